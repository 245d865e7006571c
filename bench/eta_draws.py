"""Issue 62: how many passes a run's samples still need, sample by sample, and what no
estimator of it can beat (`bench/eta_check.py --replay ... --draws`, `--limit`). Not in the
product: replayed on the recorded traces it did not raise the seven-constraint runs' held
lines without lowering others' (bench/README.md, "Time left").

Samples differ in how hard they are: a sample's chance that a draw of it is accepted, p, is
drawn from a law fitted on the run's own passes. `beta`: p ~ Beta(a, b), the beta-geometric
model: a sample rejected r times has the posterior Beta(a, b + r), so its next draw is
rejected with the chance (b + r) / (a + b + r), which grows as it keeps failing (the samples
left late are the hard ones). `hard`: a share of the samples with a p of at most 0.1, the
rest with one p. The reporter is told each pass's samples and its redraws (the samples the
pass before's judges rejected), not which ones: the fit follows the expected samples by their
draws so far (mean-field), each age's redraws taken by the law's own chance for that age, and
scores each pass's rejected count as a binomial of its mean chance (a quasi-likelihood), over
a grid of laws. A law whose p differs between samples is kept only where it beats one p for
every sample (the constant share, `cli/pace.py`) by more than `margin` in log-likelihood:
with little known (one pass, or passes of fresh samples alone) nothing tells them apart."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CONCENTRATIONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)  # a + b; ALIKE: one p
ALIKE = 1e9
MEANS = [i / 100 for i in range(1, 100)]  # a / (a + b), or the easy samples' p
HARD = ((0.01, 0.02, 0.05, 0.1, 0.2, 0.3), (0.0, 0.02, 0.05, 0.1))  # `hard`: share, its p
MOST_PASSES = 1000


@dataclass(frozen=True)
class Law:
    """A fitted law of p: its grid label, each age's chance that a sample drawn that many
    times before, each time rejected, is rejected again (`again`: 0 at its last draw allowed,
    so its length is the cap), and the pass at hand's samples by their draws before it
    (index: draws, value: expected samples), as the law follows them."""

    label: tuple[float, ...]
    again: tuple[float, ...]
    ages: tuple[float, ...]

    def rejected(self, age: int) -> float:
        return self.again[age] if age < len(self.again) else 0.0


def laws(family: str, cap: int):
    """The grid: each law's chance rejected again by age, its label, whether it is one p."""
    import numpy as np

    age = np.arange(cap + 1)
    rows, labels, alike = [], [], []
    for mean in MEANS:  # one p for every sample
        rows.append(np.full(cap, 1 - mean)), labels.append((mean,)), alike.append(True)
    if family == "beta":
        for kappa in CONCENTRATIONS:
            for mean in MEANS:
                a, b = mean * kappa, (1 - mean) * kappa
                rows.append((b + age[:-1]) / (a + b + age[:-1]))
                labels.append((a, b)), alike.append(False)
    else:
        for share in HARD[0]:
            for p_hard in HARD[1]:
                for mean in MEANS:
                    survive = (1 - share) * (1 - mean) ** age + share * (1 - p_hard) ** age
                    rows.append(survive[1:] / survive[:-1])
                    labels.append((share, p_hard, mean)), alike.append(False)
    again = np.array(rows)
    again[:, cap - 1] = 0.0  # a sample's last draw allowed is never redrawn
    return again, labels, np.array(alike)


def fit(history: list[tuple[int, int]], cap: int | None, family: str = "beta",
        margin: float = 2.0) -> Law | None:  # fmt: skip
    """The law of p that best fits the passes begun (`history`: each one's samples and
    redraws; the last is the pass at hand), among those whose p differs between samples;
    None where one p fits within `margin` as well, without a cap, or before a pass is
    judged."""
    import numpy as np

    if cap is None or cap < 2 or len(history) < 2:
        return None
    again, labels, alike = laws(family, cap)
    pool, loglik = np.zeros(again.shape), np.zeros(again.shape[0])
    for index, (samples, redraws) in enumerate(history):
        carried = np.zeros_like(pool)
        if index:
            carried[:, 1:] = (pool * again)[:, :-1]
            expected = carried.sum(axis=1)
            eligible = np.maximum(pool[:, : cap - 1].sum(axis=1), redraws)
            share = np.clip(expected / np.maximum(eligible, 1e-12), 1e-9, 1 - 1e-9)
            loglik += redraws * np.log(share) + (eligible - redraws) * np.log1p(-share)
            carried *= np.where(expected > 0, redraws / np.maximum(expected, 1e-300), 0.0)[:, None]
            # Redraws the law has no pending sample for were younger than it has them: the
            # oldest age still redrawn.
            carried[expected <= 0, cap - 2] += redraws
        carried[:, 0] += max(samples - redraws, 0)
        pool = carried
    if loglik[~alike].max() <= loglik[alike].max() + margin:
        return None
    best = int(np.argmax(np.where(alike, -np.inf, loglik)))
    return Law(labels[best], tuple(again[best].tolist()), tuple(pool[best].tolist()))


def forecast(law: Law, fresh: float, batch_size: int, least: float,
             alm: Callable[[list[float]], float]) -> list[tuple[float, float, float]]:  # fmt: skip
    """The passes after the one at hand, as `Pace.forecast` gives them (expected samples,
    chance of coming, last step's ALM): the pass at hand's samples and each pass's fresh ones
    followed as groups (count, draws so far, chance still pending); a pass of redraws alone
    comes unless every sample is accepted or capped: 1 - prod (1 - s)^count over the groups;
    the forecast ends where that chance falls below `least`."""
    groups = [(count, age, 1.0) for age, count in enumerate(law.ages) if count > 0]
    passes: list[tuple[float, float, float]] = []
    for _ in range(MOST_PASSES):
        groups = [(count, age + 1, still * law.rejected(age))
                  for count, age, still in groups if law.rejected(age) > 0]  # fmt: skip
        pending = sum(count * still for count, _, still in groups)
        intake = min(max(batch_size - pending, 0.0), fresh)
        chance = 1.0
        if intake > 0:
            fresh -= intake
            groups.append((intake, 0, 1.0))
        else:
            whole = [(1 - s) ** (c // 1) * (1 - c % 1 * s) for c, _, s in groups]
            chance = 1.0 - math.prod(whole)  # (a fraction of a sample: that share of one)
            if chance < least:
                break
        ages = [0.0] * len(law.again)
        for count, age, still in groups:
            ages[age] += count * still
        passes.append((pending + intake, chance, alm(ages)))
    return passes


def drawn_pace(family: str, margin: float):
    """`Pace` with its passes to come from the fitted law of p where one fits (`fit`)."""
    from cdd_cli.cli.pace import Pace

    class Drawn(Pace):
        told: tuple[tuple[int, int], ...] = ()
        fitted: tuple[tuple[int, int | None], Law | None] = ((0, None), None)

        def begin_pass(self, samples: int, redraws: int, steps: int, now: float) -> None:
            self.told = (*self.told, (samples, redraws))
            super().begin_pass(samples, redraws, steps, now)

        def forecast(self) -> list[tuple[float, float, float]]:
            if self.fitted[0] != (len(self.told), self.cap):
                law = fit(list(self.told), self.cap, family, margin)
                self.fitted = (len(self.told), self.cap), law
            law = self.fitted[1]
            if law is None:
                return super().forecast()
            return forecast(law, float(self.fresh()), self.batch_size, self.LEAST_PENDING,
                            self.alm_seconds)  # fmt: skip

    return Drawn


def told_pace(path: str):
    """`Pace` told the passes to come by the trace itself (their true sizes, each sure to
    come): what the cost model makes of a perfect count of passes."""
    from cdd_cli.cli.pace import Pace
    from cdd_cli.cli.pass_costs import aged

    events = [json.loads(line) for line in Path(path).read_text().splitlines()]
    told = [(e[2], e[3]) for e in events if e[1] == "pass_started"]

    class Told(Pace):
        def forecast(self) -> list[tuple[float, float, float]]:
            out, ages = [], list(self.ages)
            for samples, redraws in told[self.passes :]:
                ages = aged(ages, redraws, samples - redraws)
                out.append((samples, 1.0, self.alm_seconds(ages)))
            return out

    return Told


def best_hold(left: list[float]) -> float:
    """The chance that the best single figure c holds within 2x of a count of passes N
    whose P(N > n) is `left[n]` (0 past its end): max over c of P(c/2 <= N <= 2c)."""
    at_most = [1.0 - s for s in left]

    def chance(c: float) -> float:
        high = at_most[min(int(2 * c), len(left) - 1)] if int(2 * c) < len(left) else 1.0
        return high - at_most[math.ceil(c / 2) - 1]

    return max(chance(c / 4) for c in range(1, 4 * len(left) + 1))


def limit(path: str, cap: int, draws: int = 400) -> None:
    """From each pass of the tail on (no fresh sample left), the passes still to come N
    (the pass at hand's too) against the best any single figure can do: an oracle that knows
    the law of p fitted on the whole run (`beta`, hindsight) and each sample's draws so far
    (`youngest`), and one that also knows each sample's p (drawn from
    its posterior Beta(a, b + r), `draws` times, seeded). A count of passes, not seconds: a
    tail pass's own cost varies too (seven constraints: 7-13 s). For one sample of a small
    p and no cap, N is near exponential: a figure at its median holds with the chance
    e^-(ln 2 / 2) - e^-(2 ln 2) = 0.457, the best figure (2 ln 4 / 3 over the rate) 0.472."""
    events = [json.loads(line) for line in Path(path).read_text().splitlines()]
    history = [(e[2], e[3]) for e in events if e[1] == "pass_started"]
    cap = next((e[2] for e in events if e[1] == "draws_allowed"), cap)  # as the run told it
    last_fresh = max(i for i, (s, r) in enumerate(history) if s > r)
    whole = fit(history, cap, "beta", -math.inf)
    assert whole is not None
    a, b = whole.label
    stream = random.Random(0)
    print(f"{path}: Beta(a={a:.2f}, b={b:.2f}) fitted on the whole run")
    print("  pass  samples (draws before)  passes left  best hold: the law known, each p known")
    holds = []
    for k in range(last_fresh + 1, len(history)):
        ages = youngest(history[: k + 1], cap)
        none = [1.0] * (cap + 1)  # P(N <= n): every sample accepted or capped within n draws
        for r in ages:
            pending = 1.0  # P(it takes over n draws more)
            for n in range(cap + 1):
                none[n] *= 1 - pending
                pending *= whole.rejected(r + n)
        law_hold, known = best_hold([1 - x for x in none]), 0.0
        for _ in range(draws):
            ps = [stream.betavariate(a, b + r) for r in ages]
            left = [1 - math.prod(1 - ((1 - p) ** n if n < cap - r else 0.0)
                                  for p, r in zip(ps, ages, strict=True))
                    for n in range(cap + 1)]  # fmt: skip
            known += best_hold(left) / draws
        holds.append((law_hold, known))
        print(f"  {k + 1:4d}  {len(ages):7d} {ages!s:>16}  {len(history) - k:11d}  "
              f"{law_hold:16.2f}  {known:12.2f}")  # fmt: skip
    mean = [sum(h[i] for h in holds) / len(holds) for i in (0, 1)]
    print(f"  mean over the tail's {len(holds)} passes: {mean[0]:.2f} (the law known), "
          f"{mean[1]:.2f} (each p known)")  # fmt: skip


def youngest(history: list[tuple[int, int]], cap: int) -> list[int]:
    """The pass at hand's samples by their draws before, whole: which of a pass's samples
    its judges rejected is not told, so the youngest ones are taken (the most draws left to
    them, the widest spread of passes left: the oracle's hardest case)."""
    ages: list[int] = []
    for samples, redraws in history:
        left = sorted(age + 1 for age in ages if age + 1 < cap)[:redraws]
        ages = left + [0] * max(samples - len(left), 0)
    return sorted(ages)
