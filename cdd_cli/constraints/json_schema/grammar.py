"""JSON's text as regular expressions: its tokens, the writings of its punctuation and
whitespace (`WRITINGS`), a value written exactly (`literal`), and the regexes of the string
formats cdd writes (`FORMATS`). Every other module of the compiler writes its patterns from
these."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

SPACE = "[ ]?"
CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])'
STRING = f'"{CHAR}*"'
INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
BOOLEAN = "(?:true|false)"
NULL = "null"
# A character a JSON string holds as it is (no escape), and the ones it does not.
PLAIN = r'[^"\\\x00-\x1f]'
UNWRITTEN_CHARACTERS = {'"', "\\", *map(chr, range(0x20))}
SCALAR = f"(?:{STRING}|{NUMBER}|{BOOLEAN}|{NULL})"


@dataclass(frozen=True)
class Writing:
    """How the patterns write JSON's punctuation, with the whitespace they allow around it."""

    comma: str
    colon: str
    open_object: str
    close_object: str
    open_array: str
    close_array: str
    around: str  # before and after the whole value


# `whitespace: compact` (the default): one optional space after each `,` and `:`, nothing
# else (what `json.dumps` writes, with or without `separators=(",", ":")`). `flexible`:
# before and after each `{ } [ ] , :` and the whole value, at most one space, or one line
# break and then any spaces and tabs (an indentation: what `json.dumps(..., indent=2)`
# writes); bounded so, each place costs the automaton two states, not a loop of any
# whitespace.
FLEXIBLE_SPACE = r"(?:[ ]|\n[ \t]*)?"
WRITINGS = {
    "compact": Writing(f",{SPACE}", f":{SPACE}", r"\{", r"\}", r"\[", r"\]", ""),
    "flexible": Writing(
        f"{FLEXIBLE_SPACE},{FLEXIBLE_SPACE}",
        f"{FLEXIBLE_SPACE}:{FLEXIBLE_SPACE}",
        rf"\{{{FLEXIBLE_SPACE}",
        rf"{FLEXIBLE_SPACE}\}}",
        rf"\[{FLEXIBLE_SPACE}",
        rf"{FLEXIBLE_SPACE}\]",
        FLEXIBLE_SPACE,
    ),
}
COMPACT = WRITINGS["compact"]


# An instance of the schema `true`: any JSON value, nested at most one deep (an array or
# object of scalars): deeper ones make every schema with a `{}` in it past the automaton's
# limits (`pattern_limits.py`).
@functools.lru_cache(maxsize=4)
def any_value(w: Writing, depth: int = 1) -> str:
    if depth == 0:
        return SCALAR
    inner = any_value(w, depth - 1)
    return (
        f"(?:{SCALAR}|{w.open_array}(?:{inner}(?:{w.comma}{inner})*)?{w.close_array}"
        f"|{w.open_object}(?:{STRING}{w.colon}{inner}(?:{w.comma}{STRING}{w.colon}{inner})*)?"
        f"{w.close_object})"
    )


def strip_anchors(pattern: str) -> str:
    """A pattern without a leading `^` and trailing `$` (the automaton matches whole)."""
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1]
    return pattern


def literal(value: Any, w: Writing = COMPACT) -> str:
    """A JSON value exactly (an `enum` or `const` value, a property's name), an array's or
    object's punctuation written as `w` writes it (with its whitespace)."""
    if not isinstance(value, (dict, list)):
        return re.escape(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    if isinstance(value, list):
        items = w.comma.join(literal(v, w) for v in value)
        return w.open_array + items + w.close_array
    members = w.comma.join(f"{literal(k)}{w.colon}{literal(v, w)}" for k, v in value.items())
    return w.open_object + members + w.close_object


# ------------------------------------------------------------------------------------------
# The formats cdd writes, each a regex of the string's text: a subset of what the format
# allows (duration: all of it); the judge (`formats.py`) checks the whole format exactly.

DAY = "(?:0[1-9]|1[0-9]|2[0-8])"
MONTH_DAY = rf"(?:0[13578]|1[02])-(?:{DAY}|29|30|31)|(?:0[469]|11)-(?:{DAY}|29|30)|02-{DAY}"
DATE = rf"[1-9][0-9]{{3}}-(?:{MONTH_DAY})"
HOUR = "(?:[01][0-9]|2[0-3])"
TIME = rf"{HOUR}:[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-]{HOUR}:[0-5][0-9])"
FORMATS = {
    "date": DATE,
    "time": TIME,
    "date-time": f"{DATE}T{TIME}",
    "uuid": "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    # 1 to 3 dot-separated atoms (never two dots running: `a..b@x.io` is no address).
    "email": r"[a-z0-9][a-z0-9_+-]{0,15}(?:\.[a-z0-9][a-z0-9_+-]{0,15}){0,2}"
    r"@[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?(?:\.[a-z]{2,6}){1,2}",
    "ipv4": r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
    r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
}


def _host_label(most: int) -> str:
    """A host name label of 1 to `most` lower-case letters, digits and inner hyphens, its
    third character no hyphen (so never the reserved `??--` form of an IDNA A-label)."""
    return f"[a-z0-9](?:[a-z0-9]|[a-z0-9-][a-z0-9](?:[a-z0-9-]{{0,{most - 4}}}[a-z0-9])?)?"


# Host names of 1 to 4 labels of at most 32 characters (131 in all, of the 253 allowed).
HOSTNAME = f"{_host_label(32)}(?:\\.{_host_label(32)}){{0,3}}"
# RFC 3339's duration (its appendix A), exactly.
DURATION = (
    "P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:T{time})?"
    "|T{time}|[0-9]+W)"
).format(time="(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)")
FORMATS.update(
    {
        "hostname": HOSTNAME,
        # The full form: eight groups, no `::` and no dotted quad.
        "ipv6": "[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){7}",
        # http(s), a host name, a path of unreserved characters, no query or fragment.
        "uri": f"https?://{HOSTNAME}(?:/[A-Za-z0-9._~-]+)*/?",
        "duration": DURATION,
    }
)
