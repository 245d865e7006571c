"""JSON Schema's vocabulary as the compiler reads it: the keywords it enforces and those it
leaves out as annotations (`unsupported` names every other one, with where it is), the two
refusals (`UnsupportedSchema`, `EmptySchema`), the shapes the modules pass each other
(`Member`, `Patterns`), and small readers of keyword values shared by them."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from cdd_cli.constraints.json_schema.grammar import FORMATS

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


class UnsupportedSchema(ValueError):
    """A schema (or part) the regex cannot describe; the message names the keyword and where."""


class EmptySchema(UnsupportedSchema):
    """A schema (or part) no instance in cdd's writing satisfies: its keywords contradict
    each other. An `anyOf` branch or an optional property that is empty is left out; the
    whole schema empty is refused."""


# The longest regex a schema may make (the automaton's limits, pattern_limits.py, are
# checked on it before anything is built from it).
MAX_REGEX_CHARACTERS = 100_000
# Most patterns one schema may become: each is a token automaton, and the job's automaton is
# their product (`automaton.intersect`).
MAX_PATTERNS = 8
TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")
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


def excluded_strings(schema: Any) -> list[str]:
    """The strings of a `{"const": s}` or `{"enum": [s, ...]}` (of strings only)."""
    if not isinstance(schema, dict) or len(schema) != 1:
        return []
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return []
    return values


def json_key(value: Any) -> Hashable:
    """A JSON value as a set's key, equal where JSON Schema calls two values equal (1 and
    1.0 are, true and 1 are not; objects whatever their keys' order): an `enum` looked up,
    not compared value by value."""
    if isinstance(value, bool) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(json_key(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, json_key(v)) for k, v in value.items()))
    return ("string", value) if isinstance(value, str) else ("other", repr(value))


def strings_in(value: Any) -> list[str]:
    """The strings of a list (`required`, a `dependentRequired` entry); none where it is
    no list."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def type_admits(stated: Any, kind: str, where: str) -> bool:
    """Whether a `type` keyword admits values of `kind` (a number type admits integers)."""
    names = stated if isinstance(stated, list) else [stated]
    for name in names:
        if name not in TYPES:
            raise UnsupportedSchema(f"{where}: unknown type {name!r}")
    return kind in names or (kind == "integer" and "number" in names)


def count_bounds(members: list[Member], least: str, most: str) -> tuple[int, int | None]:
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
