"""The Rich progress displays on stderr: a sampling run's (`RichReporter`, a reporter the run
tells of records, passes, steps and the projection's stages) and a training loop's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
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
from rich.progress_bar import ProgressBar
from rich.table import Column
from rich.text import Text

from cdd_cli.cli.pace import Pace
from cdd_cli.cli.pass_costs import LateALM
from cdd_cli.cli.projection_news import STAGE_WORDS, Clause, ProjectionNews, fittings, joined
from cdd_cli.cli.terminal import console, log
from cdd_cli.reporting import Display, ProjectionPlan

if TYPE_CHECKING:
    from cdd_cli.diffusion.sampler import StepInfo
    from cdd_cli.projection.alm import ALMProgress
    from cdd_cli.projection.engine import StageProgress


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


def left_text(left: float | tuple[float, float]) -> str:
    """A time left as h:mm:ss, or a range of two."""
    if isinstance(left, tuple):
        return f"{clock_text(left[0])}–{clock_text(left[1])}"
    return clock_text(left)


class EtaColumn(ProgressColumn):
    """The time left, estimated when the row is drawn (task field `eta`: a function giving
    seconds or a range of them (`Pace.shown`), or None while nothing measures them; no
    function: an empty cell), else the least it can be (field `least`, the same kind of
    function), as "≥0:01:20". Rich's own column divides by a recent rate, which records that
    come out a pass at a time make meaningless."""

    def render(self, task: Task) -> Text:
        estimate = task.fields.get("eta")
        if estimate is None:
            return Text("")
        left = estimate()
        if left is not None:
            return Text(left_text(left), style="progress.remaining")
        least = task.fields.get("least")
        bound = least() if least is not None else None
        text = "-:--:--" if bound is None else f"≥{clock_text(bound)}"
        return Text(text, style="progress.remaining")


class CountColumn(MofNCompleteColumn):
    def render(self, task: Task) -> Text:
        # The projection's row counts ALM rounds when there are some, else nothing.
        return Text("") if task.total is None else super().render(task)


class Fitted:
    """A row's words as wide as its cell allows: the longest of its forms that fits (they run
    from longest to shortest, each whole: `projection_news.fittings`); only where not even
    the shortest fits is it cut, with "…"."""

    def __init__(self, forms: list[str]):
        self.forms = forms or [""]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(len(self.forms[-1]), max(len(f) for f in self.forms))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        form = next((f for f in self.forms if len(f) <= options.max_width), self.forms[-1])
        yield Text(form, no_wrap=True, overflow="ellipsis")


class InfoColumn(ProgressColumn):
    """A row's words (task field `info`: its forms, longest first), the longest that fits
    beside the counts and times, which keep their width."""

    def render(self, task: Task) -> Fitted:
        return Fitted(task.fields["info"])


class NarrowingBar(BarColumn):
    """The bar, narrowed to leave its rows' words room: at most MOST wide, at least LEAST,
    as the terminal leaves beside the other columns (OTHERS) and WORDS columns of words;
    none on a terminal narrower than BARLESS (the count says as much)."""

    MOST, LEAST, WORDS = 40, 8, 60
    OTHERS = 46  # the description, count, elapsed and time-left columns, and the gaps
    BARLESS = 72

    def __init__(self, out: Console):
        super().__init__()
        self.out = out

    def render(self, task: Task) -> ProgressBar | Text:
        # Read at each frame: a terminal can be resized while it runs.
        width = self.out.width
        if width < self.BARLESS:
            return Text("")
        self.bar_width = min(max(width - self.OTHERS - self.WORDS, self.LEAST), self.MOST)
        return super().render(task)


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
            NarrowingBar(self.console),
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
        self.overall = self.progress.add_task(
            label, total=total, info=[], eta=self.left_shown, least=self.least
        )
        self.denoise = self.progress.add_task("  denoising", total=None, info=[], eta=self.step_eta)
        self.fresh_projection()

    def fresh_projection(self) -> None:
        """The projection's row, hidden until a stage of the pass at hand tells something (a
        new task: Rich cannot take a row's total back to none, and it is the last row)."""
        if self.projection is not None:
            self.progress.remove_task(self.projection)
        self.projection = self.progress.add_task("  projection", total=None, info=[], visible=False)

    def draws_allowed(self, cap: int) -> None:
        with self.lock:
            assert self.pace is not None
            self.pace.cap = cap

    def projection_planned(
        self, plan: ProjectionPlan, round_seconds: Callable[[], float | None]
    ) -> None:
        # Where the ALM first runs only at a later draw (cdd's molecules: the 8th), no pass
        # before shows what a round costs: one is measured now (0.1-3 s on a busy 2-core
        # machine, before the first pass), unless no time left is shown.
        measured = round_seconds() if plan.surrogates_from > 1 and not self.quiet else None
        with self.lock:
            assert self.pace is not None
            self.pace.late = LateALM(plan.surrogates_from, plan.max_outer, measured)

    def resumed(self, present: int, draws: int) -> None:
        with self.lock:
            assert self.pace is not None
            told = self.pace
            self.pace = Pace(told.total, told.batch_size, self.clock(), present, draws)
            self.pace.cap, self.pace.late = told.cap, told.late
        self.progress.update(self.overall, completed=present)

    def pass_started(self, samples: int, redraws: int, steps: int) -> None:
        with self.lock:
            if self.pace is None:  # a BatchDrawer driven without a run (tests)
                return
            self.pace.begin_pass(samples, redraws, steps, self.clock())
            self.news = ProjectionNews()
            info = fittings(self.pass_clauses())
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
        # The tally's counts first, the rate (the time left tells the pace too) the first to go.
        clauses = [Clause(f"{rate:.2f}/s", f"{rate:.2f}/s", 9, ", ")] if rate else []
        counts = [t for t in info.split(", ") if t]
        clauses += [Clause(t, t, rank, ", ") for rank, t in enumerate(counts)]
        self.progress.update(self.overall, completed=done, info=fittings(clauses))

    def step(self, info: StepInfo) -> None:
        with self.lock:
            if self.pace is None:  # a BatchDrawer driven without a run (tests)
                return
            self.pace.stepped(info.index, info.steps, self.clock())
            text = fittings(self.pass_clauses())
        self.progress.update(
            self.denoise, total=info.steps, completed=min(info.index + 1, info.steps), info=text
        )

    def stage(self, progress: StageProgress) -> None:
        if progress.stage not in STAGE_WORDS or self.projection is None:
            return
        with self.lock:
            self.news.heard(progress)
            text = fittings(self.news.clauses(self.verbose))
        self.progress.update(self.projection, visible=bool(text), info=text)

    def alm(self, p: ALMProgress) -> None:
        if self.projection is None:  # a BatchDrawer driven without a run (tests)
            return
        with self.lock:
            self.news.alm = p
            if self.pace is not None:
                self.pace.alm_round(p.outer, p.max_outer, self.clock(), p.samples)
            text = fittings(self.news.clauses(self.verbose))
        self.progress.update(
            self.projection, visible=True, total=p.max_outer or None, completed=p.outer, info=text
        )

    def eta(self) -> float | None:
        with self.lock:
            return self.pace.left(self.clock()) if self.pace else None

    def left_shown(self) -> float | tuple[float, float] | None:
        with self.lock:
            return self.pace.shown(self.clock()) if self.pace else None

    def least(self) -> float | None:
        with self.lock:
            return self.pace.least(self.clock()) if self.pace else None

    def step_eta(self) -> float | None:
        with self.lock:
            return self.pace.step_eta(self.clock()) if self.pace else None

    def pass_text(self, steps: bool = False) -> str:
        """The pass at hand: its number in the run, its samples and how many of them are
        redrawn (the judges rejected them in the pass before), and with `steps` the step it
        is at; the last step (the noise removal, and the projection of the final prediction)
        is said to be under way until it ends."""
        pace = self.pace
        if not steps or pace is None or not pace.passes:
            return joined(self.pass_clauses())
        text = joined(self.pass_clauses()[:2])
        if pace.in_final_step:
            return f"{text}, step {pace.steps} of {pace.steps} under way"
        return f"{text}, step {pace.step} of {pace.steps}"

    def pass_clauses(self) -> list[Clause]:
        """`pass_text`'s words without the step, as the denoising row says them (its count
        shows the step): the pass's number, then that its last step is under way (why its
        count waits), then its samples."""
        pace = self.pace
        if pace is None or not pace.passes:
            return []
        samples = f"{pace.samples} sample{'s' if pace.samples != 1 else ''}"
        short = f"{pace.samples}"
        if pace.redraws:
            samples += f" ({pace.redraws} redrawn)"
            short += f" ({pace.redraws} redrawn)"
        clauses = [Clause(f"pass {pace.passes}", f"pass {pace.passes}", 0),
                   Clause(samples, short, 2, ", ")]  # fmt: skip
        if pace.in_final_step:
            clauses.append(Clause("last step under way", "last step", 1, ", "))
        return clauses

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
            rate, left = pace.rate(now), pace.shown(now)
            if rate:
                parts.append(f"{rate:.2f}/s")
            if left is not None:  # (under a second: what was measured is used up)
                done = not isinstance(left, tuple) and left < 1
                parts.append("finishing" if done else f"about {left_text(left)} left")
            elif (least := pace.least(now)) is not None:
                parts.append(f"at least {clock_text(least)} left")
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


def training_progress(
    quiet: bool, label: str, total: int | None, log_every: int
) -> tuple[Progress, Callable[[int, float], None]]:
    """A progress bar for a training loop; plain log lines every `log_every` steps instead
    when the live display is off (e.g. stderr redirected to a file)."""
    progress = make_progress(quiet)
    task = progress.add_task(label, total=total, info="")
    first: list[tuple[int, float]] = []  # the first step heard and when (a resumed run's too)

    def on_step(step: int, loss: float) -> None:
        progress.update(task, completed=step, info=f"loss {loss:.4f}")
        now = time.perf_counter()
        if not first:
            first.append((step, now))
        if not progress.live.is_started and step % log_every == 0:
            line = f"step {step} loss {loss:.4f}"
            since, began = first[0]
            if total is not None and step > since:  # the steps so far at their mean pace
                left = (total - step) * (now - began) / (step - since)
                line += f", {clock_text(left)} left"
            log(line)

    return progress, on_step
