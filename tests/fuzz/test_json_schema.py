"""Issue 60: the JSON Schema compiler fuzzed with a seeded generator, and checked against
`jsonschema` itself.

Robustness: every generated schema (the supported keywords, and keywords, values and shapes
outside them) compiles or is refused in one line (InputError), within the time a case may
take. Differential: for schemas of the supported subset and instances both valid and
invalid, written as cdd writes JSON (compact, an object's properties in the order its schema
lists them, integers without a fraction, strings without escapes), the compiled patterns
match the instance's text (`re.fullmatch` on every pattern) exactly where `jsonschema`'s
validator accepts the instance."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import jsonschema

from cdd_cli.constraints.json_schema import load_schema, schema_text_patterns
from cdd_cli.errors import InputError
from tests.fuzz.outcomes import crashes

NAMES = ["a", "b", "c"]
LETTERS = "abé"


# --------------------------------------------------------------------------------------------
# Schemas of the supported subset, each of a type, an enum or a const, so that every valid
# instance the instance generator writes is in cdd's writing


def scalar_schema(rng: random.Random) -> dict:
    kind = rng.choice(["integer", "number", "string", "boolean", "null", "enum", "const"])
    schema: dict[str, Any] = {"type": kind}
    if kind in ("integer", "number"):
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if rng.random() < 0.3:
                schema[key] = rng.randint(-4, 6)
        for inclusive, exclusive in (
            ("minimum", "exclusiveMinimum"),
            ("maximum", "exclusiveMaximum"),
        ):
            if inclusive in schema and rng.random() < 0.3:  # both bounds at one value
                schema[exclusive] = schema[inclusive]
        if rng.random() < 0.25:
            schema["multipleOf"] = rng.choice([2, 3, 5])
        if kind == "number" and rng.random() < 0.15:
            schema["not"] = {"type": "integer"}
    elif kind == "string":
        if rng.random() < 0.4:
            schema["minLength"] = rng.randint(0, 3)
        if rng.random() < 0.4:
            schema["maxLength"] = rng.randint(0, 4)
        if rng.random() < 0.25:
            schema["pattern"] = rng.choice(["^a", "b$", "é", "^[ab]*$", "a|b"])
        if rng.random() < 0.2:
            schema["not"] = {"enum": rng.sample(["", "a", "ab", "ba"], 2)}
    elif kind == "enum":
        schema = {"enum": rng.sample([0, 1, 2, -3, 0.5, "a", "b", "", True, False, None], 3)}
    elif kind == "const":
        schema = {"const": rng.choice([0, 7, "ab", None, True, [1, "a"], {"a": 1}])}
    return schema


def subset_schema(rng: random.Random, depth: int = 0) -> dict:
    """A schema of the supported subset, nested at most three deep."""
    kind = rng.randrange(10 if depth < 2 else 4)
    if kind < 4:
        return scalar_schema(rng)
    if kind < 6:
        names = rng.sample(NAMES, rng.randint(1, 3))
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {n: subset_schema(rng, depth + 1) for n in names},
            "additionalProperties": False,
        }
        if rng.random() < 0.5:
            schema["required"] = rng.sample(names, rng.randint(0, len(names)))
        return schema
    if kind < 8:
        schema = {"type": "array", "items": subset_schema(rng, depth + 1)}
        if rng.random() < 0.3:
            schema["prefixItems"] = [subset_schema(rng, depth + 1)]
        if rng.random() < 0.4:
            schema["minItems"] = rng.randint(0, 2)
        if rng.random() < 0.4:
            schema["maxItems"] = rng.randint(0, 3)
        return schema
    if kind == 8:
        return {"anyOf": [subset_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    if rng.random() < 0.5:  # two steps, or two bounds, to merge
        kind = rng.choice(["integer", "number"])
        steps = rng.sample([2, 3, 4, 5], 2)
        return {"type": kind, "allOf": [{"multipleOf": steps[0]}, {"multipleOf": steps[1]}]}
    return {"allOf": [scalar_schema(rng), scalar_schema(rng)]}


def instance(rng: random.Random, schema: Any, depth: int = 0) -> Any:
    """A value aimed at `schema` (often valid, often not), as cdd writes one: objects with
    the schema's properties in its order, integers as integers, no float that is whole."""
    if rng.random() < 0.15 or depth > 4 or not isinstance(schema, dict):
        return rng.choice([0, 3, -2, 1.5, "ab", "", None, True, [], {}, [1], {"a": 1}])
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return rng.choice([*values, 4, "c"])
    for key in ("anyOf", "allOf"):
        if key in schema:
            return instance(rng, rng.choice(schema[key]), depth + 1)
    kind = schema.get("type")
    if kind in ("integer", "number"):
        edges = [v for k, v in schema.items() if "imum" in k or k == "multipleOf"]
        whole = rng.choice(edges) + rng.randint(-1, 1) if edges and rng.random() < 0.5 else 0
        whole = whole or rng.randint(-7, 9)
        return whole + 0.5 if kind == "number" and rng.random() < 0.3 else whole
    if kind == "string":
        edges = [v + rng.randint(-1, 1) for k, v in schema.items() if k.endswith("Length")]
        count = max(0, rng.choice(edges)) if edges and rng.random() < 0.5 else rng.randint(0, 5)
        return "".join(rng.choice(LETTERS) for _ in range(count))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        count = rng.randint(0, 4)
        prefix = schema.get("prefixItems", [])
        return [
            instance(rng, prefix[j] if j < len(prefix) else schema["items"], depth + 1)
            for j in range(count)
        ]
    if kind == "object":
        names = [n for n in schema["properties"] if rng.random() < 0.7]
        out = {n: instance(rng, schema["properties"][n], depth + 1) for n in names}
        if rng.random() < 0.1:
            out["z"] = 1  # not allowed
        return out
    return None


def compiled(schema: dict) -> tuple[str, ...] | None:
    """The schema's patterns (None: refused in one line)."""
    try:
        text, _ = load_schema(schema, "fuzz")
        return schema_text_patterns(text)
    except InputError as exc:
        assert "\n" not in str(exc), exc
        return None


def test_compiled_patterns_accept_exactly_what_jsonschema_accepts():
    rng = random.Random(60)
    compared = valid = refused = 0
    disagreements = []
    for _ in range(300):
        schema = subset_schema(rng)
        patterns = compiled(schema)
        if patterns is None:
            refused += 1
            continue
        validator = jsonschema.validators.validator_for(schema)(schema)
        for _ in range(12):
            value = instance(rng, schema)
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            matched = all(re.fullmatch(p, text) for p in patterns)
            accepted = validator.is_valid(value)
            compared += 1
            valid += accepted
            if matched != accepted:
                disagreements.append(f"{json.dumps(schema)} on {text}: pattern {matched}")
    assert disagreements == []
    # The generator reaches both verdicts, and compiles most of what it writes.
    assert compared > 2500 and 0.25 < valid / compared < 0.75, (compared, valid)
    assert refused < 60, refused


# --------------------------------------------------------------------------------------------
# Any schema at all: compiled, or refused in one line


KEYWORDS = [
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
    "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "allOf", "$ref",
    "prefixItems", "contains", "minContains", "maxContains", "uniqueItems", "oneOf", "not",
    "if", "then", "else", "patternProperties", "minProperties", "maxProperties",
    "multipleOf", "dependentRequired", "$defs", "$id", "$anchor", "title", "unknownKeyword",
    "dependentSchemas", "unevaluatedProperties", "propertyNames",
]  # fmt: skip
NUMBERS = [
    0, 1, -1, 2.5, 3, 7, 10007, 1e308, -(10**400), 10**30, 1e30, 10**1001, 1e-9,
    float("nan"), float("inf"), -float("inf"), True,
]  # fmt: skip
# Odd values by the keywords they are meant for (any keyword also gets any of them).
TYPED_VALUES = {
    **dict.fromkeys(
        ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
         "minLength", "maxLength", "minItems", "maxItems", "minContains", "maxContains",
         "minProperties", "maxProperties"],
        NUMBERS,
    ),
    "pattern": ["(?=a)a", "(a)\\1", "\\bx", "[a-", "a{99999}", "(a+)+b", "\\d+", "^a$", "\"",
                "é", ""],
    "type": ["string", "integer", "nosuch", ["integer", "string"], [], "number"],
    "format": ["date", "uuid", "email", "nosuch", ""],
    "$ref": ["#", "#/$defs/x", "#/nowhere", "http://x/y", "#anchor"],
    "enum": [[], [1, 1], ["a", "b"], [1, True, 1.0], list(range(300)), [{"a": [1]}]],
    "required": [["a"], ["a", "a"], [], [1]],
}  # fmt: skip
ODD_VALUES = [
    *NUMBERS, None, "", "a", "#", [], [1, 1], ["a", "b"], {}, {"type": "string"},
    {"x": {"type": "integer"}},
]  # fmt: skip


def any_schema(rng: random.Random, depth: int = 0) -> Any:
    """A schema from all of JSON Schema's keywords (and some it lacks), each with a subschema
    or an odd value (most often one meant for that keyword): most are refused, some
    compile."""
    if depth > 3 or rng.random() < 0.1:
        return rng.choice([True, False, {}, {"type": "integer"}, rng.choice(ODD_VALUES)])
    schema = {}
    # Keywords outside the supported ones are refused at once: drawn less often.
    for key in rng.sample(KEYWORDS, rng.randint(1, 4) if rng.random() < 0.3 else 1):
        choice = rng.randrange(8)
        if key in TYPED_VALUES and choice > 2:
            schema[key] = rng.choice(TYPED_VALUES[key])
        elif choice in (0, 3):
            schema[key] = any_schema(rng, depth + 1)
        elif choice in (1, 4):
            schema[key] = [any_schema(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        elif choice in (2, 5):
            schema[key] = {n: any_schema(rng, depth + 1) for n in rng.sample(NAMES, 2)}
        else:
            schema[key] = rng.choice(ODD_VALUES)
    return schema


def test_any_generated_schema_compiles_or_is_refused_in_one_line():
    rng = random.Random(61)
    schemas = [any_schema(rng) for _ in range(400)] + [subset_schema(rng) for _ in range(100)]
    assert crashes(schemas, lambda s: load_schema(s, "fuzz")) == []


def test_any_generated_schema_file_reads_or_is_refused_in_one_line(tmp_path):
    rng = random.Random(62)
    path = tmp_path / "schema.json"

    def run(text: str) -> None:
        path.write_text(text)
        load_schema(str(path), "fuzz")

    texts = []
    for _ in range(150):
        text = json.dumps(any_schema(rng))
        if rng.random() < 0.5:  # a cut, a doubled piece or a stray character
            at = rng.randrange(len(text) + 1)
            text = rng.choice(
                [
                    text[:at],
                    text[:at] + text[at - 5 : at] + text[at:],
                    text[:at] + rng.choice('{}[]:,"\\') + text[at:],
                ]
            )
        texts.append(text)
    assert crashes(texts, run) == []
