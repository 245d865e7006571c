"""A JSON Schema written as regular expressions whose every common match is a valid instance.

The patterns are what the token automaton is built from (`automaton.py`: one automaton each,
their product where there are several); the judge is the `jsonschema` package itself, with
exact checks of the formats cdd writes (`format_checker`). The patterns describe a *subset*
of the valid instances, in one writing convention:

- compact JSON: no whitespace except one optional space after each `,` and `:` (what
  `json.dumps` writes by default, and what `separators=(",", ":")` writes);
- an object's properties in the order the schema lists them, the required ones always, the
  optional ones where the path takes them; no other properties (`additionalProperties` is
  never needed); an object with no `properties` is `{}`;
- strings without `\\u` escapes; `format` date (years 1000-9999, February's days 1-28),
  time, date-time, uuid, email or ipv4; `pattern` (a regex the string's characters must
  match whole, anchors allowed) when it cannot match a quote, backslash or control character;
- integers with any `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum`; numbers
  with such bounds where the bounds are whole numbers (written without exponent then);
- arrays of `items` with `minItems` / `maxItems` (no `items`: scalar values);
- `enum`, `const`, `anyOf`, `allOf`, a `type` list, `$ref` to `#/$defs/...` or
  `#/definitions/...` (not recursive); a schema with no `type`: the types its keywords apply
  to (`minimum`: numbers; `properties`: objects), a scalar where they name none.

Every keyword beside another is enforced, none is dropped: keywords of one kind merge
exactly (the tightest bounds, every `required`, each property under all its schemas);
`enum` and `const` keep the values the whole schema accepts (the validator judges each);
an `anyOf` beside other keywords is the union of its branches each under them; what no
merge writes as one regex (two string `pattern`s, a `format` with a length) stays a pattern
of its own, and the patterns intersect. Any other keyword is refused, every one at once
with where it is (`unsupported`): a dropped keyword would let through instances the judge
rejects.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
from outlines_core import Index, Vocabulary

from cdd_cli.constraints.pattern_limits import pattern_problem
from cdd_cli.errors import InputError

ANNOTATIONS = {
    "$schema", "$id", "$comment", "title", "description", "examples", "default",
    "readOnly", "writeOnly", "deprecated", "$defs", "definitions",
}  # fmt: skip
SUPPORTED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
    "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "allOf", "$ref",
}  # fmt: skip

SPACE = "[ ]?"
CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])'
STRING = f'"{CHAR}*"'
INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
BOOLEAN = "(?:true|false)"
NULL = "null"
SCALAR = f"(?:{STRING}|{NUMBER}|{BOOLEAN}|{NULL})"
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
    "email": r"[a-z0-9](?:[a-z0-9._+-]{0,30}[a-z0-9])?@[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?"
    r"(?:\.[a-z]{2,6}){1,2}",
    "ipv4": r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
    r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
}
ANY_FRACTION, NONZERO_FRACTION, ZERO_FRACTION = (
    r"(?:\.[0-9]+)?",
    r"\.[0-9]*[1-9][0-9]*",
    r"(?:\.0+)?",
)


# A schema's size: its file, and its regex (the automaton's limits, pattern_limits.py, are
# checked on that regex before anything is built from it).
MAX_SCHEMA_BYTES = 1 << 20
MAX_REGEX_CHARACTERS = 100_000


class UnsupportedSchema(ValueError):
    """A schema (or part) the regex cannot describe; the message names the keyword and where."""


class EmptySchema(UnsupportedSchema):
    """A schema (or part) no instance in cdd's writing satisfies: its keywords contradict
    each other. An `anyOf` branch or an optional property that is empty is left out; the
    whole schema empty is refused."""


# Most patterns one schema may become: each is a token automaton, and the job's automaton is
# their product (`automaton.intersect`).
MAX_PATTERNS = 8
SCALAR_TYPES = ("string", "number", "boolean", "null")
TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")
# Keywords that apply to one type only; a schema without `type` is written as the types its
# keywords name (a scalar where it names none), each with its own keywords.
TYPE_KEYWORDS = {
    "object": ("properties", "required", "additionalProperties"),
    "array": ("items", "minItems", "maxItems"),
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
}
# Keywords whose value holds subschemas: a schema under each, or a list or mapping of them.
SUBSCHEMA = {"items": "one", "additionalProperties": "one", "anyOf": "list", "allOf": "list"}
SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")

# One schema among those a value must satisfy together: the schema, where it is, and the
# `$ref`s followed to reach it (a `$ref` met again inside its own expansion is recursive).
Member = tuple[Any, str, tuple[str, ...]]
# Patterns whose intersection is a language (one pattern: the language itself).
Patterns = tuple[str, ...]


def schema_patterns(schema: dict, pattern_safe=None, validator: Any = None) -> Patterns:
    """The patterns of `schema`: every text all of them match whole is a valid instance.
    Most schemas are one pattern; sibling keywords or `allOf` branches that no single
    regex can join (two string `pattern`s, a `format` with a length) make several, which the
    automaton intersects. `pattern_safe(regex) -> bool` says whether a string `pattern` keeps
    to characters a JSON string holds unescaped (the caller asks the automaton);
    `validator`: a jsonschema validator of `schema` (its `enum` values are filtered by it)."""
    problems = unsupported(schema)
    if problems:
        named = "; ".join(problems[:12]) + ("; ..." if len(problems) > 12 else "")
        raise UnsupportedSchema(f"unsupported: {named}")
    if validator is None:
        cls = jsonschema.validators.validator_for(schema)
        validator = cls(schema, format_checker=format_checker(cls.FORMAT_CHECKER))
    return _Compiler(schema, pattern_safe, validator).patterns([(schema, "#", ())])


def schema_regex(schema: dict, pattern_safe=None) -> str:
    """The one regex of `schema`; UnsupportedSchema where it takes several (`schema_patterns`)."""
    patterns = schema_patterns(schema, pattern_safe)
    if len(patterns) > 1:
        raise UnsupportedSchema(
            f"#: the schema is the intersection of {len(patterns)} patterns, not one regex"
        )
    return patterns[0]


def unsupported(schema: Any, where: str = "#") -> list[str]:
    """Every keyword (and `format`) of `schema` and its subschemas that the regex cannot
    describe, each with where it is: all named at once, so a schema is fixed in one go."""
    if not isinstance(schema, dict):
        return []
    found = [
        f"keyword '{key}' at {where}"
        for key in schema
        if key not in SUPPORTED and key not in ANNOTATIONS
    ]
    fmt = schema.get("format")
    if fmt is not None and fmt not in FORMATS:
        found.append(f"format {fmt!r} at {where} (supported: {', '.join(FORMATS)})")
    for key, kind in SUBSCHEMA.items():
        if key not in schema:
            continue
        value = schema[key]
        if kind == "one":
            found += unsupported(value, f"{where}/{key}")
        elif isinstance(value, list):
            for k, sub in enumerate(value):
                found += unsupported(sub, f"{where}/{key}/{k}")
    for key in SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                found += unsupported(sub, f"{where}/{key}/{name}")
    return found


class _Compiler:
    """Writes the patterns of a value that must satisfy several schemas at once (`Member`s):
    an `allOf`'s branches, a `$ref`'s target with the keywords beside it, an `anyOf`'s branch
    with the schema around it. Keywords of one kind merge exactly (bounds: the tightest;
    `required`: all; `properties`: each property under all its schemas; `enum`: the values
    every schema accepts, by the validator); what no merge writes as one regex (two string
    `pattern`s) stays a separate pattern, and the patterns intersect. A pattern with several
    parts is the product of its parts' patterns over the same JSON: each value's text is
    delimited by the JSON around it, so `{"a": X1} ∩ {"a": X2}` is `{"a": X1 ∩ X2}`."""

    def __init__(self, root: dict, pattern_safe, validator: Any):
        self.root, self.pattern_safe, self.validator = root, pattern_safe, validator

    def patterns(self, members: list[Member]) -> Patterns:
        where = members[0][1] if members else "#"
        patterns = self.written(members)
        if len(patterns) > MAX_PATTERNS:
            raise UnsupportedSchema(
                f"{where}: it takes {len(patterns)} patterns to intersect, more than "
                f"{MAX_PATTERNS}, the most a schema may (anyOf branches that each intersect "
                "several multiply them)"
            )
        for regex in patterns:
            if len(regex) > MAX_REGEX_CHARACTERS:
                # `$ref`s that name a definition twice, nested, double the regex at each
                # level: stopped here, before it fills the memory.
                raise UnsupportedSchema(
                    f"{where}: its regex is longer than {MAX_REGEX_CHARACTERS:,} characters, "
                    "the most a schema may make"
                )
        return patterns

    def flattened(self, members: list[Member]) -> list[Member]:
        """The members with `true`/`{}` left out, `allOf` branches and `$ref` targets made
        members of their own, and each schema that had them kept without them."""
        out: list[Member] = []
        todo = list(members)
        while todo:
            schema, where, refs = todo.pop(0)
            if schema is True or schema == {}:
                continue
            if schema is False:
                raise EmptySchema(f"{where}: the schema false admits nothing")
            if not isinstance(schema, dict):
                raise UnsupportedSchema(f"{where}: a schema must be an object or a boolean")
            rest = dict(schema)
            if "$ref" in rest:
                target = rest.pop("$ref")
                todo.append((self.target(target, where, refs), str(target), (*refs, target)))
            if "allOf" in rest:
                branches = rest.pop("allOf")
                if not isinstance(branches, list) or not branches:
                    raise UnsupportedSchema(f"{where}/allOf: must be a non-empty list")
                todo += [(b, f"{where}/allOf/{k}", refs) for k, b in enumerate(branches)]
            if rest.keys() - ANNOTATIONS:
                out.append((rest, where, refs))
        return out

    def target(self, target: Any, where: str, refs: tuple[str, ...]) -> Any:
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", str(target))
        if not match:
            raise UnsupportedSchema(f"{where}: '$ref' {target!r} (only #/$defs/NAME)")
        if target in refs:
            raise UnsupportedSchema(f"{where}: '$ref' {target!r} is recursive")
        found = self.root.get(match[1], {}).get(match[2])
        if found is None:
            raise UnsupportedSchema(f"{where}: '$ref' {target!r} is not defined")
        return found

    def written(self, members: list[Member]) -> Patterns:
        members = self.flattened(members)
        for k, (schema, _, _) in enumerate(members):
            if "anyOf" in schema:
                return self.any_of(members, k)
        if any("enum" in m[0] or "const" in m[0] for m in members):
            return self.enumerated(members)
        return self.typed(members)

    def any_of(self, members: list[Member], k: int) -> Patterns:
        """A value under an `anyOf` and other schemas: the union, over its branches, of the
        branch under all of them (a branch nothing satisfies is left out)."""
        schema, where, refs = members[k]
        branches = schema["anyOf"]
        if not isinstance(branches, list) or not branches:
            raise UnsupportedSchema(f"{where}/anyOf: must be a non-empty list")
        rest = {key: v for key, v in schema.items() if key != "anyOf"}
        others = [*members[:k], (rest, where, refs), *members[k + 1 :]]
        options: list[Patterns] = []
        empty: EmptySchema | None = None
        for j, branch in enumerate(branches):
            try:
                options.append(self.patterns([*others, (branch, f"{where}/anyOf/{j}", refs)]))
            except EmptySchema as exc:
                empty = exc
        if not options:
            raise EmptySchema(f"{where}/anyOf: no branch can be satisfied ({empty})")
        return _union(options, where)

    def enumerated(self, members: list[Member]) -> Patterns:
        """The values of the first `enum` or `const` that every member accepts: the
        validator judges each value under each member, so every keyword beside the
        enumeration holds, whatever it is."""
        schema, where, _ = next(m for m in members if "enum" in m[0] or "const" in m[0])
        if "const" in schema:
            values = [schema["const"]]
        else:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise UnsupportedSchema(f"{where}/enum: must be a non-empty list")
        judges = [self.validator.evolve(schema=m[0]) for m in members]
        kept = [v for v in values if all(j.is_valid(v) for j in judges)]
        if not kept:
            raise EmptySchema(f"{where}: no value of its enum or const satisfies the schema")
        literals = list(dict.fromkeys(_literal(v) for v in kept))
        return (literals[0] if len(literals) == 1 else "(?:" + "|".join(literals) + ")",)

    def typed(self, members: list[Member]) -> Patterns:
        where = members[0][1] if members else "#"
        stated = [m for m in members if "type" in m[0]]
        if stated:
            kinds = [t for t in TYPES if all(_admits(m[0]["type"], t, m[1]) for m in stated)]
            if "number" in kinds:
                kinds.remove("integer")  # the numbers hold the integers
        else:
            named = [
                t
                for t, keys in TYPE_KEYWORDS.items()
                if any(k in m[0] for m in members for k in keys)
            ]
            kinds = [t for t in TYPES if t in named] or list(SCALAR_TYPES)
        if not kinds:
            raise EmptySchema(f"{where}: its types have nothing in common")
        options: list[Patterns] = []
        empty: EmptySchema | None = None
        for kind in kinds:
            try:
                options.append(self.of_type(kind, members, where))
            except EmptySchema as exc:
                empty = exc
        if not options:
            assert empty is not None
            raise empty
        return _union(options, where)

    def of_type(self, kind: str, members: list[Member], where: str) -> Patterns:
        if kind == "object":
            return self.object(members, where)
        if kind == "array":
            return self.array(members, where)
        if kind == "string":
            return self.string(members, where)
        if kind in ("integer", "number"):
            return (_number(members, kind == "integer", where),)
        return (BOOLEAN if kind == "boolean" else NULL,)

    def object(self, members: list[Member], where: str) -> Patterns:
        """Each property under the schemas of every member that lists it (and the
        `additionalProperties` schema of every member that does not); a property a member
        forbids (`additionalProperties: false`) is left out, or, required, empties it."""
        subschemas: dict[str, list[Member]] = {}
        required: dict[str, None] = {}
        for schema, at, refs in members:
            properties = schema.get("properties", {})
            for name, sub in properties.items():
                subschemas.setdefault(name, []).append((sub, f"{at}/properties/{name}", refs))
            required.update(dict.fromkeys(schema.get("required", [])))
        for name in required:
            subschemas.setdefault(name, [])
        written: list[tuple[str, Patterns, bool]] = []
        for name, subs in subschemas.items():
            needed = name in required
            allowed = True
            for schema, at, refs in members:
                if name in schema.get("properties", {}):
                    continue
                extra = schema.get("additionalProperties", True)
                if extra is False:
                    allowed = False
                elif extra is not True:
                    subs = [*subs, (extra, f"{at}/additionalProperties", refs)]
            try:
                if not allowed:
                    raise EmptySchema(f"{where}: required {name!r} is not allowed")
                value = self.patterns(subs or [(True, f"{where}/properties/{name}", ())])
            except EmptySchema:
                if needed:
                    raise
                continue
            written.append((f"{_literal(name)}:{SPACE}", value, needed))
        count = max([len(v) for _, v, _ in written] or [1])
        return tuple(
            _object([(key + _pick(value, i), needed) for key, value, needed in written])
            for i in range(count)
        )

    def array(self, members: list[Member], where: str) -> Patterns:
        items = [(m[0]["items"], f"{m[1]}/items", m[2]) for m in members if "items" in m[0]]
        low = max([m[0].get("minItems", 0) for m in members], default=0)
        highs = [m[0]["maxItems"] for m in members if "maxItems" in m[0]]
        high = min(highs) if highs else None
        if high is not None and high < low:
            raise EmptySchema(f"{where}: maxItems {high} < minItems {low}")
        if high == 0:
            return (r"\[\]",)
        try:
            item_patterns = self.patterns(items or [(True, f"{where}/items", ())])
        except EmptySchema:
            if low > 0:
                raise
            return (r"\[\]",)
        return tuple(_array(item, low, high) for item in item_patterns)

    def string(self, members: list[Member], where: str) -> Patterns:
        """A string's keywords, each a pattern of the string's text: its format, each
        `pattern`, and the length bounds, merged (the tightest); the patterns intersect."""
        parts: list[str] = []
        for schema, at, _ in members:
            if "format" in schema:
                parts.append(f'"{FORMATS[schema["format"]]}"')
            if "pattern" in schema:
                parts.append(self.string_pattern(schema["pattern"], f"{at}/pattern"))
        low = max([m[0].get("minLength", 0) for m in members], default=0)
        highs = [m[0]["maxLength"] for m in members if "maxLength" in m[0]]
        high = min(highs) if highs else None
        if high is not None and high < low:
            raise EmptySchema(f"{where}: maxLength {high} < minLength {low}")
        if low > 0 or high is not None:
            parts.append(f'"{CHAR}{{{low},{"" if high is None else high}}}"')
        return tuple(dict.fromkeys(parts)) or (STRING,)

    def string_pattern(self, pattern: str, where: str) -> str:
        inner = strip_anchors(pattern)
        # jsonschema judges strings by it with Python's re (which backtracks), and
        # `pattern_safe` builds its automaton: its limits first.
        problem = pattern_problem(inner)
        if problem:
            raise UnsupportedSchema(f"{where}: {problem}")
        if self.pattern_safe is not None and not self.pattern_safe(inner):
            raise UnsupportedSchema(f"{where}: can match a quote, backslash or control character")
        return f'"(?:{inner})"'


def _admits(stated: Any, kind: str, where: str) -> bool:
    """Whether a `type` keyword admits values of `kind` (a number type admits integers)."""
    names = stated if isinstance(stated, list) else [stated]
    for name in names:
        if name not in TYPES:
            raise UnsupportedSchema(f"{where}: unknown type {name!r}")
    return kind in names or (kind == "integer" and "number" in names)


def _pick(patterns: Patterns, i: int) -> str:
    """The i-th pattern of a part, or its first past its count: X1 stands for X1 ∩ X1, so a
    part of fewer patterns keeps its language in every copy of the whole."""
    return patterns[i] if i < len(patterns) else patterns[0]


def _union(options: list[Patterns], where: str) -> Patterns:
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


def _object(members: list[tuple[str, bool]]) -> str:
    """An object of these members (text, required) in this order, each optional one where
    the path takes it."""

    # After(i): the members from i on, once something has been written (each led by a
    # comma); First(i): the same before anything is (the first written has no comma).
    def after(i: int) -> str:
        return "".join(
            f",{SPACE}{text}" if needed else f"(?:,{SPACE}{text})?" for text, needed in members[i:]
        )

    def first(i: int) -> str:
        if i == len(members):
            return ""
        text, needed = members[i]
        if needed:
            return text + after(i + 1)
        return f"(?:{text}{after(i + 1)}|{first(i + 1)})"

    return r"\{" + first(0) + r"\}"


def _array(item: str, low: int, high: int | None) -> str:
    more = f"(?:,{SPACE}{item})"
    rest = f"{{{max(low - 1, 0)},{'' if high is None else high - 1}}}"
    body = f"{item}{more}{rest}"
    return r"\[" + (body if low > 0 else f"(?:{body})?") + r"\]"


def strip_anchors(pattern: str) -> str:
    """A pattern without a leading `^` and trailing `$` (the automaton matches whole)."""
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1]
    return pattern


def _literal(value) -> str:
    return re.escape(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _number(members: list[Member], integer: bool, where: str) -> str:
    """Numbers (or integers) within the tightest of every member's bounds."""
    bounds: dict[str, list] = {}
    for schema, at, _ in members:
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if key not in schema:
                continue
            value = schema[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UnsupportedSchema(f"{at}/{key}: must be a number (draft 6 and later)")
            if not math.isfinite(value):  # Python's json reads Infinity and NaN
                raise UnsupportedSchema(f"{at}/{key}: must be a finite number, got {value}")
            bounds.setdefault(key, []).append(value)
    if not bounds:
        return INTEGER if integer else NUMBER
    low, low_in = _bound(bounds, "minimum", "exclusiveMinimum", max)
    high, high_in = _bound(bounds, "maximum", "exclusiveMaximum", min)
    if integer:
        if low is not None:
            low = math.ceil(low) if low_in else math.floor(low) + 1
        if high is not None:
            high = math.floor(high) if high_in else math.ceil(high) - 1
        if low is not None and high is not None and low > high:
            raise EmptySchema(f"{where}: no integer lies between the bounds")
        return _signed(low, True, high, True, integer=True)
    for value in (low, high):
        if value is not None and value != int(value):
            raise UnsupportedSchema(
                f"{where}: number bounds must be whole numbers (or type integer)"
            )
    low = None if low is None else int(low)
    high = None if high is None else int(high)
    if (
        low is not None
        and high is not None
        and (low > high or (low == high and not (low_in and high_in)))
    ):
        raise EmptySchema(f"{where}: no number lies between the bounds")
    return _signed(low, low_in, high, high_in, integer=False)


def _bound(bounds: dict, inclusive: str, exclusive: str, tighter) -> tuple[float | None, bool]:
    options = [(v, True) for v in bounds.get(inclusive, [])]
    options += [(v, False) for v in bounds.get(exclusive, [])]
    if not options:
        return None, True
    best = tighter(v for v, _ in options)
    # At a tie the exclusive bound is the tighter one.
    return best, all(inside for v, inside in options if v == best)


def _signed(low, low_in: bool, high, high_in: bool, integer: bool) -> str:
    """Numbers in the range (None: unbounded) as the union of a non-negative part and a
    negative part written as '-' and a magnitude."""
    parts = []
    if high is None or high > 0 or (high == 0 and high_in):
        m_low, m_low_in = (0, True) if low is None or low < 0 else (low, low_in)
        parts.append(_magnitude(m_low, m_low_in, high, high_in, integer))
    if low is None or low < 0:
        if high is None or high >= 0:
            m_low, m_low_in = 0, False  # zero itself belongs to the non-negative part
        else:
            m_low, m_low_in = -high, high_in
        parts.append(
            "-" + _magnitude(m_low, m_low_in, None if low is None else -low, low_in, integer)
        )
    parts = [p for p in parts if p not in ("", "-")]
    if not parts:
        return "(?!)"
    return "(?:" + "|".join(parts) + ")"


def _magnitude(low: int, low_in: bool, high, high_in: bool, integer: bool) -> str:
    """Non-negative numbers m with low <(=) m <(=) high (high None: unbounded), integer bounds."""
    if integer:
        first = low if low_in else low + 1
        last = None if high is None else (high if high_in else high - 1)
        if last is not None and first > last:
            return ""
        return _naturals(first, last)
    parts = []
    if high is not None and low == high:
        return f"{low}{ZERO_FRACTION}" if low_in and high_in else ""
    # The whole part k == low: any fraction, or only a non-zero one where low is excluded.
    parts.append(f"{low}{ANY_FRACTION if low_in else NONZERO_FRACTION}")
    inner_last = None if high is None else high - 1
    if inner_last is None or inner_last >= low + 1:
        parts.append(f"{_naturals(low + 1, inner_last)}{ANY_FRACTION}")
    if high is not None and high_in:
        parts.append(f"{high}{ZERO_FRACTION}")
    return "(?:" + "|".join(parts) + ")"


def _naturals(low: int, high: int | None) -> str:
    """Integers low..high (high None: unbounded) written without leading zeros."""
    parts = []
    digits = len(str(low))
    top = digits if high is None else len(str(high))
    for n in range(digits, top + 1):
        a = max(low, 0 if n == 1 else 10 ** (n - 1))
        b = 10**n - 1 if high is None else min(high, 10**n - 1)
        if a <= b:
            parts.append(_same_length(str(a), str(b)))
    if high is None:
        parts.append(f"[1-9][0-9]{{{digits},}}")
    return "(?:" + "|".join(parts) + ")"


def _same_length(low: str, high: str) -> str:
    """Digit strings of one length from low to high."""
    if low == high:
        return low
    if len(low) == 1:
        return f"[{low}-{high}]"
    if low[0] == high[0]:
        return low[0] + _same_length(low[1:], high[1:])
    k = len(low) - 1
    if low[1:] == "0" * k and high[1:] == "9" * k:
        return f"[{low[0]}-{high[0]}][0-9]{{{k}}}"
    parts = [low[0] + _same_length(low[1:], "9" * k)]
    if int(high[0]) - int(low[0]) > 1:
        parts.append(f"[{int(low[0]) + 1}-{int(high[0]) - 1}][0-9]{{{k}}}")
    parts.append(high[0] + _same_length("0" * k, high[1:]))
    return "(?:" + "|".join(parts) + ")"


@functools.lru_cache(maxsize=32)
def schema_text_patterns(schema_text: str) -> Patterns:
    """The patterns of a schema given as canonical JSON (`schema_patterns`); InputError
    naming what cannot be compiled."""
    try:
        patterns = schema_patterns(json.loads(schema_text), pattern_safe=json_string_safe)
    except UnsupportedSchema as exc:
        raise InputError(f"json_schema: {exc}") from None
    except RecursionError:
        raise InputError("json_schema: the schema is nested too deeply") from None
    # The judge is jsonschema, not re: only the automaton's limits apply to the whole regex.
    for regex in patterns:
        problem = pattern_problem(regex, backtracked=False)
        if problem:
            raise InputError(f"json_schema: the schema's regex is too large: {problem}")
    return patterns


def schema_pattern(schema_text: str) -> str:
    """The one regex of a schema given as canonical JSON; InputError where it is the
    intersection of several (`schema_text_patterns`)."""
    patterns = schema_text_patterns(schema_text)
    if len(patterns) > 1:
        raise InputError(
            f"json_schema: the schema is the intersection of {len(patterns)} patterns, not one "
            "regex"
        )
    return patterns[0]


# ------------------------------------------------------------------------------------------
# The judge's formats: exact checks of RFC 3339 (date, time, date-time), RFC 5321 (email),
# RFC 4122 (uuid) and dotted-quad ipv4, for every format cdd writes. jsonschema's own
# checker skips time and date-time unless rfc3339-validator is installed, and takes any text
# with an '@' for an e-mail address.

_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIME = re.compile(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_UUID = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL = re.compile(rf'{_ATOM}(?:\.{_ATOM})*|"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"')
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def is_date(text: str) -> bool:
    match = _DATE.fullmatch(text)
    if not match:
        return False
    year, month, day = map(int, match.groups())
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    return 1 <= month <= 12 and 1 <= day <= days[month - 1]


def is_time(text: str) -> bool:
    match = _TIME.fullmatch(text)
    if not match:
        return False
    hour, minute, second = map(int, match.groups()[:3])
    sign, off_hour, off_minute = match[4], int(match[5] or 0), int(match[6] or 0)
    if hour > 23 or minute > 59 or second > 60 or off_hour > 23 or off_minute > 59:
        return False
    if second == 60:  # a leap second: 23:59:60 in UTC, whatever the offset
        offset = (off_hour * 60 + off_minute) * (-1 if sign == "-" else 1)
        return (hour * 60 + minute - offset) % 1440 == 23 * 60 + 59
    return True


def is_date_time(text: str) -> bool:
    date, sep, time = text[:10], text[10:11], text[11:]
    return sep in ("T", "t") and is_date(date) and is_time(time)


def is_email(text: str) -> bool:
    local, at, domain = text.rpartition("@")
    if not at or len(local) > 64 or not _LOCAL.fullmatch(local):
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        if literal.startswith("IPv6:"):
            try:
                ipaddress.IPv6Address(literal[5:])
            except ValueError:
                return False
            return True
        return _IPV4.fullmatch(literal) is not None
    return len(domain) <= 253 and _DOMAIN.fullmatch(domain) is not None


STRICT_FORMATS = {
    "date": is_date,
    "time": is_time,
    "date-time": is_date_time,
    "email": is_email,
    "uuid": lambda text: _UUID.fullmatch(text) is not None,
    "ipv4": lambda text: _IPV4.fullmatch(text) is not None,
}


def format_checker(base: jsonschema.FormatChecker) -> jsonschema.FormatChecker:
    """`base` (a draft's format checker) with cdd's exact checks of the formats it writes;
    a value that is no string passes, as the standard says."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(base.checkers)
    for name, check in STRICT_FORMATS.items():
        checker.checkers[name] = (_strings_only(check), ())
    return checker


def _strings_only(check):
    return lambda value: not isinstance(value, str) or check(value)


@functools.lru_cache(maxsize=64)
def json_string_safe(pattern: str) -> bool:
    """Whether every match of `pattern` keeps to characters a JSON string holds unescaped
    (no quote, backslash or control character): the pattern's byte automaton, built by the
    same library, has no move on one of those bytes."""
    single_bytes = Vocabulary(256, {bytes([b]): [b] for b in range(256)})
    try:
        index = Index(pattern, single_bytes)
    except (ValueError, RuntimeError, TypeError):
        return False
    forbidden = {*range(0x20), ord('"'), ord("\\")}
    return not any(forbidden & moves.keys() for moves in index.get_transitions().values())


def load_schema(value: Any, where: str) -> tuple[str, str]:
    """A spec's `schema` (an inline mapping, or the path of a .json file) as canonical JSON,
    and where it came from; InputError naming what is wrong (unreadable, not a schema, or a
    keyword the projection does not support)."""
    source = "inline"
    if isinstance(value, str):
        path = Path(value).expanduser()
        if path.exists() and not path.is_file():  # a folder, or a pipe or device without end
            raise InputError(f"{where}: key 'schema': {value} is not a regular file")
        try:
            with path.open("rb") as f:
                data = f.read(MAX_SCHEMA_BYTES + 1)
            if len(data) > MAX_SCHEMA_BYTES:
                raise InputError(
                    f"{where}: key 'schema': {value} is larger than {MAX_SCHEMA_BYTES >> 20} MiB, "
                    "the most a schema file may be"
                )
            value = json.loads(data.decode("utf-8"))
        except OSError as exc:
            raise InputError(
                f"{where}: key 'schema': cannot read {value} ({exc.strerror})"
            ) from None
        except ValueError as exc:  # not UTF-8 or not JSON
            problem = " ".join(str(exc).split())[:120]
            raise InputError(f"{where}: key 'schema': {value} is not JSON ({problem})") from None
        except RecursionError:
            raise InputError(f"{where}: key 'schema': {value} is nested too deeply") from None
        source = path.name
    if not isinstance(value, dict):
        raise InputError(f"{where}: key 'schema' must be a mapping or a .json file")
    try:
        jsonschema.validators.validator_for(value).check_schema(value)
    except jsonschema.SchemaError as exc:
        raise InputError(
            f"{where}: key 'schema' is not a valid JSON Schema ({exc.message[:120]})"
        ) from None
    text = json.dumps(value, sort_keys=False, separators=(",", ":"))
    try:
        schema_text_patterns(text)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return text, source
