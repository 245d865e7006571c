"""What a pass of the sampler cost, as the time left reads it (`pace.Pace`): a pass done
(`Measured`), what a part of the pass at hand still needs (`residual`), and its steps'
costs as the ALM rounds they ran tell them (`worked`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median


@dataclass
class Measured:
    """A pass done, as it went (seconds): one measurement of what a pass costs."""

    samples: int
    rows: float  # what its steps cost, in samples (`Pace.rows`)
    step: float  # one regular step per row: the median of its regular steps (its pace)
    stepping: float  # its regular steps, summed (what they cost)
    final: float  # its last step: the noise removal and the projection of the final prediction
    after: float  # its judging and records, until the next pass began
    regular: int = 0  # its regular steps

    # How the last step and judging follow the machine's step speed: as its 0.75th power.
    # On a busy two-core machine, torch's steps (every core, in lockstep) ran 8 to 11 times
    # slower in some stretches of a run than in others, the last steps (RDKit, one core)
    # about 6 times and the judging about 9 (bench/eta_check.py's traces): a step speed 8
    # times slower scales them by 4.8.
    REST_FOLLOWS = 0.75

    def parts(self, speed: float) -> tuple[float, float, float]:
        """Its steps, last step and what came after, had a regular step cost `speed` seconds
        per row (bounded to 1/8..8 of its own: a burst of other work is not the machine's
        pace)."""
        ratio = min(max(speed / self.step, 1 / 8), 8.0) if self.step else 1.0
        rest = ratio**self.REST_FOLLOWS
        return self.stepping * ratio, self.final * rest, self.after * rest


def residual(measured: list[float], elapsed: float) -> float:
    """Seconds a part of the pass at hand (its last step, or its judging) still needs when
    it has run `elapsed`, from what the passes done took for it (at its size and the speed
    now): of those that ran longer, the median of what they had left then. A pass's last
    step varies several-fold with which samples it must move, and nothing tells which before
    it ends: the median is the typical pass, and one slowed by a burst of other work does
    not move it. Once the part outlasts the shorter ones it follows the longer ones, never a
    stale mean minus the time spent (0, and there it sits). Past all of them nothing measured
    says how long it goes on: a quarter of what it took so far, which grows as it runs on."""
    longer = [m - elapsed for m in measured if m > elapsed]
    return median(longer) if longer else elapsed / 4


def worked(durations: list[float], rounds: list[int]) -> list[float] | None:
    """Each regular step's seconds as the ALM rounds it ran tell them: a part per step and a
    part per round, fitted on the pass (least squares), so that a pass's shape is the work
    its samples needed and not the load that came and went while it ran (toxicity on a busy
    machine: a first pass's first 32 steps took 1.45 s a step, its last 31 0.81, for 13.5
    and 11.7 rounds a step; the second pass's 1.22 and 2.05 s, for 15.8 and 13.3). Steps
    that all ran as many rounds are alike. None where its steps ran no rounds, or their
    seconds did not grow with them."""
    n = len(durations)
    if n < 2 or not any(rounds):
        return None
    mean_r, mean_d = sum(rounds) / n, sum(durations) / n
    spread = sum((r - mean_r) ** 2 for r in rounds)
    if spread <= 0:
        return [mean_d] * n
    per_round = sum((r - mean_r) * (d - mean_d) for r, d in zip(rounds, durations, strict=True))
    per_round /= spread
    base = max(mean_d - per_round * mean_r, 0.0)  # (noise can fit a step of no rounds below 0)
    return [base + per_round * r for r in rounds] if per_round > 0 else None


def aged(before: list[float], redraws: float, fresh: float) -> list[float]:
    """A pass's samples by the draws each had before this one (index: draws, value: expected
    samples): the pass before's (`before`), each one draw older and scaled down to the
    `redraws` its judges left (which of its samples they rejected is not told: each of them
    alike), and `fresh` samples not drawn before."""
    kept = sum(before)
    scale = redraws / kept if kept > 0 else 0.0
    return [fresh, *(n * scale for n in before)]


@dataclass
class LateALM:
    """cdd's molecules: the ALM moves a rejected sample's final prediction only from its
    `surrogates_from`th draw on (`repair.surrogates_from`, 8), so no pass before shows what
    it costs; the run tells it (`ProjectionPlan`) with a round's seconds measured before its
    first pass (`told`). Seven constraints: from 39 s on, 13-20 rounds of 0.05-0.1 s a
    pass, 37-40 in two, which no pass before showed. A last step moves its samples by runs
    of one draw count, each run by its own ALM: a tail pass of 3 samples of 2 draw counts
    ran 2 ALMs (28-38 rounds), where the first passes to run it, their late samples of one
    draw count, ran 1 (14-15). Once passes that may hold such samples are done, they tell
    how often one runs it (`rate`) and how many rounds an ALM runs (`rounds`, `alms`)."""

    surrogates_from: int = 1
    cap: int = 0  # its rounds at most
    told: float | None = None
    rounds: list[int] = field(default_factory=list)  # of each last step done that ran some
    alms: list[int] = field(default_factory=list)  # the ALMs each of those ran
    held: float = 0.0  # samples at their `surrogates_from`th draw or later in passes done
    projected: int = 0  # the samples the ALMs of those passes' last steps began with

    # What "nothing tells" weighs against the passes done, in such samples (`weight`): the
    # passes to come count held / (held + this) of their ALM at `rate`, the rest at the
    # geometric middle of none and all of it (`Pace.estimates`), so that one sample that
    # ran no ALM is not yet a rule. (1, 0.5, 2, 4: `seven_c` held 79, 80, 72, 57 lines.)
    PRIOR_SAMPLES = 1.0

    @property
    def later(self) -> bool:
        return self.surrogates_from > 1

    def judged(self, ages: list[float], rounds: int, projected: int, alms: int = 1) -> None:
        """A pass done, of samples by their draws before it (`aged`), whose last step ran
        `alms` ALMs, of `rounds` rounds in all, on `projected` samples."""
        self.held += sum(ages[self.surrogates_from - 1 :])
        self.projected += projected
        if rounds:
            self.rounds.append(rounds)
            self.alms.append(max(alms, 1))

    def rate(self) -> float:
        """How often a sample at its `surrogates_from`th draw or later runs the ALM: those
        the ALMs of the passes done began with, over those the passes held (1 before any).
        The held are expected counts (`aged` takes every sample alike, while the hard ones
        stay longest), so more may run it than are counted held: seven constraints' passes
        from the 8th on, 32 of 32.9 in one run (`seven_c`: every one), 6 of 10.3 in another."""
        return self.projected / self.held if self.held > 0 else 1.0

    def weight(self) -> float:
        """What the passes done tell of the ALM's share, against "nothing tells" (0..1)."""
        return self.held / (self.held + self.PRIOR_SAMPLES)

    def round_cost(self, latest: list[float], speed: float, first: float) -> float:
        """A round's seconds: the `latest` rounds' median, else `told` at the step `speed`
        now against the `first` pass's, measured beside it (a busy machine's load moves: a
        round told 1.06 s beside a first pass's steps of 0.52 s ran 0.05-0.09 s beside later
        ones of 0.005-0.04), else 0."""
        if latest:
            return median(latest)
        return (self.told or 0.0) * (speed / first if self.told and first else 1.0)

    def seconds(self, ages: list[float], round_cost: float) -> float:
        """What the ALMs of a pass's last step should take (0 where passes done show it):
        one for each draw count from the `surrogates_from`th on that the pass (`aged`) holds
        a sample of that runs it, with the chance 1 - e^-(m rate) for m such samples
        expected, each at `rate`, as a Poisson count of that mean is not 0; each ALM for the
        median rounds an ALM of the last steps done ran (before any: half its cap). Not one
        ALM a pass: the tail's passes hold the hard samples of several draw counts, and
        `seven_c`'s ran 2 ALMs each where the first passes to run it ran 1 (taken as one a
        pass, the passes to come were said at 0.3-0.5 of their time from 43 s to 85 s:
        51 of its 124 lines held, 79 so)."""
        if not self.later:
            return 0.0
        rate = self.rate()
        runs = sum(1 - math.exp(-rate * n) for n in ages[self.surrogates_from - 1 :])
        pairs = zip(self.rounds, self.alms, strict=True)
        each = median(rounds / alms for rounds, alms in pairs) if self.rounds else self.cap / 2
        return runs * each * round_cost
