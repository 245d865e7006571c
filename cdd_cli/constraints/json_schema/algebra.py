"""The schema algebra: the schemas one value must satisfy together (`Member`s) flattened to
plain keywords (`allOf` branches and `$ref` targets made members, `oneOf`, `not` and
`if`/`then`/`else` rewritten as `anyOf`s), with the proofs that rewriting needs: a `$ref`'s
target, two schemas' disjointness, a schema's complement as a union of schemas."""

from __future__ import annotations

import functools
import itertools
import math
import urllib.parse
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import jsonschema

from cdd_cli.constraints.json_schema.keywords import (
    ANNOTATIONS,
    SUBSCHEMA,
    SUBSCHEMA_MAPS,
    TYPES,
    EmptySchema,
    Member,
    UnsupportedSchema,
    excluded_strings,
    json_key,
    strings_in,
    type_admits,
)

# How many times one `$ref` may be followed along one path (a recursive schema is unrolled
# that deep): met once more, it admits nothing (EmptySchema), so that branch is left out
# where it may be (an optional property, an array's further items, an anyOf branch) and the
# schema refused where it may not (a required property, say).
MAX_RECURSION = 3
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


class SchemaAlgebra:
    """Rewrites the members of one schema document (`root`, where `$ref`s point) into plain
    keywords; `validator` (jsonschema's, of the document) judges `enum`/`const` values where
    disjointness is proved by them."""

    def __init__(self, root: dict, validator: Any):
        self.root, self.validator = root, validator

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
            and not any(
                type_admits(a["type"], t, "#") and type_admits(b["type"], t, "#") for t in TYPES
            )
        ):
            return True
        for one, other in ((a, b), (b, a)):
            values = [one["const"]] if "const" in one else one.get("enum")
            if isinstance(values, list) and values:
                try:
                    judge = self.judge([other])
                    if not any(judge(v) for v in values):
                        return True
                except (
                    jsonschema.exceptions.SchemaError,
                    jsonschema.exceptions.RefResolutionError,
                ):
                    pass
        both = set(strings_in(a.get("required"))) & set(strings_in(b.get("required")))
        props_a, props_b = a.get("properties", {}), b.get("properties", {})
        return any(
            name in props_a
            and name in props_b
            and self.disjoint(props_a[name], props_b[name], refs, depth + 1)
            for name in both
        )

    def judge(self, schemas: list[dict]) -> Callable[[Any], bool]:
        """Whether a value satisfies every one of `schemas`, in time linear in their sizes:
        each `enum` and `const` looked up in a set of its values (jsonschema compares a value
        with an enum's values one by one: each of an enum's 100,000 values judged by the
        schema holding it would be 10^10 comparisons), the other keywords by the validator."""
        sets: list[set[Hashable]] = []
        validators = []
        for schema in schemas:
            rest = dict(schema)
            if "const" in rest:
                sets.append({json_key(rest.pop("const"))})
            if isinstance(rest.get("enum"), list):
                sets.append({json_key(v) for v in rest.pop("enum")})
            if rest.keys() - ANNOTATIONS:
                validators.append(self.validator.evolve(schema=rest))

        def accepts(value: Any) -> bool:
            key = json_key(value) if sets else None
            return all(key in s for s in sets) and all(v.is_valid(value) for v in validators)

        return accepts

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
                    type_admits(name, "null", where)
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
                for name in strings_in(value):
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


def _written_negation(schema: Any) -> bool:
    """Whether a `not` is one the writers take as it is: not an integer (a number with a
    fraction), or not one of some strings (every other string)."""
    if schema == {"type": "integer"}:
        return True
    return isinstance(schema, dict) and bool(excluded_strings(schema)) and len(schema) == 1


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
