"""Regexes of objects and arrays written from their parts' regexes (a property's `"name":
value`, an item), and the union of several patterns' intersections (`union`, `pick`): how
the compiler's parts become one pattern, or several that intersect."""

from __future__ import annotations

import itertools
import math

from cdd_cli.constraints.json_schema.grammar import COMPACT, Writing
from cdd_cli.constraints.json_schema.keywords import (
    MAX_PATTERNS,
    MAX_REGEX_CHARACTERS,
    Patterns,
    UnsupportedSchema,
)


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
        # From the last member back: `after`, the members from here on once something has
        # been written (each led by a comma); `listed`, the same where at least one is
        # written (the first, no comma). Each optional member repeats those after it, so
        # the regex grows with the square of their number: stopped at its limit as it grows.
        after, listed = "", None
        for text, needed, _ in reversed(members):
            if needed:
                listed = text + after
            else:
                listed = f"(?:{text}{after}|{listed})" if listed else text + after
            if len(listed) > MAX_REGEX_CHARACTERS:
                raise UnsupportedSchema(_too_long(where, members))
            after = (f"{w.comma}{text}" if needed else f"(?:{w.comma}{text})?") + after
        then, alone = extras(0, True), extras(0, False)
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
        # The required members up to the next optional one in a row (a schema may list
        # thousands): only an optional member branches, and recurses.
        written = ""
        while i < len(members) and members[i][1]:
            text, _, name = members[i]
            written += (w.comma if present else "") + text
            present, i = present | {name}, i + 1
        if i == len(members):
            if any(name in present and not needs <= present for name, needs in dependent.items()):
                return None
            end = extras(len(present), bool(present))
            return None if end is None else written + end
        text, _, name = members[i]
        lead = w.comma if present else ""
        options = []
        taken = walk(i + 1, present | {name})
        if taken is not None:
            options.append(lead + text + taken)
        skipped = walk(i + 1, present)
        if skipped is not None:
            options.append(skipped)
        if not options:
            return None
        body = options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"
        if len(body) > MAX_REGEX_CHARACTERS:
            raise UnsupportedSchema(_too_long(where, members))
        return written + body

    body = walk(0, frozenset())
    return None if body is None else w.open_object + body + w.close_object


def array_pattern(
    slots: list[str], item: str | None, low: int, high: int | None, w: Writing = COMPACT
) -> str:
    """An array of the `slots` (the first items, one pattern each) and then `item`s (None:
    no more), between `low` and `high` items."""
    # From the end back: the items past the slots (or none past `high`), then each slot
    # before them, optional from `low` on.
    end = len(slots) if high is None else min(len(slots), high)
    if (high is not None and end >= high) or item is None:
        rest = ""
    else:
        least = max(low - end, 0)
        most = "" if high is None else high - end
        if end:
            rest = f"(?:{w.comma}{item}){{{least},{most}}}"
        else:
            upto = "" if high is None else high - 1
            body = f"{item}(?:{w.comma}{item}){{{max(least - 1, 0)},{upto}}}"
            rest = body if least else f"(?:{body})?"
    for j in reversed(range(end)):
        body = (w.comma if j else "") + slots[j] + rest
        rest = body if j < low else f"(?:{body})?"
    return w.open_array + rest + w.close_array


def containing_pattern(contained: str, least: int, other: str, w: Writing = COMPACT) -> str:
    """Arrays with at least `least` items matching `contained`, the others `other`."""
    others = f"(?:{other}{w.comma})*"
    more = f"(?:{w.comma}{other})*"
    body = others + contained + f"(?:{more}{w.comma}{contained}){{{least - 1}}}" + more
    return w.open_array + body + w.close_array


def _too_long(where: str, members: list[tuple[str, bool, str]]) -> str:
    optional = sum(not needed for _, needed, _ in members)
    return (
        f"{where}: its {len(members):,} properties ({optional:,} optional) make a regex longer "
        f"than {MAX_REGEX_CHARACTERS:,} characters, the most a schema may make (each optional "
        "property repeats the ones after it)"
    )
