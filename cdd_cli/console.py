"""The terminal side of the command line: one Rich console on stderr, progress displays,
the guard that turns errors into one line and an exit code, and the options every command
shares."""

from __future__ import annotations

import errno
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import torch
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from cdd_cli.errors import InputError, Interrupted, Terminated
from cdd_cli.reporting import Display
from cdd_cli.spec import Spec, constraint_from_flags, keys_of, load_spec, overlay, takes_tau

if TYPE_CHECKING:
    from cdd_cli.diffusion.sampler import StepInfo
    from cdd_cli.projection.alm import ALMProgress

console = Console(stderr=True, highlight=False)
HELP = {"help_option_names": ["-h", "--help"]}


def fail(message: str, code: int = 2) -> typer.Exit:
    rank = os.environ.get("RANK", "0") if os.environ.get("WORLD_SIZE", "1") != "1" else "0"
    where = f"rank {rank}: " if rank != "0" else ""  # under torchrun, which process says it
    console.print(f"cdd: error: {where}{message}", markup=False, soft_wrap=True)
    return typer.Exit(code)


def make_progress(quiet: bool) -> Progress:
    # Live display only on a terminal: in pipes and logs it would write control codes.
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
        disable=quiet or not console.is_terminal,
        transient=False,
    )


class RichReporter(Display):
    """The live display of a sampling run: records, denoising steps, ALM iterations."""

    LOG_EVERY_S = 10.0  # without a terminal: a plain progress line at most this often

    def __init__(self, quiet: bool, verbose: bool = False):
        self.progress = make_progress(quiet)
        self.quiet, self.verbose = quiet, verbose
        self.overall: TaskID | None = None
        self.denoise: TaskID | None = None
        self.projection: TaskID | None = None
        self.label, self.total, self.started, self.logged = "", 0, 0.0, 0.0

    def __enter__(self) -> RichReporter:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def run_started(self, label: str, total: int) -> None:
        self.label, self.total = label, total
        self.started = self.logged = time.perf_counter()
        # The run's row first, its batch's rows under it.
        self.overall = self.progress.add_task(label, total=total, info="")
        self.denoise = self.progress.add_task("  denoising", total=None, info="")
        self.projection = self.progress.add_task("  projection", total=None, info="", visible=False)

    def records_done(self, done: int, info: str) -> None:
        now = time.perf_counter()
        rate = f"{done / max(now - self.started, 1e-9):.2f}/s"
        self.progress.update(self.overall, completed=done, info=f"{rate}, {info}" if info else rate)
        live = self.progress.live.is_started
        if self.quiet or live or (now - self.logged < self.LOG_EVERY_S and done < self.total):
            return
        # No terminal (a log file, a pipe): one plain line with the rate and what is left.
        self.logged = now
        rate = done / max(now - self.started, 1e-9)
        left = f", about {(self.total - done) / rate:.0f} s left" if done < self.total else ""
        log(f"{self.label} {done}/{self.total} ({rate:.2f}/s{left}){', ' + info if info else ''}")

    def step(self, info: StepInfo) -> None:
        if info.index == 0:  # a new batch: its own elapsed time
            self.progress.reset(self.denoise, total=info.steps)
        self.progress.update(
            self.denoise, total=info.steps, completed=min(info.index + 1, info.steps)
        )
        # The projection row shows while a step projects; a finished step's is no news.
        self.progress.update(self.projection, visible=False)

    def alm(self, p: ALMProgress) -> None:
        # In a user's words: how many samples the optimiser still pulls toward their
        # constraints, in which round; its multipliers only with --verbose.
        info = f"{p.violating} of {p.samples} sample(s) still outside, round {p.outer}"
        if self.verbose:
            info += (
                f" ({p.inner} inner steps each), λ [{p.lam_range[0]:.3g}, {p.lam_range[1]:.3g}]"
                f", μ [{p.mu_range[0]:.3g}, {p.mu_range[1]:.3g}]"
            )
        self.progress.update(
            self.projection, visible=True, total=p.max_outer or None, completed=p.outer, info=info
        )


def log(message: str) -> None:
    console.print(message, markup=False, soft_wrap=True)


def training_progress(quiet: bool, label: str, total: int, log_every: int):
    """A progress bar for a training loop; plain log lines every `log_every` steps instead
    when the live display is off (e.g. stderr redirected to a file)."""
    progress = make_progress(quiet)
    task = progress.add_task(label, total=total, info="")

    def on_step(step: int, loss: float) -> None:
        progress.update(task, completed=step, info=f"loss {loss:.4f}")
        if not progress.live.is_started and step % log_every == 0:
            log(f"step {step} loss {loss:.4f}")

    return progress, on_step


def run_guarded(body) -> None:
    """Run a command body: InputError -> one line, exit 2; other errors -> one line, exit 1."""
    try:
        body()
    except typer.Exit:
        raise  # typer.Exit is a RuntimeError: let exit codes through untouched
    except InputError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt as exc:
        if isinstance(exc, Terminated):
            raise fail("terminated", 143) from None
        raise fail("interrupted", 130) from None
    except Interrupted as exc:  # a run stopped by Ctrl-C or SIGTERM: what it kept
        raise fail(str(exc), exc.code) from None
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (e.g. `| head`); nothing more to say
        raise typer.Exit(0) from None
    except OSError as exc:
        # The machine refused a path or a write (a name too long, a full disk or stdout, no
        # permission): the input or the environment, not a defect.
        name = f"{exc.filename}: " if exc.filename else ""
        if len(name) > 80:
            name = f"{name[:60]}...: "
        where = " (writing the output)" if exc.errno == errno.ENOSPC and not name else ""
        raise fail(f"{name}{exc.strerror or type(exc).__name__}{where}") from None
    except RecursionError:
        raise fail("the input is nested too deeply to read") from None
    except Exception as exc:
        # A defect, not bad input: one line (the README's exit 1), the traceback on request.
        if os.environ.get("CDD_TRACEBACK"):
            raise
        where = traceback.extract_tb(exc.__traceback__)[-1]
        message = " ".join(str(exc).split())
        raise fail(
            f"internal error: {type(exc).__name__}: {message} (at {Path(where.filename).name}:"
            f"{where.lineno}; CDD_TRACEBACK=1 shows the traceback)",
            1,
        ) from None


DeviceOpt = Annotated[
    str, typer.Option("--device", help="auto (CUDA where present), cpu, cuda or cuda:K.")
]
ThreadsOpt = Annotated[Optional[int], typer.Option(help="CPU threads for torch.")]


def set_threads(threads: int | None, processes: int = 1) -> None:
    """torch's CPU threads (None: what torch picks, or with `processes` sharing the machine
    (`--shard I/N`), their share of the cores unless OMP_NUM_THREADS says). On a busy machine
    fewer can be faster: two runs at once took 169.6 s against 8.3 s at one thread each."""
    if threads is not None and threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    if threads is None and processes > 1 and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, (os.cpu_count() or 1) // processes)
    if threads:
        torch.set_num_threads(threads)


FLAG = " "  # a flag takes no value: no "<bool>" beside it in the help
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.", metavar=FLAG)]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="The projection's multipliers (λ, μ) in its progress row.",
        metavar=FLAG,
    ),
]


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
):
    """The spec file (if any) with command-line flags laid over it, fully validated."""
    spec = load_spec(spec_file) if spec_file else Spec()
    if tau and not constraint:
        raise InputError("--tau given without --constraint")
    for name in constraint:
        keys_of(name, f"--constraint {name}")  # an unknown name before counting its --tau
    # Each --tau goes to the next --constraint that takes a threshold (novelty takes none).
    wants_tau = [takes_tau(c) for c in constraint]
    if sum(wants_tau) != len(tau):
        raise InputError(
            f"give one --tau per --constraint that takes a threshold ({sum(wants_tau)} such "
            f"constraint(s), {len(tau)} tau value(s))"
        )
    taus = iter(tau)
    given = [
        constraint_from_flags(c, next(taus) if w else None)
        for c, w in zip(constraint, wants_tau, strict=True)
    ]
    if novel and not any(c.type == "novelty" for c in [*spec.constraints, *given]):
        given.append(constraint_from_flags("novelty", None))
    sampling = {"steps": steps, "batch_size": batch_size, "seed": seed, "n": n}
    sampling["block_length"] = block_length
    choices = {"decode": decode, "sampler": sampler, "dtype": dtype}
    choices |= {"temperature": temperature, "top_p": top_p}
    return overlay(spec, given, model, method, sampling, flags=True, **choices)


ConstraintOpt = Annotated[
    list[str],
    typer.Option("--constraint", "-c", help="Constraint type (repeatable; pair with --tau)."),
]
TauOpt = Annotated[list[float], typer.Option("--tau", help="Threshold of each --constraint.")]
ModelOpt = Annotated[
    Optional[str],
    typer.Option(
        help="Shipped name, HF-format directory or hf://owner/name. \\[default: default-molecules "
        "or default-text]"
    ),
]
StepsOpt = Annotated[Optional[int], typer.Option(help="Denoising steps (model default).")]
BatchOpt = Annotated[
    Optional[int], typer.Option("--batch-size", help="Samples per batch. \\[default: 64]")
]
OutputOpt = Annotated[str, typer.Option("-o", "--output", help="JSONL file (appended) or -.")]
ShardOpt = Annotated[
    Optional[str],
    typer.Option(
        "--shard",
        help="I/N: write only sample k with k % N == I (merge the N files with `cdd merge`).",
        metavar="I/N",
    ),
]


def parse_shard(text: str | None) -> tuple[int, int]:
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


ResumeOpt = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Finish an interrupted run: write only the records -o FILE lacks.",
        metavar=FLAG,
    ),
]
SpecOpt = Annotated[Optional[Path], typer.Option("--spec", help="YAML constraint spec.")]
MethodOpt = Annotated[
    Optional[str],
    typer.Option(
        help="cdd (the projection engine), paper (the paper's algorithm as published), "
        "reject (best-of-N) or unconstrained. \\[default: cdd, or the spec's]"
    ),
]
