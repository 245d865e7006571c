"""What of Python's regex syntax the token automaton's library cannot build, named as a user
knows it (`unsupported_syntax`), and how deep a pattern's groups nest (`group_depth`): the
library refuses both in its own words ("error building NFA"), which say neither."""

from __future__ import annotations

try:  # Python 3.11 renamed the module; importing the old name there warns
    from re import _parser as sre_parse
except ImportError:  # Python 3.10
    import sre_parse  # type: ignore[no-redef]

# What the automaton library cannot build (its syntax is the Rust `regex` crate's), by the
# name a user knows it by.
UNBUILDABLE = {
    sre_parse.ASSERT: "look-arounds ((?=...), (?!...), (?<=...), (?<!...)) are not supported",
    sre_parse.ASSERT_NOT: "look-arounds ((?=...), (?!...), (?<=...), (?<!...)) are not supported",
    sre_parse.GROUPREF: "back-references (\\1, (?P=name)) are not supported",
    sre_parse.GROUPREF_EXISTS: "conditionals ((?(1)...|...)) are not supported",
}
BOUNDARIES = {sre_parse.AT_BOUNDARY, sre_parse.AT_NON_BOUNDARY}


def unsupported_syntax(pattern: str) -> str | None:
    """What in `pattern` the automaton library cannot build, named (None: nothing found, or
    Python's parser cannot read it)."""
    try:
        todo = list(sre_parse.parse(pattern))
    except Exception:  # re.compile's own check reports a bad pattern, in its words
        return None
    while todo:
        op, av = todo.pop()
        if op in UNBUILDABLE:
            return UNBUILDABLE[op]
        if op is sre_parse.AT and av in BOUNDARIES:
            return "word boundaries (\\b, \\B) are not supported"
        for value in av if isinstance(av, (tuple, list)) else [av]:
            if isinstance(value, sre_parse.SubPattern):
                todo += list(value)
            elif isinstance(value, list):  # a branch's alternatives
                todo += [x for sub in value if isinstance(sub, sre_parse.SubPattern) for x in sub]
    return None


def group_depth(pattern: str) -> int:
    """How deep the pattern's parentheses nest (escaped ones and those in a class not
    counted)."""
    depth = deepest = 0
    escaped = in_class = False
    for c in pattern:
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
    return deepest
