"""Histograms as hand-written SVG, and the two-sample Kolmogorov-Smirnov distance.

Hand-written rather than matplotlib: a histogram with a bound line is a few rectangles and
lines, about 2 kB of SVG, where matplotlib's SVG of the same chart is ~30 kB (glyphs as paths,
a clip path per axis) and the library is a ~40 MB install; the page needs no other chart.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from html import escape

# One colour per run, the first the run the page is about; more runs cycle.
COLOURS = ("#2f6db5", "#e07b24", "#3a9a4a", "#9b4dbf", "#b23b3b")
WIDTH, HEIGHT, PAD = 360, 170, 28
MAX_BINS = 30


def ks_distance(a: Sequence[float], b: Sequence[float]) -> float:
    """The largest gap between the empirical distribution functions of `a` and `b`."""
    if not a or not b:
        return math.nan
    xs, ys = sorted(a), sorted(b)
    gap = 0.0
    for x in sorted(set(xs) | set(ys)):
        below_a = bisect.bisect_right(xs, x) / len(xs)
        below_b = bisect.bisect_right(ys, x) / len(ys)
        gap = max(gap, abs(below_a - below_b))
    return gap


def number(x: float) -> str:
    """A value as a chart's label shows it: a few significant digits."""
    return f"{x:.4g}"


def bins_for(values: list[float], bounds: list[float]) -> tuple[float, float, int]:
    """(low, high, count) of the bins every run shares: integers get a bin each where they
    span at most MAX_BINS * 2; the bounds lie within the range."""
    low, high = min(values + bounds), max(values + bounds)
    if all(float(v).is_integer() for v in values) and high - low <= 2 * MAX_BINS:
        return low - 0.5, high + 0.5, int(high - low) + 1
    if high == low:
        return low - 0.5, high + 0.5, 1
    return low, high, MAX_BINS


def histogram(runs: Sequence[Sequence[float]], bounds: dict[str, float]) -> str:
    """An SVG histogram of each run's values (shares of its own count, so runs of different
    sizes compare), overlaid, with each bound (`{"max": 3.5}`) drawn as a labelled line."""
    pooled = [v for run in runs for v in run]
    if not pooled:
        return '<p class="none">no finite values</p>'
    marks = [b for b in bounds.values() if math.isfinite(b)]
    low, high, count = bins_for(pooled, marks)
    width = (high - low) / count
    shares = []
    for run in runs:
        counts = [0] * count
        for v in run:
            counts[min(count - 1, max(0, int((v - low) / width)))] += 1
        shares.append([c / len(run) if run else 0.0 for c in counts])
    top = max(max(s) for s in shares) or 1.0
    plot_w, plot_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD

    def x_at(v: float) -> float:
        return PAD + (v - low) / (high - low) * plot_w

    parts = [
        f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'role="img">',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'stroke="#555"/>',
    ]
    for k, share in enumerate(shares):
        colour = COLOURS[k % len(COLOURS)]
        for i, s in enumerate(share):
            if s:
                h = s / top * plot_h
                parts.append(
                    f'<rect x="{x_at(low + i * width):.1f}" y="{HEIGHT - PAD - h:.1f}" '
                    f'width="{max(plot_w / count - 1, 0.5):.1f}" height="{h:.1f}" '
                    f'fill="{colour}" fill-opacity="{0.75 if len(runs) == 1 else 0.45}"/>'
                )
    for side, bound in bounds.items():
        if math.isfinite(bound):
            x = x_at(bound)
            parts.append(
                f'<line x1="{x:.1f}" y1="{PAD - 8}" x2="{x:.1f}" y2="{HEIGHT - PAD}" '
                'stroke="#c0392b" stroke-width="2" stroke-dasharray="5 3"/>'
                f'<text x="{x:.1f}" y="{PAD - 11}" text-anchor="middle" fill="#c0392b">'
                f"{escape(side)} {number(bound)}</text>"
            )
    parts.append(
        f'<text x="{PAD}" y="{HEIGHT - 8}" text-anchor="start">{number(min(pooled + marks))}</text>'
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 8}" text-anchor="end">{number(max(pooled + marks))}'
        f'</text><text x="4" y="{PAD - 11}">{top:.0%}</text></svg>'
    )
    return "".join(parts)
