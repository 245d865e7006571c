"""Issue 46: every keyword of a schema is enforced or the schema refused (sibling keywords,
`allOf`, `$ref` beside keywords), every unsupported keyword named at once; the judge checks
each format cdd writes exactly; several patterns make one automaton, their product."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from cdd_cli.constraints import automaton
from cdd_cli.constraints.automaton import compile_pattern, compile_patterns, intersect
from cdd_cli.constraints.json_schema import (
    EmptySchema,
    UnsupportedSchema,
    load_schema,
    schema_patterns,
)
from cdd_cli.constraints.json_schema.byte_automata import byte_automaton, json_string_safe
from cdd_cli.constraints.json_schema.formats import STRICT_FORMATS
from cdd_cli.constraints.json_schema.grammar import FORMATS
from cdd_cli.constraints.structured import JsonSchemaConstraint, RegexConstraint, pattern_layout
from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import Gpt2Tokenizer

TOKENIZER = Gpt2Tokenizer()
SUITE = Path(__file__).parent / "data" / "json_schema_test_suite"


def judge(schema: dict) -> JsonSchemaConstraint:
    text, source = load_schema(schema, "test")
    return JsonSchemaConstraint(schema_text=text, source=source)


def written(patterns: tuple[str, ...], text: str) -> bool:
    """Whether `text` matches every pattern whole (what their automata's product accepts)."""
    return all(re.fullmatch(p, text) for p in patterns)


# --------------------------------------------------------------------------------------------
# Keywords beside each other: enforced, never dropped

CONTACT = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "email": {"type": "string", "format": "email"},
        "phone": {"type": "string", "pattern": "^[0-9]{3}$"},
    },
    "anyOf": [{"required": ["email"]}, {"required": ["phone"]}],
}

# (schema, texts its patterns write, texts the judge rejects). Each schema was compiled with
# the keyword beside `enum`, `const`, `anyOf` or `$ref` dropped before: a text of the last
# column matched.
CASES = [
    (
        CONTACT,
        ['{"email":"a@b.co"}', '{"name":"Ada","phone":"123"}', '{"email":"a@b.co","phone":"123"}'],
        ["{}", '{"name":"Ada"}', "1", '"x"', '{"phone":"12"}', '{"email":"x@"}'],
    ),
    ({"enum": ["ab", "abcd"], "maxLength": 3}, ['"ab"'], ['"abcd"']),
    ({"type": "string", "enum": ["a", 1, None]}, ['"a"'], ["1", "null"]),
    ({"enum": [12, 5], "minimum": 10}, ["12"], ["5"]),
    ({"enum": [{"a": 1}, {"a": 5}], "properties": {"a": {"maximum": 3}}}, ['{"a":1}'], ['{"a":5}']),
    (
        {"anyOf": [{"type": "integer"}, {"type": "null"}], "minimum": 10},
        ["10", "123", "null"],
        ["3", "-12", "9"],
    ),
    ({"minimum": 10}, ["10", "10.5", "99"], ["3", "9.99", "-10"]),
    ({"maxLength": 2}, ['"ab"', '""'], ['"abc"']),
    (
        {"allOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"maxLength": 3}]},
        ['"abc"', '"a"'],
        ['"abcd"', '"AB"', '""'],
    ),
    (
        {"type": "string", "format": "date", "maxLength": 10, "pattern": "^2024-[0-9-]+$"},
        ['"2024-02-28"'],
        ['"2023-02-28"', '"2024-02-30"'],
    ),
    (
        {"$defs": {"n": {"type": "integer", "maximum": 20}}, "$ref": "#/$defs/n", "minimum": 5},
        ["5", "20"],
        ["3", "21", '"x"'],
    ),
    (
        {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"a": {"minimum": 2}, "b": {"type": "string"}}, "required": ["b"]},
            ]
        },
        ['{"a":2,"b":"x"}', '{"a":7, "b":""}'],
        ['{"a":1,"b":"x"}', '{"a":2}', '{"b":"x"}', '{"a":"2","b":"x"}'],
    ),
    (
        {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                {"properties": {"b": {"type": "string"}}},
            ]
        },
        ['{"a":2}', "{}"],
        ['{"a":2,"b":"x"}', '{"b":"x"}'],
    ),
    (
        {"type": "array", "items": {"type": "integer"}, "allOf": [{"items": {"maximum": 1}}]},
        ["[0,1]", "[]"],
        ["[0,2]", '["a"]'],
    ),
    (
        {"type": ["integer", "null"], "anyOf": [{"minimum": 3}, {"type": "null"}]},
        ["3", "null"],
        ["2", '"a"'],
    ),
    ({"type": "integer", "anyOf": [{"type": "string"}, {"maximum": 1}]}, ["1", "-4"], ["2", '"a"']),
]


# The keywords written since: each exact within cdd's writing, or refused (below).
KEYWORD_CASES = [
    (
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
        ["[]", "[1]", '[1,"a"]'],
        ['["a"]', '[1,"a",2]', "[1,2]"],
    ),
    (
        {"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
        ["3", '"ab"'],
        ['"abc"', "null", "1.5"],
    ),
    (
        {
            "type": "object",
            "oneOf": [
                {
                    "required": ["kind"],
                    "properties": {"kind": {"const": "a"}, "n": {"type": "integer"}},
                },
                {
                    "required": ["kind"],
                    "properties": {"kind": {"const": "b"}, "n": {"type": "string"}},
                },
            ],
        },
        ['{"kind":"a","n":1}', '{"kind":"b","n":"x"}'],
        ['{"kind":"a","n":"x"}', '{"kind":"c"}', '{"n":1}'],
    ),
    ({"type": "integer", "not": {"minimum": 3}}, ["2", "-7"], ["3", "10", '"x"']),
    ({"type": "string", "not": {"enum": ["ab", "a"]}}, ['"b"', '"abc"', '""'], ['"a"', '"ab"']),
    (
        {
            "type": "integer",
            "if": {"minimum": 10},
            "then": {"multipleOf": 5},
            "else": {"maximum": 3},
        },
        ["10", "15", "3", "-4"],
        ["11", "4", "9"],
    ),
    (
        {
            "type": "array",
            "items": {"type": "integer"},
            "contains": {"minimum": 5},
            "minContains": 2,
        },
        ["[5,6]", "[1,7,2,9]"],
        ["[5]", "[1,2]", "[]"],
    ),
    (
        {
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "patternProperties": {"^x-": {"type": "string"}},
            "additionalProperties": False,
        },
        ['{"id":1}', '{"id":1,"x-a":"v"}', '{"x-":""}'],
        ['{"id":1,"y":"v"}', '{"x-a":1}', '{"id":"1"}'],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "minProperties": 1,
            "maxProperties": 1,
        },
        ['{"a":1}', '{"b":2}'],
        ["{}", '{"a":1,"b":2}'],
    ),
    (
        {
            "type": "object",
            "properties": {"card": {"type": "string"}, "billing": {"type": "string"}},
            "dependentRequired": {"card": ["billing"]},
        },
        ['{"billing":"x"}', '{"card":"1","billing":"x"}', "{}"],
        ['{"card":"1"}'],
    ),
    ({"type": "integer", "multipleOf": 6}, ["0", "12", "-18"], ["4", "9", "13"]),
    ({"type": "string", "pattern": "[0-9]{2}"}, ['"a12b"', '"99"'], ['"a1b2"', '""']),
    (
        {"$defs": {"pos": {"$anchor": "p", "type": "integer", "minimum": 1}}, "$ref": "#p"},
        ["1", "20"],
        ["0", '"1"'],
    ),
    ({"minimum": 2}, ["2", '"x"', "null", "[]", '{"a":1}'], ["1", "-3"]),
    (
        {
            "type": "object",
            "properties": {"child": {"$ref": "#"}, "v": {"type": "integer"}},
            "additionalProperties": False,
        },
        ['{"v":1}', '{"child":{"child":{"v":2}}}'],
        ['{"v":"1"}', '{"child":{"w":1}}'],
    ),
]


@pytest.mark.parametrize(("schema", "valid", "invalid"), KEYWORD_CASES)
def test_each_keyword_written_is_exact(schema: dict, valid: list, invalid: list):
    """What the patterns write the judge accepts, and what it rejects they do not write."""
    test_every_keyword_beside_another_is_enforced(schema, valid, invalid)


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, "branches 0 and 1 may both hold"),
        ({"type": "array", "uniqueItems": True}, "uniqueItems: items all different"),
        (
            {"type": "array", "contains": {"const": 1}, "maxContains": 1},
            "maxContains: at most 1 items satisfying contains",
        ),
        ({"not": {"pattern": "a"}}, "cannot write the complement of its 'pattern'"),
        ({"type": "number", "multipleOf": 0.5}, "0.5 is not an integer"),
    ],
)
def test_a_keyword_cdd_cannot_write_exactly_is_refused_saying_why(schema: dict, named: str):
    with pytest.raises(InputError, match=re.escape(named)):
        load_schema(schema, "spec.yaml:3")


@pytest.mark.parametrize(("schema", "valid", "invalid"), CASES)
def test_every_keyword_beside_another_is_enforced(schema: dict, valid: list, invalid: list):
    """The judge (jsonschema) accepts what the patterns write and rejects the rest; no text
    the judge rejects matches every pattern."""
    patterns = schema_patterns(schema, json_string_safe)
    constraint = judge(schema)
    for text in valid:
        assert constraint.matches(text), (text, constraint.error(text))
        assert written(patterns, text), (schema, text)
    for text in invalid:
        assert not constraint.matches(text), text
        assert not written(patterns, text), (schema, text)


def test_a_format_with_a_length_is_two_patterns_intersected():
    patterns = schema_patterns({"type": "string", "format": "uuid", "maxLength": 30})
    assert len(patterns) == 2  # no uuid is 30 characters or fewer: nothing matches both
    assert not any(
        written(patterns, json.dumps(text))
        for text in ("2eb8aa08-aa98-11ea-b4aa-73b441d16380", "2eb8aa08", "")
    )


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "string", "enum": [1, 2]}, "#: no value of its enum or const"),
        ({"type": "integer", "minimum": 5, "allOf": [{"maximum": 3}]}, "no integer lies"),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "types have nothing in common"),
        (
            {"type": "object", "required": ["a"], "allOf": [{"additionalProperties": False}]},
            "required 'a' is not allowed",
        ),
        ({"anyOf": [{"const": 1, "type": "null"}, False]}, "#/anyOf: no branch can be satisfied"),
    ],
)
def test_a_schema_nothing_satisfies_is_refused_saying_why(schema: dict, named: str):
    with pytest.raises(EmptySchema, match=re.escape(named)):
        schema_patterns(schema)
    with pytest.raises(InputError, match=re.escape(named)):
        load_schema(schema, "spec.yaml:3")


def test_a_branch_or_optional_property_nothing_satisfies_is_left_out():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer", "enum": ["x"]}, "b": {"type": "null"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    patterns = schema_patterns(schema)
    assert written(patterns, '{"b":null}') and written(patterns, "{}") is False
    assert not written(patterns, '{"a":"x","b":null}')


def test_every_unsupported_keyword_is_named_at_once_with_where_it_is():
    schema = {
        "type": "object",
        "propertyNames": {"maxLength": 3},
        "properties": {
            "tags": {"type": "array", "unevaluatedItems": False, "items": {"format": "iri"}},
            "n": {"anyOf": [{"$dynamicRef": "#x"}, {"allOf": [{"dependentSchemas": {}}]}]},
        },
        "$defs": {"d": {"unevaluatedProperties": False}},
    }
    with pytest.raises(UnsupportedSchema) as refused:
        schema_patterns(schema)
    message = str(refused.value)
    for named in (
        "keyword 'propertyNames' at #",
        "keyword 'unevaluatedItems' at #/properties/tags",
        "format 'iri' at #/properties/tags/items",
        "keyword '$dynamicRef' at #/properties/n/anyOf/0",
        "keyword 'dependentSchemas' at #/properties/n/anyOf/1/allOf/0",
        "keyword 'unevaluatedProperties' at #/$defs/d",
    ):
        assert named in message, message
    with pytest.raises(InputError) as refused_entry:
        load_schema(schema, "spec.yaml:3")
    assert len(str(refused_entry.value).splitlines()) == 1


def test_ref_beside_keywords_and_recursion_through_all_of():
    defs = {"$defs": {"x": {"allOf": [{"$ref": "#/$defs/x"}]}}}
    with pytest.raises(UnsupportedSchema, match="recurs deeper than 3 levels"):
        schema_patterns({**defs, "$ref": "#/$defs/x"})
    # A definition used twice along one path, not inside itself, is no recursion.
    twice = {
        "$defs": {"n": {"type": "integer"}},
        "allOf": [{"$ref": "#/$defs/n"}],
        "$ref": "#/$defs/n",
    }
    assert written(schema_patterns(twice), "7")


# --------------------------------------------------------------------------------------------
# The judge's formats


def suite_cases(name: str) -> list[tuple[str, bool]]:
    groups = json.loads((SUITE / f"format-{name}.json").read_text())
    return [
        (test["data"], test["valid"])
        for group in groups
        for test in group["tests"]
        if isinstance(test["data"], str)
    ]


FORMATS_WRITTEN = [
    "date", "time", "date-time", "email", "uuid", "ipv4", "hostname", "ipv6", "uri", "duration"
]  # fmt: skip


def test_every_format_cdd_writes_is_checked_here():
    assert sorted(FORMATS_WRITTEN) == sorted(FORMATS) == sorted(STRICT_FORMATS)


@pytest.mark.parametrize("fmt", FORMATS_WRITTEN)
def test_the_judge_checks_each_format_cdd_writes_as_the_official_suite_does(fmt: str):
    """Every string case of the JSON-Schema-Test-Suite (draft 2020-12, optional/format) for
    the formats cdd writes: the judge says valid exactly where the suite does."""
    constraint = judge({"type": "string", "format": fmt})
    cases = suite_cases(fmt)
    assert len(cases) >= 20
    wrong = [data for data, valid in cases if constraint.matches(json.dumps(data)) != valid]
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("fmt", "bad"),
    [
        ("time", "25:99:99"),
        ("time", "12:00:00"),  # no offset
        ("date-time", "2020-13-45T99:00:00"),
        ("date-time", "2020-01-01T10:00:00+25:00"),
        ("date", "2021-02-29"),
        ("email", "x@"),
        ("email", "@example.com"),
        ("uuid", "2eb8aa08-aa98-11ea-b4aa-73b441d1638"),
        ("ipv4", "127.1"),
        ("hostname", "-example.com"),
        ("hostname", "example..com"),
        ("hostname", "a" * 64 + ".com"),
        ("hostname", "xn--X.com"),  # not Punycode
        ("ipv6", "1::2::3"),
        ("ipv6", "fe80::1%eth0"),  # a zone is no part of the address
        ("ipv6", "12345::"),
        ("uri", "example.com/path"),  # no scheme
        ("uri", "http://exa mple.com"),
        ("uri", "http://[::1/"),
        ("duration", "P1D2H"),  # hours before the T
        ("duration", "PT"),
        ("duration", "P1Y2W"),
    ],
)
def test_a_wrong_value_of_each_format_is_rejected(fmt: str, bad: str):
    constraint = judge({"type": "object", "properties": {"v": {"type": "string", "format": fmt}}})
    assert constraint.explain(json.dumps({"v": bad})) == f"v: {bad!r} is not a {fmt!r}"


@pytest.mark.parametrize("fmt", FORMATS_WRITTEN)
def test_every_text_a_format_pattern_writes_is_valid_by_the_judge(fmt: str):
    """Random walks through the byte automaton of the format's generator pattern: the judge
    takes every text they spell, and no case the suite marks invalid matches the pattern."""
    moves = byte_automaton(FORMATS[fmt])
    rng = random.Random(0)
    texts = set()
    for _ in range(300):
        state, spelled = moves.start, b""
        while moves.moves.get(state) and not (state in moves.final and rng.random() < 0.1):
            byte, state = rng.choice(sorted(moves.moves[state].items()))
            spelled += bytes([byte])
        if state in moves.final:
            texts.add(spelled.decode())
    assert len(texts) >= 100
    wrong = [t for t in texts if not STRICT_FORMATS[fmt](t) or not re.fullmatch(FORMATS[fmt], t)]
    assert not wrong, wrong
    matched = [d for d, valid in suite_cases(fmt) if re.fullmatch(FORMATS[fmt], d) and not valid]
    assert not matched, matched


# --------------------------------------------------------------------------------------------
# The automata's product


def walks(table: automaton.TokenAutomaton, rng: random.Random, n: int) -> list[list[int]]:
    """Tokens of random walks from the start that end in a final state."""
    moves: dict[int, list[tuple[int, int]]] = {}
    for s, t, d in zip(table.src.tolist(), table.token.tolist(), table.dst.tolist(), strict=True):
        moves.setdefault(s, []).append((t, d))
    out = []
    for _ in range(n):
        state, ids = 0, []
        for _ in range(30):
            if (table.final[state] and rng.random() < 0.3) or state not in moves:
                break
            token, state = rng.choice(moves[state])
            ids.append(token)
        if table.final[state]:
            out.append(ids)
    return out


@pytest.mark.slow
def test_the_product_accepts_exactly_what_every_automaton_accepts():
    patterns = ("[a-z]+( [a-z]+)*", "[a-z ]{0,12}x", "[^q]*")
    parts = [compile_pattern(p, TOKENIZER) for p in patterns]
    product = intersect(parts)
    rng = random.Random(0)
    every = [ids for table in (product, *parts) for ids in walks(table, rng, 300)]
    assert len(every) > 400
    both = 0
    for ids in every:
        expected = all(p.accepts(ids) for p in parts)
        assert product.accepts(ids) == expected, TOKENIZER.decode(ids)
        both += expected
    assert both >= 300
    # Trimmed: from every state some final state is reached.
    reach = {int(s) for s in torch.nonzero(product.final).flatten()}
    moves = set(zip(product.src.tolist(), product.dst.tolist(), strict=True))
    grew = True
    while grew:
        before = len(reach)
        reach |= {s for s, d in moves if d in reach}
        grew = len(reach) > before
    assert reach == set(range(product.states))


def test_a_product_past_its_limit_is_refused_with_the_sizes(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(automaton, "MAX_PRODUCT_STATES", 5)
    a, b = compile_pattern("[a-z]{8}", TOKENIZER), compile_pattern("[a-m]+", TOKENIZER)
    with pytest.raises(InputError) as refused:
        intersect([a, b])
    assert str(refused.value) == (
        f"the product of the patterns' automata ({a.states} x {b.states} states) has more "
        "than 5 states, the most it may; give fewer or smaller patterns"
    )


def decode(layout, seed: int, start: int = 2, length: int = 16, b: int = 8) -> list[str]:
    """Masked diffusion in miniature on random predictions (test_structured's sampler)."""
    from tests.constraints.test_structured import decode_like_a_sampler

    torch.manual_seed(seed)
    probs = torch.softmax(3 * torch.randn(b, start + length, len(TOKENIZER)), -1)
    x = decode_like_a_sampler(layout, probs, start, seed)
    return [TOKENIZER.decode(row[start:]) for row in x.tolist()]


@pytest.mark.slow
def test_two_regexes_and_a_schema_in_one_job_all_hold():
    """Once refused ('write both in one regex'): the job's patterns are intersected."""
    words = RegexConstraint(pattern='"[a-z]+( [a-z]+)*"')
    short = RegexConstraint(pattern='"[^"]{1,9}"')
    schema = judge({"type": "string", "pattern": "^[a-w ]*$"})
    layout = pattern_layout([words, short, schema], TOKENIZER, 2, 16)
    for seed in (0, 1):
        texts = decode(layout, seed)
        for text in texts:
            assert words.matches(text) and short.matches(text) and schema.matches(text), text


@pytest.mark.slow
def test_a_schema_of_several_patterns_is_drawn_from_their_product():
    constraint = judge(
        {
            "type": "object",
            "properties": {"d": {"format": "date", "pattern": "^[0-9]{4}-02-[0-9]{2}$"}},
        }
    )
    assert len(constraint.automaton_patterns()) == 2
    layout = pattern_layout([constraint], TOKENIZER, 2, 16)
    texts = decode(layout, 0)
    assert all(constraint.matches(t) for t in texts), texts
    assert compile_patterns(constraint.automaton_patterns(), TOKENIZER).states == layout.states - 1


# --------------------------------------------------------------------------------------------
# The pattern, for a user to see


def test_the_patterns_of_a_schema_are_public():
    import cdd_cli as cdd

    regex = cdd.schema_to_regex({"type": "integer", "minimum": 3, "maximum": 12})
    assert [t for t in map(str, range(-2, 20)) if re.fullmatch(regex, t)] == [
        str(n) for n in range(3, 13)
    ]
    both = {"type": "string", "format": "date", "maxLength": 10}
    assert cdd.schema_to_patterns(both) == list(schema_patterns(both))
    assert len(cdd.schema_to_patterns(both)) == 2
    with pytest.raises(cdd.InputError, match="intersection of 2 regexes, not one"):
        cdd.schema_to_regex(both)
    with pytest.raises(
        cdd.InputError, match="keyword 'propertyNames' at #; keyword 'dependentSchemas' at #"
    ):
        cdd.schema_to_regex({"propertyNames": {}, "dependentSchemas": {}})


@pytest.mark.slow
def test_validate_shows_the_patterns_and_takes_two_pattern_constraints(
    text_model_dir: Path, tmp_path: Path
):
    """`cdd validate --show-pattern`: each regex and schema pattern, a line each; a spec with
    a regex and a schema (once refused: 'write both in one regex') is valid."""
    from typer.testing import CliRunner

    from cdd_cli.cli.app import app

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"model: {text_model_dir}\nconstraints:\n"
        "  - type: regex\n    pattern: '^[0-9]{1,3}$'\n"
        "  - type: json_schema\n    schema: {type: integer, minimum: 10, maximum: 99}\n"
    )
    result = CliRunner().invoke(app, ["validate", str(spec), "--show-pattern", "--length", "8"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "regex\t[0-9]{1,3}",
        "json_schema\t" + schema_patterns({"type": "integer", "minimum": 10, "maximum": 99})[0],
    ]
    assert "ok (2 constraint(s)" in result.stderr
    plain = CliRunner().invoke(app, ["validate", str(spec), "--length", "8"])
    assert plain.exit_code == 0 and "constraints:" in plain.stdout


# --------------------------------------------------------------------------------------------
# outlines-core 0.2.14's Index loses texts past a match (automaton.py's docstring): worked around


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (r"1(?:\.[0-9])?", "1.5"),  # a move out of an accepting state into one that is not
        (r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", "12.25e3"),  # a number
        ("(?:1|10)", "10"),  # a longer branch after a shorter one matched (leftmost-first)
        ("a(?:bc)?", "abc"),
    ],
)
def test_the_token_automaton_takes_texts_that_go_on_past_a_match(pattern: str, text: str):
    table = compile_pattern(pattern, TOKENIZER)
    assert table.accepts(TOKENIZER.encode(text))
    for shorter in (text[:1], text[:-1]):  # and its prefixes exactly as the pattern says
        assert table.accepts(TOKENIZER.encode(shorter)) == bool(re.fullmatch(pattern, shorter))
    # Every state it keeps leads to an accepting one (the states past the end are gone).
    reach = set(torch.nonzero(table.final).flatten().tolist())
    moves = set(zip(table.src.tolist(), table.dst.tolist(), strict=True))
    while len(grown := reach | {s for s, d in moves if d in reach}) > len(reach):
        reach = grown
    assert reach | {0} == set(range(table.states))


def test_a_pattern_is_opened_by_start_only_where_it_cannot_read_it():
    """`START` keeps the library's search for the pattern anywhere from tracking every
    position (a host name's exponential blow-up); a pattern that may read `START` itself is
    built with `END` only (with `START` inside `[^0-4]{0,40}` it is the blow-up)."""
    from cdd_cli.constraints.pattern_limits import may_read

    start = ord(automaton.START)
    assert not may_read(FORMATS["hostname"], start) and not may_read("a(?:bc)?", start)
    for broad in ("[^0-4]{0,40}", ".{0,4}", r"\w+", '"(?:[^"\\\\])*"', r"\x{10FFFE}"):
        assert may_read(broad, start), broad
    assert len(byte_automaton("[^0-4]{0,40}").moves) < 1000


def test_a_string_pattern_that_may_hold_a_quote_after_a_match_is_refused():
    """The byte automaton that says which string patterns are safe to write unescaped sees
    the quote after "a" (outlines-core's own index dropped it, and `"a"b"` was written)."""
    assert not json_string_safe('a(?:"b)?')
    assert json_string_safe("a(?:bc)?")
    with pytest.raises(UnsupportedSchema, match="can match a quote"):
        schema_patterns({"type": "string", "pattern": '^a(?:"b)?$'}, pattern_safe=json_string_safe)


# --------------------------------------------------------------------------------------------
# whitespace: compact | flexible

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "tags": {"type": "array", "items": {"enum": ["a", {"k": [1, 2]}]}, "maxItems": 3},
        "home": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    "required": ["name"],
}
PEOPLE = [
    {"name": "Ann", "tags": ["a", {"k": [1, 2]}], "home": {"city": "Rome"}},
    {"name": "Bo", "tags": [], "home": {}},
    {"name": ""},
]


def test_flexible_whitespace_takes_json_as_json_dumps_writes_it():
    import cdd_cli as cdd

    compact = cdd.schema_to_regex(PERSON)
    flexible = cdd.schema_to_regex(PERSON, whitespace="flexible")
    for person in PEOPLE:
        indented, spaced = json.dumps(person, indent=2), json.dumps(person)
        tabbed = json.dumps(person, indent="\t")
        assert all(re.fullmatch(flexible, t) for t in (indented, spaced, tabbed)), indented
        assert re.fullmatch(compact, spaced) and not re.fullmatch(compact, indented)
    # Bounded: one space, or a line break and an indentation, at each place; nothing else.
    for loose in ('{"name":  "x"}', '{"name":\t"x"}', '{"name": "x"}\n\n', '{"name" :\r\n"x"}'):
        assert not re.fullmatch(flexible, loose), loose
    assert re.fullmatch(flexible, ' {"name" : "x" }\n')
    invalid = json.dumps({"name": "too long a name"}, indent=2)
    assert not re.fullmatch(flexible, invalid)


def test_the_whitespace_option_is_a_key_of_the_json_schema_type():
    import cdd_cli as cdd
    from cdd_cli.constraints.structured import entry_patterns

    entry = cdd.JsonSchema(PERSON, whitespace="flexible")
    assert entry_patterns(entry) == schema_patterns(
        PERSON, pattern_safe=json_string_safe, whitespace="flexible"
    )
    assert entry_patterns(cdd.JsonSchema(PERSON)) == schema_patterns(
        PERSON, pattern_safe=json_string_safe
    )
    with pytest.raises(cdd.InputError, match="whitespace") as refused:
        cdd.JsonSchema(PERSON, whitespace="loose")
    assert "\n" not in str(refused.value)
    with pytest.raises(cdd.InputError, match="'compact' or 'flexible', got 'loose'"):
        cdd.schema_to_regex(PERSON, whitespace="loose")


@pytest.mark.slow
def test_texts_drawn_under_flexible_whitespace_are_valid():
    text, source = load_schema(PERSON, "test", "flexible")
    constraint = JsonSchemaConstraint(schema_text=text, source=source, whitespace="flexible")
    layout = pattern_layout([constraint], TOKENIZER, 2, 24)
    texts = decode(layout, 0, length=24)
    assert all(constraint.matches(t) for t in texts), texts
    compact = pattern_layout([judge(PERSON)], TOKENIZER, 2, 24)
    assert layout.states > compact.states  # the whitespace's own states
