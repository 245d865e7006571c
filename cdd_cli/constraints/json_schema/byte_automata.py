"""Patterns read byte by byte, by the library the token automaton is built with: whether a
pattern keeps to the characters a JSON string holds unescaped (`json_string_safe`), and
whether two patterns share a match (`patterns_meet`)."""

from __future__ import annotations

import functools

from cdd_cli.constraints.automaton import Moves, pattern_moves

# The 256 single bytes, each a token of its own (the end of text: 256).
SINGLE_BYTES = {bytes([b]): [b] for b in range(256)}


@functools.lru_cache(maxsize=256)
def byte_automaton(pattern: str) -> Moves:
    """The byte automaton of `pattern` (built as the token automaton is, `pattern_moves`)."""
    return pattern_moves(pattern, SINGLE_BYTES, 256)


@functools.lru_cache(maxsize=64)
def json_string_safe(pattern: str) -> bool:
    """Whether every match of `pattern` keeps to characters a JSON string holds unescaped
    (no quote, backslash or control character): the pattern's byte automaton, built by the
    same library, has no move on one of those bytes."""
    try:
        index = byte_automaton(pattern)
    except (ValueError, RuntimeError, TypeError):
        return False
    forbidden = {*range(0x20), ord('"'), ord("\\")}
    return not any(forbidden & moves.keys() for moves in index.moves.values())


def patterns_meet(a: str, b: str) -> bool:
    """Whether some text matches both regexes whole: a walk of their byte automata's
    product (True where either cannot be built: they may)."""
    try:
        first, second = byte_automaton(a), byte_automaton(b)
    except (ValueError, RuntimeError, TypeError):
        return True
    moves_a, moves_b = first.moves, second.moves
    start = (first.start, second.start)
    seen, todo = {start}, [start]
    while todo:
        x, y = todo.pop()
        if x in first.final and y in second.final:
            return True
        for byte, x2 in moves_a.get(x, {}).items():
            y2 = moves_b.get(y, {}).get(byte)
            if y2 is not None and (x2, y2) not in seen:
                seen.add((x2, y2))
                todo.append((x2, y2))
    return False
