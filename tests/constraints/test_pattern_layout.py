"""PatternLayout piece by piece, on token automata written out by hand over a vocabulary of a
few tokens: the edges and token sets it builds, the masses it reads, the paths it draws
(against enumeration) and the projection of each row.

The automaton of most tests reads (a|b)(d* c (a d* c)*)? ... precisely, over tokens
a b c d (0-3), end-of-text 4 and a token no edge takes, 5:

    0 -{a, b}-> 1,  0 -{c}-> 2,  1 -{d}-> 1,  1 -{c}-> 2,  2 -{a}-> 1;  2 accepts.
"""

from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch

from cdd_cli.constraints.automaton import TokenAutomaton
from cdd_cli.constraints.pattern_layout import (
    FREE,
    ROWS,
    SMALL_ATOM,
    TINY,
    PathPlan,
    PatternLayout,
    _pick,
)
from cdd_cli.errors import InputError

A, B, C, D, EOS, OTHER = range(6)
V = 6
END = 3  # the layout's state after end-of-text


def automaton(edges: list[tuple[int, int, int]], final: list[bool]) -> TokenAutomaton:
    src, token, dst = zip(*edges, strict=True)
    return TokenAutomaton(
        src=torch.tensor(src),
        token=torch.tensor(token),
        dst=torch.tensor(dst),
        final=torch.tensor(final),
        states=len(final),
    )


# Listed out of order: the layout sorts the edges by (source, target).
EDGES = [(2, A, 1), (0, B, 1), (1, C, 2), (0, C, 2), (1, D, 1), (0, A, 1)]
FINAL = [False, False, True]


def layout(start: int = 0, length: int = 3, banned=None) -> PatternLayout:
    return PatternLayout(automaton(EDGES, FINAL), V, EOS, banned).placed(start, length)


def generators(n: int, seed: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed + i) for i in range(n)]


def sets_of(pattern: PatternLayout) -> list[list[int]]:
    return [pattern.masks[u].nonzero().squeeze(-1).tolist() for u in range(len(pattern.masks))]


# --------------------------------------------------------------------------------------------
# What the layout builds


def test_edges_join_pairs_of_states_with_deduplicated_token_sets():
    pattern = layout()
    assert sets_of(pattern) == [[A, B], [C], [D], [A], [EOS]]
    assert (pattern.end, pattern.states, pattern.vocab_size) == (END, 4, V)
    # (0, 1), (0, 2), (1, 1), (1, 2), (2, 1); then end-of-text from the accepting state,
    # and every token after it.
    assert pattern.src.tolist() == [0, 0, 1, 1, 2, 2, END]
    assert pattern.dst.tolist() == [1, 2, 1, 2, 1, END, END]
    assert pattern.edge_set.tolist() == [0, 1, 2, 1, 3, 4, FREE]
    assert pattern.edge_column.tolist() == [0, 1, 2, 1, 3, 4, 5]
    assert pattern.accepting.tolist() == [False, False, True, True]
    assert pattern.shortest == 1


def test_each_state_lists_its_incoming_edges_padded_with_one_past_the_last():
    pattern = layout()
    e = len(pattern.src)
    assert pattern.incoming.tolist() == [
        [e, e, e],  # the start: nothing comes in
        [0, 2, 4],
        [1, 3, e],
        [5, 6, e],
    ]


def test_every_set_of_several_tokens_is_one_edge_for_each_pair_of_states():
    # Two states joined by several tokens: one edge, its set holding them all.
    edges = [(0, B, 1), (0, A, 1), (0, C, 1), (1, A, 0)]
    pattern = PatternLayout(automaton(edges, [False, True]), V, EOS)
    assert pattern.src.tolist() == [0, 1, 1, 2] and pattern.dst.tolist() == [1, 0, 2, 2]
    assert sets_of(pattern) == [[A, B, C], [A], [EOS]]
    assert pattern.incoming.tolist() == [[1, 4], [0, 4], [2, 3]]


def test_banned_tokens_are_taken_out_of_every_edge():
    pattern = layout(banned=torch.tensor([A, OTHER]))
    assert sets_of(pattern) == [[B], [C], [D], [EOS]]
    assert pattern.src.tolist() == [0, 0, 1, 1, 2, END]
    assert pattern.dst.tolist() == [1, 2, 1, 2, END, END]
    assert layout(banned=torch.tensor([], dtype=torch.long)).src.tolist() == layout().src.tolist()
    message = "no text matches the pattern with this tokenizer"
    with pytest.raises(InputError, match=message):
        PatternLayout(automaton(EDGES, FINAL), V, EOS, torch.tensor([C]))
    with pytest.raises(InputError, match=message):
        PatternLayout(automaton(EDGES, [False, False, False]), V, EOS)


def test_placed_copies_the_layout_where_the_shortest_match_fits():
    shared = PatternLayout(automaton([(0, A, 1), (1, B, 2)], [False, False, True]), V, EOS)
    assert (shared.start, shared.length, shared.shortest) == (0, 0, 2)
    pattern = shared.placed(3, 2)
    assert (pattern.start, pattern.length) == (3, 2) and (shared.start, shared.length) == (0, 0)
    assert pattern.masks is shared.masks and pattern._multipliers is shared._multipliers
    with pytest.raises(InputError) as error:
        shared.placed(3, 1)
    assert str(error.value) == (
        "the shortest text that matches the pattern takes 2 tokens; the continuation has 1"
    )


# --------------------------------------------------------------------------------------------
# Masses


def test_each_sets_mass_is_the_predictions_sum_over_it_and_decided_positions_fit_or_not():
    pattern = layout(start=1, length=4)
    probs = torch.rand(2, 6, V, generator=torch.Generator().manual_seed(0))
    probs = probs / probs.sum(-1, keepdim=True)
    probs[1, 2] = 0.0
    probs[1, 2, OTHER] = 1.0  # nothing on any set: the floor
    x = torch.full((2, 6), OTHER)
    fixed = torch.zeros(2, 6, dtype=torch.bool)
    fixed[:, 0] = True
    x[0, 3], fixed[0, 3] = A, True
    x[1, 4], fixed[1, 4] = EOS, True
    mass = pattern.set_mass(probs, x, fixed)
    assert mass.shape == (2, 4, 5) and mass.dtype == torch.float32
    expected = (probs[:, 1:5, None, :] * pattern.masks.float()).sum(-1).clamp_min(TINY)
    expected[0, 2] = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0])  # "a": in {a, b} and {a}
    expected[1, 3] = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0])
    assert torch.allclose(mass, expected)
    assert torch.equal(mass[1, 1], torch.full((5,), TINY))  # float32's TINY
    # Everything decided: no sums at all.
    fixed[:] = True
    mass = pattern.set_mass(probs, x, fixed)
    assert mass[0, 2].tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert mass[0, 0].tolist() == [0.0] * 5  # OTHER is in no set


def test_large_atoms_are_multiplied_and_small_ones_gathered_to_the_same_masses():
    vocab = SMALL_ATOM + 600
    eos = vocab - 1
    big = list(range(SMALL_ATOM + 2))  # less token 5: one atom of 2,049 tokens
    small = [SMALL_ATOM + 10, SMALL_ATOM + 11, 5]  # token 5 is in both sets
    edges = [(0, t, 1) for t in big] + [(1, t, 2) for t in small]
    pattern = PatternLayout(automaton(edges, [False, True, True]), vocab, eos)
    assert pattern.dense.shape == (vocab, 1) and pattern.atoms == 4
    # The big set less token 5 is the only atom over the limit.
    assert pattern.dense[:, 0].sum() == SMALL_ATOM + 1 and pattern.dense[5, 0] == 0
    assert sorted(pattern.small_tokens.tolist()) == sorted(
        [5, SMALL_ATOM + 10, SMALL_ATOM + 11, eos]
    )
    probs = torch.rand(2, 3, vocab, generator=torch.Generator().manual_seed(1))
    probs = probs / probs.sum(-1, keepdim=True)
    x = torch.zeros(2, 3, dtype=torch.long)
    fixed = torch.zeros(2, 3, dtype=torch.bool)
    mass = pattern.placed(0, 3).set_mass(probs, x, fixed)
    expected = (probs[:, :, None, :] * pattern.masks.float()).sum(-1)
    assert torch.allclose(mass, expected, atol=1e-6)


def test_an_atom_of_exactly_the_limit_is_gathered():
    vocab = SMALL_ATOM + 2
    edges = [(0, t, 1) for t in range(SMALL_ATOM)]
    pattern = PatternLayout(automaton(edges, [False, True]), vocab, vocab - 1)
    assert pattern.dense.shape == (vocab, 0) and len(pattern.small_tokens) == SMALL_ATOM + 1
    probs = torch.full((1, 1, vocab), 1.0 / vocab)
    mass = pattern.placed(0, 1).set_mass(
        probs, torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1, dtype=torch.bool)
    )
    assert torch.allclose(mass[0, 0], torch.tensor([SMALL_ATOM / vocab, 1 / vocab]))


# --------------------------------------------------------------------------------------------
# Paths


def path_weights(pattern: PatternLayout, mass: torch.Tensor) -> dict[tuple[int, ...], float]:
    """Every path from the start to an accepting state by enumeration: its sets and the
    product of their masses (FREE: 1)."""
    edges = list(
        zip(pattern.src.tolist(), pattern.dst.tolist(), pattern.edge_set.tolist(), strict=True)
    )
    weights: dict[tuple[int, ...], float] = {}
    for chosen in itertools.product(edges, repeat=pattern.length):
        state, weight = 0, 1.0
        for i, (s, d, u) in enumerate(chosen):
            if s != state:
                break
            weight *= 1.0 if u == FREE else float(mass[i, u])
            state = d
        else:
            if pattern.accepting[state]:
                sets = tuple(u for _, _, u in chosen)
                weights[sets] = weights.get(sets, 0.0) + weight
    return weights


def test_paths_are_drawn_in_proportion_to_the_mass_of_their_edges():
    pattern = layout(length=3)
    rows = torch.rand(3, V, generator=torch.Generator().manual_seed(2)) + 0.1
    rows = rows / rows.sum(-1, keepdim=True)
    n = 3000
    probs = rows.expand(n, -1, -1)
    x = torch.full((n, 3), OTHER)
    fixed = torch.zeros(n, 3, dtype=torch.bool)
    plans = pattern.plan(probs, x, fixed, generators(n))
    assert all(isinstance(p, PathPlan) for p in plans)
    weights = path_weights(pattern, pattern.set_mass(rows[None], x[:1], fixed[:1])[0])
    total = sum(weights.values())
    seen: dict[tuple[int, ...], float] = {}
    for plan in plans:
        key = tuple(plan.sets)
        assert key in weights, key  # every path drawn is a path
        seen[key] = seen.get(key, 0.0) + 1 / n
    assert len(weights) == 4  # a d c, a c <end>, c a c, c <end> (anything)
    for key, weight in weights.items():
        share = weight / total
        assert abs(seen.get(key, 0.0) - share) < 4 * math.sqrt(share * (1 - share) / n) + 2e-3


def test_a_path_keeps_to_the_tokens_decided():
    pattern = layout(start=2, length=4)
    probs = torch.full((3, 6, V), 1.0 / V)
    x = torch.full((3, 6), OTHER)
    fixed = torch.zeros(3, 6, dtype=torch.bool)
    fixed[:, :2] = True
    x[0, 3], fixed[0, 3] = D, True  # a "d": after a first token, before the "c"
    x[1, 2], fixed[1, 2] = C, True  # "c" first: a match at once
    x[1, 3], fixed[1, 3] = EOS, True  # ... ended there
    x[2, 2], fixed[2, 2] = OTHER, True  # no edge takes it
    with pytest.raises(InputError, match="no continuation of this length follows the pattern"):
        pattern.plan(probs, x, fixed, generators(3))
    plans = pattern.plan(probs[:2], x[:2], fixed[:2], generators(2))
    d, c, eos = 2, 1, 4
    for _ in range(3):
        assert plans[0].sets[1] == d and plans[0].sets[0] == 0
        assert plans[1].sets == [c, eos, FREE, FREE]
        plans = pattern.plan(probs[:2], x[:2], fixed[:2], generators(2, seed=7))


def test_each_sample_draws_with_its_own_generator():
    pattern = layout(length=3)
    probs = torch.full((2, 3, V), 1.0 / V)
    x = torch.full((2, 3), OTHER)
    fixed = torch.zeros(2, 3, dtype=torch.bool)
    one = pattern.plan(probs, x, fixed, generators(2, seed=3))
    two = pattern.plan(probs, x, fixed, [generators(1, seed=4)[0], generators(1, seed=3)[0]])
    assert two[1].sets == one[0].sets
    # A model that gives every edge nothing: each still weighs TINY, so a path is found,
    # the one with the fewest such edges (c, end-of-text, then anything).
    none = torch.zeros(50, 3, V)
    none[..., OTHER] = 1.0
    plans = pattern.plan(none, x[:1].expand(50, -1), fixed[:1].expand(50, -1), generators(50))
    assert all(p.sets == [1, 4, FREE] for p in plans)


# --------------------------------------------------------------------------------------------
# The projection


def test_undecided_positions_are_renormalised_over_their_edges_tokens():
    start, length = 2, 17  # more positions than ROWS: renormalised in three slices
    assert 2 * ROWS < length < 3 * ROWS
    pattern = layout(start=start, length=length)
    probs = torch.rand(2, start + length + 3, V, generator=torch.Generator().manual_seed(5))
    probs = (probs / probs.sum(-1, keepdim=True)).double()
    probs[0, start + 1] = 0.0
    probs[0, start + 1, OTHER] = 1.0  # nothing on its edge: uniform over it
    fixed = torch.zeros(2, start + length + 3, dtype=torch.bool)
    fixed[:, :start] = True
    fixed[1, start + 4] = True
    sets = [[0] + [2] * 14 + [1, 4], [1, 3, 2, 1, 4] + [FREE] * 12]
    plans = [PathPlan(s) for s in sets]
    out = pattern.apply(probs, plans, fixed)
    assert out.dtype == torch.float64 and out.shape == probs.shape
    assert torch.equal(out[:, :start], probs[:, :start])  # the prompt
    assert torch.equal(out[:, start + length :], probs[:, start + length :])  # after it
    assert torch.equal(out[1, start + 4], probs[1, start + 4])  # decided
    assert torch.equal(out[1, start + 5 :], probs[1, start + 5 :])  # after the end: FREE
    masks = pattern.masks.double()
    for b, row in enumerate(sets):
        for i, u in enumerate(row):
            if u == FREE or fixed[b, start + i]:
                continue
            expected = probs[b, start + i] * masks[u]
            if b == 0 and i == 1:
                expected = masks[u]
            assert torch.allclose(out[b, start + i], expected / expected.sum()), (b, i)
            assert abs(float(out[b, start + i].sum()) - 1.0) < 1e-12  # to float64's precision
    assert out[0, start + 1].tolist() == [0.5, 0.5, 0, 0, 0, 0] or sets[0][1] != 0
    assert out[0, start + 1, D] == 1.0  # set 2 is {d} alone


def test_the_projection_multiplies_by_masks_kept_for_each_dtype():
    pattern = layout(length=2)
    floats = pattern.multipliers(torch.float32, torch.device("cpu"))
    assert floats.dtype == torch.float32 and floats.shape == (6, V)
    assert torch.equal(floats[:5], pattern.masks.float()) and floats[5].tolist() == [1.0] * V
    assert pattern.multipliers(torch.float32, torch.device("cpu")) is floats
    doubles = pattern.multipliers(torch.float64, torch.device("cpu"))
    assert doubles.dtype == torch.float64 and doubles is not floats
    assert set(pattern._multipliers) == {(torch.float32, "cpu"), (torch.float64, "cpu")}


def test_order_leaves_the_steps_decisions_alone():
    pattern = layout(length=3)
    changing = torch.tensor([[True, False, True]])
    assert (
        pattern.order([PathPlan([0, 1, 4])], changing, torch.zeros(1, 3, dtype=torch.bool)) is None
    )
    assert changing.tolist() == [[True, False, True]]


# --------------------------------------------------------------------------------------------
# One draw from weights


def test_a_draw_takes_the_index_whose_partial_sum_passes_the_uniform():
    weights = torch.tensor([[1.0, 2.0, 1.0], [0.0, 1.0, 1.0]], dtype=torch.float64)
    pick = lambda u: _pick(weights, torch.tensor(u, dtype=torch.float64)).tolist()  # noqa: E731
    assert pick([0.0, 0.0]) == [0, 1]
    assert pick([0.24, 0.49]) == [0, 1]
    assert pick([0.25, 0.5]) == [1, 2]  # exactly at a partial sum: the next index
    assert pick([0.74, 0.99]) == [1, 2]
    assert pick([0.75, 1.0]) == [2, 2]  # at the total: the last index, never past it
    assert pick([1.0, 1.0]) == [2, 2]


def test_a_row_with_nothing_on_its_edge_is_exactly_uniform_in_the_predictions_dtype():
    edges = [(0, A, 1), (0, B, 1), (0, C, 1)]
    pattern = PatternLayout(automaton(edges, [False, True]), V, EOS).placed(1, 2)
    probs = torch.zeros(1, 3, V, dtype=torch.float64)
    probs[..., OTHER] = 1.0
    fixed = torch.tensor([[True, False, False]])
    out = pattern.apply(probs, [PathPlan([0, 1])], fixed)
    third = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], dtype=torch.float64) / 3
    assert out.dtype == torch.float64 and torch.equal(out[0, 1], third)
    assert torch.equal(out[0, 2], torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64))
    assert torch.equal(out[0, 0], probs[0, 0])


# --------------------------------------------------------------------------------------------
# Edge cases: large automata and vocabularies, other dtypes, weights far below float32's range


def test_the_errors_say_what_does_not_match():
    with pytest.raises(InputError) as error:
        PatternLayout(automaton(EDGES, [False, False, False]), V, EOS)
    assert str(error.value) == "no text matches the pattern with this tokenizer"
    pattern = layout(length=2)
    x = torch.full((1, 2), OTHER)
    fixed = torch.tensor([[True, False]])  # a token no edge takes, decided first
    with pytest.raises(InputError) as error:
        pattern.plan(torch.full((1, 2, V), 1.0 / V), x, fixed, generators(1))
    assert str(error.value) == "no continuation of this length follows the pattern"


def test_many_states_still_get_one_edge_for_each_pair():
    # 8,000 states: two sources into the same target stay two edges, their sets apart.
    states = 8000
    edges = [(1, B, states - 1), (0, A, states - 1)]
    final = [False] * (states - 1) + [True]
    pattern = PatternLayout(automaton(edges, final), V, EOS)
    assert pattern.src.tolist() == [0, 1, states - 1, states]
    assert pattern.dst.tolist() == [states - 1, states - 1, states, states]
    assert sets_of(pattern) == [[A], [B], [EOS]]


def test_incoming_edges_keep_the_edge_order_among_many_into_one_state():
    # Twenty states each lead to 1 or 2 (alternately): more edges than a sort keeps stable
    # unasked.
    edges = [(s, A, 1 + s % 2) for s in range(3, 23)] + [(0, B, 3)]
    final = [False, True, True] + [False] * 20
    pattern = PatternLayout(automaton(edges, final), V, EOS)
    e = len(pattern.src)
    for state in range(pattern.states):
        row = pattern.incoming[state].tolist()
        into = [k for k in range(e) if pattern.dst[k] == state]
        assert row == into + [e] * (len(row) - len(into)), state


def test_several_large_atoms_give_the_same_masses_in_any_dtype():
    size = SMALL_ATOM + 2
    vocab = 2 * size + 3
    eos = vocab - 1
    edges = [(0, t, 1) for t in range(size)] + [(1, t, 2) for t in range(size, 2 * size)]
    edges += [(1, 2 * size, 2)]  # a small atom beside them
    pattern = PatternLayout(automaton(edges, [False, False, True]), vocab, eos).placed(1, 3)
    assert pattern.dense.shape == (vocab, 2)
    x = torch.zeros(2, 5, dtype=torch.long)
    fixed = torch.zeros(2, 5, dtype=torch.bool)
    fixed[:, 0] = True
    for dtype in (torch.float32, torch.float64):
        probs = torch.rand(2, 5, vocab, generator=torch.Generator().manual_seed(3), dtype=dtype)
        probs = probs / probs.sum(-1, keepdim=True)
        mass = pattern.set_mass(probs, x, fixed)
        expected = (probs[:, 1:4, None, :].double() * pattern.masks.double()).sum(-1)
        assert torch.allclose(mass.double(), expected, atol=1e-5), dtype


def test_a_prediction_in_float64_is_read_and_drawn_from():
    pattern = layout(length=3)
    rows = torch.rand(3, V, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    rows = rows / rows.sum(-1, keepdim=True)
    probs = rows.expand(2, -1, -1)
    x = torch.full((2, 3), OTHER)
    fixed = torch.zeros(2, 3, dtype=torch.bool)
    mass = pattern.set_mass(probs, x, fixed)
    expected = (probs[:, :, None, :] * pattern.masks.double()).sum(-1)
    assert torch.allclose(mass.double(), expected, atol=1e-6)
    weights = path_weights(pattern, mass[0])
    for plan in pattern.plan(probs, x, fixed, generators(2)):
        assert tuple(plan.sets) in weights


def test_the_only_path_that_fits_is_found_however_little_the_model_gives_it():
    # a* b b: the model says "a" twice, then end-of-text is decided. Only b b fits, weighing
    # TINY x TINY (1e-60) next to the a a the model wants.
    edges = [(0, A, 0), (0, B, 1), (1, B, 2)]
    pattern = PatternLayout(automaton(edges, [False, False, True]), V, EOS).placed(0, 3)
    probs = torch.zeros(1, 3, V)
    probs[0, :, A] = 1.0
    x = torch.tensor([[OTHER, OTHER, EOS]])
    fixed = torch.tensor([[False, False, True]])
    plan = pattern.plan(probs, x, fixed, generators(1))[0]
    assert [sets_of(pattern)[u] for u in plan.sets] == [[B], [B], [EOS]]


def test_a_long_path_the_model_gives_no_mass_is_found_beside_one_it_gives_all():
    # a{12}: every position weighs TINY in the second sample, 1 in the first; the product
    # over twelve positions (1e-360) is far below float64's range unless rescaled per sample.
    n = 12
    edges = [(s, A, s + 1) for s in range(n)]
    pattern = PatternLayout(automaton(edges, [False] * n + [True]), V, EOS).placed(0, n)
    probs = torch.zeros(2, n, V)
    probs[0, :, A] = 1.0
    probs[1, :, OTHER] = 1.0
    x = torch.full((2, n), OTHER)
    fixed = torch.zeros(2, n, dtype=torch.bool)
    plans = pattern.plan(probs, x, fixed, generators(2))
    assert [p.sets for p in plans] == [[0] * n, [0] * n]


def test_the_projection_reuses_its_multipliers_and_warns_of_nothing():
    pattern = layout(length=ROWS + 3)
    probs = torch.rand(2, ROWS + 3, V, generator=torch.Generator().manual_seed(6))
    fixed = torch.zeros(2, ROWS + 3, dtype=torch.bool)
    plans = [PathPlan([0] + [2] * (ROWS + 1) + [1])] * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = pattern.apply(probs, plans, fixed)
        second = layout(length=ROWS + 3).apply(probs, plans, fixed)
    assert torch.equal(first, second)
    assert set(pattern._multipliers) == {(torch.float32, "cpu")}
    assert torch.allclose(first.sum(-1), torch.ones(2, ROWS + 3))


def test_a_draw_past_the_total_falls_back_to_the_last_index_that_weighs_even_the_first():
    weights = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0]], dtype=torch.float64)
    assert _pick(weights, torch.tensor([1.0, 1.0], dtype=torch.float64)).tolist() == [0, 1]
