"""Command-line flags -> what the library takes: the spec (a spec file with the flags laid over
it), the shard; and back: the command line that finishes an interrupted run."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

from cdd_cli.errors import InputError
from cdd_cli.spec.entries import constraint_from_flags, keys_of, takes_tau, tau_is_optional
from cdd_cli.spec.model import Spec
from cdd_cli.spec.overlay import overlay
from cdd_cli.spec.reader import load_spec


def build_spec(
    spec_file: Optional[Path],
    model: Optional[str],
    constraint: list[str],
    tau: list[float],
    method: Optional[str],
    steps: Optional[int],
    batch_size: Optional[int],
    seed: Optional[int],
    n: Optional[int],
    novel: bool = False,
    decode: Optional[str] = None,
    sampler: Optional[str] = None,
    block_length: Optional[int] = None,
    dtype: Optional[str] = None,
    temperature: Optional[float] = None,
    top_p: Optional[float] = None,
    to: Optional[str] = None,
) -> Spec:
    """The spec file (if any) with command-line flags laid over it, fully validated; `to`
    (--to) goes to each --constraint whose type takes it (similarity's lead)."""
    spec = load_spec(spec_file) if spec_file else Spec()
    if tau and not constraint:
        raise InputError("--tau given without --constraint")
    for name in constraint:
        keys_of(name, f"--constraint {name}")  # an unknown name before counting its --tau
    wants_tau = tau_receivers(constraint, len(tau))
    taking_to = [c for c in constraint if "to" in keys_of(c, f"--constraint {c}")]
    if to is not None and not taking_to:
        raise InputError("--to given without a --constraint that takes it (similarity)")
    taus = iter(tau)
    given = [
        constraint_from_flags(c, next(taus) if w else None, {"to": to} if c in taking_to else {})
        for c, w in zip(constraint, wants_tau, strict=True)
    ]
    if novel and not any(c.type == "novelty" for c in [*spec.constraints, *given]):
        given.append(constraint_from_flags("novelty", None))
    sampling = {"steps": steps, "batch_size": batch_size, "seed": seed, "n": n}
    sampling["block_length"] = block_length
    choices = {"decode": decode, "sampler": sampler, "dtype": dtype}
    choices |= {"temperature": temperature, "top_p": top_p}
    return overlay(spec, given, model, method, sampling, flags=True, **choices)


def tau_receivers(constraint: list[str], taus: int) -> list[bool]:
    """Which --constraint each --tau goes to, in order: those that need a threshold (novelty
    takes none); or, where as many are given, also those whose tau has a default (a plugin's
    `tau_default`) -- all of them or none, so that the pairing is never a guess."""
    needs = [takes_tau(c) for c in constraint]
    takes = [n or tau_is_optional(c) for n, c in zip(needs, constraint, strict=True)]
    if taus == sum(needs):
        return needs
    if taus == sum(takes):
        return takes
    if sum(takes) == sum(needs):
        raise InputError(
            f"give one --tau per --constraint that takes a threshold ({sum(needs)} such "
            f"constraint(s), {taus} tau value(s))"
        )
    needing = ", ".join(c for c, n in zip(constraint, needs, strict=True) if n) or "none"
    taking = ", ".join(c for c, t in zip(constraint, takes, strict=True) if t)
    raise InputError(
        f"give one --tau per --constraint that needs a threshold ({sum(needs)}: {needing}), "
        f"or one per --constraint that takes one, defaults included ({sum(takes)}: "
        f"{taking}); got {taus} tau value(s)"
    )


def parse_shard(text: str | None) -> tuple[int, int]:
    """`--shard I/N` as (I, N); none given: (0, 1), the whole run."""
    if text is None:
        return (0, 1)
    index, _, count = text.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        shard = (-1, 0)
    if not 0 <= shard[0] < shard[1]:
        raise InputError(f"--shard must be I/N with 0 <= I < N, got {text!r}")
    return shard


def resume_command() -> str:
    """This command line with --resume (the command that finishes an interrupted run)."""
    args = [a for a in sys.argv[1:] if a != "--resume"]
    return shlex.join(["cdd", *args, "--resume"]).replace("\n", " ")
