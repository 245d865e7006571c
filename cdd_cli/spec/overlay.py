"""What a command line or an API call gives, laid over a spec and checked as the spec's own
values are: a constraint of a type the spec has replaces its entries, a value given (not
None) replaces the spec's."""

from __future__ import annotations

from dataclasses import fields

from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.diffusion.processes import SAMPLERS
from cdd_cli.errors import InputError
from cdd_cli.methods import METHODS
from cdd_cli.settings import DECODINGS, DTYPE_NAMES, MAX_SEED, MAX_STEPS, ALMSettings
from cdd_cli.spec.entries import check_lookahead
from cdd_cli.spec.model import Spec, check_settings
from cdd_cli.suggest import did_you_mean

# The sampling settings a flag names from a few choices.
FLAG_CHOICES = {"decode": DECODINGS, "sampler": SAMPLERS, "dtype": DTYPE_NAMES}
SAMPLING_RANGES = {  # others: positive
    "steps": (1, MAX_STEPS),
    "seed": (0, MAX_SEED),
    "block_length": (0, MAX_STEPS),
}


def overlay(
    spec: Spec,
    constraints: list[ConstraintSpec],
    model: str | None = None,
    method: str | None = None,
    sampling: dict[str, int | None] | None = None,
    flags: bool = False,
    words: str | None = None,
    **choices: str | float | None,
) -> Spec:
    """`spec` with what a command line or an API call gives laid over it, fully validated:
    a constraint of a type the spec has replaces its entries; a value given (not None)
    replaces the spec's. `flags`: name problems as flags (--batch-size) rather than keys.
    `words`: the word rules of lexical constraints. `choices`: other sampling settings by
    name (decode, sampler, dtype, temperature, top_p), checked with the rest."""
    spec.constraints = [c for c in spec.constraints if c.type not in {g.type for g in constraints}]
    spec.constraints += constraints
    if method is not None:
        overlay_method(spec, method, "--method" if flags else "method")
    for name, value in (sampling or {}).items():
        if value is not None:
            flag = ("-n" if name == "n" else "--" + name.replace("_", "-")) if flags else name
            if isinstance(value, bool) or not isinstance(value, int):  # an API caller's value
                raise InputError(f"{flag} must be an integer, got {value!r}")
            low, high = SAMPLING_RANGES.get(name, (1, None))
            if value < low or (high is not None and value > high):
                within = f"in [{low}, {high:,}]" if high is not None else "positive"
                raise InputError(f"{flag} must be {within}, got {value}")
            setattr(spec.sampling, name, value)
    for name, value in choices.items():
        if value is not None:
            number = name in ("temperature", "top_p")
            kind = (int, float) if number else str
            if isinstance(value, bool) or not isinstance(value, kind):
                flag = "--" + name.replace("_", "-") if flags else name
                raise InputError(
                    f"{flag} must be a {'number' if number else 'name'}, got {value!r}"
                )
            allowed = FLAG_CHOICES.get(name)
            if flags and allowed is not None and value not in allowed:
                # Named as the flag: the settings' check below would blame the spec file.
                raise InputError(
                    f"--{name} must be one of {', '.join(allowed)}, got {value!r}"
                    f"{did_you_mean(value, allowed)}"
                )
            setattr(spec.sampling, name, value)
    if words is not None and not isinstance(words, str):
        raise InputError(f"words must be a name, got {words!r}")
    spec.words = words or spec.words
    if model is not None and not isinstance(model, str):
        raise InputError(f"model must be a name or a folder, got {model!r}")
    if model is not None and not model.strip():
        raise InputError(f"{'--model' if flags else 'model'} is empty")
    spec.model = model or spec.model
    check_settings(spec, spec.source)
    check_lookahead(spec.projection.lookahead, spec.method, spec.constraints, spec.source)
    return spec


def overlay_method(spec: Spec, method: str, name: str) -> None:
    """`spec` set to run `method` (`name`: how the caller calls it, "--method" or "method");
    refused where the spec writes another projecting method's settings, which would run
    silently under this one."""
    if not isinstance(method, str) or method not in METHODS:
        raise InputError(
            f"{name} must be one of {', '.join(METHODS)}, got {method!r}"
            f"{did_you_mean(method, METHODS)}"
        )
    given = [f.name for f in fields(spec.projection)]
    unset = ALMSettings()  # None: the method's value; lookahead 0: off under every method
    written = [k for k in given if getattr(spec.projection, k) != getattr(unset, k)]
    written += ["search.project_from"] if spec.search.project_from is not None else []
    if method != spec.method and written and METHODS[method].projects:
        # A written configuration holds the other method's values: they would run silently.
        raise InputError(
            f"{name} {method}: {spec.source} is a '{spec.method}' spec that sets "
            f"{', '.join(written[:3])}{'...' if len(written) > 3 else ''}; change its "
            "method: there, or remove those settings to take the method's own"
        )
    spec.method = method
