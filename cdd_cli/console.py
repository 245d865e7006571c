"""The terminal side of the command line: one Rich console on stderr, progress displays,
the guard that turns errors into one line and an exit code, and the options every command
shares."""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import torch
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column
from rich.text import Text

from cdd_cli.errors import InputError, Interrupted, Terminated, one_line, raising_signals
from cdd_cli.helpstyle import choice_metavar
from cdd_cli.methods import METHODS
from cdd_cli.projection import stages
from cdd_cli.reporting import Display, Pace
from cdd_cli.spec import (
    Spec,
    constraint_from_flags,
    keys_of,
    load_spec,
    overlay,
    takes_tau,
    tau_is_optional,
)

if TYPE_CHECKING:
    from cdd_cli.diffusion.sampler import StepInfo
    from cdd_cli.projection.alm import ALMProgress
    from cdd_cli.projection.engine import StageProgress

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


def clock_text(seconds: float) -> str:
    """Seconds as h:mm:ss, as Rich's columns write times."""
    whole = int(max(seconds, 0.0))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class EtaColumn(ProgressColumn):
    """The time left, estimated when the row is drawn (task field `eta`: a function giving
    seconds, or None while nothing measures them; no function: an empty cell). Rich's own
    column divides by a recent rate, which records that come out a pass at a time make
    meaningless."""

    def render(self, task: Task) -> Text:
        estimate = task.fields.get("eta")
        if estimate is None:
            return Text("")
        seconds = estimate()
        return Text(
            "-:--:--" if seconds is None else clock_text(seconds), style="progress.remaining"
        )


class CountColumn(MofNCompleteColumn):
    def render(self, task: Task) -> Text:
        # The projection's row counts ALM rounds when there are some, else nothing.
        return Text("") if task.total is None else super().render(task)


class InfoColumn(ProgressColumn):
    """A row's words (task field `info`), on one line cut short with "…" where the terminal
    is narrow: the counts and times beside them keep their width."""

    def render(self, task: Task) -> Text:
        return Text(task.fields["info"], no_wrap=True, overflow="ellipsis")


# The engine's stages a display names, in a user's words (the closed forms act at every step
# and at once: no news).
STAGE_WORDS = {
    stages.FinalJudges.name: "judges",
    stages.LinearisedLadder.name: "linearised ladder",
    stages.LookAhead.name: "look-ahead",
    stages.ALM.name: "ALM",
    stages.RedrawAfterALM.name: "redraw after the ALM",
    stages.FlipSearch.name: "flip search",
}


class ProjectionNews:
    """What the projection did in the pass at hand, as a display tells it: the stage at work
    now, the ALM's latest round, and what the other stages did so far."""

    def __init__(self) -> None:
        self.active: StageProgress | None = None  # the stage running now
        self.redrawn = 0  # look-ahead: decisions redrawn given acceptability
        self.after_alm = 0  # samples whose decision was redrawn after the ALM
        self.accepted: tuple[int, int] | None = None  # final prediction: judges accept a of b
        self.laddered = 0  # samples the linearised ladder tried
        self.searched = 0  # samples the flip search worked on
        self.alm: ALMProgress | None = None  # the ALM's latest outer iteration

    def heard(self, p: StageProgress) -> None:
        if not p.ended:
            self.active = p
            return
        self.active = None
        if p.stage == stages.LookAhead.name:
            self.redrawn += p.touched
        elif p.stage == stages.RedrawAfterALM.name:
            self.after_alm += p.touched
        elif p.stage == stages.FinalJudges.name:
            self.accepted = (p.settled, p.samples)
        elif p.stage == stages.LinearisedLadder.name:
            self.laddered += p.touched
        elif p.stage == stages.FlipSearch.name:
            self.searched += p.touched

    def text(self, verbose: bool) -> str:
        # Most telling first: a narrow terminal cuts the end off.
        parts, alm = [], None
        if self.alm is not None:
            p = self.alm
            alm = (
                f"round {p.outer}/{p.max_outer} × {p.inner} inner steps, "
                f"{p.violating} of {p.samples} still outside"
            )
            if verbose:
                alm += (
                    f", λ [{p.lam_range[0]:.3g}, {p.lam_range[1]:.3g}]"
                    f", μ [{p.mu_range[0]:.3g}, {p.mu_range[1]:.3g}]"
                )
        active = self.active
        if active is not None:
            final = active.step >= active.steps
            where = "the final step" if final else f"step {active.step + 1}"
            parts.append(f"{STAGE_WORDS[active.stage]} at {where}")
            if active.stage == "ALM" and alm is not None:
                parts[-1] += f": {alm}"
                alm = None
        if self.accepted is not None:
            parts.append(f"judges accept {self.accepted[0]}/{self.accepted[1]}")
        if self.redrawn:
            parts.append(f"look-ahead redrew {self.redrawn}")
        if alm is not None:
            parts.append(f"ALM {alm}")
        if self.after_alm:
            parts.append(f"{self.after_alm} redrawn after the ALM")
        if self.laddered:
            parts.append(f"ladder tried {self.laddered}")
        if self.searched:
            parts.append(f"flip search on {self.searched}")
        return "; ".join(parts)


class RichReporter(Display):
    """The progress of a sampling run on stderr. On a terminal, a live view: the run's row
    (records, rate, time left), the denoising row of the sampler's pass at hand (its samples,
    how many of them the judges rejected in the pass before, its steps) and, while the
    projection works, its row (its stages, in words, and the ALM's rounds). Without one (a
    log file, a pipe): a plain line as the run begins, then at least every LOG_EVERY_S
    seconds from a ticker thread (a step or the final projection can take minutes without a
    callback), and one at the end. `clock`: where times are read (a test passes its own)."""

    LOG_EVERY_S = 10.0
    LOADING_NOTE_S = 5.0  # loading past this long is told (see __init__)

    def __init__(
        self,
        quiet: bool,
        verbose: bool = False,
        out: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.console = out or console
        self.quiet, self.verbose, self.clock = quiet, verbose, clock
        self.plain = not quiet and not self.console.is_terminal
        self.progress = Progress(
            TextColumn("{task.description}", table_column=Column(no_wrap=True)),
            BarColumn(),
            CountColumn(table_column=Column(no_wrap=True)),
            TimeElapsedColumn(table_column=Column(no_wrap=True)),
            EtaColumn(table_column=Column(no_wrap=True)),
            InfoColumn(table_column=Column(no_wrap=False)),  # the one to narrow
            console=self.console,
            disable=quiet or self.plain,
            get_time=clock,
            # Records may go to stdout: never through the display.
            redirect_stdout=False,
        )
        # Guards what the events change against the threads that read it (Rich's refresh,
        # the ticker). Never held while calling Rich, whose own lock its refresh holds while
        # asking for the time left: the other order would deadlock.
        self.lock = threading.Lock()
        self.label, self.tally = "", ""
        self.pace: Pace | None = None
        self.news = ProjectionNews()
        self.overall = self.denoise = self.projection = None
        self.ticker: threading.Thread | None = None
        self.stopping = threading.Event()
        # Loading can take long (a large model, a busy machine): a log then says that a run
        # began. Not at once: a checkpoint refused while loading must stay one line on stderr.
        self.loading = threading.Timer(
            self.LOADING_NOTE_S, self.say, ["cdd: loading the model and its constraints"]
        )
        self.loading.daemon = True
        if self.plain:
            self.loading.start()

    def __enter__(self) -> RichReporter:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        if self.ticker is not None:
            self.ticker.join(timeout=5.0)  # it prints whole lines: never long
        if self.projection is not None:  # the last frame: no row of a step long done
            self.progress.update(self.projection, visible=False)
        try:
            if self.plain and exc[0] is None and self.pace is not None:
                self.say(self.end_line())
        finally:
            self.progress.__exit__(*exc)

    def say(self, line: str) -> None:
        self.console.print(line, markup=False, soft_wrap=True, highlight=False)

    def loaded(self) -> None:
        """Loading is over (the run begins, or it ended in an error): no note of it now."""
        self.loading.cancel()

    def run_started(self, label: str, total: int, batch_size: int) -> None:
        self.loaded()
        now = self.clock()
        with self.lock:
            self.label, self.pace = label, Pace(total, batch_size, now)
        # The run's row first, its pass's rows under it.
        self.overall = self.progress.add_task(label, total=total, info="", eta=self.eta)
        self.denoise = self.progress.add_task("  denoising", total=None, info="", eta=self.step_eta)
        self.fresh_projection()

    def fresh_projection(self) -> None:
        """The projection's row, hidden until a stage of the pass at hand tells something (a
        new task: Rich cannot take a row's total back to none, and it is the last row)."""
        if self.projection is not None:
            self.progress.remove_task(self.projection)
        self.projection = self.progress.add_task("  projection", total=None, info="", visible=False)

    def resumed(self, present: int, draws: int) -> None:
        with self.lock:
            assert self.pace is not None
            self.pace = Pace(self.pace.total, self.pace.batch_size, self.clock(), present, draws)
        self.progress.update(self.overall, completed=present)

    def pass_started(self, samples: int, redraws: int, steps: int) -> None:
        with self.lock:
            if self.pace is None:  # a Generation driven without a run (tests)
                return
            self.pace.begin_pass(samples, redraws, steps, self.clock())
            self.news = ProjectionNews()
            info = self.pass_text()
        self.progress.reset(self.denoise, total=steps, info=info, eta=self.step_eta)
        self.fresh_projection()
        if self.plain and self.ticker is None:
            self.say(self.line())  # the first line at once, then the ticker's
            self.ticker = threading.Thread(target=self.tick, name="cdd-progress", daemon=True)
            self.ticker.start()

    def records_done(self, done: int, info: str) -> None:
        with self.lock:
            assert self.pace is not None
            self.pace.finished(done)
            self.tally = info
            rate = self.pace.rate(self.clock())
        text = ", ".join(t for t in (f"{rate:.2f}/s" if rate else "", info) if t)
        self.progress.update(self.overall, completed=done, info=text)

    def step(self, info: StepInfo) -> None:
        with self.lock:
            if self.pace is None:  # a Generation driven without a run (tests)
                return
            self.pace.stepped(info.index, info.steps, self.clock())
            text = self.pass_text()
        self.progress.update(
            self.denoise, total=info.steps, completed=min(info.index + 1, info.steps), info=text
        )

    def stage(self, progress: StageProgress) -> None:
        if progress.stage not in STAGE_WORDS or self.projection is None:
            return
        with self.lock:
            self.news.heard(progress)
            text = self.news.text(self.verbose)
        self.progress.update(self.projection, visible=bool(text), info=text)

    def alm(self, p: ALMProgress) -> None:
        if self.projection is None:  # a Generation driven without a run (tests)
            return
        with self.lock:
            self.news.alm = p
            text = self.news.text(self.verbose)
        self.progress.update(
            self.projection, visible=True, total=p.max_outer or None, completed=p.outer, info=text
        )

    def eta(self) -> float | None:
        with self.lock:
            return self.pace.left(self.clock()) if self.pace else None

    def step_eta(self) -> float | None:
        with self.lock:
            return self.pace.step_eta(self.clock()) if self.pace else None

    def pass_text(self, steps: bool = False) -> str:
        """The pass at hand: its number in the run, its samples and how many of them are
        redrawn (the judges rejected them in the pass before), and with `steps` the step it
        is at; the last step (the noise removal, and the projection of the final prediction)
        is said to be under way until it ends."""
        pace = self.pace
        if pace is None or not pace.passes:
            return ""
        text = f"pass {pace.passes}, {pace.samples} sample{'s' if pace.samples != 1 else ''}"
        if pace.redraws:
            text += f" ({pace.redraws} redrawn)"
        if steps and pace.in_final_step:
            return f"{text}, step {pace.steps} of {pace.steps} under way"
        if steps:
            return f"{text}, step {pace.step} of {pace.steps}"
        return text + (", last step under way" if pace.in_final_step else "")

    def line(self) -> str:
        """A plain progress line: records, time, rate and what is left (once measured); the
        pass, its step and what its steps still need; the records' tally; the projection's
        news."""
        now = self.clock()
        with self.lock:
            pace = self.pace
            assert pace is not None
            parts = [f"{self.label} {pace.done}/{pace.total}"]
            if pace.present:
                parts[0] += f" ({pace.present} already there)"
            parts.append(f"{clock_text(now - pace.started)} elapsed")
            rate, left = pace.rate(now), pace.left(now)
            if rate:
                parts.append(f"{rate:.2f}/s")
            if left is not None:  # (under a second: what was measured is used up)
                parts.append(f"about {clock_text(left)} left" if left >= 1 else "finishing")
            if pace.passes:
                parts.append(self.pass_text(steps=True))
                steps = pace.step_eta(now)
                if steps is not None and pace.step < pace.steps:
                    parts.append(f"its steps done in about {clock_text(steps)}")
            news = self.news.text(self.verbose)
            tally = self.tallied(pace) if self.tally else ""
            return "; ".join(t for t in (", ".join(parts), tally, news) if t)

    def end_line(self) -> str:
        now = self.clock()
        with self.lock:
            pace = self.pace
            assert pace is not None
            rate = pace.rate(now)
            text = f"{self.label} {pace.done}/{pace.total} in {clock_text(now - pace.started)}"
            if rate:
                text += f" ({rate:.2f}/s)"
            return f"{text}; {self.tallied(pace)}" if self.tally else text

    def tallied(self, pace: Pace) -> str:
        """The records' tally, which counts the records this run wrote (not those a resumed
        file already held)."""
        written = pace.done - pace.present
        return f"of the {written} written now: {self.tally}" if pace.present else self.tally

    def tick(self) -> None:
        while not self.stopping.wait(self.LOG_EVERY_S):
            try:
                self.say(self.line())
            except Exception:  # e.g. stderr gone: the run goes on without its log
                return


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


# Characters that end a line on a terminal or to str.splitlines: a message quoting what a
# user gave (a model name, a word) shows them escaped, so that it stays one line.
def run_guarded(body) -> None:
    """Run a command body: InputError -> one line, exit 2; other errors -> one line, exit 1;
    Ctrl-C or SIGTERM during it -> one line (what a run kept), exit 130 or 143."""
    try:
        with raising_signals():  # the body's writers stop between whole records
            body()
    except typer.Exit:
        raise  # typer.Exit is a RuntimeError: let exit codes through untouched
    except InputError as exc:
        raise fail(one_line(exc.cli)) from None  # the flags' wording of the API's message
    except KeyboardInterrupt as exc:
        if isinstance(exc, Terminated):
            raise fail("terminated", 143) from None
        raise fail("interrupted", 130) from None
    except Interrupted as exc:  # a run stopped by Ctrl-C or SIGTERM: what it kept
        raise fail(one_line(str(exc)), exc.code) from None
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (e.g. `| head`); nothing more to say
        raise typer.Exit(0) from None
    except OSError as exc:
        # The machine refused a path or a write (a name too long, a full disk or stdout, no
        # permission): the input or the environment, not a defect.
        name = f"{one_line(str(exc.filename))}: " if exc.filename else ""
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
    str,
    typer.Option(
        "--device", help="Where to run: auto (a GPU where CUDA has one), cpu, cuda or cuda:K."
    ),
]
ThreadsOpt = Annotated[
    Optional[int],
    typer.Option(help="CPU threads for torch. \\[default: torch's choice]"),
]


def set_threads(threads: int | None, processes: int = 1) -> None:
    """torch's CPU threads (None: what torch picks, or with `processes` sharing the machine
    (`--shard I/N`), their share of the cores unless OMP_NUM_THREADS says). On a busy machine
    fewer can be faster: two runs at once took 169.6 s against 8.3 s at one thread each."""
    if threads is not None and threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    cores = usable_cores()
    if threads is not None and threads > cores:
        # More threads than cores only adds switching, and each thread's stack is reserved
        # memory: 100,000 of them exhausted it before the model could load.
        console.print(
            f"cdd: warning: --threads {threads} is more than the {cores} CPU core(s) this "
            f"process may use: using {cores}",
            markup=False,
            soft_wrap=True,
        )
        threads = cores
    if threads is None and processes > 1 and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, cores // processes)
    if threads:
        torch.set_num_threads(threads)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the platform says)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on macOS and Windows
        return max(1, os.cpu_count() or 1)


# A flag's help shows no value beside it: cdd_cli/helpstyle.py labels every option.
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Show the projection's multipliers (λ, μ) in its progress row."
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
    wants_tau = tau_receivers(constraint, len(tau))
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


ConstraintOpt = Annotated[
    list[str],
    typer.Option(
        "--constraint",
        "-c",
        help="A constraint type (`cdd constraints ls` lists them); repeatable, each with its "
        "--tau.",
    ),
]
TauOpt = Annotated[
    list[float], typer.Option("--tau", help="The threshold of each --constraint, in order.")
]


def model_option(default: str) -> Any:
    """The --model option of a command whose domain's shipped model is `default`."""
    return Annotated[
        Optional[str],
        typer.Option(
            help="A shipped model's name (`cdd models ls`), a model folder, or hf://org/name "
            f"for one on the Hugging Face hub. \\[default: the spec's, else {default}]"
        ),
    ]


StepsOpt = Annotated[Optional[int], typer.Option(help="Denoising steps. \\[default: the model's]")]
BatchOpt = Annotated[
    Optional[int],
    typer.Option(
        "--batch-size",
        help="Samples drawn together in one pass (rejected ones first, then new ones). "
        "\\[default: 64]",
    ),
]
OutputOpt = Annotated[
    str, typer.Option("-o", "--output", help="JSONL file to append to, or - for stdout.")
]
ShardOpt = Annotated[
    Optional[str],
    typer.Option(
        "--shard",
        help="I/N: write only sample k with k % N == I (merge the N files with `cdd merge`); "
        "without --threads, each of the N takes its share of the cores.",
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
        "--resume", help="Finish an interrupted run: write only the records -o FILE lacks."
    ),
]
SpecOpt = Annotated[
    Optional[Path],
    typer.Option("--spec", help="A YAML spec: constraints, model and settings (`cdd validate`)."),
]
MethodOpt = Annotated[
    Optional[str],
    typer.Option(
        help="cdd: the projection engine; paper: the paper's algorithm as published; reject: "
        "best-of-N; unconstrained: no projection. \\[default: the spec's, else cdd]",
        metavar=choice_metavar(METHODS),
    ),
]
