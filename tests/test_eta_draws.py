"""bench/eta_draws.py, the per-sample law of p replayed as the time left's passes to come
(issue 62; not in the product): a run whose samples left kept failing foresees more passes
than one share rejected for every sample, one whose passes show no such thing keeps that
share, and the best figure for a count of passes left holds as the exponential says."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest

from cdd_cli.cli.pace import Pace

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def draws():
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("eta_draws")
    finally:
        sys.path.remove(str(BENCH))


# 64 samples, 32 a pass, the judges rejecting half of each pass, then 3 samples rejected in
# every pass after (seven constraints: `seven_c`'s last 3 to the cap of 16 draws).
HARD_TAIL = [(32, 0), (32, 16), (32, 16), (32, 16), (16, 8), (8, 4), *[(3, 3)] * 8]
# `-c sa --tau 3.5` (bench/results/eta_2026-12-02/sa): about half rejected at every age.
ALIKE = [(64, 0), (64, 31), (64, 37), (64, 33), (64, 30), (64, 29), (64, 35), (33, 30),
         (16, 16), (6, 6), (2, 2)]  # fmt: skip


def paces(draws, history: list[tuple[int, int]]) -> tuple[Pace, Pace]:
    """The product's Pace and the one whose passes to come follow the fitted law."""
    total = sum(samples - redraws for samples, redraws in history)
    batch = history[0][0]
    shared, drawn = Pace(total, batch, 0.0), draws.drawn_pace("beta", 2.0)(total, batch, 0.0)
    for pace in (shared, drawn):
        pace.cap = 16
        for number, (samples, redraws) in enumerate(history):
            pace.begin_pass(samples, redraws, 4, 10.0 * number)
    return shared, drawn


def expected_passes(passes: list[tuple[float, float, float]]) -> float:
    return sum(chance for _, chance, _ in passes)


def test_samples_that_kept_failing_foresee_more_passes_than_one_share(draws):
    law = draws.fit(HARD_TAIL, 16)
    assert law is not None  # the tail tells that p differs between samples
    assert law.rejected(10) > law.rejected(1) > law.rejected(0)  # the hard ones remain
    shared, drawn = paces(draws, HARD_TAIL)
    # One share (84 of the 173 samples judged rejected): its tail thins pass by pass; the
    # law's: 3 samples that failed 8 times and more, each likelier to fail again.
    ahead, constant = expected_passes(drawn.forecast()), expected_passes(shared.forecast())
    assert ahead > 1.5 * constant, (ahead, constant)
    assert ahead <= 16 - 8  # none drawn past the cap


def test_passes_alike_keep_the_one_share(draws):
    for passes in range(2, len(ALIKE) + 1):
        assert draws.fit(ALIKE[:passes], 16) is None
    shared, drawn = paces(draws, ALIKE[:6])
    assert drawn.forecast() == shared.forecast()
    # Without a cap on draws a heavy tail has no end: the one share stands.
    assert draws.fit(HARD_TAIL, None) is None


def test_a_forecast_ends_at_the_cap(draws):
    law = draws.fit(HARD_TAIL, 16)
    youngest = min(age for age, count in enumerate(law.ages) if count > 0)
    passes = draws.forecast(law, 0.0, 32, Pace.LEAST_PENDING, lambda ages: 0.0)
    assert 0 < len(passes) <= 16 - 1 - youngest  # every sample capped by then
    assert all(0 <= chance <= 1 for _, chance, _ in passes)
    assert all(size <= 3 + 1e-9 for size, _, _ in passes)


def test_the_best_figure_for_a_geometric_count_holds_about_47_percent(draws):
    # One sample of p = 0.01, no cap: passes left near exponential; the best single figure
    # holds within 2x with the chance max_x e^-x/2 - e^-2x = 0.472 (x = 2 ln 4 / 3).
    p = 0.01
    left = [(1 - p) ** n for n in range(4000)]
    exact = math.exp(-math.log(4) / 3) - math.exp(-4 * math.log(4) / 3)
    assert draws.best_hold(left) == pytest.approx(exact, abs=0.01)
    assert draws.best_hold([1.0, 1.0, 1.0, 0.0]) == 1.0  # exactly 3 passes: a figure holds
    # The cap bounds the count: 16 draws left at most, p = 0.01 -> nearly always 16.
    assert draws.best_hold([(1 - p) ** n if n < 16 else 0.0 for n in range(17)]) > 0.85


def test_the_youngest_samples_are_taken_as_the_ones_left(draws):
    assert draws.youngest([(4, 0), (4, 3), (2, 2)], 16) == [1, 2]
    assert draws.youngest([(2, 0), (2, 2), (2, 2)], 3) == [2, 2]
