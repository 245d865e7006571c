"""Issue 60: the JSON Schema compiler's bounds, and its work bounded on every schema.

Ties between an inclusive and an exclusive bound (the exclusive one wins), the edges the
official suite alone caught (a `minLength` lower edge, `allOf` with two `multipleOf`, a
number's `exclusiveMinimum`), and the schemas that hung, filled the memory or raised past
the guard: a 100,000-value enum, `multipleOf: 1e30`, a 400-digit bound, 2,000 flat
properties, a look-around in a `pattern`, a key named twice in a schema file."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from cdd_cli.constraints.automaton import compile_pattern
from cdd_cli.constraints.json_schema import load_schema, schema_text_patterns
from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import Gpt2Tokenizer


def patterns(schema: dict) -> tuple[str, ...]:
    text, _ = load_schema(schema, "test")
    return schema_text_patterns(text)


def matches(schema: dict, instance: object) -> bool:
    """Whether the compact JSON text of `instance` matches every pattern of `schema` whole."""
    text = json.dumps(instance, separators=(",", ":"))
    return all(re.fullmatch(p, text) for p in patterns(schema))


def refusal(schema: object) -> str:
    with pytest.raises(InputError) as caught:
        load_schema(schema, "constraints[0]")
    message = str(caught.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------------------------
# Both bounds at one value: the exclusive one wins the tie


@pytest.mark.parametrize("kind", ["integer", "number"])
@pytest.mark.parametrize(
    ("inclusive", "exclusive", "inside", "outside"),
    [("minimum", "exclusiveMinimum", 4, 3), ("maximum", "exclusiveMaximum", 2, 3)],
)
def test_an_inclusive_and_an_exclusive_bound_at_one_value_exclude_it(
    kind: str, inclusive: str, exclusive: str, inside: int, outside: int
):
    for schema in (
        {"type": kind, inclusive: 3, exclusive: 3},
        {"allOf": [{"type": kind, inclusive: 3}, {exclusive: 3}]},
        {"allOf": [{"type": kind, exclusive: 3}, {inclusive: 3}]},
    ):
        assert not matches(schema, outside), schema
        assert matches(schema, inside), schema
        if kind == "number":
            assert not matches(schema, float(outside)), schema
            assert matches(schema, (inside + outside) / 2), schema


def test_a_tie_of_both_inclusive_bounds_keeps_the_value():
    assert matches({"type": "integer", "minimum": 3, "maximum": 3}, 3)
    assert "no integer lies between" in refusal(
        {"type": "integer", "minimum": 3, "exclusiveMaximum": 3}
    )
    assert "no number lies between" in refusal(
        {"type": "number", "exclusiveMinimum": 3, "maximum": 3}
    )


# --------------------------------------------------------------------------------------------
# The edges the official suite alone caught


def test_min_length_takes_its_lower_edge_and_nothing_shorter():
    schema = {"type": "string", "minLength": 2, "maxLength": 4}
    assert not matches(schema, "a")
    assert matches(schema, "ab")
    assert matches(schema, "abcd")
    assert not matches(schema, "abcde")


def test_all_of_two_multiple_ofs_takes_the_multiples_of_both():
    schema = {"type": "integer", "allOf": [{"multipleOf": 2}, {"multipleOf": 3}]}
    for n in range(-13, 40):
        assert matches(schema, n) == (n % 6 == 0), n


def test_a_numbers_exclusive_minimum_excludes_it_and_takes_what_is_just_above():
    schema = {"type": "number", "exclusiveMinimum": 1}
    assert not matches(schema, 1)
    assert not matches(schema, 1.0)
    assert not matches(schema, 0.5)
    assert matches(schema, 1.001)
    assert matches(schema, 2)


# --------------------------------------------------------------------------------------------
# Bounded work: each refused (or compiled) in one line and in seconds


@pytest.mark.parametrize("count", [20_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_a_large_enum_is_judged_in_linear_time(count: int):
    start = time.monotonic()
    message = refusal({"enum": [f"value-{i:06d}" for i in range(count)]})
    assert f"{count:,} values" in message and "100,000 characters" in message
    assert time.monotonic() - start < 10  # 20,000 values took 26.6 s when quadratic


def test_an_enum_under_another_enum_or_other_keywords_is_still_judged():
    schema = {"allOf": [{"enum": list(range(3000))}, {"enum": [2, 5, 2999, 3000, True]}]}
    assert [matches(schema, v) for v in (2, 5, 2999, 3000, 1)] == [True, True, True, False, False]
    assert matches({"enum": [1, "a", None], "type": "integer"}, 1)
    assert not matches({"enum": [1, "a", None], "type": "integer"}, "a")


def test_a_boolean_in_an_enum_is_no_number_and_a_float_equals_its_integer():
    assert not matches({"allOf": [{"enum": [1, 2]}, {"enum": [True, 2.0]}]}, 1)
    assert matches({"allOf": [{"enum": [1, 2]}, {"enum": [True, 2.0]}]}, 2)
    assert matches(
        {"allOf": [{"enum": [{"a": 1, "b": [1]}]}, {"const": {"b": [1.0], "a": 1}}]},
        {"a": 1, "b": [1]},
    )


def test_multiple_of_past_the_table_is_written_or_refused_with_the_number():
    start = time.monotonic()
    message = refusal({"type": "integer", "multipleOf": 1e30})
    assert "multipleOf 1000...8656 (31 digits)" in message and "10,000" in message
    assert "more than 10,000" in refusal({"type": "integer", "multipleOf": 10007})
    assert time.monotonic() - start < 5  # 11 GB in 30 s when tabled over range(step)
    for step in (10**6, 3 * 10**20):
        schema = {"type": "integer", "multipleOf": step}
        for n in (0, step, -step, 7 * step, step + 1, step // 10, 10**4):
            assert matches(schema, n) == (n % step == 0), (step, n)


def test_multiple_of_that_is_no_finite_positive_number_is_refused():
    assert "not an integer" in refusal({"type": "integer", "multipleOf": 1e400})  # infinity


def test_a_bound_of_400_digits_is_one_line_and_one_of_1001_refused_by_its_digits():
    assert "too large" in refusal({"type": "integer", "minimum": -(10**400), "maximum": 5})
    assert "too large" in refusal({"type": "number", "minimum": -(10**400), "maximum": 5})
    assert "1,000 digits" in refusal({"type": "integer", "maximum": 10**1001})
    assert matches({"type": "integer", "minimum": -(10**40), "maximum": 5}, -(10**40))
    assert not matches({"type": "integer", "minimum": -(10**40), "maximum": 5}, -(10**40) - 1)


@pytest.mark.parametrize("count", [120, pytest.param(2000, marks=pytest.mark.slow)])
def test_a_flat_schema_of_many_properties_names_the_real_limit(count: int):
    properties = {f"p{i}": {"type": "integer"} for i in range(count)}
    message = refusal({"type": "object", "properties": properties})
    assert "nested too deeply" not in message
    assert f"{count:,} properties ({count:,} optional)" in message
    assert "100,000 characters" in message
    required = {"type": "object", "properties": properties, "required": list(properties)}
    for schema in (required, {**required, "minProperties": 1}):
        try:  # 120 required ones compile; 2,000 are past the automaton's limits, named
            patterns(schema)
        except InputError as exc:
            assert "the schema's regex is too large" in str(exc)


@pytest.mark.parametrize("count", [600, pytest.param(2000, marks=pytest.mark.slow)])
def test_many_optional_items_name_the_real_limit(count: int):
    items = {"type": "array", "prefixItems": [{"type": "integer"}] * count}
    assert "nested deeper than Python's re" in refusal(items)


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        ("(?=a)a", "look-arounds"),
        ("(?<!a)b", "look-arounds"),
        ("(a)\\1", "back-references"),
        ("\\bword", "word boundaries"),
        ("(a)?(?(1)b|c)", "conditionals"),
    ],
)
def test_a_pattern_the_automaton_cannot_build_is_named_for_what_it_holds(pattern, named):
    message = refusal({"type": "string", "pattern": pattern})
    assert f"{named} " in message and "not supported" in message
    assert "quote" not in message


def test_a_schema_file_naming_a_key_twice_is_refused_naming_it(tmp_path: Path):
    path = tmp_path / "s.json"
    path.write_text(
        '{"type": "object", "properties": {"a": {"type": "string"}, "a": {"type": "integer"}}}'
    )
    message = refusal(str(path))
    assert "'a' twice" in message


def test_a_schema_json_cannot_write_is_refused_in_one_line():
    looped: dict = {"type": "object"}
    looped["properties"] = {"self": looped}
    assert "not JSON" in refusal(looped)
    assert "not JSON" in refusal({"const": {1, 2}})


@pytest.mark.slow  # GPT-2's vocabulary read for the automaton: 3 s
def test_items_nested_past_the_automaton_librarys_limit_name_the_nesting():
    (regex,) = patterns({"type": "array", "prefixItems": [{"type": "boolean"}] * 100})
    with pytest.raises(InputError, match=r"its groups are nested 10[0-9] deep") as caught:
        compile_pattern(regex, Gpt2Tokenizer())
    assert "about 80 optional items" in str(caught.value)
