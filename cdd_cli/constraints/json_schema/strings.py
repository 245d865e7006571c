"""Strings as regexes of their text: `format`, `pattern` (found anywhere in the text unless
anchored), the length bounds and excluded values, each a pattern of its own that the
others intersect; and the property names a `patternProperties` regex matches."""

from __future__ import annotations

import re
from collections.abc import Callable

from cdd_cli.constraints.json_schema.grammar import (
    CHAR,
    FORMATS,
    PLAIN,
    STRING,
    UNWRITTEN_CHARACTERS,
    strip_anchors,
)
from cdd_cli.constraints.json_schema.keywords import (
    EmptySchema,
    Member,
    Patterns,
    UnsupportedSchema,
    count_bounds,
    excluded_strings,
)
from cdd_cli.constraints.pattern_limits import pattern_problem
from cdd_cli.constraints.pattern_syntax import unsupported_syntax


def string_patterns(
    members: list[Member], where: str, pattern_safe: Callable[[str], bool] | None
) -> Patterns:
    """A string's keywords, each a pattern of the string's text: its format, each
    `pattern`, and the length bounds, merged (the tightest); the patterns intersect."""
    parts: list[str] = []
    for schema, at, _ in members:
        if "format" in schema:
            parts.append(f'"{FORMATS[schema["format"]]}"')
        if "pattern" in schema:
            parts.append(string_pattern(schema["pattern"], f"{at}/pattern", pattern_safe))
    low, high = count_bounds(members, "minLength", "maxLength")
    if high is not None and high < low:
        raise EmptySchema(f"{where}: maxLength {high} < minLength {low}")
    if low > 0 or high is not None:
        parts.append(f'"{CHAR}{{{low},{"" if high is None else high}}}"')
    excluded = [v for schema, _, _ in members for v in excluded_strings(schema.get("not"))]
    if excluded:
        parts.append(other_string(excluded))
    return tuple(dict.fromkeys(parts)) or (STRING,)


def string_pattern(pattern: str, where: str, pattern_safe: Callable[[str], bool] | None) -> str:
    """The strings `pattern` is found in (searched, as the standard says: where it is not
    anchored by `^` or `$`, any characters before or after)."""
    inner = strip_anchors(pattern)
    # jsonschema judges strings by it with Python's re (which backtracks), and
    # `pattern_safe` builds its automaton: its limits first.
    problem = pattern_problem(inner)
    if problem:
        raise UnsupportedSchema(f"{where}: {problem}")
    unbuildable = unsupported_syntax(inner)
    if unbuildable:
        raise UnsupportedSchema(f"{where}: {unbuildable} (cdd builds an automaton of it)")
    if pattern_safe is not None and not pattern_safe(inner):
        raise UnsupportedSchema(f"{where}: can match a quote, backslash or control character")
    return f'"{searched(pattern, inner, CHAR)}"'


def key_pattern(regex: str, pattern_safe: Callable[[str], bool]) -> str | None:
    """The names a `patternProperties` regex matches (searched, as the standard says),
    written without escapes; None where the regex may match a character that needs one."""
    inner = strip_anchors(regex)
    if pattern_problem(inner) or not pattern_safe(inner):
        return None
    return searched(regex, inner, PLAIN)


def searched(pattern: str, inner: str, character: str) -> str:
    """Texts `pattern` is found in: `inner` (the pattern without its anchors) with any
    `character`s before it where the pattern does not start with `^`, after it where it
    does not end with `$`."""
    before = "" if pattern.startswith("^") else f"{character}*"
    after = "" if pattern.endswith("$") and not pattern.endswith("\\$") else f"{character}*"
    return f"{before}(?:{inner}){after}"


def other_string(excluded: list[str]) -> str:
    """A JSON string (written without escapes) whose text is none of `excluded`."""
    return f'"{_other_text(excluded)}"'


def _other_text(excluded: list[str]) -> str:
    """Texts of unescaped JSON string characters that are none of `excluded`: by the trie
    of the excluded texts, each text leaves it at the first character where it differs,
    or ends at a node no excluded text ends at. Built and written without recursion, in
    time linear in the texts' length (an excluded text may be longer than Python's
    recursion limit)."""
    # The trie's nodes, breadth first (a node's number: its place in `nodes`): the texts
    # under it, whether one ends there, its children by character.
    nodes = [(0, list(excluded))]
    ends: list[bool] = []
    children: list[list[tuple[str, int]]] = []
    for depth, words in nodes:
        ends.append(any(len(w) == depth for w in words))
        by_next: dict[str, list[str]] = {}
        for w in words:
            if len(w) > depth and w[depth] not in UNWRITTEN_CHARACTERS:
                by_next.setdefault(w[depth], []).append(w)
        children.append([])
        for c in sorted(by_next):
            children[-1].append((c, len(nodes)))
            nodes.append((depth + 1, by_next[c]))
    # Written as nested groups: each node, "(?:" its alternatives ")", the children inside.
    out: list[str] = []
    stack: list[str | int] = [0]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        parts: list[list[str | int]] = [] if ends[item] else [["(?:)"]]
        if children[item]:
            other = "".join(re.escape(c) for c, _ in children[item])
            parts.append([rf'[^{other}"\\\x00-\x1f]{PLAIN}*'])
            parts += [[re.escape(c), child] for c, child in children[item]]
        else:
            parts.append([f"{PLAIN}+"])
        sequence: list[str | int] = ["(?:"]
        for k, part in enumerate(parts):
            sequence += ["|", *part] if k else part
        sequence.append(")")
        stack += reversed(sequence)
    return "".join(out)
