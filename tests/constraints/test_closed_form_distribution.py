"""What each closed form draws from, checked against brute force on a tiny case.

Each closed form's docstring states the law of one draw of every undecided position from its
projection (the layout drawn, then each position drawn from its renormalised row): a product
of the prediction's rows, restricted to the texts the constraint accepts, and for the word
layout weighted by the role lifts. Here the prediction lives on a handful of real GPT-2 tokens,
so every sequence of three of them can be listed and judged by the exact judge, and the stated
law computed by enumeration. The closed form's law is estimated from many drawn layouts
(paths): given its layout, a draw's probability is the product of the projected rows at its
tokens, so averaging that product over the layouts estimates the law with no token sampling
noise; the tolerance is five standard errors of that average (3 / layouts for a sequence no
layout drew). Each test also checks that a
plausible wrong statement is rejected at that tolerance, so the tolerance can tell them apart.
"""

from __future__ import annotations

import itertools
import math
import re

import pytest
import torch

from cdd_cli.constraints.lexical import WordCount
from cdd_cli.constraints.lexical.grammar import BREAK, END, PUNCT, ROLE_LIFTS, WORD
from cdd_cli.constraints.lexical.layout import WordLayout
from cdd_cli.constraints.structured import RegexConstraint, pattern_layout
from cdd_cli.models.tokenizers import Gpt2Tokenizer

TOKENIZER = Gpt2Tokenizer()
LENGTH = 3
BATCH, BATCHES = 128, 4  # 512 layouts drawn


def token(text: str) -> int:
    (i,) = TOKENIZER.encode(text)
    return i


def prediction(support: list[int], seed: int) -> torch.Tensor:
    """[LENGTH, V] rows that put random mass on `support` only, a different row per position."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.zeros(LENGTH, len(TOKENIZER))
    weights = torch.rand(LENGTH, len(support), generator=generator) + 0.2
    rows[:, support] = weights / weights.sum(-1, keepdim=True)
    return rows


def estimated_law(
    layout_for_batch, rows: torch.Tensor, support: list[int]
) -> tuple[dict[tuple[int, ...], float], dict[tuple[int, ...], float]]:
    """The closed form's law over support^LENGTH: mean over drawn layouts of the product of
    the projected rows at the sequence's tokens, and the standard error of that mean."""
    per_layout: list[torch.Tensor] = []  # [layouts, |support|^LENGTH]
    sequences = list(itertools.product(support, repeat=LENGTH))
    index = torch.tensor(sequences)  # [S, LENGTH]
    for batch in range(BATCHES):
        layout = layout_for_batch()
        probs = rows.expand(BATCH, -1, -1).clone()
        x = torch.full((BATCH, LENGTH), TOKENIZER.mask_id)
        fixed = torch.zeros(BATCH, LENGTH, dtype=torch.bool)
        generators = [torch.Generator().manual_seed(batch * BATCH + b) for b in range(BATCH)]
        plans = layout.plan(probs, x, fixed, generators)
        out = layout.apply(probs, plans, fixed)  # [B, LENGTH, V]
        at = out[:, torch.arange(LENGTH)[None, :], index]  # [B, S, LENGTH]
        per_layout.append(at.double().prod(-1))
    values = torch.cat(per_layout)
    mean, se = values.mean(0), values.std(0) / math.sqrt(len(values))
    return (
        dict(zip(sequences, mean.tolist(), strict=True)),
        dict(zip(sequences, se.tolist(), strict=True)),
    )


def normalised(weights: dict[tuple[int, ...], float]) -> dict[tuple[int, ...], float]:
    total = sum(weights.values())
    return {k: v / total for k, v in weights.items()}


def within(
    law: dict[tuple[int, ...], float],
    estimate: dict[tuple[int, ...], float],
    se: dict[tuple[int, ...], float],
) -> bool:
    """Every sequence within five standard errors, and within 3 / layouts where it was never
    drawn (a layout of probability q goes unseen in n draws with chance (1 - q)^n: under 5%
    for q above 3 / n, the rule of three)."""
    slack = 3 / (BATCH * BATCHES)
    return all(
        abs(estimate[k] - law[k]) <= 5 * se[k] + (slack if se[k] == 0 else 1e-9) for k in law
    )


@pytest.mark.slow
def test_the_pattern_layout_draws_the_prediction_restricted_to_the_matches():
    """PatternLayout: P(x) = prod_i p_i(x_i) [the decoded text fullmatches] / Z, the end and
    the positions after it included (an end-of-text at position 2 leaves position 3 free)."""
    pattern = "(cat|dog)( (cat|dog))*"
    support = [token(t) for t in ("cat", "dog", " cat", " dog", ",")] + [TOKENIZER.eos_id]
    rows = prediction(support, seed=0)
    constraint = RegexConstraint(pattern=pattern)
    estimate, se = estimated_law(
        lambda: pattern_layout([constraint], TOKENIZER, 0, LENGTH), rows, support
    )
    weights = {
        seq: math.prod(float(rows[i, t]) for i, t in enumerate(seq))
        * bool(re.fullmatch(pattern, TOKENIZER.decode(list(seq))))
        for seq in estimate
    }
    law = normalised(weights)
    assert sum(v > 0 for v in law.values()) >= 10  # a real choice among the matches
    assert within(law, estimate, se)
    # Wrong statement, told apart: each position's row renormalised over the tokens some
    # match has there, drawn independently (a mask per position, no path).
    allowed = [{seq[i] for seq, v in law.items() if v} for i in range(LENGTH)]
    masked = normalised(
        {
            seq: math.prod(float(rows[i, t]) * (t in allowed[i]) for i, t in enumerate(seq))
            for seq in estimate
        }
    )
    assert not within(masked, estimate, se)


@pytest.mark.slow
def test_the_word_layout_draws_the_prediction_restricted_to_the_layouts_weighted_by_lifts():
    """WordLayout (all positions undecided, the prediction allows no end-of-text): P(x) =
    prod_i p_i(x_i) x [the judges accept x] x the sum over the role readings r of x that the
    grammar allows of prod_{i>1} ROLE_LIFTS[r_{i-1}, r_i], the end unlifted, / Z. A line break
    reads as a break (lifted by 0.206 after a word, 0.001 before one) or, last, as the end."""
    words = [token(" cat"), token(" dog")]
    comma, newline = token(","), token("\n")
    support = [*words, comma, newline]
    rows = prediction(support, seed=1)
    constraint = WordCount(equals=2)
    estimate, se = estimated_law(
        lambda: WordLayout([constraint], TOKENIZER, 0, LENGTH), rows, support
    )
    readings_of = {comma: [PUNCT], newline: [BREAK, END]}

    def lifted(roles: tuple[str, ...]) -> float:
        return math.prod(
            1.0 if END in (a, b) else ROLE_LIFTS[a, b] for a, b in itertools.pairwise(roles)
        )

    weights: dict[tuple[int, ...], float] = {}
    unlifted: dict[tuple[int, ...], float] = {}
    for seq in estimate:
        accepted = constraint.judge([TOKENIZER.decode(list(seq))]) == [1.0]
        base = math.prod(float(rows[i, t]) for i, t in enumerate(seq)) * accepted
        readings = [
            roles
            for roles in itertools.product(*(readings_of.get(t, [WORD]) for t in seq))
            if END not in roles[:-1]  # after the end: an end-of-text, not in the support
        ]
        weights[seq] = base * sum(lifted(r) for r in readings)
        unlifted[seq] = base * len(readings)
    law = normalised(weights)
    # 3 places for the comma or the line break x 2 x 2 x 2 words
    assert sum(v > 0 for v in law.values()) == 24
    assert within(law, estimate, se)
    # Wrong statement, told apart: the same without the lifts.
    assert not within(normalised(unlifted), estimate, se)
