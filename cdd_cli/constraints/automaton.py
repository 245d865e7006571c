r"""A regular expression compiled against a model's vocabulary: which token leads from which
state to which, as arrays a dynamic program can read.

The automaton comes from outlines-core (its `Index`: the pattern's byte-level DFA walked with
every token of the vocabulary), chosen over llguidance and xgrammar because it hands out the
whole transition table (`get_transitions`), not only a next-token mask: the projection
(`pattern_layout.py`) needs every (state, token, next state) to run forward over positions.
Building one costs 0.03-0.3 s for a short pattern over GPT-2's 50,257 tokens and grows with the
pattern; the table is cached on disk per (pattern, vocabulary, outlines-core version) as
safetensors, so a second run loads it in milliseconds.

Tokens are read as the bytes they stand for (`TextTokenizer.token_bytes`), never as their
display text: a token holding half of a UTF-8 character is still a valid step of the byte
DFA.

outlines-core 0.2.14's `Index` loses texts once the whole pattern has matched: it keeps a
token's move only where its DFA (the `regex-automata` crate's, leftmost-first, a match
reported one byte late) is not in a match state after it or matches at the end there, so a
move out of an accepting state into one that is not is dropped (`a(?:bc)?` does not take
"abc", `[0-9]+(?:\.[0-9]+)?` not "1.5"), and leftmost-first drops the longer branches once a
shorter one has matched (`1|10` does not take "10"). Fixed after that release, not released.
So the index is built of the pattern between `START` and `END`, characters that open and
close it, spelled by tokens of their own (`pattern_moves`): no text matches before `END` is
read, and the pattern's accepting states are those the `END` token leads from into an
accepting state. `START`: the library's DFA also searches for the pattern anywhere in a
text, and without it that search costs exponential time and memory for some patterns once
they have an end (a host name's 4 labels, `[a-z0-9](?:[a-z0-9-]{0,28}[a-z0-9])?` each); with
it, for a pattern that may read `START` itself (`.`, `[^0-4]{0,40}`: a search may begin at
every one of its characters), so such a pattern is built with `END` only (`may_read`). Only
a text that holds one of the two characters (U+10FFFE, U+10FFFF: noncharacters) itself may
still be lost.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import metadata

import torch
from outlines_core import Index, Vocabulary
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from cdd_cli.constraints.pattern_limits import may_read, pattern_problem
from cdd_cli.constraints.pattern_syntax import group_depth, unsupported_syntax
from cdd_cli.errors import InputError
from cdd_cli.evaluate.reference import cache_dir
from cdd_cli.models.tokenizers import TextTokenizer


@dataclass(frozen=True)
class TokenAutomaton:
    """A DFA over token ids: state 0 is the start; `src[k] --token[k]--> dst[k]`; the
    end-of-text token is left out (the projection adds it where `final` allows an end)."""

    src: torch.Tensor  # [T] int64
    token: torch.Tensor  # [T] int64
    dst: torch.Tensor  # [T] int64
    final: torch.Tensor  # [S] bool
    states: int

    def accepts(self, ids: list[int]) -> bool:
        """Whether these tokens (no end-of-text) spell a match, walking the table."""
        table = self.table
        state = 0
        for t in ids:
            state = table.get((state, t))
            if state is None:
                return False
        return bool(self.final[state])

    @functools.cached_property
    def table(self) -> dict[tuple[int, int], int]:
        return {
            (s, t): d
            for s, t, d in zip(
                self.src.tolist(), self.token.tolist(), self.dst.tolist(), strict=True
            )
        }

    def shortest(self) -> int | None:
        """The fewest tokens that spell a match (None: nothing does)."""
        edges: dict[int, set[int]] = {}
        for s, d in zip(self.src.tolist(), self.dst.tolist(), strict=True):
            edges.setdefault(s, set()).add(d)
        # Sets, of the final states and of each step's: indexing the tensor state by state,
        # and a frontier that listed a state once per edge into it, took minutes for a{1000}.
        final = set(torch.nonzero(self.final).flatten().tolist())
        seen, frontier, n = {0}, {0}, 0
        while frontier:
            if not final.isdisjoint(frontier):
                return n
            frontier = {d for s in frontier for d in edges.get(s, ()) if d not in seen}
            seen |= frontier
            n += 1
        return None


# The characters that open and close every pattern the index is built of (the module's
# docstring says why), and how `Index` reads them.
START, END = "\U0010fffe", "\U0010ffff"
START_REGEX, END_REGEX = "\\x{10FFFE}", "\\x{10FFFF}"


# Groups nested deeper than this, in a pattern the library refused, are named as the reason
# (its nest limit counts each group, repetition and sequence: ~83 optional groups in a row).
NESTING_HINT = 60


@dataclass(frozen=True)
class Moves:
    """A pattern's DFA over token ids: `moves[state][token] = next state`, only among the
    states from which an accepting one can be reached (and the start)."""

    start: int
    moves: dict[int, dict[int, int]]
    final: frozenset[int]


def pattern_moves(pattern: str, pieces: dict[bytes, list[int]], eos_id: int) -> Moves:
    """The DFA of `pattern` over the tokens `pieces` (each byte string's ids), by
    outlines-core's `Index` of the pattern between `START` and `END` (the module's docstring
    says why); ValueError, RuntimeError or TypeError where the library cannot build it."""
    start_id = 1 + max([eos_id, *(i for ids in pieces.values() for i in ids)])
    end_id = start_id + 1
    spelled = dict(pieces)
    for text, i in ((START, start_id), (END, end_id)):
        spelled[text.encode()] = [*spelled.get(text.encode(), []), i]
    opened = not may_read(pattern, ord(START))
    regex = f"{START_REGEX if opened else ''}(?:{pattern}){END_REGEX}"
    index = Index(regex, Vocabulary(eos_id, spelled))
    transitions = index.get_transitions()
    start = index.get_initial_state()
    if opened:
        start = transitions.get(start, {}).get(start_id)
    if start is None:  # nothing matches
        return Moves(-1, {}, frozenset())
    ended = set(index.get_final_states())
    moves = {
        s: {t: d for t, d in out.items() if t not in (start_id, end_id, eos_id)}
        for s, out in transitions.items()
    }
    final = {s for s, out in transitions.items() if out.get(end_id) in ended}
    # Back from the accepting states, then on from the start: the rest (before START,
    # inside or after END) lead nowhere.
    back: dict[int, set[int]] = {}
    for s, out in moves.items():
        for d in out.values():
            back.setdefault(d, set()).add(s)
    alive, todo = set(final), list(final)
    while todo:
        for s in back.get(todo.pop(), ()):
            if s not in alive:
                alive.add(s)
                todo.append(s)
    kept: dict[int, dict[int, int]] = {}
    todo = [start]
    while todo:
        s = todo.pop()
        kept[s] = {t: d for t, d in moves.get(s, {}).items() if d in alive}
        todo += [d for d in set(kept[s].values()) if d not in kept]
    final &= kept.keys()
    return Moves(start, kept, frozenset(final))


@functools.lru_cache(maxsize=8)
def _vocabulary(tokenizer: TextTokenizer) -> tuple[dict[bytes, list[int]], str]:
    """The tokens' bytes (each byte string's ids), and a digest of them."""
    pieces: dict[bytes, list[int]] = {}
    for i, b in enumerate(tokenizer.token_bytes()):
        if b:
            pieces.setdefault(b, []).append(i)
    digest = hashlib.sha256(
        repr(sorted((b, ids) for b, ids in pieces.items())).encode()
    ).hexdigest()[:16]
    return pieces, digest


@functools.lru_cache(maxsize=32)
def compile_pattern(pattern: str, tokenizer: TextTokenizer) -> TokenAutomaton:
    """The token automaton of `pattern` (outlines-core's regex syntax, the Rust `regex`
    crate's: no look-around or back-references), loaded from the cache where it was built
    before. InputError where the library cannot compile the pattern."""
    # The last gate before the library builds it (from a spec, the entry's check ran this):
    # a pattern past the limits would hold the process for minutes or fill its memory.
    problem = pattern_problem(pattern, backtracked=False) or unsupported_syntax(pattern)
    if problem:
        raise InputError(f"the pattern cannot be compiled: {problem}")
    pieces, digest = _vocabulary(tokenizer)
    version = metadata.version("outlines_core")
    # "ended": built with `END` (tables cached before it lost texts).
    key = hashlib.sha256(f"{version}\0ended\0{digest}\0{pattern}".encode()).hexdigest()[:24]
    path = cache_dir() / "automata" / f"{key}.safetensors"
    if path.is_file():
        try:
            return _automaton(load_file(str(path)))
        except (OSError, ValueError, KeyError, SafetensorError):
            pass  # a torn or foreign file: built again below
    try:
        moves = pattern_moves(pattern, pieces, tokenizer.eos_id)
    except (ValueError, RuntimeError, TypeError) as exc:
        problem = str(exc).splitlines()[0][:160]
        depth = group_depth(pattern)
        if depth > NESTING_HINT:
            # The library's own words ("error building NFA") do not say it is the nesting.
            problem = (
                f"its groups are nested {depth} deep, past what the automaton library reads "
                "(250 levels of groups, repetitions and sequences: about 80 optional items "
                f"or properties in a row) ({problem})"
            )
        raise InputError(f"the pattern cannot be compiled: {problem}") from None
    arrays = _arrays(moves)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        save_file(arrays, str(partial))
        partial.replace(path)  # whole or not at all: a reader never sees half a table
    except OSError:
        pass  # a read-only cache costs the next run the build, nothing else
    return _automaton(arrays)


def _arrays(moves: Moves) -> dict[str, torch.Tensor]:
    """The moves renumbered from 0 (the start) as int64 arrays."""
    names = {moves.start: 0}
    for s in sorted(set(moves.moves) | {d for out in moves.moves.values() for d in out.values()}):
        names.setdefault(s, len(names))
    rows = [(names[s], t, names[d]) for s, out in moves.moves.items() for t, d in out.items()]
    table = torch.tensor(rows, dtype=torch.int64).reshape(-1, 3)
    final = torch.zeros(len(names), dtype=torch.bool)
    final[[names[s] for s in moves.final if s in names]] = True
    return {
        "src": table[:, 0].contiguous(),
        "token": table[:, 1].contiguous(),
        "dst": table[:, 2].contiguous(),
        "final": final,
    }


def _automaton(arrays: dict[str, torch.Tensor]) -> TokenAutomaton:
    return TokenAutomaton(
        arrays["src"], arrays["token"], arrays["dst"], arrays["final"], len(arrays["final"])
    )


# The product of several automata (`intersect`): its states, and its edges (each one
# (state, token) move, 24 bytes as the tables hold them), the most it may have. Three
# benchmarked schemas' automata (at most 566 states each) meet far below these.
MAX_PRODUCT_STATES = 50_000
MAX_PRODUCT_EDGES = 20_000_000


@functools.lru_cache(maxsize=16)
def compile_patterns(patterns: tuple[str, ...], tokenizer: TextTokenizer) -> TokenAutomaton:
    """The token automaton of the texts that match every one of `patterns` whole: the
    product of their automata (`intersect`)."""
    return intersect([compile_pattern(p, tokenizer) for p in patterns])


def intersect(automata: list[TokenAutomaton]) -> TokenAutomaton:
    """The product of deterministic token automata: a state per tuple of their states that
    the start reaches, a move on a token where every one of them moves on it, final where all
    are; trimmed to the states from which a final one can still be reached (the projection
    draws paths through it: a state that leads nowhere would only cost). InputError past
    MAX_PRODUCT_STATES or MAX_PRODUCT_EDGES, naming the sizes."""
    product = automata[0]
    for other in automata[1:]:
        product = _trimmed(_product(product, other, [a.states for a in automata]))
    return product


def _product(a: TokenAutomaton, b: TokenAutomaton, sizes: list[int]) -> TokenAutomaton:
    """The product of two automata, breadth first from (0, 0), one layer of states at a time
    with every move of the layer found at once: each state's moves in `a`, looked up in `b`
    by (state, token)."""
    vocab = max([int(t.token.max()) + 1 for t in (a, b) if len(t.token)] or [1])
    # a's moves grouped by state (offsets into them), b's by a sorted key state * vocab + token.
    order = torch.argsort(a.src, stable=True)
    a_token, a_dst = a.token[order], a.dst[order]
    offsets = torch.zeros(a.states + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.bincount(a.src, minlength=a.states), 0)
    b_key = b.src * vocab + b.token
    b_order = torch.argsort(b_key)
    b_key, b_dst = b_key[b_order], b.dst[b_order]

    names = {(0, 0): 0}
    layer = torch.zeros((1, 2), dtype=torch.int64)  # [n, 2]: (a state, b state)
    layer_ids = torch.zeros(1, dtype=torch.int64)
    src_parts, token_parts, dst_parts = [], [], []
    edges = 0
    while len(layer):
        counts = offsets[layer[:, 0] + 1] - offsets[layer[:, 0]]
        owner = torch.repeat_interleave(torch.arange(len(layer)), counts)
        # Position k of owner's run of moves: offsets[a] + k.
        starts = torch.cumsum(counts, 0) - counts
        index = offsets[layer[owner, 0]] + torch.arange(len(owner)) - starts[owner]
        token = a_token[index]
        key = layer[owner, 1] * vocab + token
        found = torch.searchsorted(b_key, key).clamp(max=max(len(b_key) - 1, 0))
        hit = (b_key[found] == key) if len(b_key) else torch.zeros_like(key, dtype=torch.bool)
        owner, token = owner[hit], token[hit]
        targets = torch.stack([a_dst[index[hit]], b_dst[found[hit]]], 1)
        edges += len(token)
        if edges > MAX_PRODUCT_EDGES:
            raise InputError(_too_large(f"{MAX_PRODUCT_EDGES:,} moves", sizes))
        # Each distinct target once (a state's moves on a string's characters share one).
        keys, inverse = torch.unique(targets[:, 0] * b.states + targets[:, 1], return_inverse=True)
        fresh, ids = [], []
        for k in keys.tolist():
            pair = (k // b.states, k % b.states)
            if pair not in names:
                names[pair] = len(names)
                fresh.append(pair)
            ids.append(names[pair])
        if len(names) > MAX_PRODUCT_STATES:
            raise InputError(_too_large(f"{MAX_PRODUCT_STATES:,} states", sizes))
        src_parts.append(layer_ids[owner])
        token_parts.append(token)
        dst_parts.append(torch.tensor(ids, dtype=torch.int64)[inverse])
        layer = torch.tensor(fresh, dtype=torch.int64).reshape(-1, 2)
        layer_ids = torch.tensor([names[p] for p in fresh], dtype=torch.int64)
    pairs = torch.tensor(list(names), dtype=torch.int64)  # in the order of their names
    final = a.final[pairs[:, 0]] & b.final[pairs[:, 1]]
    return TokenAutomaton(
        torch.cat(src_parts), torch.cat(token_parts), torch.cat(dst_parts), final, len(names)
    )


def _too_large(what: str, sizes: list[int]) -> str:
    return (
        f"the product of the patterns' automata ({' x '.join(f'{n:,}' for n in sizes)} states) "
        f"has more than {what}, the most it may; give fewer or smaller patterns"
    )


def _trimmed(automaton: TokenAutomaton) -> TokenAutomaton:
    """The automaton without the states from which no final state can be reached (state 0,
    the start, kept and renumbered 0 whatever it leads to)."""
    pairs = torch.unique(automaton.src * automaton.states + automaton.dst)
    back: dict[int, list[int]] = {}
    for pair in pairs.tolist():
        back.setdefault(pair % automaton.states, []).append(pair // automaton.states)
    alive = set(torch.nonzero(automaton.final).flatten().tolist())
    todo = list(alive)
    while todo:
        for s in back.get(todo.pop(), ()):
            if s not in alive:
                alive.add(s)
                todo.append(s)
    kept = sorted(alive | {0})
    rename = torch.full((automaton.states,), -1, dtype=torch.int64)
    rename[kept] = torch.arange(len(kept))
    keep = (rename[automaton.src] >= 0) & (rename[automaton.dst] >= 0)
    if 0 not in alive:  # nothing matches: the start alone, with no moves
        keep[:] = False
    return TokenAutomaton(
        rename[automaton.src[keep]],
        automaton.token[keep],
        rename[automaton.dst[keep]],
        automaton.final[kept],
        len(kept),
    )
