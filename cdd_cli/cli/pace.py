"""How far a sampling run is and how long its rest should take, from what it measured: the
progress display's time left (`Pace`). Pure bookkeeping: every event passes the clock's
reading `now`."""

from __future__ import annotations

import math
from collections import deque
from statistics import median

from cdd_cli.cli.pass_costs import LateALM, Measured, aged, residual, worked


class Pace:
    """How far a sampling run is and how long its rest should take, from what it measured.

    A run is a stream of passes of the sampler, each of at most `batch_size` samples: those
    the judges rejected in the pass before, then samples not yet begun. A pass is its regular
    steps, its last step (the noise removal, which carries the projection of the final
    prediction), then the judging and its records until the next pass begins. Each pass done
    is one measurement of those three parts (`Measured`). Before the first is done nothing
    says what the last step and the judging cost (most of a pass of `-c sa --tau 3.5`), so
    there is no estimate.

    The rest of the run is the pass at hand's remainder (`here`: its steps left, weighed by
    the shape the passes done's steps had, `shape`) and the passes to come, their number and
    sizes from the share of a pass's samples the judges reject (`rejected`) by running the
    pool forward (`forecast`): each pass takes the rejected and fresh samples up to the batch
    size and leaves its share rejected, until no fresh sample is left and hardly any
    rejected one is expected, or none may be drawn again (the method's cap, `cap`): a tail
    of shrinking passes. One of `size` samples expected comes with the chance 1 - e^-size
    (a Poisson count not 0), and its fixed costs (FIXED_ROWS, `fixed_share`) count by that
    chance. Several prompts, whose samples never share a pass, are taken as one pool (each
    prompt's own tail of small passes is not foreseen).

    A pass to come costs what the passes done cost: their steps per row (`rows`: a step has
    a cost whatever the size; their sum, not their median times their count: the paper's
    method's steps cost 1 ALM round at a pass's start and up to its cap at its end, and a
    masked text model's toxicity steps 0 to 4 s, `skew`), their last steps and judging as a
    part fixed per pass and a part per sample (`fixed_share`, fitted on the passes done),
    each summed over the passes done and divided by their rows or sizes summed, so that a
    full pass tells more than a small one, and a small one slowed by a burst of other work
    counts for little. Where the passes done cost so unlike each other for their size that
    the dearest's rate would say over RANGE_FROM times what the cheapest's would, the time
    left is told as that range (`shown`).

    A busy machine's load moves several-fold within a run (on two cores beside other work,
    a pass's steps took 0.06 s in one pass and 2 s in another) and slows every part: the pass
    at hand is taken at the speed the machine steps now, the median of the latest
    RECENT_STEPS regular steps per row (a median: a first step also sets the pass up, a
    burst of other work slows a step or two), against each pass done's own median. Whether
    a slow-down lasts nothing tells (one 4 times slower lasted 50 s of a 190 s run, another
    run's last 80 s were 10 times slower), so where the machine steps slower than the run's
    typical pace the passes to come are taken at the geometric middle of the two speeds,
    which errs by the same factor whether it ends at once or lasts (within 2 times up to a
    4-fold one); where it steps faster, at the speed now (what slowed the passes before has
    ended); never below the time the denoising steps left need alone (`floor`). It cannot
    foresee a load that changes after it spoke."""

    RECENT_STEPS = 9  # the latest regular steps, whose median is the machine's speed now
    # A step costs a part per sample and a part whatever the size (Python, torch's calls,
    # the threads meeting): on two cores a step of 64 molecules took 0.06 s, of 6 0.015 s and
    # of 1 0.008 s, as if every pass had 8 samples more. The tail of small passes costs that.
    FIXED_ROWS = 8
    # The share rejected, bounded below 1 so that the pool runs dry: at 0.95, a pass takes
    # 5% fresh samples and the forecast is some hundred passes (the method's cap on a
    # sample's draws, `cap`, 16 for molecules, ends the tail sooner).
    MOST_REJECTED = 0.95
    MOST_PASSES = 1000  # passes forecast at most
    RANGE_FROM = 2.0  # a range is said where its most is over this many times its least
    LEAST_PENDING = 0.01  # rejected samples expected that no longer count

    def __init__(self, total: int, batch_size: int, now: float, present: int = 0, draws: int = 0):
        self.total, self.batch_size = total, max(batch_size, 1)
        self.present = self.done = present
        self.started = now
        self.passes = 0  # passes begun
        self.cap: int | None = None  # draws a sample may take (told by the run); None: unknown
        self.last_fresh = 0  # the latest pass that began samples not drawn before
        self.begun = 0  # samples begun: drawn once at least, or in the pass at hand
        # The redraws of the passes begun, and the samples of the passes done. A resumed
        # run's records already written count with their draws: its first passes take the
        # samples the run before had begun and not finished, those its judges rejected, and
        # again reject most of them (the same seeds), 58 of 64 in one run where 42 was the
        # rule: alone they said 2.6-2.9 times the time left.
        self.redrawn = max(draws - present, 0)
        self.judged = draws
        self.passes_done: list[Measured] = []
        self.latest: deque[float] = deque(maxlen=self.RECENT_STEPS)  # seconds per row
        # The lowest mean of a pass's regular steps so far per row, their ALM rounds apart.
        self.step_cost: float | None = None
        # The passes done's regular steps, each step's seconds per row, by their step count.
        self.profiles: dict[int, list[list[float]]] = {}
        self.round_seconds: deque[float] = deque(maxlen=self.RECENT_STEPS)  # latest ALM rounds
        self.late = LateALM()  # an ALM from a later draw on (told by the run)
        self.ages: list[float] = []  # the pass at hand's samples by their draws before (`aged`)
        self.begin(0, 0, 0, now)

    def begin(self, samples: int, redraws: int, steps: int, now: float) -> None:
        """The pass at hand's own bookkeeping, afresh."""
        self.samples, self.redraws, self.steps = samples, redraws, steps
        self.pass_started = self.last_step = now
        self.step = 0  # its steps done
        self.step_time: float | None = None  # seconds of one of its regular steps so far
        self.durations: list[float] = []  # each regular step's seconds
        self.step_rounds: list[int] = []  # each regular step's ALM rounds
        self.denoised = 0.0  # its regular steps' seconds, their ALM rounds apart
        self.rounds_now = 0
        self.alms_now = 0  # the ALMs the step under way began (one a run of samples)
        self.projected_now = 0  # the samples the step under way's ALMs began with
        # Each regular step's cost against the pass's mean step, as the passes done of as
        # many steps had it (1 each where none did): see `shape`.
        self.relative = self.shape(steps)
        # When its regular steps ended, and its last step (None: not yet).
        self.rest_started: float | None = None if steps > 1 else now
        self.final_ended: float | None = None
        self.round_ended: float | None = None  # the step under way's latest ALM round
        self.rounds_left = 0  # rounds its ALM may still run (its cap less those run)
        self.round_cap = 0  # the rounds an ALM of the step under way may run at most
        self.final_rounds = self.final_projected = 0  # its last step's ALM rounds, samples
        self.final_alms = 0  # the ALMs its last step ran

    def begin_pass(self, samples: int, redraws: int, steps: int, now: float) -> None:
        if self.passes:  # the pass before is done: what it cost is measured
            steps_ended = now if self.rest_started is None else self.rest_started
            final_ended = now if self.final_ended is None else self.final_ended
            rows = self.rows(self.samples)
            durations = list(self.durations)
            if self.passes == 1 and len(durations) > 1:  # the run's first step warms up
                durations[0] = median(durations[1:])
            if durations:
                profile = worked(durations, self.step_rounds) or durations
                self.profiles.setdefault(self.steps, []).append([d / rows for d in profile])
            step = median(durations) / rows if durations else 0.0
            final, after = final_ended - steps_ended, now - final_ended
            if self.late.later:
                self.late.judged(
                    self.ages, self.final_rounds, self.final_projected, self.final_alms
                )
            if self.late.later and self.final_rounds:  # its ALM apart: see `alm_seconds`
                final = max(final - self.final_rounds * self.round_cost(), final / 8)
            measured = Measured(
                self.samples, rows, step, sum(durations), final, after, len(durations)
            )
            self.passes_done.append(measured)
            self.judged += self.samples
        self.passes += 1
        if samples > redraws:
            self.last_fresh = self.passes
        self.redrawn += redraws
        self.begun += samples - redraws
        self.ages = aged(self.ages, redraws, samples - redraws)
        self.begin(samples, redraws, steps, now)

    def alm_round(self, outer: int, most: int, now: float, samples: int = 0) -> None:
        """An ALM round (outer iteration) of the step under way ended: its `outer`th, of at
        most `most`, of an ALM that began with `samples`."""
        if outer > 1 and self.round_ended is not None:  # a first round also sets the ALM up
            self.round_seconds.append(now - self.round_ended)
        self.round_ended, self.rounds_left = now, max(most - outer, 0)
        self.round_cap = most
        self.rounds_now += 1
        self.alms_now += outer == 1
        self.projected_now += samples if outer == 1 else 0

    def alm_left(self, now: float) -> float | None:
        """Seconds the ALMs of the step under way need at most: the one under way's rounds
        left to its cap, and the cap again for each of the pass's samples no ALM of the step
        began with yet (a step moves its samples by runs of one draw count, each run by its
        own ALM: `seven_c`'s tail passes ran 2, and bounded by one its pass's time left held
        in 39 of 84 lines, so in 63), all at the median of the latest rounds. None where none
        runs, where the one under way has run to its cap (what follows is other work), or its
        rounds have outrun that pace (a stale zero would say it is done)."""
        if self.round_ended is None or not self.rounds_left or not self.round_seconds:
            return None
        later = max(self.samples - self.projected_now, 0) * self.round_cap
        pace = median(self.round_seconds)
        left = (self.rounds_left + later) * pace - (now - self.round_ended)
        return left if left > 0 else None

    def stepped(self, index: int, steps: int, now: float) -> None:
        self.round_ended, self.rounds_left = None, 0
        rounds, self.rounds_now = self.rounds_now, 0
        alms, self.alms_now = self.alms_now, 0
        projected, self.projected_now = self.projected_now, 0
        previous = self.last_step
        self.steps, self.step, self.last_step = steps, min(index + 1, steps), now
        if index < steps - 1:
            rows = self.rows(self.samples)
            self.durations.append(now - previous)
            self.step_rounds.append(rounds)
            self.latest.append((now - previous) / rows)
            self.step_time = (now - self.pass_started) / self.step
            # Its denoising alone: its ALM rounds at their pace apart (see `least`); not the
            # run's first step, which warms up.
            warming = self.passes == 1
            if index or not warming:
                pace = median(self.round_seconds) if rounds and self.round_seconds else 0.0
                self.denoised += max(now - previous - rounds * pace, 0.0)
                per_row = self.denoised / (self.step - warming) / rows
                self.step_cost = min(self.step_cost or per_row, per_row)
            if index == steps - 2:
                self.rest_started = now
        else:
            self.final_ended, self.final_rounds, self.final_alms = now, rounds, alms
            self.final_projected = projected

    def finished(self, done: int) -> None:
        self.done = done

    def shape(self, steps: int) -> list[float]:
        """Each regular step's cost relative to the mean step of a pass of `steps` steps: per
        step, the median over the passes done of as many steps of its cost, scaled to a mean
        of 1 (all 1 where none was done). A pass's steps need not cost alike: a masked text
        model's steps cost 2-2.6 s at a pass's start and 0.4 s at its end (the projection
        works on the positions a step decides), the same each pass, and the steps left of a
        pass, taken at the mean of its steps so far, were said to need twice their time. A
        pass whose steps ran ALM rounds gives its cost as its rounds tell it (`worked`): its
        seconds also carry the load of the moment."""
        done = self.profiles.get(steps)
        regular = max(steps - 1, 0)
        if not done:
            return [1.0] * regular
        across = [median(p[i] for p in done) for i in range(regular)]
        # Each step with its neighbours (a running median of 5): a burst of other work in a
        # step or two of a pass is not the pass's shape, a cost that falls step by step is.
        medians = [median(across[max(i - 2, 0) : i + 3]) for i in range(regular)]
        mean = sum(medians) / regular if regular else 0.0
        # A step far off the others is a burst of other work more than the pass's shape.
        bounded = [min(max(m / mean, 1 / 4), 4.0) if mean > 0 else 1.0 for m in medians]
        scale = sum(bounded) / len(bounded) if bounded else 1.0
        return [b / scale for b in bounded]

    def weight(self, start: int, stop: int) -> float:
        """The regular steps start..stop-1 of the pass at hand, in mean steps (`shape`)."""
        return sum(self.relative[start:stop]) + max(stop - max(start, len(self.relative)), 0)

    def rows(self, samples: float) -> float:
        """What a pass of `samples` costs a step, in samples (see FIXED_ROWS)."""
        return samples + self.FIXED_ROWS

    @property
    def in_final_step(self) -> bool:
        """The pass at hand's last step (the final prediction's projection) is under way."""
        return self.passes > 0 and self.steps - 1 <= self.step < self.steps

    def rate(self, now: float) -> float | None:
        """Records written per second by this run (None before the first)."""
        written = self.done - self.present
        return written / (now - self.started) if written and now > self.started else None

    def fresh(self) -> int:
        """Samples not yet begun."""
        return max(self.total - self.present - self.begun, 0)

    def rejected(self) -> float:
        """The share of a pass's samples its judges reject: every rejected sample is drawn
        again in the very next pass, so the redraws of the passes begun over the samples of
        the passes before them."""
        return min(self.redrawn / self.judged, self.MOST_REJECTED) if self.judged else 0.0

    def forecast(self) -> list[tuple[float, float, float]]:
        """The passes after the one at hand, the pool run forward (see the class): each one's
        samples, chance of coming and last step's ALM (`alm_seconds`). No sample is drawn
        over `cap` times: the tail ends `cap` - 1 passes after the last with fresh ones."""
        share = self.rejected()
        pending, fresh = self.samples * share, float(self.fresh())
        pending_ages = [n * share for n in self.ages]  # (by their draws so far)
        since = self.passes - self.last_fresh  # passes of redraws alone, the one at hand's too
        passes = []
        for _ in range(self.MOST_PASSES):
            if fresh <= 0 and pending < self.LEAST_PENDING:
                break
            if fresh <= 0 and self.cap is not None and since >= self.cap - 1:
                break
            size = min(self.batch_size, pending + fresh)
            since = 0 if size > pending else since + 1
            fresh -= size - pending
            ages = aged(pending_ages, pending, size - pending)
            passes.append((size, 1 - math.exp(-size), self.alm_seconds(ages)))
            pending, pending_ages = size * share, [n * share for n in ages]
        return passes

    def ahead(self, passes: list[tuple[float, float, float]] | None = None) -> tuple[float, float]:
        """The rows and the samples of the passes after the one at hand (`forecast`)."""
        passes = self.forecast() if passes is None else passes
        rows = sum(size + self.FIXED_ROWS * chance for size, chance, _ in passes)
        return rows, sum(size for size, _, _ in passes)

    def round_cost(self) -> float:
        first = self.passes_done[0].step if self.passes_done else 0.0
        return self.late.round_cost(list(self.round_seconds), self.speed(), first)

    def alm_seconds(self, ages: list[float]) -> float:
        """What the ALM of a pass's last step should take (`LateALM.seconds`)."""
        return self.late.seconds(ages, self.round_cost()) if self.late.later else 0.0

    def size_weight(self, samples: float, share: float) -> float:
        """What the last step and judging of a pass of `samples` cost, in full passes, where
        `share` of a full pass's is fixed."""
        return share + (1 - share) * samples / self.batch_size

    def fixed_share(self) -> float:
        """The share of a full pass's last step and judging that is the same whatever its
        size, fitted on the passes done: of the shares 0, 0.1 .. 1, the one whose costs at
        each pass's size miss the measured ones least, a share s weighing as much as one
        pass off by s/4 of their mean. So passes all of one size, which say nothing of it,
        leave it 0: per sample, as the projection and the judges work (`-c sa`: a last
        step of 2 samples took 0.18 s where one of 64 took 7.4; a fixed share of a tenth
        said twice the time its tail took). They work by runs of samples of one draw count,
        though, and from the draw `repair.surrogates_from` on such a run may run the ALM
        for seconds whatever its size (seven constraints: a last step of 1 sample took 2-2.5
        s, one of 32 2-3): passes of other sizes show it."""
        costs = [(m.samples, sum(m.parts(m.step)[1:])) for m in self.passes_done]
        mean = sum(c for _, c in costs) / len(costs) if costs else 0.0
        if mean <= 0:
            return 0.0

        def misfit(share: float) -> float:
            weights = [self.size_weight(n, share) for n, _ in costs]
            scale = sum(c for _, c in costs) / sum(weights)
            missed = sum((c - scale * w) ** 2 for (_, c), w in zip(costs, weights, strict=True))
            return missed + (mean / 4 * share) ** 2

        return min((tenth / 10 for tenth in range(11)), key=misfit)

    def speed(self) -> float:
        """Seconds of one regular step per row at the machine's pace now: the median of the
        latest RECENT_STEPS regular steps."""
        return median(self.latest) if self.latest else 0.0

    def pass_left(self, now: float) -> float | None:
        """Seconds the pass at hand's regular steps still need (None before one is measured,
        or while the step under way is overdue: a step that projects, e.g. the paper's
        method, can take minutes where the ones before took seconds, and a stale zero would
        say it is done). The step under way is taken to cost at least what it took so far,
        and every step left as much: the paper's steps grow along a pass (1 ALM round at
        its start, the cap at its end), and its first pass's time left held within 2x for
        42 of 171 s so, against 3 with the overrun counted in the mean step alone."""
        if self.step_time is None:
            return None
        regular = self.steps - 1
        if regular - self.step <= 0:
            return 0.0
        # Its mean step so far, in mean steps of its shape: the steps left at that pace.
        mean = (self.last_step - self.pass_started) / max(self.weight(0, self.step), 1e-9)
        left = self.steps_left(now, mean)
        return left if left > 0 else None

    def steps_left(self, now: float, unit: float) -> float:
        """Seconds the pass at hand's regular steps left need at `unit` seconds a mean step
        of its shape. The step under way costs at least what it took so far, and one that
        overran makes every step left as slow (the paper's steps grow along a pass)."""
        regular = max(self.steps - 1, 0)
        current = now - self.last_step
        this = self.weight(self.step, min(self.step + 1, regular))
        unit = max(unit, current / max(this, 1e-9)) if this else unit
        return self.weight(self.step, regular) * unit - current

    def scaled(self, speed: float, share: float) -> tuple[list[float], list[float]]:
        """Each pass done's last step, and what came after it, for the pass at hand's
        samples at the speed now, `share` of them fixed (`fixed_share`), with its own last
        step's ALM (`alm_seconds`)."""
        finals, afters = [], []
        alm = self.alm_seconds(self.ages)
        for m in self.passes_done:
            _, final, after = m.parts(speed)
            ratio = self.size_weight(self.samples, share) / self.size_weight(m.samples, share)
            finals.append(final * ratio + alm)
            afters.append(after * ratio)
        return finals, afters

    def step_eta(self, now: float) -> float | None:
        """Seconds the pass at hand's steps still need: its regular steps, then the last one
        as the passes done took theirs (None where nothing measures it, and once past that:
        the row's countdown is not a guess)."""
        if not self.in_final_step:
            return self.pass_left(now)
        if not self.passes_done or self.rest_started is None:
            return None
        finals, _ = self.scaled(self.speed(), self.fixed_share())
        left = median(finals) - (now - self.rest_started)
        capped = self.alm_left(now)  # its ALM's rounds left to their cap bound it
        left = left if capped is None else min(left, capped)
        return left if left > 0 else None  # overdue: unknown, not a stale zero

    def floor(self, now: float) -> float:
        """Seconds the denoising steps left need alone: the pass at hand's regular steps, and
        those of as few passes as the samples not begun need (none redrawn), at the lowest
        per-row step cost measured."""
        fresh = self.fresh()
        rows = fresh + self.FIXED_ROWS * -(-fresh // self.batch_size)
        later = rows * max(self.steps - 1, 0) * (self.step_cost or 0.0)
        return (self.pass_left(now) or 0.0) + later

    def least(self, now: float) -> float | None:
        """Before a pass is done (`left` says nothing yet), what the run needs at least: the
        denoising steps left, the pass at hand's and those of as few passes as the samples
        not begun need, all at the lowest cost per row measured, each step's ALM rounds at
        their pace apart: toxicity and the paper's method project at every step for as many
        rounds as the samples need, and a pass's first steps ran more than its last (with
        them, two runs' bounds said 1.1-2 times what the run took, at every line). Not at
        the pass's mean so far (a masked text model's first steps cost 2-2.6 s and its last
        0.4 s), nor its last steps: a first pass's can take several times a later one's (the
        run's first projection warms up; a burst of other work), so nothing sure is known of
        theirs. A first pass whose last step takes minutes (a toxicity bound deep in the
        model's tail) shows that much left at least, not nothing. None before a step is
        measured, and once a pass is done."""
        if self.passes_done or self.step_cost is None:
            return None
        here = max(self.steps - 1 - self.step, 0) * self.rows(self.samples) * self.step_cost
        return here + self.floor(now) - (self.pass_left(now) or 0.0)

    def left(self, now: float) -> float | None:
        """Seconds the run should still take (`estimates`); None until a pass is done."""
        estimated = self.estimates(now)
        return None if estimated is None else estimated[0]

    def shown(self, now: float) -> float | tuple[float, float] | None:
        """The time left as a line says it: seconds, or the least and the most where the
        passes done's costs spread so that the most is over RANGE_FROM times the least (a
        range is honest where one figure would swing: the paper's method); None until a pass
        is done."""
        estimated = self.estimates(now)
        if estimated is None:
            return None
        point, low, high = estimated
        return (low, high) if high > low * self.RANGE_FROM else point

    def estimates(self, now: float) -> tuple[float, float, float] | None:
        """Seconds the run should still take, and the least and most it may: the pass at
        hand's remainder (`here`) and the passes to come (`forecast`) at what the passes
        done cost per row and per pass of their size (`fixed_share`), at the speed now or,
        where slower than the run's typical pace, between the two (see the class); the
        least and the most, the passes to come at the rate of the cheapest and of the
        dearest pass done for its size (the paper's method projects every step for as many
        ALM rounds as the samples at hand need: passes of 12, 15, then 63 s). None until a
        pass is done: unknown, not a guess."""
        if not self.passes_done:
            return None
        if self.done >= self.total:
            return 0.0, 0.0, 0.0
        speed = self.speed()
        typical = median(m.step for m in self.passes_done)
        # Slower than the run's typical pace: the passes to come at the geometric middle.
        coming = math.sqrt(speed * typical) if speed > typical else speed
        parts = [m.parts(coming) for m in self.passes_done]
        per_row = sum(p[0] for p in parts) / sum(m.rows for m in self.passes_done)
        share = self.fixed_share()
        weights = [self.size_weight(m.samples, share) for m in self.passes_done]
        full = sum(p[1] + p[2] for p in parts) / sum(weights)  # a full pass's last step, judging
        passes = self.forecast()
        rows, _ = self.ahead(passes)
        rest = sum(share * chance + (1 - share) * size / self.batch_size
                   for size, chance, _ in passes)  # fmt: skip
        here, later = self.here(now, speed, share), rows * per_row + rest * full
        # The last steps' ALM of the passes to come, which no pass done's rate says
        # (`alm_seconds`). Before a pass holds a sample from its 8th draw on, whether the
        # surrogates reject such samples nothing tells (seven constraints: 5 of 8 such
        # passes ran it in one run, 12 of 12 in another): the geometric middle of none and
        # all of it, off by the same factor either way. The passes that held them tell it
        # (`LateALM.rate`), weighed by how many they held (`LateALM.weight`).
        alm = sum(seconds for _, _, seconds in passes)
        whole = here + later
        middle = math.sqrt(whole * (whole + alm)) - whole
        weight = self.late.weight()
        here += weight * alm + (1 - weight) * middle
        # Each pass done's cost against what its size costs at the rate of them all.
        done = zip(parts, self.passes_done, weights, strict=True)
        ratios = [sum(p) / cost if (cost := per_row * m.rows + full * w) > 0 else 1.0
                  for p, m, w in done]  # fmt: skip
        floor = self.floor(now)
        low, high = here + later * min(ratios), here + later * max(ratios)
        return max(here + later, floor), max(low, floor), max(high, floor)

    def skew(self) -> float:
        """The passes done's regular steps, summed, against as many at their median: 1 where
        steps cost alike, more where a few cost far more than the rest (the paper's method
        projects at every step, for 1 to 1,000 rounds; its median step says little of its
        sum)."""
        typical = sum(m.step * m.rows * m.regular for m in self.passes_done)
        return sum(m.stepping for m in self.passes_done) / typical if typical > 0 else 1.0

    def here(self, now: float, speed: float, share: float) -> float:
        """Seconds the pass at hand still needs: its regular steps at `speed`, then its last
        step and what follows as the passes done took them from the same point on
        (`residual`: once a part has run long, as the longer ones did)."""
        finals, afters = self.scaled(speed, share)
        if self.rest_started is None:
            # A mean step at the speed now (the median step, as the passes done's mean
            # steps stood to their median ones: `skew`).
            step = speed * self.rows(self.samples) * self.skew()
            regular = max(self.steps_left(now, step), 0.0)
            return regular + residual(finals, 0.0) + residual(afters, 0.0)
        if self.final_ended is None:
            final = residual(finals, now - self.rest_started)
            capped = self.alm_left(now)
            final = final if capped is None else min(final, capped)
            return final + residual(afters, 0.0)
        return residual(afters, now - self.final_ended)
