"""What a sampling run tells as it goes: the reporter interface, and the pace of a run (how
far it is and how long the rest should take). No torch imported here, so the CLI can subclass
the reporter without paying for torch at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdd_cli.diffusion.sampler import StepInfo
    from cdd_cli.projection.alm import ALMProgress
    from cdd_cli.projection.engine import StageProgress


class Reporter:
    """Every method does nothing here: the CLI's live display overrides them
    (`console.RichReporter`), and so may any caller of the Python API. A run calls
    `run_started`, then `resumed` (only where records were already written), then per batch
    `batch_started`, its steps, stages and ALM iterations, its `redraw_started` passes, and
    `records_done` as each record is final."""

    def run_started(self, label: str, total: int) -> None:
        """A run of `total` records of `label` ("molecules", "samples") begins."""

    def resumed(self, present: int) -> None:
        """`present` of the `total` records were already written (--resume); `records_done`
        counts them."""

    def batch_started(self, batch: int, batches: int, size: int, steps: int) -> None:
        """Batch `batch` (from 1) of `batches` begins: `size` samples drawn together, each
        through `steps` denoising steps."""

    def redraw_started(self, samples: int, attempt: int) -> None:
        """`samples` of the batch at hand that the judges rejected are drawn again (`attempt`:
        their draw, 2 for the first redraw); the pass's steps follow, from index 0."""

    def records_done(self, done: int, info: str) -> None:
        """`done` records are final; `info`: a short tally (valid, violating)."""

    def step(self, info: StepInfo) -> None:
        """A denoising step of the pass at hand ended (index 0 begins a pass)."""

    def stage(self, progress: StageProgress) -> None:
        """A projection stage began or ended at the step at hand (`projection/engine.py`)."""

    def alm(self, progress: ALMProgress) -> None:
        """An ALM outer iteration ended."""


class Display(Reporter):
    """A reporter that is also a context: a live display runs inside it."""

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def satisfaction_note(
    constraints: list,
    total: int,
    violating: int,
    method: str,
    held: dict[str, int] | None = None,
) -> str:
    """The summary's clause on constraints ("" without any). `held`: per constraint name, how
    many records satisfy it; one no record satisfies is named as looking infeasible."""
    if not constraints:
        return ""
    labels = ", ".join(c.label() for c in constraints)
    judges = ", ".join(sorted({c.judge_name for c in constraints}))
    note = f"; {total - violating}/{total} satisfy {labels} ({method}, judged by {judges})"
    never = [c.label() for c in constraints if held is not None and not held.get(c.name)]
    if never and total and method == "unconstrained":
        # Nothing steered the samples toward it: no sign that it cannot be met.
        note += f"; no sample satisfies {', '.join(never)} (unconstrained: nothing steered to it)"
    elif never and total:
        note += (
            f"; no sample satisfies {', '.join(never)}: it looks infeasible for this model "
            "(check its bounds against what the model makes)"
        )
    return note


class Tally:
    """What a run's records add up to, as they are written: the progress display's short
    tally and the closing summary's counts (a domain adds its own, e.g. validity)."""

    def __init__(self, constraints: list, method: str):
        self.constraints, self.method = constraints, method
        self.count = self.violating = 0
        self.seconds = 0.0  # the records' own seconds, summed
        self.held: dict[str, int] = {}  # per constraint name, the records that satisfy it

    def add(self, row: dict) -> None:
        self.count += 1
        self.violating += row["satisfied"] is False
        self.seconds += row["seconds"]
        for name, verdict in (row.get("constraints") or {}).items():
            self.held[name] = self.held.get(name, 0) + bool(verdict["satisfied"])

    def progress(self) -> str:
        return f"violating {self.violating}" if self.constraints else ""

    def note(self) -> str:
        return satisfaction_note(
            self.constraints, self.count, self.violating, self.method, self.held
        )


@dataclass
class Measured:
    """A batch done, as it went (seconds): one measurement of what a batch costs."""

    size: int
    step: float  # one regular step of its first pass, per sample: their median
    stepping: float  # its first pass's regular steps, at that median
    final: float  # its first pass's last step: the noise removal and the final projection
    after: float  # judging, records and redraw passes

    # How the last step and judging follow the machine's step speed: as its 0.75th power.
    # On a busy two-core machine, torch's steps (every core, in lockstep) ran 8 to 11 times
    # slower in some batches than in others, the last steps (RDKit, one core) about 6 times
    # and the judging and redraws about 9 (bench/eta_check.py's traces); a step speed 8
    # times slower scales them by 4.8. Replaying three such runs: 171 of 230 estimates within
    # 2x, against 170 at the square root, 165 at the full ratio and 150 at none.
    REST_FOLLOWS = 0.75

    def parts(self, speed: float, size: int) -> tuple[float, float, float]:
        """Its steps, last step and what came after, for `size` samples when a regular step
        costs `speed` seconds per sample (bounded to 1/8..8 of its own: a burst of other
        work is not the machine's pace)."""
        ratio = min(max(speed / self.step, 1 / 8), 8.0) if self.step else 1.0
        rest = ratio**self.REST_FOLLOWS * size / self.size
        return self.stepping * ratio * size / self.size, self.final * rest, self.after * rest


def residual(measured: list[float], elapsed: float) -> float:
    """Seconds a part of the batch at hand (its last step, or its judging and redraws)
    still needs when it has run `elapsed`, from what the batches done took for it (at the
    speed now): of those that ran longer, what they had left then, the geometric mean of
    the least and the most. A batch's last step varies several-fold with which samples it
    must move (10 to 40 s beside a CI run, then 12) and nothing tells which before it ends:
    a point between the extremes errs by the same factor either way (the mean of 10, 25 and
    40 is 25, twice a 12 s one; their geometric middle, 20, is 1.7 times it and half of 40).
    Once the part outlasts the shorter ones, it follows the longer ones, never a stale mean
    minus the time spent (0, and there it sits). Past all of them nothing measured says how
    long it goes on: a quarter of what it took so far, which grows as it runs on."""
    longer = [m - elapsed for m in measured if m > elapsed]
    return (min(longer) * max(longer)) ** 0.5 if longer else elapsed / 4


class Pace:
    """How far a sampling run is and how long its rest should take, from what it measured.

    A run's work is its batches, each `steps` denoising steps: the regular steps, then the
    last one, the noise removal, which carries the projection of the final prediction, then
    the judging and any redraw passes. Before a batch is done nothing says what its last step
    and the rest cost (most of a batch of `-c sa --tau 3.5`), so there is no estimate; after,
    each batch done is one measurement of the three parts (`Measured`), and the estimate is
    built from whole batches: the batches not begun cost what the batches done cost on
    average (a sum over several batches: the mean is its best guess), and the batch at hand
    its steps left, then its last step and what follows as the batches done took them from
    the same point on (`residual`), so its share shrinks as each part ends.

    A busy machine's load moves several-fold within a run (on two cores beside other work, a
    batch's steps took 0.07 s in one batch and 0.8 s in the next), and it slows every part:
    each batch done is taken at the speed the machine steps now, the median of the batch at
    hand's latest regular steps against the median of that batch's (a median: the first
    steps of a run warm up, and a burst of other work slows a step or two several-fold;
    neither is the machine's pace). Until the batch at hand has TRUST_STEPS steps there is
    no estimate (`fresh`). The estimate never falls below the time the denoising steps left
    need alone, at the lowest per-sample step cost seen. What it cannot foresee: a load that
    changes after it spoke, and a batch whose judges reject more or fewer samples than the
    batches done (each redraw pass is a pass of all the steps). Pure bookkeeping: every
    event passes the clock's reading `now`."""

    RECENT_STEPS = 9  # the batch at hand's latest steps, whose median is the speed now
    TRUST_STEPS = 3  # its steps before that median is trusted (one may carry a burst)

    def __init__(self, total: int, present: int, now: float):
        self.total, self.present, self.done = total, present, present
        self.started = now
        self.batch = self.batches = self.size = self.steps = 0
        self.batch_started = now
        self.batch_done = 0  # records of the batch at hand already final
        self.begin_pass(0, 1, now)
        # When the first pass's regular steps ended, and its last step (None: not yet).
        self.rest_started: float | None = None
        self.final_ended: float | None = None
        self.batches_done: list[Measured] = []
        self.measured = 0  # records of the batches done
        self.step_cost: float | None = None  # lowest seconds of one regular step per sample
        # The first pass's regular steps of the batch at hand: each one's seconds.
        self.durations: list[float] = []

    def begin_batch(self, batch: int, batches: int, size: int, steps: int, now: float) -> None:
        if self.batch:  # the batch before is done: what it cost is measured
            steps_ended = now if self.rest_started is None else self.rest_started
            final_ended = now if self.final_ended is None else self.final_ended
            if self.durations:
                step = median(self.durations) / max(self.size, 1)
                stepping = step * self.size * max(self.steps - 1, 0)
            else:  # one step: no regular ones
                step, stepping = 0.0, 0.0
            self.batches_done.append(
                Measured(self.size, step, stepping, final_ended - steps_ended, now - final_ended)
            )
            self.measured += self.size
        self.batch, self.batches, self.size, self.steps = batch, batches, size, steps
        self.batch_started, self.batch_done = now, 0
        self.rest_started = None if steps > 1 else now  # one step: it is the last
        self.final_ended = None
        self.durations = []
        self.begin_pass(size, 1, now)

    def begin_pass(self, samples: int, attempt: int, now: float) -> None:
        self.samples, self.attempt = samples, attempt
        self.pass_started = self.last_step = now
        self.step = 0  # steps of the pass at hand done
        self.step_time: float | None = None  # seconds of one regular step of the pass

    def stepped(self, index: int, steps: int, now: float) -> None:
        previous = self.last_step
        self.steps, self.step, self.last_step = steps, min(index + 1, steps), now
        regular = steps - 1
        if index < regular:
            self.step_time = (now - self.pass_started) / self.step
            per_sample = self.step_time / max(self.samples, 1)
            self.step_cost = min(self.step_cost or per_sample, per_sample)
            if self.attempt == 1:
                self.durations.append(now - previous)
            if index == regular - 1 and self.attempt == 1:
                self.rest_started = now
        elif self.attempt == 1:
            self.final_ended = now

    def finished(self, done: int) -> None:
        self.batch_done += done - self.done
        self.done = done

    @property
    def in_final_step(self) -> bool:
        """The pass at hand's regular steps are done: its last step (in a first pass, with
        the projection of the final prediction) is under way."""
        return self.batch > 0 and self.steps - 1 <= self.step < self.steps

    def rate(self, now: float) -> float | None:
        """Records written per second by this run (None before the first)."""
        written = self.done - self.present
        return written / (now - self.started) if written and now > self.started else None

    def later(self) -> int:
        """Records of the batches not begun."""
        return max(self.total - self.done - (self.size - self.batch_done), 0)

    def pass_left(self, now: float) -> float | None:
        """Seconds the pass at hand's regular steps still need (None before one is measured,
        or while the step under way is overdue: a step that projects, e.g. the paper's
        method, can take minutes where the ones before took seconds, and a stale zero would
        say it is done). The step under way is taken to cost at least what it took so far."""
        if self.step_time is None:
            return None
        steps = self.steps - 1 - self.step
        if steps <= 0:
            return 0.0
        current = now - self.last_step
        left = steps * max(self.step_time, current) - current
        return left if left > 0 else None

    def speed(self) -> float:
        """Seconds of one regular step per sample at the machine's pace now: the median of
        the batch at hand's latest first-pass steps (TRUST_STEPS at least), else the latest
        batch done's."""
        recent = self.durations[-self.RECENT_STEPS :]
        if len(recent) >= self.TRUST_STEPS:
            return median(recent) / max(self.size, 1)
        return self.batches_done[-1].step if self.batches_done else 0.0

    def expected(self, size: int) -> list[tuple[float, float, float]]:
        """Each batch done's steps, last step and what came after, for `size` samples at the
        machine's speed now."""
        speed = self.speed()
        return [m.parts(speed, size) for m in self.batches_done]

    def step_eta(self, now: float) -> float | None:
        """Seconds the pass at hand's steps still need: its regular steps, then the last one
        as the batches done took theirs on average (None where nothing measures it, and once
        past that average: the row's countdown is not a guess)."""
        if not self.in_final_step:
            return self.pass_left(now)
        if not self.measured or self.attempt != 1 or self.rest_started is None:
            return None
        parts = self.expected(self.size)
        left = sum(final for _, final, _ in parts) / len(parts) - (now - self.rest_started)
        return left if left > 0 else None  # overdue: unknown, not a stale zero

    def floor(self, now: float) -> float:
        """Seconds the denoising steps left need alone: the pass at hand's regular steps, and
        every later batch's at the lowest per-sample step cost measured."""
        here = self.pass_left(now) or 0.0
        return here + self.later() * max(self.steps - 1, 0) * (self.step_cost or 0.0)

    @property
    def fresh(self) -> bool:
        """A batch's first pass has not yet taken TRUST_STEPS steps: nothing says how fast
        the machine is now (on a busy two-core machine a batch's steps ran 12 to 30 times
        slower or faster than the batch before's; at that batch's speed a new batch was said
        to have 236 s left of 41)."""
        steps = len(self.durations)
        return self.attempt == 1 and self.rest_started is None and steps < self.TRUST_STEPS

    def left(self, now: float) -> float | None:
        """Seconds the run should still take: the batch at hand's remainder (see `here`) and
        the batches not begun at the mean cost of the batches done, per sample. None until a
        batch is done (nothing measured) and while `fresh`: unknown, not a stale number."""
        if not self.measured or self.fresh:
            return None
        later = self.later()
        whole = sum(sum(p) for p in self.expected(1)) / len(self.batches_done)
        return max(self.here(now) + later * whole, self.floor(now))

    def here(self, now: float) -> float:
        """Seconds the batch at hand still needs: its regular steps at the speed now, then
        its last step and what follows as the batches done took them from the same point on
        (`residual`: once a part has run long, as the longer ones did)."""
        size = self.size
        if self.batch_done >= size:  # the batch at hand is written: nothing of it left
            return 0.0
        parts = self.expected(size)
        count = len(parts)
        after = [a for _, _, a in parts]
        if self.rest_started is None:  # the regular steps of the batch's first pass
            steps = max(self.steps - 1 - self.step, 0)
            current = now - self.last_step
            step = self.speed() * size
            regular = max(steps * max(step, current) - current, 0.0)
            final = residual([f for _, f, _ in parts], 0.0)
            return regular + final + sum(after) / count
        if self.final_ended is None:
            final = residual([f for _, f, _ in parts], now - self.rest_started)
            return final + sum(after) / count
        return max(residual(after, now - self.final_ended), self.redraw_left(now))

    def redraw_left(self, now: float) -> float:
        """Seconds the redraw pass under way still needs for its regular steps at least (0
        outside one): the batches done may have had none, or fewer samples to redraw, and
        a pass of 32 steps is no short wait. At its own step time once it has one, else at
        the first pass's per-sample speed."""
        if self.attempt == 1 or self.in_final_step:
            return 0.0
        left = self.pass_left(now)
        if left is None:
            steps = max(self.steps - 1 - self.step, 0)
            left = steps * self.speed() * self.samples - (now - self.last_step)
        return max(left, 0.0)
