"""The linearised search alone: hand-built predictions whose every position's choice flips at a
known multiplier, a toy constraint with a linear surrogate, a judge that keeps a log."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
import torch

from cdd_cli.constraints.base import DifferentiableConstraint
from cdd_cli.models.surrogate import SparseTokens, Tokens, token_mass
from cdd_cli.projection import linearized
from cdd_cli.projection.linearized import linearised_search

V = 16  # vocabulary: token 0 is the one the constraint counts
SCALE = 0.125  # the surrogate's weight on each unit of counted mass


class Clock:
    """Stands in for `time`: it reads `now`, which moves only when a test says so."""

    def __init__(self, start: float):
        self.now = start

    def perf_counter(self) -> float:
        return self.now


@dataclass(frozen=True)
class TokenMass(DifferentiableConstraint):
    """At most tau of `counted` tokens, scored as SCALE x their mass (grad SCALE on each). The
    surrogate keeps what it was shown and, given a clock, takes `seconds` on it."""

    counted: tuple[int, ...] = (0,)
    shown: list = field(default_factory=list, compare=False)
    clock: Clock | None = field(default=None, compare=False)
    seconds: float = 0.0

    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        self.shown.append(soft_tokens)
        if self.clock is not None:
            self.clock.now += self.seconds
        return SCALE * sum(token_mass(soft_tokens, t).sum(-1) for t in self.counted)

    def judge(self, texts: list[str]) -> list[float | None]:
        raise AssertionError("the linearised search asks `accept_all`, not the judge")


class Judge:
    """`accept_all` with a log: each call's sequences, as tuples. Accepts those in `accepted`;
    given a clock, a call takes `seconds` on it."""

    def __init__(self, accepted, clock: Clock | None = None, seconds: float = 0.0):
        self.accepted = {tuple(s) for s in accepted}
        self.calls: list[list[tuple[int, ...]]] = []
        self.clock, self.seconds = clock, seconds

    def __call__(self, sequences: list[list[int]]) -> list[bool]:
        self.calls.append([tuple(s) for s in sequences])
        if self.clock is not None:
            self.clock.now += self.seconds
        return [tuple(s) in self.accepted for s in sequences]


def flipping_at(multiplier: float, to: int = 1) -> torch.Tensor:
    """A position's distribution [V]: token 0 most probable, then `to`, by the log-ratio that
    the tilt (SCALE per unit of multiplier) overcomes just past `multiplier`."""
    p = torch.full((V,), 0.0)
    p[to] = 0.1
    p[0] = 0.1 * math.exp(multiplier * SCALE)
    rest = [t for t in range(V) if t not in (0, to)]
    p[rest] = (1.0 - p[0] - p[to]) / len(rest)  # each above the floor 0.35 / V, below 0.1
    return p


def batch(*rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([torch.stack(positions) for positions in rows])


def search(probs, rows, movable, tokens, judge, support=0, constraint=None, well_formed=None):
    constraint = constraint or TokenMass(tau=0.0)
    return linearised_search(
        probs, rows, movable, tokens, [constraint], support, judge, well_formed
    )


def test_the_smallest_multiplier_that_is_accepted_wins_and_fixed_tokens_stay():
    # Positions 0-2 flip to token 1 past multipliers 0.375, 1.5 and 6 (the ladder's 0.5, 2
    # and 8); position 3 is fixed at token 2 although its prediction would flip at once.
    row = [flipping_at(0.375), flipping_at(1.5), flipping_at(6.0), flipping_at(0.1)]
    probs = batch([flipping_at(0.1)] * 4, row)
    movable = torch.tensor([[True] * 4, [True, True, True, False]])
    tokens = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 2]])
    # At most one counted token is accepted: (1, 1, 1, 2) would be too, but comes later.
    judge = Judge([(1, 1, 0, 2), (1, 0, 1, 2), (0, 1, 1, 2), (1, 1, 1, 2)])
    result = search(probs, [1], movable, tokens, judge)
    assert judge.calls == [[(1, 0, 0, 2)], [(1, 1, 0, 2)]]
    assert result.found == {1: [1, 1, 0, 2]}
    assert result.judged == {1: 2}
    assert set(result.seconds) == {1}


def test_support_limits_the_tokens_tried():
    # Tokens 0 and 1, the two most probable, are both counted; token 2, third, is not and
    # takes over past multiplier 8 ln 2 = 5.5 (the ladder's 8) where it may be chosen.
    position = torch.full((V,), 0.1 / (V - 3))
    position[:3] = torch.tensor([0.4, 0.3, 0.2])
    probs = batch([position, position])
    movable = torch.tensor([[True, False]])
    tokens = torch.tensor([[0, 5]])
    constraint = TokenMass(tau=0.0, counted=(0, 1))
    for support, found in [(0, {0: [2, 5]}), (3, {0: [2, 5]}), (2, {}), (1, {})]:
        judge = Judge([(2, 5)])
        result = search(probs, [0], movable, tokens, judge, support, constraint)
        assert result.found == found, support
        assert result.judged == {0: len(found)}, support
        assert judge.calls == ([[(2, 5)]] if found else []), support


def test_the_surrogate_reads_each_positions_support_as_a_distribution():
    first = torch.tensor([0.5, 0.2, 0.1] + [0.2 / (V - 3)] * (V - 3))
    second = torch.tensor([0.01, 0.3, 0.01, 0.4, 0.2] + [0.08 / (V - 5)] * (V - 5))
    probs = batch([first, first, first], [first, second, second])
    movable = torch.tensor([[True, True, True], [True, True, False]])
    tokens = torch.tensor([[0, 0, 0], [0, 3, 7]])
    constraint = TokenMass(tau=0.0)
    search(probs, [1, 0], movable, tokens, Judge([]), support=3, constraint=constraint)
    (soft,) = constraint.shown
    assert isinstance(soft, SparseTokens)
    assert soft.ids.tolist() == [[[0, 1, 2], [3, 1, 4], [7, 7, 7]], [[0, 1, 2]] * 3]
    expected = torch.tensor([[0.5, 0.2, 0.1], [0.4, 0.3, 0.2]])
    expected /= expected.sum(-1, keepdim=True)
    assert torch.allclose(soft.weights[0, :2], expected, atol=1e-6)
    assert torch.allclose(soft.weights.sum(-1), torch.ones(2, 3), atol=1e-6)
    assert torch.allclose(soft.weights[1], expected[0].expand(3, 3), atol=1e-6)


def two_rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Judge]:
    """Rows 2 and 0 of a batch of 3. Row 2 flips past 0.375 (the ladder's 0.5) and 3 (its 4)
    and is accepted at 0.5; row 0 flips to token 2 past 1.5 and 6 (2 and 8), accepted at 8."""
    probs = batch(
        [flipping_at(1.5, to=2), flipping_at(6.0, to=2)],
        [flipping_at(0.1), flipping_at(0.1)],
        [flipping_at(0.375), flipping_at(3.0)],
    )
    movable = torch.ones(3, 2, dtype=torch.bool)
    tokens = torch.zeros(3, 2, dtype=torch.long)
    return probs, movable, tokens, Judge([(1, 0), (2, 2)])


def test_a_settled_row_is_no_longer_searched():
    probs, movable, tokens, judge = two_rows()
    result = search(probs, [2, 0], movable, tokens, judge)
    # Row 2's choice moves again at 4, after it settled: nobody judges (1, 1).
    assert judge.calls == [[(1, 0)], [(2, 0)], [(2, 2)]]
    assert result.found == {2: [1, 0], 0: [2, 2]}
    assert result.judged == {2: 1, 0: 2}


class Multiplier(float):
    """A multiplier whose tilt takes `seconds` on the clock (it is read once a multiplier)."""

    clock: Clock
    seconds: float

    def __mul__(self, other):
        self.clock.now += self.seconds
        return super().__mul__(other)


def test_each_multipliers_time_goes_to_the_rows_it_moved(monkeypatch: pytest.MonkeyPatch):
    clock = Clock(start=1000.0)
    monkeypatch.setattr(linearized, "time", clock)
    Multiplier.clock, Multiplier.seconds = clock, 1.0
    monkeypatch.setattr(linearized, "LADDER", tuple(Multiplier(m) for m in linearized.LADDER))
    probs, movable, tokens, _ = two_rows()
    judge = Judge([(1, 0), (2, 2)], clock, seconds=2.0)
    constraint = TokenMass(tau=0.0, clock=clock, seconds=8.0)
    result = search(probs, [2, 0], movable, tokens, judge, constraint=constraint)
    assert result.found == {2: [1, 0], 0: [2, 2]}
    # The surrogate pass (8 s) is split evenly; then by multiplier: 0.25 moves nobody (its
    # 1 s split between both rows still searching), 0.5 moves row 2 (1 s + a judge call of
    # 2 s), 1 nobody (row 0 searches alone), 2 row 0, 4 only row 2, which has settled (row 0
    # alone pays), 8 row 0, which settles the last row: the search stops.
    assert result.seconds == pytest.approx({2: 4 + 0.5 + 3, 0: 4 + 0.5 + 1 + 3 + 1 + 3})
    assert sum(result.seconds.values()) == pytest.approx(clock.now - 1000.0)

    # Two rows that 0.5 moves together (both accepted there) share its 1 s and the judge's 2.
    together = batch([flipping_at(0.375)] * 2, [flipping_at(0.375)] * 2)
    judge = Judge([(1, 1)], clock, seconds=2.0)
    result = search(together, [0, 1], movable[:2], tokens[:2], judge, constraint=constraint)
    assert judge.calls == [[(1, 1), (1, 1)]]
    assert result.seconds == pytest.approx({0: 4 + 0.5 + 1.5, 1: 4 + 0.5 + 1.5})


def test_the_syntax_reads_the_tilted_support_and_a_sequence_is_judged_once():
    # Row 0 flips past 0.375, 1.5 and 6 (the ladder's 0.5, 2 and 8); row 1 never moves. The
    # syntax pins the last position to token 3, so 8's choice reads as 2's: judged once.
    row = [flipping_at(0.375), flipping_at(1.5), flipping_at(6.0), flipping_at(0.1)]
    still = torch.full((V,), 0.5 / (V - 1))
    still[4] = 0.5
    probs = batch(row, [still] * 4)
    movable = torch.tensor([[True, True, True, False], [True] * 4])
    tokens = torch.tensor([[0, 0, 0, 5], [4, 4, 4, 4]])
    shown: list[torch.Tensor] = []

    def pin_last(spread: torch.Tensor) -> torch.Tensor:
        shown.append(spread.clone())
        out = spread.clone()
        out[:, 2] = 0.0
        out[:, 2, 3] = 1.0
        return out

    judge = Judge([])
    result = search(probs, [0, 1], movable, tokens, judge, support=3, well_formed=pin_last)
    assert judge.calls == [[(1, 0, 3, 5)], [(1, 1, 3, 5)], []]
    assert result.found == {}
    assert result.judged == {0: 2, 1: 0}
    assert [s.shape for s in shown] == [(1, 4, V)] * 3
    for spread in shown:
        assert torch.allclose(spread.sum(-1), torch.ones(1, 4), atol=1e-6)
        assert spread[0, 3, 5] == pytest.approx(1.0)  # the fixed token, all its mass
        # Three tokens each (0, 1 and one of the tied rest), nothing outside them.
        assert ((spread[0, :3] > 0).sum(-1) == 3).all()
        assert (spread[0, :3, :2] > 0).all()
    # What the syntax saw at 2: positions 0 and 1 flipped (token 1 above token 0), 2 not.
    assert (shown[1][0, :2, 1] > shown[1][0, :2, 0]).all()
    assert shown[1][0, 2, 0] > shown[1][0, 2, 1]


def test_answers_for_another_number_of_sequences_are_an_error():
    probs, movable, tokens, _ = two_rows()
    with pytest.raises(ValueError):
        search(probs, [2, 0], movable, tokens, lambda sequences: [False] * (len(sequences) + 1))

    def one_row_more(spread: torch.Tensor) -> torch.Tensor:
        return torch.cat([spread, spread[:1]])

    with pytest.raises(ValueError):
        search(probs, [2, 0], movable, tokens, Judge([]), well_formed=one_row_more)
