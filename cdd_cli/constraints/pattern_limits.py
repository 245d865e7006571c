"""What a regular expression costs, worked out before anything is built from it.

A pattern becomes a token automaton (`automaton.py`: outlines-core walks every token of the
vocabulary from every state of the pattern's DFA) and is judged by Python's `re`, which
backtracks. Both can be made to run for hours or fill the memory by a short pattern:
`a{100000}` (100,000 states), `[ab]*a[ab]{20}` (a DFA of 2^21 states), `[a-z ]{0,3000}`
(3,000 states each taking most of a vocabulary: 20 GB), `(a+)+b` (exponentially many ways to
match, which `re` tries one by one on a text that does not match).

`pattern_problem` reads the pattern with Python's own parser and finds these first, in
milliseconds: each repetition count, the pattern's size with its counted repetitions written
out, the states of its DFA over characters (its subset construction, stopped at the limit) and
how many of them let letters through, and whether two different paths through one
repetition read the same text (exponential ambiguity, for `re`: `(a+)+`, `(a|a)*`). The
limits are far past the patterns and schemas cdd is benchmarked on
(bench/structured_table.py: at most 566 states).
"""

from __future__ import annotations

import bisect
import functools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

try:  # Python 3.11 renamed the module; importing the old name there warns
    from re import _parser as sre_parse
except ImportError:  # Python 3.10
    import sre_parse  # type: ignore[no-redef]

MAX_REPEAT_COUNT = 1_000  # a{n}, a{m,n}: each count
MAX_POSITIONS = 5_000  # characters of the pattern with its counted repetitions written out
MAX_STATES = 2_000  # states of its DFA over characters
# States that let letters through ([a-z ], a JSON string's character) take most of a
# vocabulary's tokens (words: 28,000 of GPT-2's 50,257 for [a-z ]) into the automaton's
# table, about 7 MB each as it is built: a state counts by the share of a-z it accepts. The
# largest benchmarked schema (`profile`) counts 187; [a-z ]{0,250} counts 250 (25 s, 2 GB).
MAX_LETTER_STATES = 250
# The ambiguity check's product graph: a repetition's positions squared, and its edges. A
# repeated part past these is refused rather than left unchecked (`(?:[ab]?){250}c)+` has
# C(250, k) ways to read k letters, and its product 4 billion edges).
MAX_AMBIGUITY_POSITIONS = 300
MAX_PRODUCT_EDGES = 2_000_000
# Steps of the checks themselves (links between positions, positions visited building the
# DFA): many optional parts in a row make each follow all those before.
MAX_WORK = 5_000_000
TOO_INTRICATE = (
    "it has too many ways through it (optional or repeated parts) for cdd to check that its "
    "automaton and Python's re (the judge) can handle it; simplify it"
)
TOP = 0x10FFFF
Ranges = tuple[tuple[int, int], ...]  # code point ranges, inclusive, sorted, disjoint
REPEATS = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT}
if hasattr(sre_parse, "POSSESSIVE_REPEAT"):  # a*+ (Python 3.11)
    REPEATS.add(sre_parse.POSSESSIVE_REPEAT)
UNBOUNDED = sre_parse.MAXREPEAT


class PatternTooLarge(ValueError):
    """A pattern past one of the limits; the message names it and the limit."""


def _ranges(pairs: Iterable[tuple[int, int]]) -> Ranges:
    merged: list[list[int]] = []
    for low, high in sorted(pairs):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return tuple((a, b) for a, b in merged)


def _complement(ranges: Ranges) -> Ranges:
    out, start = [], 0
    for low, high in ranges:
        if low > start:
            out.append((start, low - 1))
        start = high + 1
    if start <= TOP:
        out.append((start, TOP))
    return tuple(out)


# Categories as ASCII ranges, with all of non-ASCII counted in (Unicode digits, letters and
# spaces): an estimate that may only overstate what a class and another share.
NON_ASCII = (0x80, TOP)
CATEGORIES: dict[object, Ranges] = {
    sre_parse.CATEGORY_DIGIT: _ranges([(48, 57), NON_ASCII]),
    sre_parse.CATEGORY_WORD: _ranges([(48, 57), (65, 90), (95, 95), (97, 122), NON_ASCII]),
    sre_parse.CATEGORY_SPACE: _ranges([(9, 13), (32, 32), NON_ASCII]),
}
CATEGORIES[sre_parse.CATEGORY_NOT_DIGIT] = _complement(_ranges([(48, 57)]))
CATEGORIES[sre_parse.CATEGORY_NOT_WORD] = _complement(
    _ranges([(48, 57), (65, 90), (95, 95), (97, 122)])
)
CATEGORIES[sre_parse.CATEGORY_NOT_SPACE] = _complement(_ranges([(9, 13), (32, 32)]))


def _case_folded(ranges: Ranges) -> Ranges:
    """ASCII letters in both cases (a case-insensitive pattern)."""
    extra = []
    for low, high in ranges:
        for a, b, shift in ((65, 90, 32), (97, 122, -32)):
            if low <= b and high >= a:
                extra.append((max(low, a) + shift, min(high, b) + shift))
    return _ranges([*ranges, *extra])


@dataclass
class _Glushkov:
    """The pattern's position automaton: one position per character class written (counted
    repetitions written out, or with `collapse` each variable one as a loop), `follow[p]`:
    the positions that may come after p, each with the number of ways the pattern's syntax
    leads there (two for `(a+)+`: the inner loop and the outer one)."""

    chars: list[Ranges] = field(default_factory=list)
    follow: list[Counter[int]] = field(default_factory=list)
    links: int = 0  # entries of `follow`, counted against MAX_WORK

    def position(self, ranges: Ranges) -> int:
        if len(self.chars) >= MAX_POSITIONS:
            raise PatternTooLarge(
                f"it is more than {MAX_POSITIONS:,} characters long with its counted "
                "repetitions written out, the most a pattern may be"
            )
        self.chars.append(ranges)
        self.follow.append(Counter())
        return len(self.chars) - 1

    def link(self, lasts: Iterable[int], firsts: set[int]) -> None:
        for p in lasts:
            self.follow[p].update(firsts)
            self.links += len(firsts)
        if self.links > MAX_WORK:  # many optional parts in a row: each follows all before
            raise PatternTooLarge(TOO_INTRICATE)


# (first positions, last positions, whether it matches the empty text)
Part = tuple[set[int], set[int], bool]
EMPTY: Part = (set(), set(), True)


def _sequence(auto: _Glushkov, parts: Iterable[Part]) -> Part:
    first, last, nullable = set(), set(), True
    for p_first, p_last, p_nullable in parts:
        auto.link(last, p_first)
        if nullable:
            first |= p_first
        last = (last | p_last) if p_nullable else set(p_last)
        nullable = nullable and p_nullable
    return first, last, nullable


class _Builder:
    def __init__(self, collapse: bool = False) -> None:
        self.auto = _Glushkov()
        self.ignore_case = False
        # Where a backtracking matcher's choices are (`_ambiguous`): a repetition of a
        # variable count as one looping copy (X{1,20} tries splits as X+ does).
        self.collapse = collapse
        # Each looping repetition: the positions its body holds.
        self.loops: list[set[int]] = []
        self.looping = 0  # how many looping repetitions the part being built is inside
        # An alternation with two ways to match nothing inside a loop (`(a|a)*`: Python's
        # parser makes it a(|)): each turn of the loop may take either.
        self.empty_choice = False

    def chars(self, ranges: Ranges) -> Part:
        p = self.auto.position(_case_folded(ranges) if self.ignore_case else ranges)
        return {p}, {p}, False

    def items(self, items: Iterable[tuple[object, object]]) -> Part:
        return _sequence(self.auto, (self.item(op, av) for op, av in items))

    def item(self, op: object, av: object) -> Part:
        if op is sre_parse.LITERAL:
            return self.chars(((av, av),))
        if op is sre_parse.NOT_LITERAL:
            return self.chars(_complement(((av, av),)))
        if op is sre_parse.ANY:
            return self.chars(_complement(((10, 10),)))
        if op is sre_parse.IN:
            return self.chars(self.char_class(av))
        if op is sre_parse.BRANCH:
            parts = [self.items(branch) for branch in av[1]]
            if self.looping and sum(p[2] for p in parts) > 1:
                self.empty_choice = True
            return (
                set().union(*(p[0] for p in parts)),
                set().union(*(p[1] for p in parts)),
                any(p[2] for p in parts),
            )
        if op is sre_parse.SUBPATTERN:
            flags = av[1]
            outer = self.ignore_case
            self.ignore_case = bool(flags & sre_parse.SRE_FLAG_IGNORECASE) or outer
            try:
                return self.items(av[-1])
            finally:
                self.ignore_case = outer
        if op in REPEATS:
            return self.repeat(*av)
        if getattr(sre_parse, "ATOMIC_GROUP", None) is op:
            return self.items(av)
        # Anchors, look-arounds, back-references: no character of their own (the automaton
        # library refuses the last two itself).
        return EMPTY

    def char_class(self, items: list[tuple[object, object]]) -> Ranges:
        pairs: list[tuple[int, int]] = []
        negate = False
        for op, av in items:
            if op is sre_parse.NEGATE:
                negate = True
            elif op is sre_parse.LITERAL:
                pairs.append((av, av))
            elif op is sre_parse.RANGE:
                pairs.append(av)
            elif op is sre_parse.CATEGORY:
                pairs += CATEGORIES.get(av, ((0, TOP),))
            else:  # an unusual item: every character, which can only overstate
                pairs.append((0, TOP))
        ranges = _ranges(pairs)
        return _complement(ranges) if negate else ranges

    def repeat(self, low: int, high: int, body: list) -> Part:
        for count in (low, high):
            if count != UNBOUNDED and count > MAX_REPEAT_COUNT:
                raise PatternTooLarge(
                    f"a repetition count of {count:,} is more than {MAX_REPEAT_COUNT:,}, the "
                    "most a pattern may ask"
                )
        start = len(self.auto.chars)
        looping = high == UNBOUNDED or (self.collapse and high >= 2 and low < high)
        if looping and self.collapse:
            self.looping += 1
            try:
                first, last, nullable = self.items(body)
            finally:
                self.looping -= 1
            self.auto.link(last, first)
            self.loops.append(set(range(start, len(self.auto.chars))))
            return first, last, nullable or low == 0
        # Copies of a choice multiply it: (a|a){30} is 2^30 ways, as a loop's turns are.
        counted = self.collapse and high >= 2
        self.looping += counted
        try:
            copies = [self.items(body) for _ in range(max(low, 1))]
            if looping:
                # The last copy loops: X{2,} is X X+.
                first, last, _ = copies[-1]
                self.auto.link(last, first)
            else:
                copies += [self.items(body) for _ in range(high - max(low, 1))]
        finally:
            self.looping -= counted
        # The copies past the least count are optional.
        parts = [(f, last, n or k >= low) for k, (f, last, n) in enumerate(copies)]
        return _sequence(self.auto, parts)


def _classes(chars: list[Ranges]) -> list[tuple[int, int]]:
    """The alphabet cut where any position's class starts or ends: each piece is all in or
    all out of every position's class."""
    cuts = {0, TOP + 1}
    for ranges in chars:
        for low, high in ranges:
            cuts |= {low, high + 1}
    ordered = sorted(cuts)
    return list(zip(ordered, [c - 1 for c in ordered[1:]], strict=False))


def _members(chars: list[Ranges], classes: list[tuple[int, int]]) -> list[frozenset[int]]:
    """For each position, the alphabet pieces (by index) its class holds."""
    starts = [low for low, _ in classes]
    out = []
    for ranges in chars:
        held = set()
        for low, high in ranges:
            k = _index(starts, low)
            while k < len(classes) and classes[k][1] <= high:
                held.add(k)
                k += 1
        out.append(frozenset(held))
    return out


def _index(starts: list[int], value: int) -> int:
    return bisect.bisect_left(starts, value)


def _letters(classes: list[tuple[int, int]], held: Iterable[int]) -> float:
    """The share of a-z among the alphabet pieces `held`."""
    pieces = (classes[k] for k in held)
    return sum(max(0, min(high, 122) - max(low, 97) + 1) for low, high in pieces) / 26


def _states(auto: _Glushkov, first: set[int], members: list[frozenset[int]], classes) -> None:
    """The DFA's subset construction, refused past MAX_STATES (or MAX_LETTER_STATES)."""
    start: frozenset[int] = frozenset({-1})
    seen = {start}
    todo = [start]
    letters = 0.0
    work = 0
    while todo:
        state = todo.pop()
        work += sum(len(auto.follow[p]) if p >= 0 else len(first) for p in state)
        if work > MAX_WORK:
            raise PatternTooLarge(TOO_INTRICATE)
        nexts = set().union(*(auto.follow[p] if p >= 0 else first for p in state))
        moves: dict[int, set[int]] = {}
        for q in nexts:
            for k in members[q]:
                moves.setdefault(k, set()).add(q)
        letters += _letters(classes, moves)
        if letters > MAX_LETTER_STATES:
            raise PatternTooLarge(
                f"its automaton lets letters through at more than {MAX_LETTER_STATES} states "
                "(each takes most of a vocabulary's tokens into its table), the most a pattern "
                "may; bound long runs of free text more tightly, e.g. [a-z ]{0,100}"
            )
        for target in {frozenset(t) for t in moves.values()}:
            if target not in seen:
                seen.add(target)
                if len(seen) > MAX_STATES:
                    raise PatternTooLarge(
                        f"its automaton has more than {MAX_STATES:,} states, the most a pattern "
                        "may have (a class repeated after an open repetition, as in "
                        "[ab]*a[ab]{20}, doubles them at each step)"
                    )
                todo.append(target)


def _ambiguous(auto: _Glushkov, loops: list[set[int]], members: list[frozenset[int]]) -> bool:
    """Whether some text can be read along two different paths that leave a position and
    come back to it, inside one repetition: a backtracking matcher such as `re` may then try
    exponentially many paths on a text that does not match. Two such paths are one step
    that the syntax reaches two ways, on a cycle (`(a+)+`), or (Weber and Seidl's criterion)
    a strongly connected part of the automaton's product with itself that holds a pair
    (p, p) and a pair (p, q) with p != q (`(a|a)*`, `(\\w+\\s?)*`)."""
    for body in loops:
        if len(body) > MAX_AMBIGUITY_POSITIONS:
            raise PatternTooLarge(TOO_INTRICATE)
        inside = {p: [q for q in auto.follow[p] if q in body] for p in body}
        cyclic = {node for part in _components(list(inside), inside) for node in part}
        if any(
            p in cyclic and q in cyclic and auto.follow[p][q] > 1 for p in body for q in inside[p]
        ):
            return True
        pairs = [(p, q) for p in body for q in body if members[p] & members[q]]
        if sum(len(inside[p]) * len(inside[q]) for p, q in pairs) > MAX_PRODUCT_EDGES:
            raise PatternTooLarge(TOO_INTRICATE)
        edges: dict[tuple[int, int], list[tuple[int, int]]] = {
            (p, q): [(a, b) for a in inside[p] for b in inside[q] if members[a] & members[b]]
            for p, q in pairs
        }
        for component in _components(list(edges), edges):
            if any(p == q for p, q in component) and any(p != q for p, q in component):
                return True
    return False


def _components(nodes, edges) -> list[list]:
    """Strongly connected components (Tarjan's, without recursion) of more than one node or
    with a self-loop."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    found: list[list] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(component)
    return found


@functools.lru_cache(maxsize=256)
def pattern_problem(pattern: str, backtracked: bool = True) -> str | None:
    """Why `pattern` is refused (None: it is not): past a size limit, or, where Python's `re`
    judges texts by it (`backtracked`), ambiguous enough to take exponential time."""
    try:
        tree = sre_parse.parse(pattern)
    except RecursionError:
        return "its groups are nested deeper than Python's re (the judge) reads"
    except Exception:  # re.compile's own check reports a bad pattern, in its words
        return None
    builder = _Builder()
    try:
        first, _, _ = builder.items(list(tree))
        auto = builder.auto
        classes = _classes(auto.chars)
        _states(auto, first, _members(auto.chars, classes), classes)
        if not backtracked:
            return None
        loops = _Builder(collapse=True)
        loops.items(list(tree))
        members = _members(loops.auto.chars, _classes(loops.auto.chars))
    except PatternTooLarge as exc:
        return str(exc)
    except RecursionError:
        return "it is nested too deeply"
    try:
        ambiguous = loops.empty_choice or _ambiguous(loops.auto, loops.loops, members)
    except PatternTooLarge as exc:
        return str(exc)
    if ambiguous:
        return (
            "inside a repetition, part of it can match one text in many ways (as (a+)+ and "
            "(a|a)* do), which Python's re (the judge) tries one by one on a text that does "
            "not match; write it so that each character has one place, e.g. a+ for (a+)+"
        )
    return None


def may_read(pattern: str, code: int) -> bool:
    """Whether some character class of `pattern` admits the character `code` (categories
    such as `\\w` count every non-ASCII character in): True also where Python's parser cannot
    read the pattern or it is past the limits (it may)."""
    try:
        builder = _Builder()
        builder.items(list(sre_parse.parse(pattern)))
    except Exception:  # unreadable, past the limits, nested too deeply: it may
        return True
    for ranges in builder.auto.chars:
        k = bisect.bisect_right(ranges, (code, TOP)) - 1
        if k >= 0 and ranges[k][0] <= code <= ranges[k][1]:
            return True
    return False
