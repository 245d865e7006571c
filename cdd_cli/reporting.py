"""What a sampling run tells as it goes: the reporter interface, and the pace of a run (how
far it is and how long the rest should take). No torch imported here, so the CLI can subclass
the reporter without paying for torch at start-up."""

from __future__ import annotations

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


class Pace:
    """How far a sampling run is and how long its rest should take, from what it measured.

    A run's work is its batches, each `steps` denoising steps: the regular steps, then the
    last one, the noise removal, which carries the projection of the final prediction, then
    the judging and any redraw passes. Before a batch is done nothing says what its last step
    and the rest cost (98% of a batch of `-c sa --tau 3.5` on a busy machine), so there is no
    estimate; after, the batches done give the per-sample cost of each of the three parts,
    and the batch at hand counts down by its own steps as they end. A busy machine's load
    moves: each step of a full batch compares the time it took to get there with the batches
    done, and that speed scales what is left. The estimate never falls below the time the
    denoising steps left need alone, at the lowest per-sample step cost seen. Pure
    bookkeeping: every event passes the clock's reading `now`."""

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
        # The batches done: records, seconds, and the seconds of their first pass's regular
        # steps and of its last step.
        self.measured = 0
        self.seconds = self.stepping = self.finishing = 0.0
        self.step_cost: float | None = None  # lowest seconds of one regular step per sample
        # The seconds a first pass took to reach each regular step: this batch's, and summed
        # over the full-size batches done; this batch's over theirs at its latest step is the
        # machine's speed now (below 1: faster than it was).
        self.full = self.full_batches = 0
        self.reach: list[float] = []
        self.reach_sum: list[float] = []
        self.speed = 1.0

    def begin_batch(self, batch: int, batches: int, size: int, steps: int, now: float) -> None:
        if self.batch:  # the batch before is done: what it cost is measured
            steps_ended = self.rest_started or now
            self.measured += self.size
            self.seconds += now - self.batch_started
            self.stepping += steps_ended - self.batch_started
            self.finishing += (self.final_ended or now) - steps_ended
            if self.size == self.full and len(self.reach) == self.steps - 1:
                old = self.reach_sum or [0.0] * len(self.reach)
                self.reach_sum = [a + b for a, b in zip(old, self.reach, strict=True)]
                self.full_batches += 1
                # Until the next batch's first step: the speed of this one, against them all.
                self.speed = self.reach[-1] / (self.reach_sum[-1] / self.full_batches)
        self.full, self.reach = max(self.full, size), []
        self.batch, self.batches, self.size, self.steps = batch, batches, size, steps
        self.batch_started, self.batch_done = now, 0
        self.rest_started = None if steps > 1 else now  # one step: it is the last
        self.final_ended = None
        self.begin_pass(size, 1, now)

    def begin_pass(self, samples: int, attempt: int, now: float) -> None:
        self.samples, self.attempt = samples, attempt
        self.pass_started = self.last_step = now
        self.step = 0  # steps of the pass at hand done
        self.step_time: float | None = None  # seconds of one regular step of the pass

    def stepped(self, index: int, steps: int, now: float) -> None:
        self.steps, self.step, self.last_step = steps, min(index + 1, steps), now
        regular = steps - 1
        if index < regular:
            self.step_time = (now - self.pass_started) / self.step
            per_sample = self.step_time / max(self.samples, 1)
            self.step_cost = min(self.step_cost or per_sample, per_sample)
            if self.attempt == 1 and index == len(self.reach):
                self.reach.append(now - self.batch_started)
                then = self.reach_sum[index] / self.full_batches if self.full_batches else 0.0
                if self.size == self.full and then > 0 and len(self.reach) >= self.trusted:
                    # Bounded: one slow step (a burst of other work) is not the machine's pace.
                    self.speed = min(max(self.reach[index] / then, 0.125), 8.0)
            if index == regular - 1 and self.attempt == 1:
                self.rest_started = now
        elif self.attempt == 1:
            self.final_ended = now

    @property
    def trusted(self) -> int:
        """Steps of a new batch before its speed is trusted: a quarter of its regular steps
        (the first of a batch can carry a burst of other work several times its own cost)."""
        return max(1, (self.steps - 1) // 4)

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

    def step_eta(self, now: float) -> float | None:
        """Seconds the pass at hand's steps still need: its regular steps, then the last one
        as the batches done took theirs (None where nothing measures it)."""
        if not self.in_final_step:
            return self.pass_left(now)
        if not self.measured or self.attempt != 1 or self.rest_started is None:
            return None
        left = self.size * self.per_sample()[2] - (now - self.rest_started)
        return left if left > 0 else None  # overdue: unknown, not a stale zero

    def floor(self, now: float) -> float:
        """Seconds the denoising steps left need alone: the pass at hand's regular steps, and
        every later batch's at the lowest per-sample step cost measured."""
        here = self.pass_left(now) or 0.0
        return here + self.later() * max(self.steps - 1, 0) * (self.step_cost or 0.0)

    def per_sample(self) -> tuple[float, float, float, float]:
        """Seconds a sample costs, as the batches done took it at the machine's speed now: in
        all, its regular steps, its last step, and what came after (judging, redraws)."""
        scale = self.speed / self.measured
        whole, stepping = self.seconds * scale, self.stepping * scale
        finishing = self.finishing * scale
        return whole, stepping, finishing, max(whole - stepping - finishing, 0.0)

    def overdue(self, now: float) -> bool:
        """The batch at hand's final projection, or its judging and redraws, has run longer
        than the batches done took theirs: these vary with which samples they must move, and
        past that nothing measured says how long they go on (no estimate beats a stale one)."""
        if not self.measured or self.batch_done >= self.size or self.rest_started is None:
            return False
        _, _, finishing, after = self.per_sample()
        if self.final_ended is None:
            return now - self.rest_started > self.size * finishing
        return now - self.final_ended > self.size * after

    def left(self, now: float) -> float | None:
        """Seconds the run should still take (None until a batch is done: nothing measured;
        and at a new batch until a quarter of its steps ended: a busy machine's speed can
        change several-fold between batches, and only this batch's steps say how fast it is
        now)."""
        if not self.measured or self.seconds <= 0:
            return None
        if self.attempt == 1 and self.rest_started is None and len(self.reach) < self.trusted:
            return None
        whole, stepping, finishing, after = self.per_sample()
        size = self.size
        if self.batch_done >= size:  # the batch at hand is written: nothing of it left
            here = 0.0
        elif self.rest_started is None:  # the regular steps of the batch's first pass
            steps = self.pass_left(now)
            if steps is None:  # not one step yet: as the batches done took theirs
                steps = max(size * stepping - (now - self.batch_started), 0.0)
            here = steps + size * (finishing + after)
        elif self.overdue(now):
            return None
        elif self.final_ended is None:
            here = size * finishing - (now - self.rest_started) + size * after
        else:
            here = size * after - (now - self.final_ended)
        return max(here + self.later() * whole, self.floor(now))
