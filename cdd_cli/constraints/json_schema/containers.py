"""Regexes of objects and arrays written from their parts' regexes (a property's `"name":
value`, an item), and the union of several patterns' intersections (`union`, `pick`): how
the compiler's parts become one pattern, or several that intersect."""

from __future__ import annotations

import itertools
import math

from cdd_cli.constraints.json_schema.grammar import COMPACT, Writing
from cdd_cli.constraints.json_schema.keywords import MAX_PATTERNS, Patterns, UnsupportedSchema


def pick(patterns: Patterns, i: int) -> str:
    """The i-th pattern of a part, or its first past its count: X1 stands for X1 ∩ X1, so a
    part of fewer patterns keeps its language in every copy of the whole."""
    return patterns[i] if i < len(patterns) else patterns[0]


def union(options: list[Patterns], where: str) -> Patterns:
    """The union of intersections, as an intersection of unions (distributed: (A1 ∩ A2) | B
    is (A1 | B) ∩ (A2 | B)), one union for each way to pick a pattern of each option."""
    count = math.prod(len(o) for o in options)
    if count > MAX_PATTERNS:
        raise UnsupportedSchema(
            f"{where}: its branches take {count} patterns to intersect, more than "
            f"{MAX_PATTERNS}, the most a schema may"
        )
    out = []
    for picked in itertools.product(*options):
        alternatives = list(dict.fromkeys(picked))
        out.append(
            alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"
        )
    return tuple(dict.fromkeys(out))


# The most optional properties whose combinations `object_pattern` spells out one by one (where
# minProperties, maxProperties or dependentRequired limit them): 2**12 branches.
MAX_OPTIONAL_COMBINED = 12


def object_pattern(
    members: list[tuple[str, bool, str]],
    extra: str | None,
    low: int,
    high: int | None,
    dependent: dict[str, set[str]],
    where: str,
    w: Writing = COMPACT,
) -> str | None:
    """An object of these members (text, required, name) in this order, each optional one
    where the path takes it, then any number of `extra` members (None: none); with between
    `low` and `high` members, and every name's `dependent` names where it is written.
    None: no object meets them. Extra members count towards `low` one at most: two of them
    may repeat a name, which a reader takes as one."""

    def extras(count: int, written: bool) -> str | None:
        least = max(0, low - count)
        most = None if high is None else high - count
        if (most is not None and most < 0) or least > 1 or (least and extra is None):
            return None
        if extra is None or most == 0:
            return ""
        upto = "" if most is None else most - 1
        if written:
            return f"(?:{w.comma}{extra}){{{least},{'' if most is None else most}}}"
        body = f"{extra}(?:{w.comma}{extra}){{0,{upto}}}"
        return body if least else f"(?:{body})?"

    if low == 0 and high is None and not dependent:
        # After(i): the members from i on, once something has been written (each led by a
        # comma); Some(i): the same where at least one is written (the first, no comma).
        def after(i: int) -> str:
            return "".join(
                f"{w.comma}{text}" if needed else f"(?:{w.comma}{text})?"
                for text, needed, _ in members[i:]
            )

        def some(i: int) -> str | None:
            if i == len(members):
                return None
            text, needed, _ = members[i]
            if needed:
                return text + after(i + 1)
            rest = some(i + 1)
            return f"(?:{text}{after(i + 1)}|{rest})" if rest else text + after(i + 1)

        listed, then, alone = some(0), extras(0, True), extras(0, False)
        if listed is None:
            body = alone
        elif any(needed for _, needed, _ in members):
            body = listed + then
        else:
            body = f"(?:{listed}{then}|{alone})" if alone else f"(?:{listed}{then})?"
        return w.open_object + body + w.close_object

    optional = sum(not needed for _, needed, _ in members)
    if optional > MAX_OPTIONAL_COMBINED:
        raise UnsupportedSchema(
            f"{where}: {optional} optional properties under minProperties/maxProperties/"
            f"dependentRequired, more than {MAX_OPTIONAL_COMBINED}, the most cdd combines"
        )

    def walk(i: int, present: frozenset[str]) -> str | None:
        if i == len(members):
            if any(name in present and not needs <= present for name, needs in dependent.items()):
                return None
            return extras(len(present), bool(present))
        text, needed, name = members[i]
        lead = w.comma if present else ""
        options = []
        taken = walk(i + 1, present | {name})
        if taken is not None:
            options.append(lead + text + taken)
        if not needed:
            skipped = walk(i + 1, present)
            if skipped is not None:
                options.append(skipped)
        if not options:
            return None
        return options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"

    body = walk(0, frozenset())
    return None if body is None else w.open_object + body + w.close_object


def array_pattern(
    slots: list[str], item: str | None, low: int, high: int | None, w: Writing = COMPACT
) -> str:
    """An array of the `slots` (the first items, one pattern each) and then `item`s (None:
    no more), between `low` and `high` items."""

    def rest(j: int) -> str:
        if high is not None and j >= high:
            return ""
        lead = w.comma if j else ""
        if j >= len(slots):
            if item is None:
                return ""
            least = max(low - j, 0)
            most = "" if high is None else high - j
            if j:
                return f"(?:{w.comma}{item}){{{least},{most}}}"
            upto = "" if high is None else high - 1
            body = f"{item}(?:{w.comma}{item}){{{max(least - 1, 0)},{upto}}}"
            return body if least else f"(?:{body})?"
        body = lead + slots[j] + rest(j + 1)
        return body if j < low else f"(?:{body})?"

    return w.open_array + rest(0) + w.close_array


def containing_pattern(contained: str, least: int, other: str, w: Writing = COMPACT) -> str:
    """Arrays with at least `least` items matching `contained`, the others `other`."""
    others = f"(?:{other}{w.comma})*"
    more = f"(?:{w.comma}{other})*"
    body = others + contained + f"(?:{more}{w.comma}{contained}){{{least - 1}}}" + more
    return w.open_array + body + w.close_array
