"""A JSON Schema written as regular expressions whose every common match is a valid instance.

The patterns are what the token automaton is built from (`automaton.py`: one automaton each,
their product where there are several); the judge is the `jsonschema` package itself, with
exact checks of the formats cdd writes (`format_checker`). The patterns describe a *subset*
of the valid instances, in one writing convention:

- compact JSON: no whitespace except one optional space after each `,` and `:` (what
  `json.dumps` writes by default, and what `separators=(",", ":")` writes); or, with
  `whitespace="flexible"`, JSON's whitespace, bounded: before and after each `{ } [ ] , :`
  and the whole value, one space, or a line break and any spaces and tabs (`WRITINGS`);
- an object's properties in the order the schema lists them, the required ones always, the
  optional ones where the path takes them; no other properties (`additionalProperties` is
  never needed); an object with no `properties` is `{}`;
- strings without `\\u` escapes; `format` date (years 1000-9999, February's days 1-28),
  time, date-time, uuid, email (1-3 dot-separated atoms), ipv4, hostname (1-4 labels of at
  most 32 characters, no `??--` label), ipv6 (the full 8-group form), uri (`http(s)://`, a
  host name, a path) or duration; `pattern` (a regex the string's characters must
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
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import idna
import jsonschema

from cdd_cli.constraints.automaton import Moves, pattern_moves
from cdd_cli.constraints.pattern_limits import pattern_problem
from cdd_cli.errors import InputError

# Keywords that assert nothing (draft 2020-12 makes the content keywords annotations; an
# anchor only names a schema for `$ref`): accepted and left out.
ANNOTATIONS = {
    "$schema", "$id", "$comment", "title", "description", "examples", "default",
    "readOnly", "writeOnly", "deprecated", "$defs", "definitions", "$anchor",
    "$dynamicAnchor", "contentMediaType", "contentEncoding", "contentSchema", "$vocabulary",
}  # fmt: skip
SUPPORTED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
    "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "allOf", "$ref",
    "prefixItems", "contains", "minContains", "maxContains", "uniqueItems", "oneOf", "not",
    "if", "then", "else", "patternProperties", "minProperties", "maxProperties",
    "multipleOf", "dependentRequired",
}  # fmt: skip
# How deep a `$ref` may recur inside its own expansion: past it, that branch is left out
# (an optional property, an array's further items, an anyOf branch), or, unavoidable, the
# schema refused.
MAX_RECURSION = 3

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


ANY = any_value(COMPACT)
# The complement of each bound (minimum 3: below 3 is exclusiveMaximum 3) and of each count.
OPPOSITE = {
    "minimum": "exclusiveMaximum", "exclusiveMaximum": "minimum",
    "maximum": "exclusiveMinimum", "exclusiveMinimum": "maximum",
}  # fmt: skip
COUNTS = {
    key: (kind, least, most)
    for kind, least, most in (
        ("string", "minLength", "maxLength"),
        ("array", "minItems", "maxItems"),
        ("object", "minProperties", "maxProperties"),
    )
    for key in (least, most)
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
    "object": (
        "properties", "required", "additionalProperties", "patternProperties",
        "minProperties", "maxProperties", "dependentRequired",
    ),
    "array": (
        "items", "minItems", "maxItems", "prefixItems", "contains", "minContains",
        "maxContains", "uniqueItems",
    ),
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
}  # fmt: skip
# Keywords whose value holds subschemas: a schema under each, or a list or mapping of them.
SUBSCHEMA = {
    "items": "one", "additionalProperties": "one", "anyOf": "list", "allOf": "list",
    "oneOf": "list", "prefixItems": "list", "contains": "one", "not": "one", "if": "one",
    "then": "one", "else": "one",
}  # fmt: skip
SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")

# One schema among those a value must satisfy together: the schema, where it is, and the
# `$ref`s followed to reach it (a `$ref` met again inside its own expansion is recursive).
Member = tuple[Any, str, tuple[str, ...]]
# Patterns whose intersection is a language (one pattern: the language itself).
Patterns = tuple[str, ...]


def schema_patterns(
    schema: dict, pattern_safe=None, validator: Any = None, whitespace: str = "compact"
) -> Patterns:
    """The patterns of `schema`: every text all of them match whole is a valid instance.
    Most schemas are one pattern; sibling keywords or `allOf` branches that no single
    regex can join (two string `pattern`s, a `format` with a length) make several, which the
    automaton intersects. `pattern_safe(regex) -> bool` says whether a string `pattern` keeps
    to characters a JSON string holds unescaped (the caller asks the automaton);
    `validator`: a jsonschema validator of `schema` (its `enum` values are filtered by it);
    `whitespace`: "compact" or "flexible" (`WRITINGS`)."""
    problems = unsupported(schema)
    if problems:
        named = "; ".join(problems[:12]) + ("; ..." if len(problems) > 12 else "")
        raise UnsupportedSchema(f"unsupported: {named}")
    if validator is None:
        cls = jsonschema.validators.validator_for(schema)
        validator = cls(schema, format_checker=format_checker(cls.FORMAT_CHECKER))
    if whitespace not in WRITINGS:
        raise UnsupportedSchema(f"whitespace {whitespace!r} (one of: {', '.join(WRITINGS)})")
    w = WRITINGS[whitespace]
    patterns = _Compiler(schema, pattern_safe, validator, w).patterns([(schema, "#", ())])
    return tuple(f"{w.around}{p}{w.around}" if w.around else p for p in patterns)


def schema_regex(schema: dict, pattern_safe=None, whitespace: str = "compact") -> str:
    """The one regex of `schema`; UnsupportedSchema where it takes several (`schema_patterns`)."""
    patterns = schema_patterns(schema, pattern_safe, whitespace=whitespace)
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

    def __init__(self, root: dict, pattern_safe, validator: Any, w: Writing = COMPACT):
        self.root, self.pattern_safe, self.validator, self.w = root, pattern_safe, validator, w

    def patterns(self, members: list[Member]) -> Patterns:
        where = members[0][1] if members else "#"
        patterns = self.written(members)
        # No pattern would be no constraint at all (the intersection of none): never.
        assert patterns, where
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
        members of their own, and each schema that had them kept without them; `oneOf`
        (branches provably exclusive), `not` and `if`/`then`/`else` made `anyOf`s."""
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
            if "oneOf" in rest:
                branches = rest.pop("oneOf")
                if not isinstance(branches, list) or not branches:
                    raise UnsupportedSchema(f"{where}/oneOf: must be a non-empty list")
                self.exclusive(branches, f"{where}/oneOf", refs)
                todo.append(({"anyOf": branches}, f"{where}/oneOf", refs))
            if "not" in rest and not _written_negation(rest["not"]):
                negated = self.negations(rest.pop("not"), f"{where}/not", refs)
                if not negated:
                    raise EmptySchema(f"{where}/not: the schema it negates admits everything")
                todo.append(({"anyOf": negated}, f"{where}/not", refs))
            then, otherwise = rest.pop("then", True), rest.pop("else", True)
            if "if" in rest:
                condition = rest.pop("if")
                at = f"{where}/if"
                branches = [{"allOf": [condition, then]}]
                if otherwise is not False:
                    negated = self.negations(condition, at, refs)
                    branches += [{"allOf": [n, otherwise]} for n in negated]
                todo.append(({"anyOf": branches}, at, refs))
            if rest.keys() - ANNOTATIONS:
                out.append((rest, where, refs))
        return out

    def target(self, target: Any, where: str, refs: tuple[str, ...]) -> Any:
        """The schema a `$ref` names: a JSON pointer into this document (`#`, `#/$defs/x`,
        `#/properties/a`, escaped as RFC 6901 and 3986 say) or an anchor (`#name`)."""
        text = str(target)
        if not text.startswith("#"):
            raise UnsupportedSchema(
                f"{where}: '$ref' {target!r} (only a reference inside the schema, '#...')"
            )
        if self.nested_ids:
            raise UnsupportedSchema(
                f"{where}: '$ref' {target!r} in a schema whose subschemas set their own '$id'"
            )
        if refs.count(text) >= MAX_RECURSION:
            raise EmptySchema(
                f"{where}: '$ref' {target!r} recurs deeper than {MAX_RECURSION} levels "
                "(recursive schemas are unrolled that deep)"
            )
        if text == "#" or text.startswith("#/"):
            found: Any = self.root
            for part in text[2:].split("/") if text != "#" else []:
                step = urllib.parse.unquote(part).replace("~1", "/").replace("~0", "~")
                if isinstance(found, dict) and step in found:
                    found = found[step]
                elif isinstance(found, list) and step.isdigit() and int(step) < len(found):
                    found = found[int(step)]
                else:
                    raise UnsupportedSchema(f"{where}: '$ref' {target!r} is not defined")
            return found
        anchors = self.anchors.get(text[1:], [])
        if len(anchors) != 1:
            raise UnsupportedSchema(
                f"{where}: '$ref' {target!r} is not defined"
                if not anchors
                else f"{where}: '$ref' {target!r} names {len(anchors)} anchors"
            )
        return anchors[0]

    @functools.cached_property
    def anchors(self) -> dict[str, list[Any]]:
        """The subschemas each `$anchor` (or `$dynamicAnchor`) names."""
        found: dict[str, list[Any]] = {}
        for node in _subschemas(self.root):
            for key in ("$anchor", "$dynamicAnchor"):
                if isinstance(node.get(key), str):
                    found.setdefault(node[key], []).append(node)
        return found

    @functools.cached_property
    def nested_ids(self) -> bool:
        """Whether a subschema sets its own `$id` (a `$ref` inside it is read against it)."""
        return any("$id" in node for node in _subschemas(self.root) if node is not self.root)

    def exclusive(self, branches: list, where: str, refs: tuple[str, ...]) -> None:
        """A `oneOf` is written as an `anyOf` where no instance can satisfy two branches:
        UnsupportedSchema naming two branches that cannot be proved exclusive."""
        for i, j in itertools.combinations(range(len(branches)), 2):
            if not self.disjoint(branches[i], branches[j], refs):
                raise UnsupportedSchema(
                    f"{where}: branches {i} and {j} may both hold (oneOf is written only where "
                    "its branches are provably exclusive: different types, distinct "
                    "const/enum values, or a required property of exclusive values)"
                )

    def disjoint(self, a: Any, b: Any, refs: tuple[str, ...], depth: int = 0) -> bool:
        """Whether no instance satisfies both schemas, by proofs that need no search: their
        `type`s share no value, every value of one's `enum`/`const` fails the other, or a
        property both require has exclusive schemas."""
        if a is False or b is False:
            return True
        if not isinstance(a, dict) or not isinstance(b, dict) or depth > 8:
            return False
        if "$ref" in a and len(a.keys() - ANNOTATIONS) == 1:
            return self.disjoint(self.target(a["$ref"], "#", refs), b, refs, depth + 1)
        if "$ref" in b and len(b.keys() - ANNOTATIONS) == 1:
            return self.disjoint(a, self.target(b["$ref"], "#", refs), refs, depth + 1)
        if (
            "type" in a
            and "type" in b
            and not any(_admits(a["type"], t, "#") and _admits(b["type"], t, "#") for t in TYPES)
        ):
            return True
        for one, other in ((a, b), (b, a)):
            values = [one["const"]] if "const" in one else one.get("enum")
            if isinstance(values, list) and values:
                try:
                    judge = self.validator.evolve(schema=other)
                    if not any(judge.is_valid(v) for v in values):
                        return True
                except (
                    jsonschema.exceptions.SchemaError,
                    jsonschema.exceptions.RefResolutionError,
                ):
                    pass
        both = set(_strings(a.get("required"))) & set(_strings(b.get("required")))
        props_a, props_b = a.get("properties", {}), b.get("properties", {})
        return any(
            name in props_a
            and name in props_b
            and self.disjoint(props_a[name], props_b[name], refs, depth + 1)
            for name in both
        )

    def negations(self, schema: Any, where: str, refs: tuple[str, ...]) -> list[Any]:
        """Schemas whose union is exactly the instances `schema` rejects (the schema is the
        conjunction of its keywords, so its complement is the union of theirs);
        UnsupportedSchema naming a keyword whose complement cdd cannot write."""
        if schema is True or schema == {}:
            return []
        if schema is False:
            return [True]
        if not isinstance(schema, dict):
            raise UnsupportedSchema(f"{where}: a schema must be an object or a boolean")
        out: list[Any] = []
        for key, value in schema.items():
            if key in ANNOTATIONS:
                continue
            others = lambda kind: {"type": [t for t in TYPES if t not in (kind, "integer")]}  # noqa: E731
            if key == "type":
                names = value if isinstance(value, list) else [value]
                for name in names:
                    _admits(name, "null", where)
                rest = [t for t in TYPES if t not in names and t != "integer"]
                if "integer" in names and "number" not in names:
                    rest.remove("number")
                    out.append({"type": "number", "not": {"type": "integer"}})
                if rest:
                    out.append({"type": rest})
            elif key in OPPOSITE:
                out += [others("number"), {"type": "number", OPPOSITE[key]: value}]
            elif key in COUNTS:
                kind, least, most = COUNTS[key]
                out.append(others(kind))
                if key == least:
                    if value > 0:
                        out.append({"type": kind, most: math.ceil(value) - 1})
                else:
                    out.append({"type": kind, least: math.floor(value) + 1})
            elif key == "required":
                for name in _strings(value):
                    out += [others("object"), {"type": "object", "properties": {name: False}}]
            elif key in ("const", "enum") and all(
                isinstance(v, str) for v in ([value] if key == "const" else value)
            ):
                out += [others("string"), {"type": "string", "not": {key: value}}]
            elif key == "not":
                out.append(value)
            elif key == "anyOf" and isinstance(value, list):
                parts = [self.negations(b, f"{where}/anyOf/{k}", refs) for k, b in enumerate(value)]
                if all(parts):
                    out.append({"allOf": [{"anyOf": p} for p in parts]})
            elif key == "allOf" and isinstance(value, list):
                for k, b in enumerate(value):
                    out += self.negations(b, f"{where}/allOf/{k}", refs)
            elif key == "$ref":
                out += self.negations(self.target(value, where, refs), where, (*refs, value))
            elif key == "properties" and not schema.keys() & {
                "additionalProperties",
                "patternProperties",
            }:
                for name, sub in value.items():
                    for n in self.negations(sub, f"{where}/properties/{name}", refs):
                        out.append({"type": "object", "required": [name], "properties": {name: n}})
            else:
                raise UnsupportedSchema(
                    f"{where}: cannot write the complement of its '{key}' (under not, or an "
                    "if with else)"
                )
        return out

    def written(self, members: list[Member]) -> Patterns:
        members = self.flattened(members)
        if not members:  # true, {}, or only annotations
            return (any_value(self.w),)
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
        literals = list(dict.fromkeys(_literal(v, self.w) for v in kept))
        return (literals[0] if len(literals) == 1 else "(?:" + "|".join(literals) + ")",)

    def typed(self, members: list[Member]) -> Patterns:
        where = members[0][1] if members else "#"
        stated = [m for m in members if "type" in m[0]]
        if stated:
            kinds = [t for t in TYPES if all(_admits(m[0]["type"], t, m[1]) for m in stated)]
            if "number" in kinds:
                kinds.remove("integer")  # the numbers hold the integers
        else:  # every type, each under the keywords that apply to it
            kinds = [t for t in TYPES if t != "integer"]
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
            fraction = any(m[0].get("not") == {"type": "integer"} for m in members)
            if fraction and kind == "integer":
                raise EmptySchema(f"{where}: an integer that is not an integer")
            return _numbers(members, kind == "integer", where, fraction)
        return (BOOLEAN if kind == "boolean" else NULL,)

    def object(self, members: list[Member], where: str) -> Patterns:
        """The properties some member lists or requires, in that order, each under the
        schemas of every member that lists it, every `patternProperties` schema whose regex
        its name matches, and the `additionalProperties` schema of every member that does
        neither (`false`: left out, or, required, the object is empty); then other
        properties (`extra_members`). `minProperties`/`maxProperties` and
        `dependentRequired` choose which optional properties may be written together."""
        subschemas: dict[str, list[Member]] = {}
        required: dict[str, None] = {}
        dependent: dict[str, set[str]] = {}
        for schema, at, refs in members:
            for name, sub in schema.get("properties", {}).items():
                subschemas.setdefault(name, []).append((sub, f"{at}/properties/{name}", refs))
            required.update(dict.fromkeys(_strings(schema.get("required"))))
            for name, needs in schema.get("dependentRequired", {}).items():
                dependent.setdefault(name, set()).update(_strings(needs))
                subschemas.setdefault(name, [])
                for need in _strings(needs):
                    subschemas.setdefault(need, [])
        for name in required:
            subschemas.setdefault(name, [])
        written: list[tuple[str, Patterns, bool, str]] = []
        for name, subs in subschemas.items():
            needed = name in required
            allowed = True
            for schema, at, refs in members:
                matched = [
                    (sub, f"{at}/patternProperties/{regex}", refs)
                    for regex, sub in schema.get("patternProperties", {}).items()
                    if re.search(regex, name)
                ]
                subs = [*subs, *matched]
                if name in schema.get("properties", {}) or matched:
                    continue
                extra = schema.get("additionalProperties", True)
                if extra is False:
                    allowed = False
                elif extra is not True:
                    subs = [*subs, (extra, f"{at}/additionalProperties", refs)]
            try:
                if not allowed:
                    raise EmptySchema(f"{where}: required {name!r} is not allowed")
                value = self.patterns(subs)
            except EmptySchema:
                if needed:
                    raise
                continue
            written.append((f"{_literal(name)}{self.w.colon}", value, needed, name))
        # Other properties are written where the schema speaks of them (patternProperties,
        # additionalProperties as a schema) or lists none: each costs the automaton states.
        speaks = any(
            "patternProperties" in m[0] or m[0].get("additionalProperties", True) is not True
            for m in members
        )
        extra = self.extra_members(members, list(subschemas)) if speaks or not subschemas else None
        low, high = _counts(members, "minProperties", "maxProperties")
        if high is not None and high < low:
            raise EmptySchema(f"{where}: maxProperties {high} < minProperties {low}")
        count = max([len(v) for _, v, _, _ in written] or [1])
        out = []
        for i in range(count):
            entries = [
                (key + _pick(value, i), needed, name) for key, value, needed, name in written
            ]
            regex = _object(entries, extra, low, high, dependent, where, self.w)
            if regex is None:
                raise EmptySchema(
                    f"{where}: no set of its properties meets minProperties/maxProperties/"
                    "dependentRequired"
                )
            out.append(regex)
        return tuple(dict.fromkeys(out))

    def extra_members(self, members: list[Member], names: list[str]) -> str | None:
        """One property none of `names` (the ones listed), written after them: its name
        matching a `patternProperties` regex (where no listed name does) with the value under
        that schema, each other such schema whose regex the name may also match and each
        other member's `additionalProperties`; or a name matching none (where no member
        forbids others) with the value under every such schema. None: there are none."""
        keyed = [
            (regex, sub, f"{at}/patternProperties/{regex}", refs, k)
            for k, (schema, at, refs) in enumerate(members)
            for regex, sub in schema.get("patternProperties", {}).items()
        ]
        keys = {}
        for regex, _, at, _, _ in keyed:
            keys[regex] = self.key_pattern(regex, f"{at}") if self.pattern_safe else None
        options: list[str] = []
        for regex, sub, at, refs, owner in keyed:
            key = keys[regex]
            if key is None or any(re.search(regex, n) for n in names):
                continue
            value = [(sub, at, refs)] + [
                (other[1], other[2], other[3])
                for other in keyed
                if other[0] != regex and (keys[other[0]] is None or _meet(key, keys[other[0]]))
            ]
            closed = False
            for k, (schema, mat, mrefs) in enumerate(members):
                if k == owner:
                    continue
                extra = schema.get("additionalProperties", True)
                closed |= extra is False
                if extra not in (True, False):
                    value.append((extra, f"{mat}/additionalProperties", mrefs))
            if not closed:
                options += self.member_option(f'"{key}"', value)
        extras = [m[0].get("additionalProperties", True) for m in members]
        if False not in extras:
            value = [(other[1], other[2], other[3]) for other in keyed] + [
                (extra, f"{m[1]}/additionalProperties", m[2])
                for extra, m in zip(extras, members, strict=True)
                if extra is not True
            ]
            options += self.member_option(_other_string(names), value)
        options = list(dict.fromkeys(options))
        if not options:
            return None
        return options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"

    def member_option(self, key: str, value: list[Member]) -> list[str]:
        """`key: value` as one regex, or none where the value is empty or several patterns;
        a value under no schema is a scalar (cheaper than any value, for the automaton)."""
        if not [m for m in value if m[0] is not True and m[0] != {}]:
            return [f"{key}{self.w.colon}{SCALAR}"]
        try:
            patterns = self.patterns(value)
        except EmptySchema:
            return []
        return [f"{key}{self.w.colon}{patterns[0]}"] if len(patterns) == 1 else []

    def key_pattern(self, regex: str, where: str) -> str | None:
        """The names a `patternProperties` regex matches (searched, as the standard says),
        written without escapes; None where the regex may match a character that needs one."""
        inner = strip_anchors(regex)
        if pattern_problem(inner) or not self.pattern_safe(inner):
            return None
        return _searched(regex, inner, PLAIN)

    def array(self, members: list[Member], where: str) -> Patterns:
        """Items by position: each under every member's `prefixItems` schema there, or its
        `items` past its `prefixItems`; `minItems`/`maxItems` the tightest; `contains`
        (with `minContains`) a pattern of its own, intersected."""
        low, high = _counts(members, "minItems", "maxItems")
        if high is not None and high < low:
            raise EmptySchema(f"{where}: maxItems {high} < minItems {low}")
        for schema, at, _ in members:
            if schema.get("uniqueItems") is True and (high is None or high > 1):
                raise UnsupportedSchema(
                    f"{at}/uniqueItems: items all different is not a regular language "
                    "(cdd writes it only with maxItems 1)"
                )
        fixed = max([len(m[0].get("prefixItems", [])) for m in members], default=0)

        def position(j: int) -> list[Member]:
            out = []
            for schema, at, refs in members:
                prefix = schema.get("prefixItems", [])
                if j < len(prefix):
                    out.append((prefix[j], f"{at}/prefixItems/{j}", refs))
                elif "items" in schema:
                    out.append((schema["items"], f"{at}/items", refs))
            return out

        slots: list[Patterns] = []
        for j in range(fixed if high is None else min(fixed, high)):
            try:
                slots.append(self.patterns(position(j)))
            except EmptySchema:
                if low > j:
                    raise
                high = j
                break
        item: Patterns | None = None
        if high is None or high > len(slots):
            try:
                item = self.patterns(position(fixed))
            except EmptySchema:
                if low > len(slots):
                    raise
                high = len(slots)
        count = max([len(p) for p in slots] + ([len(item)] if item else []), default=1)
        out = [
            _array(
                [_pick(slot, i) for slot in slots],
                None if item is None else _pick(item, i),
                low,
                high,
                self.w,
            )
            for i in range(count)
        ]
        for schema, at, refs in members:
            if "contains" not in schema:
                continue
            least, most = _counts([(schema, at, refs)], "minContains", "maxContains")
            least = least if "minContains" in schema else 1
            if most is not None and (high is None or most < high):
                raise UnsupportedSchema(
                    f"{at}/maxContains: at most {most} items satisfying contains (cdd "
                    "cannot write the items that do not)"
                )
            if least == 0:
                continue
            contained = self.patterns([(schema["contains"], f"{at}/contains", refs)])
            if len(contained) > 1:
                raise UnsupportedSchema(f"{at}/contains: its schema takes several patterns")
            # The other items: as the array's items where they are all one pattern (fewer
            # automaton states than any value; the array's own pattern holds them anyway).
            any_item = any_value(self.w)
            other = item[0] if item is not None and len(item) == 1 and not slots else any_item
            out.append(_containing(contained[0], least, other, self.w))
        return tuple(dict.fromkeys(out))

    def string(self, members: list[Member], where: str) -> Patterns:
        """A string's keywords, each a pattern of the string's text: its format, each
        `pattern`, and the length bounds, merged (the tightest); the patterns intersect."""
        parts: list[str] = []
        for schema, at, _ in members:
            if "format" in schema:
                parts.append(f'"{FORMATS[schema["format"]]}"')
            if "pattern" in schema:
                parts.append(self.string_pattern(schema["pattern"], f"{at}/pattern"))
        low, high = _counts(members, "minLength", "maxLength")
        if high is not None and high < low:
            raise EmptySchema(f"{where}: maxLength {high} < minLength {low}")
        if low > 0 or high is not None:
            parts.append(f'"{CHAR}{{{low},{"" if high is None else high}}}"')
        excluded = [v for schema, _, _ in members for v in _excluded_strings(schema.get("not"))]
        if excluded:
            parts.append(_other_string(excluded))
        return tuple(dict.fromkeys(parts)) or (STRING,)

    def string_pattern(self, pattern: str, where: str) -> str:
        """The strings `pattern` is found in (searched, as the standard says: where it is not
        anchored by `^` or `$`, any characters before or after)."""
        inner = strip_anchors(pattern)
        # jsonschema judges strings by it with Python's re (which backtracks), and
        # `pattern_safe` builds its automaton: its limits first.
        problem = pattern_problem(inner)
        if problem:
            raise UnsupportedSchema(f"{where}: {problem}")
        if self.pattern_safe is not None and not self.pattern_safe(inner):
            raise UnsupportedSchema(f"{where}: can match a quote, backslash or control character")
        return f'"{_searched(pattern, inner, CHAR)}"'


def _searched(pattern: str, inner: str, character: str) -> str:
    """Texts `pattern` is found in: `inner` (the pattern without its anchors) with any
    `character`s before it where the pattern does not start with `^`, after it where it
    does not end with `$`."""
    before = "" if pattern.startswith("^") else f"{character}*"
    after = "" if pattern.endswith("$") and not pattern.endswith("\\$") else f"{character}*"
    return f"{before}(?:{inner}){after}"


def _meet(a: str, b: str) -> bool:
    """Whether some text matches both regexes whole: a walk of their byte automata's
    product (True where either cannot be built: they may)."""
    try:
        first, second = _byte_index(a), _byte_index(b)
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


def _written_negation(schema: Any) -> bool:
    """Whether a `not` is one the writers take as it is: not an integer (a number with a
    fraction), or not one of some strings (every other string)."""
    if schema == {"type": "integer"}:
        return True
    return isinstance(schema, dict) and bool(_excluded_strings(schema)) and len(schema) == 1


def _excluded_strings(schema: Any) -> list[str]:
    """The strings of a `{"const": s}` or `{"enum": [s, ...]}` (of strings only)."""
    if not isinstance(schema, dict) or len(schema) != 1:
        return []
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return []
    return values


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _subschemas(schema: Any) -> Iterator[dict]:
    """The schema and every schema inside it (under a keyword that holds subschemas)."""
    if not isinstance(schema, dict):
        return
    yield schema
    for key, kind in SUBSCHEMA.items():
        value = schema.get(key)
        for sub in value if kind == "list" and isinstance(value, list) else [value]:
            yield from _subschemas(sub)
    for key in SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for sub in schema[key].values():
                yield from _subschemas(sub)


def _other_string(excluded: list[str]) -> str:
    """A JSON string (written without escapes) whose text is none of `excluded`."""
    return f'"{_other_text(excluded)}"'


def _other_text(excluded: list[str]) -> str:
    """Texts of unescaped JSON string characters that are none of `excluded`: by the trie
    of the excluded texts, each text leaves it at the first character where it differs,
    or ends at a node no excluded text ends at."""

    def node(prefix: str) -> str:
        words = [w for w in excluded if w.startswith(prefix)]
        nexts = sorted(
            {w[len(prefix)] for w in words if len(w) > len(prefix)} - UNWRITTEN_CHARACTERS
        )
        parts = [] if prefix in words else ["(?:)"]
        if nexts:
            other = "".join(re.escape(c) for c in nexts)
            parts.append(rf'[^{other}"\\\x00-\x1f]{PLAIN}*')
            parts += [re.escape(c) + node(prefix + c) for c in nexts]
        else:
            parts.append(f"{PLAIN}+")
        return "(?:" + "|".join(parts) + ")"

    return node("")


def _admits(stated: Any, kind: str, where: str) -> bool:
    """Whether a `type` keyword admits values of `kind` (a number type admits integers)."""
    names = stated if isinstance(stated, list) else [stated]
    for name in names:
        if name not in TYPES:
            raise UnsupportedSchema(f"{where}: unknown type {name!r}")
    return kind in names or (kind == "integer" and "number" in names)


def _counts(members: list[Member], least: str, most: str) -> tuple[int, int | None]:
    """The tightest of every member's bounds on a count (2.0 is the integer 2)."""
    low, high = 0, None
    for schema, at, _ in members:
        for key in (least, most):
            if key not in schema:
                continue
            value = schema[key]
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or value != int(value)
            ):
                raise UnsupportedSchema(f"{at}/{key}: must be a whole number, got {value!r}")
            if key == least:
                low = max(low, int(value))
            else:
                high = int(value) if high is None else min(high, int(value))
    return low, high


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


# The most optional properties whose combinations `_object` spells out one by one (where
# minProperties, maxProperties or dependentRequired limit them): 2**12 branches.
MAX_OPTIONAL_COMBINED = 12


def _object(
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


def _array(
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


def _containing(contained: str, least: int, other: str, w: Writing = COMPACT) -> str:
    """Arrays with at least `least` items matching `contained`, the others `other`."""
    others = f"(?:{other}{w.comma})*"
    more = f"(?:{w.comma}{other})*"
    body = others + contained + f"(?:{more}{w.comma}{contained}){{{least - 1}}}" + more
    return w.open_array + body + w.close_array


def strip_anchors(pattern: str) -> str:
    """A pattern without a leading `^` and trailing `$` (the automaton matches whole)."""
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1]
    return pattern


def _literal(value: Any, w: Writing = COMPACT) -> str:
    """A JSON value exactly (an `enum` or `const` value, a property's name), an array's or
    object's punctuation written as `w` writes it (with its whitespace)."""
    if not isinstance(value, (dict, list)):
        return re.escape(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    if isinstance(value, list):
        items = w.comma.join(_literal(v, w) for v in value)
        return w.open_array + items + w.close_array
    members = w.comma.join(f"{_literal(k)}{w.colon}{_literal(v, w)}" for k, v in value.items())
    return w.open_object + members + w.close_object


# The longest regex one `multipleOf` may take (divisibility by 7 is already long).
MAX_MULTIPLE_REGEX = 20_000


def _numbers(members: list[Member], integer: bool, where: str, fraction: bool) -> Patterns:
    """Numbers (or integers) within every member's bounds, multiples of every member's
    `multipleOf` (an integer: the number is then an integer), with a non-zero fraction where
    a member says `not: {type: integer}`; several patterns of the same number, intersected."""
    step = 0
    for schema, at, _ in members:
        if "multipleOf" not in schema:
            continue
        value = schema["multipleOf"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise UnsupportedSchema(f"{at}/multipleOf: must be a positive number")
        if value != int(value):
            raise UnsupportedSchema(
                f"{at}/multipleOf: {value} is not an integer (cdd writes multiples of integers)"
            )
        step = math.lcm(step or 1, int(value))
    parts = [_number(members, integer, where)]
    if step and fraction:
        raise EmptySchema(f"{where}: a multiple of {step} with a fraction")
    if step:
        parts.append(INTEGER if step == 1 else _multiples(step, where))
    if fraction:
        parts.append(r"-?(?:0|[1-9][0-9]*)\.[0-9]*[1-9][0-9]*")
    return tuple(dict.fromkeys(parts))


def _multiples(step: int, where: str) -> str:
    """Integers divisible by `step`: the automaton of the remainder as the digits are read
    (r -> 10r + d mod step), its equivalent states merged, written as a regex by
    eliminating its states."""
    # Equivalent remainders (the same future: 10 and 0 for step 20 differ, 1 and 3 for
    # step 2 do not), by refining the split into accepting and not.
    block = {r: int(r == 0) for r in range(step)}
    while True:
        signature = {r: (block[r], *(block[(10 * r + d) % step] for d in range(10))) for r in block}
        names = {sig: k for k, sig in enumerate(dict.fromkeys(signature.values()))}
        refined = {r: names[signature[r]] for r in block}
        if len(set(refined.values())) == len(set(block.values())):
            break
        block = refined
    classes = sorted(set(block.values()))
    digits: dict[Any, dict[Any, str]] = {"i": {}, **{c: {} for c in classes}}
    for c in classes:
        r = next(r for r in block if block[r] == c)
        for d in range(10):
            q = block[(10 * r + d) % step]
            digits[c][q] = digits[c].get(q, "") + str(d)
    for d in range(1, 10):
        q = block[d % step]
        digits["i"][q] = digits["i"].get(q, "") + str(d)
    labels: dict[Any, dict[Any, str]] = {
        p: {q: f"[{ds}]" if len(ds) > 1 else ds for q, ds in out.items()}
        for p, out in digits.items()
    }
    labels[block[0]]["f"] = ""
    for k in classes:
        loop = labels[k].pop(k, None)
        star = f"(?:{loop})*" if loop else ""
        for p in list(labels):
            if p == k or k not in labels[p]:
                continue
            into = labels[p].pop(k)
            for q, out in labels[k].items():
                path = f"{into}{star}{out}"
                labels[p][q] = f"(?:{labels[p][q]}|{path})" if q in labels[p] else path
        del labels[k]
        if sum(len(v) for out in labels.values() for v in out.values()) > MAX_MULTIPLE_REGEX:
            raise UnsupportedSchema(
                f"{where}: multiples of {step} take a regex longer than "
                f"{MAX_MULTIPLE_REGEX:,} characters"
            )
    return f"-?(?:0|{labels['i']['f']})"


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
def schema_text_patterns(schema_text: str, whitespace: str = "compact") -> Patterns:
    """The patterns of a schema given as canonical JSON (`schema_patterns`), in the
    `whitespace` writing; InputError naming what cannot be compiled."""
    try:
        patterns = schema_patterns(
            json.loads(schema_text), pattern_safe=json_string_safe, whitespace=whitespace
        )
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


def schema_pattern(
    schema_text: str, whitespace: str = "compact", where: str = "json_schema"
) -> str:
    """The one regex of a schema given as canonical JSON; InputError where it is the
    intersection of several (`schema_text_patterns`)."""
    patterns = schema_text_patterns(schema_text, whitespace)
    if len(patterns) > 1:
        raise InputError(
            f"{where}: it is the intersection of {len(patterns)} regexes, not one; "
            "schema_to_patterns gives them"
        )
    return patterns[0]


# ------------------------------------------------------------------------------------------
# The judge's formats: exact checks of RFC 3339 (date, time, date-time, duration), RFC 5321
# (email), RFC 4122 (uuid), dotted-quad ipv4, RFC 1123 with IDNA 2008 A-labels (hostname),
# RFC 4291 (ipv6) and RFC 3986 (uri), for every format cdd writes. jsonschema's own
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
_LABEL_ASCII = re.compile(_LABEL)
_IPV6_CHARACTERS = re.compile(r"[0-9A-Fa-f:.]+")
_DURATION = re.compile(DURATION)
# RFC 3986: its unreserved characters and sub-delimiters, a percent-encoded byte, a path's
# character; the URI's authority (user, host, port), then its path, query and fragment.
_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB_DELIMS = r"!$&'()*+,;="
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_URI = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.\-]*:"
    rf"(?://(?:(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*@)?"
    rf"(?P<host>\[[^\]/?#@]*\]|(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*)(?::[0-9]*)?"
    rf"(?:/{_PCHAR}*)*"
    rf"|/?(?:{_PCHAR}+(?:/{_PCHAR}*)*)?)"
    rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
)
_IPVFUTURE = re.compile(rf"v[0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB_DELIMS}:]+")


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


def is_hostname(text: str) -> bool:
    """RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, 1 to
    63 characters each, 253 in all; a label with `--` third and fourth is an IDNA A-label
    (`xn--`) that decodes under IDNA 2008's rules (the `idna` package)."""
    if not text or len(text) > 253:
        return False
    for label in text.split("."):
        if not _LABEL_ASCII.fullmatch(label):
            return False
        if label[2:4] == "--":
            if label[:4].lower() != "xn--":
                return False
            try:
                idna.decode(label)
            except (idna.IDNAError, UnicodeError):
                return False
    return True


def is_ipv6(text: str) -> bool:
    """RFC 4291's text forms (a dotted quad last allowed, no leading zero in it); no zone."""
    if not _IPV6_CHARACTERS.fullmatch(text):
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def is_uri(text: str) -> bool:
    """RFC 3986's URI (absolute: a scheme), character by character; a bracketed host is
    an IPv6 address or an IPvFuture."""
    match = _URI.fullmatch(text)
    if not match:
        return False
    host = match["host"]
    if host is not None and host.startswith("["):
        inner = host[1:-1]
        return is_ipv6(inner) or _IPVFUTURE.fullmatch(inner) is not None
    return True


STRICT_FORMATS = {
    "date": is_date,
    "time": is_time,
    "date-time": is_date_time,
    "email": is_email,
    "uuid": lambda text: _UUID.fullmatch(text) is not None,
    "ipv4": lambda text: _IPV4.fullmatch(text) is not None,
    "hostname": is_hostname,
    "ipv6": is_ipv6,
    "uri": is_uri,
    "duration": lambda text: _DURATION.fullmatch(text) is not None,
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


# The 256 single bytes, each a token of its own (the end of text: 256).
SINGLE_BYTES = {bytes([b]): [b] for b in range(256)}


@functools.lru_cache(maxsize=256)
def _byte_index(pattern: str) -> Moves:
    """The byte automaton of `pattern` (built as the token automaton is, `pattern_moves`)."""
    return pattern_moves(pattern, SINGLE_BYTES, 256)


@functools.lru_cache(maxsize=64)
def json_string_safe(pattern: str) -> bool:
    """Whether every match of `pattern` keeps to characters a JSON string holds unescaped
    (no quote, backslash or control character): the pattern's byte automaton, built by the
    same library, has no move on one of those bytes."""
    try:
        index = _byte_index(pattern)
    except (ValueError, RuntimeError, TypeError):
        return False
    forbidden = {*range(0x20), ord('"'), ord("\\")}
    return not any(forbidden & moves.keys() for moves in index.moves.values())


def load_schema(value: Any, where: str, whitespace: str = "compact") -> tuple[str, str]:
    """A spec's `schema` (an inline mapping, or the path of a .json file) as canonical JSON,
    and where it came from; InputError naming what is wrong (unreadable, not a schema, or a
    keyword the projection does not support in the `whitespace` writing)."""
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
        schema_text_patterns(text, whitespace)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return text, source
