"""Runtime overhead as DESIGN.md §3 asks: a ratio against unconstrained sampling of the same
model, batch and steps, measured in the same run, for the mean and the median per sample."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def overhead(seconds: Sequence[float], baseline: Sequence[float]) -> dict[str, float]:
    return {
        "overhead_mean": round(statistics.fmean(seconds) / statistics.fmean(baseline), 2),
        "overhead_median": round(statistics.median(seconds) / statistics.median(baseline), 2),
    }
