"""The token automaton (`constraints/automaton.py`) piece by piece, on automata small enough to
check by hand: walking and the shortest match, a pattern's DFA over a vocabulary of a few
byte strings (outlines-core's `Index`, real), the arrays it is stored as, and the product of
several automata, checked against every token sequence up to a length."""

from __future__ import annotations

import itertools
import re

import pytest
import torch

from cdd_cli.constraints import automaton
from cdd_cli.constraints.automaton import (
    END,
    START,
    Moves,
    TokenAutomaton,
    _arrays,
    _automaton,
    _product,
    _trimmed,
    compile_pattern,
    compile_patterns,
    intersect,
    pattern_moves,
)
from cdd_cli.errors import InputError


def table(moves: list[tuple[int, int, int]], final: list[int], states: int) -> TokenAutomaton:
    """An automaton of (src, token, dst) moves, its final states and its number of states."""
    rows = torch.tensor(moves, dtype=torch.int64).reshape(-1, 3)
    accepting = torch.zeros(states, dtype=torch.bool)
    accepting[final] = True
    return TokenAutomaton(rows[:, 0], rows[:, 1], rows[:, 2], accepting, states)


def language(a: TokenAutomaton, tokens: range, longest: int) -> set[tuple[int, ...]]:
    """Every sequence of `tokens` up to `longest` long that `a` accepts."""
    return {
        ids
        for n in range(longest + 1)
        for ids in itertools.product(tokens, repeat=n)
        if a.accepts(list(ids))
    }


def moves_of(a: TokenAutomaton) -> set[tuple[int, int, int]]:
    return set(zip(a.src.tolist(), a.token.tolist(), a.dst.tolist(), strict=True))


def every_state_leads_to_a_final_one(a: TokenAutomaton) -> bool:
    reach = set(torch.nonzero(a.final).flatten().tolist())
    edges = set(zip(a.src.tolist(), a.dst.tolist(), strict=True))
    while len(grown := reach | {s for s, d in edges if d in reach}) > len(reach):
        reach = grown
    return reach == set(range(a.states))


# --------------------------------------------------------------------------------------------
# Walking a table


# 0 -1-> 1 (final) -2-> 2 -3-> 3 (final); 0 -4-> 2; 3 -1-> 3
CHAIN = table([(0, 1, 1), (1, 2, 2), (2, 3, 3), (0, 4, 2), (3, 1, 3)], [1, 3], 4)


def test_accepts_walks_from_state_0_and_ends_in_a_final_state():
    assert CHAIN.accepts([1])
    assert CHAIN.accepts([1, 2, 3]) and CHAIN.accepts([4, 3]) and CHAIN.accepts([4, 3, 1, 1])
    assert not CHAIN.accepts([])  # the start is not final
    assert not CHAIN.accepts([1, 2])  # ends in a state that is not final
    assert not CHAIN.accepts([2])  # no move on 2 from the start (1 --2--> 2 is not it)
    assert not CHAIN.accepts([1, 5]) and not CHAIN.accepts([1, 2, 3, 4])  # no such move
    assert CHAIN.table == {(0, 1): 1, (1, 2): 2, (2, 3): 3, (0, 4): 2, (3, 1): 3}


def test_an_automaton_whose_start_is_final_accepts_no_tokens():
    empty = table([(0, 7, 1)], [0], 2)
    assert empty.accepts([]) and not empty.accepts([7]) and not empty.accepts([0])
    assert empty.shortest() == 0


def test_shortest_is_the_fewest_tokens_to_a_final_state():
    assert CHAIN.shortest() == 1
    # Two ways to the final state 4: 0-1-2-3-4 (4 tokens) and 0-5-4 (2 tokens), and a loop.
    two_ways = table(
        [(0, 1, 1), (1, 1, 2), (2, 1, 3), (3, 1, 4), (0, 2, 5), (5, 2, 4), (5, 3, 0)], [4], 6
    )
    assert two_ways.shortest() == 2
    assert table([(0, 1, 1), (1, 1, 2), (2, 1, 3)], [3], 4).shortest() == 3


def test_shortest_is_none_where_no_final_state_is_reached_even_through_a_loop():
    assert table([(0, 1, 1), (1, 1, 0), (1, 2, 2), (2, 2, 1)], [3], 4).shortest() is None
    assert table([], [], 1).shortest() is None
    assert table([(0, 1, 0)], [], 1).shortest() is None


# --------------------------------------------------------------------------------------------
# A pattern's DFA over a few byte strings (outlines-core's Index, real)


def spells(m: Moves, ids: list[int]) -> bool:
    state = m.start
    for t in ids:
        if t not in m.moves.get(state, {}):
            return False
        state = m.moves[state][t]
    return state in m.final


# Ids from 1: 0 is the end-of-text token (below every piece, so that the ids `pattern_moves`
# gives START and END come after the largest piece's).
LETTERS = {b"a": [1], b"b": [2], b"c": [3], b"ab": [4], b"1": [5], b"0": [6], b"10": [7]}
# The bytes of START (f4 8f bf be) and END (f4 8f bf bf) one at a time, as a byte-level
# vocabulary (GPT-2's) has them.
BYTES = {b"\xf4": [8], b"\x8f": [9], b"\xbf": [10], b"\xbe": [11]}


@pytest.mark.parametrize(
    ("pattern", "texts"),
    [
        ("a(?:bc)?", ["a", "abc", "ab", "b", "abca", "", "c", "aa"]),
        ("1|10", ["1", "10", "0", "101", "", "11"]),
        ("(?:ab)+c", ["abc", "ababc", "c", "ab", "abcc", "aabc"]),
        ("ab|ba", ["ab", "ba", "a", "aba", "bab"]),
        ("a+", ["a", "aaaa", "", "ab"]),
        ("", ["", "a"]),
    ],
)
def test_the_moves_spell_exactly_the_texts_the_pattern_matches(pattern: str, texts: list[str]):
    """Every split of a text into the vocabulary's pieces is walked: the DFA takes the
    text, in every tokenisation, exactly where the pattern matches it whole."""
    for pieces in (LETTERS, {**LETTERS, **BYTES}):
        m = pattern_moves(pattern, pieces, eos_id=0)
        ids_of = {piece.decode(): ids[0] for piece, ids in LETTERS.items()}
        for text in texts:
            expected = re.fullmatch(pattern, text) is not None
            for split in splits(text, ids_of):
                assert spells(m, split) == expected, (pattern, text, split)
        # Only the pieces' own ids move (not START's, END's or the end-of-text's), and every
        # state kept leads to a match (no state inside START or END, none past the end).
        every = {i for ids in pieces.values() for i in ids}
        assert all(t in every for out in m.moves.values() for t in out)
        assert m.start in m.moves and m.final <= m.moves.keys()
        assert alive(m) == set(m.moves)


def splits(text: str, ids_of: dict[str, int]) -> list[list[int]]:
    """Every way to write `text` as pieces."""
    if not text:
        return [[]]
    return [
        [i, *rest]
        for piece, i in ids_of.items()
        if text.startswith(piece)
        for rest in splits(text[len(piece) :], ids_of)
    ]


def alive(m: Moves) -> set[int]:
    """The states of `m.moves` from which a final state is reached (the start included)."""
    reach = set(m.final)
    while len(
        grown := reach | {s for s, out in m.moves.items() if set(out.values()) & reach}
    ) > len(reach):
        reach = grown
    return reach | {m.start}


def test_the_bytes_of_end_after_a_match_lead_nowhere_and_are_left_out():
    """A byte-level vocabulary spells END's bytes one by one: after "a" the DFA of `a` could
    read f4 8f bf bf into the state past END; none of those states leads to a match."""
    m = pattern_moves("a", {b"a": [1], **BYTES}, eos_id=0)
    assert m.moves == {m.start: {1: m.moves[m.start][1]}, m.moves[m.start][1]: {}}
    assert m.final == {m.moves[m.start][1]}
    # The same with the end-of-text id above the pieces' (GPT-2's 50256).
    high = pattern_moves("a", {b"a": [1], **BYTES}, eos_id=50)
    assert set(high.moves[high.start]) == {1} and len(high.moves) == 2


def test_a_pattern_that_may_read_start_is_built_without_it_and_reads_it():
    """`.` may read U+10FFFE, START itself: the pattern is built with END only, and a token
    that spells START (here id 2) is one character for it, as any other."""
    m = pattern_moves(".", {b"a": [1], START.encode(): [2], b"ab": [3]}, eos_id=0)
    assert spells(m, [1]) and spells(m, [2])
    assert not spells(m, []) and not spells(m, [3]) and not spells(m, [1, 1])
    assert set(m.moves[m.start]) == {1, 2}
    # A pattern that names START and matches it.
    named = pattern_moves(r"a|\x{10FFFE}", {b"a": [1], START.encode(): [2]}, eos_id=0)
    assert spells(named, [1]) and spells(named, [2]) and not spells(named, [2, 2])


def test_the_largest_piece_id_keeps_its_moves():
    """START and END get ids above every piece's and the end-of-text's: none of the pieces
    loses its moves to them, whether the end-of-text id is below the pieces' or above."""
    for eos in (0, 9):
        m = pattern_moves("ab", {b"a": [1], b"b": [2], b"ab": [3]}, eos_id=eos)
        assert spells(m, [3]) and spells(m, [1, 2]) and not spells(m, [1])
    # Several ids of one byte string all move.
    m = pattern_moves("ab", {b"a": [1, 5], b"b": [2], b"ab": [3, 4]}, eos_id=0)
    assert all(spells(m, ids) for ids in ([3], [4], [1, 2], [5, 2]))


HOST_LABEL = "[a-z0-9](?:[a-z0-9-]{0,28}[a-z0-9])?"


def test_a_host_name_pattern_is_built_opened_by_start():
    """Four labels of a host name: the library's search for the pattern anywhere would track
    every position (exponential time and memory) were the pattern not opened by START."""
    pieces = {bytes([c]): [c] for c in b"abcxyz0123456789-."}
    m = pattern_moves(rf"{HOST_LABEL}(?:\.{HOST_LABEL}){{3}}", pieces, eos_id=0)
    text = b"a.b-0.c.xyz"
    assert spells(m, list(text)) and not spells(m, list(b"a.b.c")) and not spells(m, [])
    assert not spells(m, list(b"a.-b.c.d"))


def test_a_pattern_no_piece_can_spell_is_refused_by_the_library():
    with pytest.raises(ValueError, match="incompatible"):
        pattern_moves("x", {b"a": [1]}, eos_id=0)


# --------------------------------------------------------------------------------------------
# The arrays the moves are stored as


def test_the_arrays_number_the_start_0_and_the_rest_in_order():
    m = Moves(start=40, moves={40: {1: 30, 2: 50}, 30: {3: 50}, 50: {}}, final=frozenset({50}))
    arrays = _arrays(m)
    assert set(arrays) == {"src", "token", "dst", "final"}
    assert all(v.dtype == torch.int64 for k, v in arrays.items() if k != "final")
    assert arrays["final"].tolist() == [False, False, True]  # 40 -> 0, 30 -> 1, 50 -> 2
    a = _automaton(arrays)
    assert a.states == 3 and moves_of(a) == {(0, 1, 1), (0, 2, 2), (1, 3, 2)}
    assert a.accepts([2]) and a.accepts([1, 3]) and not a.accepts([1])


def test_the_arrays_of_a_start_that_is_final_and_of_nothing_that_matches():
    whole = _automaton(_arrays(Moves(start=7, moves={7: {}}, final=frozenset({7}))))
    assert whole.states == 1 and whole.final.tolist() == [True] and len(whole.src) == 0
    assert whole.src.shape == whole.token.shape == whole.dst.shape == (0,)
    # int64 even with no moves (an index tensor: an empty list would make float32 of it).
    assert whole.src.dtype == whole.token.dtype == whole.dst.dtype == torch.int64
    assert whole.accepts([]) and whole.shortest() == 0
    nothing = _automaton(_arrays(Moves(-1, {}, frozenset())))
    assert nothing.states == 1 and nothing.final.tolist() == [False] and len(nothing.token) == 0
    assert not nothing.accepts([]) and nothing.shortest() is None


def test_every_state_of_the_moves_is_numbered_even_one_no_move_leads_to():
    m = Moves(start=0, moves={0: {1: 1}, 1: {}, 5: {2: 1}}, final=frozenset({1}))
    a = _automaton(_arrays(m))
    assert a.states == 3 and moves_of(a) == {(0, 1, 1), (2, 2, 1)}
    assert a.final.tolist() == [False, True, False]


def test_a_start_with_a_loop_is_still_state_0():
    m = Moves(start=9, moves={3: {1: 3}, 9: {2: 3, 1: 9}}, final=frozenset({3}))
    a = _automaton(_arrays(m))
    assert moves_of(a) == {(0, 2, 1), (0, 1, 0), (1, 1, 1)} and a.final.tolist() == [False, True]


# --------------------------------------------------------------------------------------------
# compile_pattern over a small byte-level BPE of its own


@pytest.fixture
def small_tokenizer():
    """A byte-level BPE of ten tokens: a, b, c, 0, 1, -, ab, 10 and two specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from cdd_cli.models.tokenizers import TextTokenizer

    vocab = {"a": 0, "b": 1, "c": 2, "0": 3, "1": 4, "-": 5, "ab": 6, "10": 7}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b"), ("1", "0")]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.add_special_tokens(["<eos>", "<mask>"])
    return TextTokenizer(bpe, eos_id=8, mask_id=9, size=10)


def test_a_compiled_pattern_takes_every_tokenisation_of_a_match(
    small_tokenizer, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    a = compile_pattern("a(?:bc)?-1(?:0)?", small_tokenizer)
    for ids in ([0, 5, 4], [0, 1, 2, 5, 4], [6, 2, 5, 7], [6, 2, 5, 4, 3], [0, 5, 7]):
        assert a.accepts(ids), ids
    for ids in ([0], [6, 5, 4], [0, 5], [0, 5, 4, 4], [8], [0, 5, 4, 8]):
        assert not a.accepts(ids), ids
    assert a.shortest() == 3 and every_state_leads_to_a_final_one(a)
    assert list((tmp_path / "cdd" / "automata").glob("*.safetensors"))


def test_a_pattern_the_library_cannot_build_is_an_input_error(
    small_tokenizer, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(InputError, match="cannot be compiled: The vocabulary provided"):
        compile_pattern("x+", small_tokenizer)


def test_patterns_compiled_together_take_what_all_of_them_take(
    small_tokenizer, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    both = compile_patterns(("[ab]{1,3}", "a.*"), small_tokenizer)
    for ids, expected in (([0], True), ([6], True), ([6, 0], True), ([1], False), ([6, 6], False)):
        assert both.accepts(ids) == expected, ids
    assert every_state_leads_to_a_final_one(both)


# --------------------------------------------------------------------------------------------
# The product


# Over tokens 0..3: A takes (0|1)* 2 with a sink after; B takes texts of an even number of
# tokens among 0, 2, 3; C takes at most 2 tokens, any.
A = table([(0, 0, 0), (0, 1, 0), (0, 2, 1), (1, 3, 2)], [1], 3)
B = table([(0, 0, 1), (0, 2, 1), (0, 3, 1), (1, 0, 0), (1, 2, 0), (1, 3, 0)], [0], 2)
C = table([(s, t, s + 1) for s in (0, 1) for t in range(4)], [0, 1, 2], 3)
TOKENS = range(5)


@pytest.mark.parametrize(
    "parts",
    [(A, B), (B, A), (A, C), (C, A), (B, C), (C, B), (A, B, C), (C, B, A), (A, A)],
    ids=lambda parts: "x".join(str(p.states) for p in parts),
)
def test_the_product_accepts_exactly_what_every_automaton_accepts(parts):
    product = intersect(list(parts))
    expected = set.intersection(*(language(p, TOKENS, 5) for p in parts))
    assert language(product, TOKENS, 5) == expected
    assert every_state_leads_to_a_final_one(product)
    # Deterministic: one move a (state, token).
    pairs = list(zip(product.src.tolist(), product.token.tolist(), strict=True))
    assert len(pairs) == len(set(pairs))
    assert product.src.dtype == product.dst.dtype == product.token.dtype == torch.int64


def test_the_product_of_a_then_b_has_a_state_per_pair_reached():
    product = _product(A, B, [3, 2])
    # Breadth first from (0, 0): on 0 to (0, 1), on 2 to (1, 1); from (0, 1) on 0 back to
    # (0, 0), on 2 to (1, 0); from (1, 1) on 3 to (2, 0); from (1, 0) on 3 to (2, 1).
    assert product.states == 6 and len(product.src) == 6
    assert product.final.tolist() == [False, False, False, True, False, False]  # (1, 0)
    assert moves_of(product) == {(0, 0, 1), (0, 2, 2), (1, 0, 0), (1, 2, 3), (2, 3, 4), (3, 3, 5)}
    # (1, 1) and the sinks (2, 0), (2, 1) lead nowhere.
    trimmed = _trimmed(product)
    assert trimmed.states == 3 and moves_of(trimmed) == {(0, 0, 1), (1, 0, 0), (1, 2, 2)}


def test_a_token_past_the_other_automatons_largest_matches_nothing_there():
    """Tokens of one automaton the other never reads (ids above all of its), and a move of
    the other on a (state + 1, token 0) whose key a too small id range would confuse with
    (state, largest token)."""
    high = table([(0, 9, 1), (1, 0, 2), (0, 0, 2)], [1, 2], 3)
    low = table([(0, 0, 1), (1, 0, 1), (1, 9, 1)], [1], 2)
    for parts in ((high, low), (low, high)):
        product = intersect(list(parts))
        assert language(product, range(10), 3) == {(0,)}
        assert product.states == 2 and moves_of(product) == {(0, 0, 1)}


def test_an_automaton_of_one_move_meets_tokens_on_either_side_of_it():
    one = table([(0, 1, 1)], [1], 2)
    around = table([(0, 0, 1), (0, 1, 1), (0, 2, 1)], [1], 2)
    for parts in ((around, one), (one, around)):
        product = intersect(list(parts))
        assert language(product, range(4), 2) == {(1,)}
        assert product.states == 2 and moves_of(product) == {(0, 1, 1)}


def test_an_automaton_with_no_moves_meets_another_only_at_the_start():
    start_only = table([], [0], 1)
    for parts in ((start_only, C), (C, start_only)):
        product = intersect(list(parts))
        assert product.states == 1 and len(product.src) == 0 and product.final.tolist() == [True]
    refuses = intersect([table([], [], 1), C])
    assert refuses.states == 1 and not refuses.accepts([]) and refuses.shortest() is None


def test_a_product_nothing_satisfies_is_the_start_alone():
    """A takes texts ending in 2, D only texts without 2: no text is both."""
    d = table([(0, 0, 0), (0, 1, 0)], [0], 1)
    product = intersect([A, d])
    assert product.states == 1 and product.final.tolist() == [False]
    assert len(product.src) == len(product.token) == len(product.dst) == 0
    assert product.shortest() is None and not product.accepts([])


def test_one_automaton_is_its_own_product():
    assert intersect([A]) is A


def test_trimming_keeps_the_start_and_what_leads_to_a_final_state():
    # 0 -1-> 1 -1-> 2 (final); 0 -2-> 3 (dead end); 1 -3-> 4 -3-> 4 (dead loop); 2 -1-> 2.
    raw = table([(0, 1, 1), (1, 1, 2), (0, 2, 3), (1, 3, 4), (4, 3, 4), (2, 1, 2)], [2], 5)
    trimmed = _trimmed(raw)
    assert trimmed.states == 3 and trimmed.final.tolist() == [False, False, True]
    assert moves_of(trimmed) == {(0, 1, 1), (1, 1, 2), (2, 1, 2)}
    # State 1 leads nowhere, the start does: the start's other moves stay.
    dead_1 = _trimmed(table([(0, 1, 1), (0, 2, 2), (2, 2, 2)], [2], 3))
    assert dead_1.states == 2 and moves_of(dead_1) == {(0, 2, 1), (1, 2, 1)}
    # The start leads nowhere, state 1 does: no move stays.
    dead_0 = _trimmed(table([(0, 1, 3), (1, 1, 2)], [2], 4))
    assert (
        dead_0.states == 3
        and len(dead_0.src) == 0
        and dead_0.final.tolist()
        == [
            False,
            False,
            True,
        ]
    )
    # A start that leads nowhere stays, alone and without moves, even beside a final state
    # it cannot reach.
    stranded = _trimmed(table([(0, 1, 1), (2, 1, 3)], [3], 4))
    assert stranded.states == 3 and len(stranded.src) == 0  # 0, and 2 -> 3 renumbered 1 -> 2
    assert stranded.final.tolist() == [False, False, True] and not stranded.accepts([1])


def test_a_product_of_exactly_the_most_states_or_moves_is_built(monkeypatch):
    # The product of A and B before trimming: 6 states, 6 moves.
    monkeypatch.setattr(automaton, "MAX_PRODUCT_STATES", 6)
    monkeypatch.setattr(automaton, "MAX_PRODUCT_EDGES", 6)
    assert intersect([A, B]).states == 3
    monkeypatch.setattr(automaton, "MAX_PRODUCT_STATES", 5)
    with pytest.raises(InputError) as refused:
        intersect([A, B, C])
    assert str(refused.value) == (
        "the product of the patterns' automata (3 x 2 x 3 states) has more than 5 states, "
        "the most it may; give fewer or smaller patterns"
    )
    monkeypatch.setattr(automaton, "MAX_PRODUCT_STATES", 6)
    monkeypatch.setattr(automaton, "MAX_PRODUCT_EDGES", 5)
    with pytest.raises(InputError) as refused:
        intersect([A, B])
    assert str(refused.value) == (
        "the product of the patterns' automata (3 x 2 states) has more than 5 moves, "
        "the most it may; give fewer or smaller patterns"
    )


def test_the_sizes_in_a_refusal_are_written_with_thousands_separators(monkeypatch):
    monkeypatch.setattr(automaton, "MAX_PRODUCT_EDGES", 1000)
    many = table([(s, t, s + 1) for s in range(1200) for t in (0, 1)], [1200], 1201)
    with pytest.raises(InputError) as refused:
        intersect([many, many])
    assert str(refused.value) == (
        "the product of the patterns' automata (1,201 x 1,201 states) has more than 1,000 "
        "moves, the most it may; give fewer or smaller patterns"
    )


def test_start_and_end_are_the_two_last_noncharacters():
    assert (START, END) == ("\U0010fffe", "\U0010ffff")
