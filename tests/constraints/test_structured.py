"""Structured output: regex and JSON Schema constraints. Every match of a schema's regex is a
valid instance; the pattern's closed form keeps every draw on a path of the token automaton,
whatever order positions are decided in; `cdd generate` certifies records by the exact judges;
what cannot be done is refused in one line."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import jsonschema
import pytest
import torch

from cdd_cli.constraints import automaton
from cdd_cli.constraints.automaton import compile_pattern
from cdd_cli.constraints.json_schema import UnsupportedSchema, load_schema, schema_regex
from cdd_cli.constraints.json_schema.byte_automata import json_string_safe
from cdd_cli.constraints.pattern_layout import FREE
from cdd_cli.constraints.structured import JsonSchemaConstraint, RegexConstraint, pattern_layout
from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import FileTokenizer, Gpt2Tokenizer
from tests.test_text import generate, records

TOKENIZER = Gpt2Tokenizer()

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "city": {"enum": ["Rome", "Oslo"]},
        "tags": {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2},
    },
    "required": ["name", "age"],
}


def schema_constraint(schema: dict) -> JsonSchemaConstraint:
    text, source = load_schema(schema, "test")
    return JsonSchemaConstraint(schema_text=text, source=source)


# --------------------------------------------------------------------------------------------
# The schema's regex


NUMBERS = [*map(str, range(-25, 26)), "0.5", "-0.5", "2.5", "-2.5", "12.0", "12.01", "-12.0"]
NUMBERS += ["3.000", "-3.0", "9.99", "10.5", "-10.5", "100", "0.0", "1e3"]


@pytest.mark.parametrize("kind", ["integer", "number"])
@pytest.mark.parametrize("low", [None, -12, -3, 0, 2, 10])
@pytest.mark.parametrize("high", [None, -3, 0, 3, 12])
@pytest.mark.parametrize("exclusive", [False, True])
def test_a_bounded_number_matches_only_where_the_schema_accepts_it(kind, low, high, exclusive):
    schema: dict = {"type": kind}
    if low is not None:
        schema["exclusiveMinimum" if exclusive else "minimum"] = low
    if high is not None:
        schema["maximum"] = high
    try:
        pattern = re.compile(schema_regex(schema))
    except UnsupportedSchema as exc:
        assert "no " in str(exc) and low is not None and high is not None and low >= high
        return
    validator = jsonschema.Draft202012Validator(schema)
    written = 0
    for text in NUMBERS:
        valid = validator.is_valid(json.loads(text))
        matched = pattern.fullmatch(text) is not None
        assert not matched or valid, (schema, text)
        # The regex writes every valid integer (no exponent, no "-0"), and a number's whole
        # and decimal forms.
        if valid and "e" not in text and not (kind == "integer" and "." in text):
            assert matched, (schema, text)
        written += matched
    assert written or (low is not None and high is not None and low >= high - 1)


def random_match(table: automaton.TokenAutomaton, rng: random.Random, limit: int = 60):
    """Tokens of a random walk through the automaton that ends in an accepting state."""
    moves: dict[int, list[tuple[int, int]]] = {}
    for s, t, d in zip(table.src.tolist(), table.token.tolist(), table.dst.tolist(), strict=True):
        moves.setdefault(s, []).append((t, d))
    state, ids = 0, []
    for _ in range(limit):
        if table.final[state] and rng.random() < 0.3:
            return ids
        if state not in moves:
            break
        # Leaving the state is preferred: loops (digits, string characters) would go on.
        onward = [m for m in moves[state] if m[1] != state]
        token, state = rng.choice(onward if onward and rng.random() < 0.7 else moves[state])
        ids.append(token)
    return ids if table.final[state] else None


@pytest.mark.slow
@pytest.mark.parametrize(
    "schema",
    [
        PERSON,
        {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 5}, "maxItems": 3},
        {
            "type": "object",
            "properties": {
                "a": {"type": "string", "format": "date"},
                "b": {
                    "anyOf": [{"type": "null"}, {"type": "string", "pattern": "^[A-Z]{2}[0-9]$"}]
                },
            },
            "required": ["b"],
        },
        {
            "$defs": {
                "p": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
            },
            "type": "array",
            "items": {"$ref": "#/$defs/p"},
            "minItems": 2,
        },
    ],
)
def test_every_text_the_automaton_spells_is_a_valid_instance(schema: dict):
    """Random walks through the compiled token automaton (GPT-2's vocabulary), decoded as the
    judge reads them, all validate."""
    constraint = schema_constraint(schema)
    table = compile_pattern(constraint.automaton_pattern(), TOKENIZER)
    rng = random.Random(0)
    texts = [random_match(table, rng) for _ in range(300)]
    texts = [TOKENIZER.decode(ids) for ids in texts if ids is not None]
    assert len(texts) >= 100
    for text in texts:
        assert constraint.matches(text), (text, constraint.error(text))


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "integer", "multipleOf": 7}, "multiples of 7 take a regex longer"),
        (
            {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
            "uniqueItems: items all different",
        ),
        ({"oneOf": [{"type": "integer"}, {"minimum": 1}]}, "may both hold"),
        ({"type": "object", "properties": {"a": {"propertyNames": {}}}}, "#/properties/a"),
        ({"type": "number", "minimum": 0.5}, "whole numbers"),
        ({"type": "string", "format": "idn-hostname"}, "format 'idn-hostname'"),
        ({"type": "string", "pattern": '^a"b$'}, "quote"),
        (
            {
                "$ref": "#/$defs/x",
                "$defs": {"x": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/x"}}},
            },
            "recurs deeper than 3 levels",
        ),
    ],
)
def test_what_the_regex_cannot_say_is_refused_by_name(schema: dict, named: str):
    with pytest.raises(InputError, match=re.escape(named)):
        load_schema(schema, "spec.yaml:3")


def test_a_string_pattern_is_checked_against_json_string_characters():
    assert json_string_safe("[A-Z]{2}[0-9]")
    assert not json_string_safe('[a-z"]+')
    assert not json_string_safe(r"a\\b")
    assert not json_string_safe(".+")  # '.' matches a quote too


def test_the_judge_is_jsonschema_with_formats_checked():
    c = schema_constraint(
        {
            "type": "object",
            "properties": {"d": {"type": "string", "format": "date"}},
            "required": ["d"],
        }
    )
    assert c.matches('{"d":"2024-02-28"}')
    assert not c.matches('{"d":"2024-02-31"}')  # the format checker reads the date
    assert "not JSON" in c.explain('{"d":')
    assert c.explain('{"e":1}').startswith("the document")


def test_the_regex_judge_is_a_whole_match_and_says_why_not():
    code = RegexConstraint(pattern="^[A-Z]{2}-[0-9]{3}$")
    assert code.judge(["AB-123", "AB-1234", "xAB-123", "ab-123"]) == [1.0, 0.0, 0.0, 0.0]
    assert code.explain("AB-123") is None
    assert code.explain("AB-1234") == "'AB-1234' does not match '^[A-Z]{2}-[0-9]{3}$' whole"
    assert code.explain("x" * 80) == f"{'x' * 60!r} does not match '^[A-Z]{{2}}-[0-9]{{3}}$' whole"
    assert code.label() == "matches /^[A-Z]{2}-[0-9]{3}$/"
    assert code.automaton_pattern() == "[A-Z]{2}-[0-9]{3}"  # the automaton matches whole
    assert (code.tau, code.upper_bound) == (1.0, False) and code.satisfied(1.0)
    assert not code.satisfied(0.0)
    folded = RegexConstraint(pattern="[a-z]+", ignore_case=True)
    assert folded.judge(["Whale", "whale", "whale!"]) == [1.0, 1.0, 0.0]
    assert folded.label() == "matches /[a-z]+/i"
    assert folded.automaton_pattern() == "(?i:[a-z]+)"


def test_the_schema_judge_names_where_an_instance_fails():
    person = schema_constraint(PERSON)
    assert person.judge(['{"name":"Ada","age":36}', '{"name":"Ada","age":7}']) == [1.0, 0.0]
    assert person.explain('{"name":"Ada","age":36}') is None
    assert person.explain('{"name":"Ada","age":7}') == "age: 7 is less than the minimum of 18"
    assert person.explain('{"name":"Ada","age":36,"tags":[true,3]}') == (
        "tags/1: 3 is not of type 'boolean'"
    )
    long = person.explain('{"name":"' + "x" * 200 + '","age":36}')
    assert long.startswith("name: 'xxx") and len(long) == len("name: ") + 120
    assert person.label() == "JSON valid under inline"
    assert person.automaton_pattern() == schema_regex(PERSON)


# --------------------------------------------------------------------------------------------
# The automaton and its cache


@pytest.mark.slow
def test_the_automaton_is_cached_on_disk_and_a_torn_file_is_rebuilt():
    pattern = r"[0-9]{3}-[a-c]{2}"
    compile_pattern.cache_clear()
    first = compile_pattern(pattern, TOKENIZER)
    files = list((automaton.cache_dir() / "automata").glob("*.safetensors"))
    assert files
    compile_pattern.cache_clear()
    again = compile_pattern(pattern, TOKENIZER)
    assert torch.equal(first.token, again.token) and torch.equal(first.final, again.final)
    for f in files:
        f.write_bytes(b"torn")
    compile_pattern.cache_clear()
    rebuilt = compile_pattern(pattern, TOKENIZER)
    assert torch.equal(first.dst, rebuilt.dst)
    assert rebuilt.accepts(TOKENIZER.encode("123-ab"))
    assert not rebuilt.accepts(TOKENIZER.encode("123-abc"))


def smollm2_tokenizer() -> FileTokenizer:
    """The shipped A2D model's tokenizer: a Hugging Face tokenizers file (49,152 tokens)."""
    from cdd_cli.models.registry import ASSETS

    return FileTokenizer(ASSETS / "smollm2-a2d" / "tokenizer.json", eos_id=0, mask_id=16)


@pytest.mark.slow
@pytest.mark.parametrize("make", [Gpt2Tokenizer, smollm2_tokenizer], ids=["gpt2", "smollm2"])
def test_token_bytes_are_the_bytes_tokens_stand_for(make):
    tokenizer = make()
    pieces = tokenizer.token_bytes()
    assert pieces[tokenizer.eos_id] is None and pieces[tokenizer.mask_id] is None
    # Whatever the text, its tokens' bytes spell it, a character split over tokens included.
    for text in (' {"name": "Ishmael"}', "naïve café 東京 — ok", "\n\tx = 1;"):
        ids = tokenizer.encode(text)
        assert b"".join(pieces[i] for i in ids) == text.encode(), text


# --------------------------------------------------------------------------------------------
# The projection


def decode_like_a_sampler(layout, probs: torch.Tensor, start: int, seed: int) -> torch.Tensor:
    """Masked diffusion in miniature: each round plans, projects and decides a random few
    undecided positions by drawing from the projection, until all are decided."""
    b, total, _ = probs.shape
    x = torch.full((b, total), TOKENIZER.mask_id)
    fixed = torch.zeros(b, total, dtype=torch.bool)
    fixed[:, :start] = True
    generators = [torch.Generator().manual_seed(seed + i) for i in range(b)]
    rng = torch.Generator().manual_seed(seed)
    while not bool(fixed.all()):
        plans = layout.plan(probs, x, fixed, generators)
        projected = layout.apply(probs, plans, fixed)
        deciding = (torch.rand(b, total, generator=rng) < 0.3) & ~fixed
        drawn = torch.multinomial(projected.view(b * total, -1), 1, generator=rng).view(b, total)
        x = torch.where(deciding, drawn, x)
        fixed |= deciding
    return x


@pytest.mark.slow
@pytest.mark.parametrize(
    "constraint",
    [
        RegexConstraint(pattern=r"\d{4}-\d{2}-\d{2}"),
        RegexConstraint(pattern=r"(cat|dog)s? [a-z]+!", ignore_case=True),
        schema_constraint(PERSON),
    ],
    ids=["date", "words", "person"],
)
def test_draws_decided_in_any_order_always_match(constraint):
    """Random predictions, positions decided at random in random order: every sequence that
    comes out fullmatches the pattern (the exact judge), with or without an early end."""
    start, length, b = 2, 24, 8
    layout = pattern_layout([constraint], TOKENIZER, start, length)
    torch.manual_seed(0)
    probs = torch.softmax(3 * torch.randn(b, start + length, len(TOKENIZER)), -1)
    for seed in (0, 1):
        x = decode_like_a_sampler(layout, probs, start, seed)
        texts = [TOKENIZER.decode(row[start:]) for row in x.tolist()]
        assert all(constraint.matches(t) for t in texts), texts


def test_the_projection_keeps_the_rest_of_each_distribution():
    """Each undecided position becomes the prediction renormalised over its edge's tokens:
    allowed tokens keep their ratios; decided positions and the prompt are untouched."""
    layout = pattern_layout([RegexConstraint(pattern=r"[0-9]{2}x")], TOKENIZER, 1, 6)
    probs = torch.softmax(torch.randn(2, 7, len(TOKENIZER)), -1)
    x = torch.full((2, 7), TOKENIZER.mask_id)
    fixed = torch.zeros(2, 7, dtype=torch.bool)
    fixed[:, 0] = True
    x[0, 1], fixed[0, 1] = TOKENIZER.encode("4")[0], True
    plans = layout.plan(probs, x, fixed, [torch.Generator().manual_seed(i) for i in range(2)])
    out = layout.apply(probs, plans, fixed)
    assert torch.equal(out[:, 0], probs[:, 0]) and torch.equal(out[0, 1], probs[0, 1])
    for b, plan in enumerate(plans):
        for i, u in enumerate(plan.sets):
            if fixed[b, 1 + i] or u == FREE:
                continue
            allowed = layout.masks[u]
            row = out[b, 1 + i]
            assert torch.allclose(row.sum(), torch.tensor(1.0)) and not row[~allowed].any()
            expected = probs[b, 1 + i] * allowed
            assert torch.allclose(row, expected / expected.sum(), atol=1e-6)


def test_paths_follow_the_model_where_the_pattern_leaves_a_choice():
    """An enumeration is chosen in proportion to the model's mass on each branch, not always
    its mode."""
    cat, dog = TOKENIZER.encode("cat")[0], TOKENIZER.encode("dog")[0]
    bang, ask = TOKENIZER.encode("!")[0], TOKENIZER.encode("?")[0]
    # The branches part ways: "cat" goes on with "!", "dog" with "?".
    layout = pattern_layout([RegexConstraint(pattern=r"cat!|dog\?")], TOKENIZER, 0, 2)
    probs = torch.full((400, 2, len(TOKENIZER)), 1e-9)
    probs[:, 0, cat], probs[:, 0, dog] = 0.75, 0.25
    probs[:, 1, bang], probs[:, 1, ask] = 0.5, 0.5
    x = torch.full((400, 2), TOKENIZER.mask_id)
    fixed = torch.zeros(400, 2, dtype=torch.bool)
    plans = layout.plan(probs, x, fixed, [torch.Generator().manual_seed(i) for i in range(400)])
    assert all(layout.masks[p.sets[0], cat] != layout.masks[p.sets[0], dog] for p in plans)
    chose_cat = sum(layout.masks[p.sets[0], cat].item() for p in plans)
    assert 250 < chose_cat < 350  # ~300 expected


@pytest.mark.slow
def test_a_pattern_longer_than_the_continuation_is_refused_before_sampling():
    digits = RegexConstraint(pattern="[0-9]{40}")
    fewest = compile_pattern(digits.automaton_pattern(), TOKENIZER).shortest()
    assert 1 < fewest < 40  # GPT-2 has tokens of many digits ("0000000000000000")
    pattern_layout([digits], TOKENIZER, 0, fewest)
    with pytest.raises(
        InputError, match=f"takes {fewest} tokens; the continuation has {fewest - 1}"
    ):
        pattern_layout([digits], TOKENIZER, 0, fewest - 1)
    with pytest.raises(InputError, match="regex: no text matches all 2 patterns together"):
        pattern_layout(
            [RegexConstraint(pattern="a"), RegexConstraint(pattern="b")], TOKENIZER, 0, 4
        )
    with pytest.raises(InputError, match="cannot be compiled"):
        compile_pattern(r"(a)\1", TOKENIZER)  # a back-reference: no automaton has one


# --------------------------------------------------------------------------------------------
# Through the command line


def spec_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(body)
    return path


@pytest.mark.slow
def test_generate_certifies_json_records_that_unconstrained_sampling_does_not(
    text_model_dir: Path, tmp_path: Path
):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    spec = spec_file(tmp_path, f"constraints:\n  - type: json_schema\n    schema: {schema}\n")
    args = ["--prompt", "Person:", "-n", "4", "--length", "24", "--spec", str(spec)]
    free = generate(text_model_dir, *args, "--method", "unconstrained")
    assert free.exit_code == 3 and not any(r["satisfied"] for r in records(free.stdout))
    result = generate(text_model_dir, *args)
    assert result.exit_code == 0, result.stderr
    validator = jsonschema.Draft202012Validator(PERSON)
    for row in records(result.stdout):
        assert validator.is_valid(json.loads(row["text"]))
        judged = row["constraints"]["json_schema"]
        assert judged["satisfied"] and judged["value"] == 1.0


@pytest.mark.slow
def test_a_regex_and_toxicity_in_one_spec(text_model_dir: Path, toxicity_dir: Path, tmp_path):
    from tests.test_text import toxicity_spec

    args = ["--prompt", "You are", "-n", "4", "--length", "10"]
    spec = toxicity_spec(tmp_path, toxicity_dir, 1.0, "continuation")
    probe = generate(text_model_dir, *args, "--spec", str(spec))
    tau = round(sorted(r["constraints"]["toxicity"]["value"] for r in records(probe.stdout))[1], 4)
    spec = toxicity_spec(tmp_path, toxicity_dir, tau, "continuation")
    spec.write_text(spec.read_text() + "  - type: regex\n    pattern: '[a-z]+( [a-z]+){2}'\n")
    result = generate(text_model_dir, *args, "--spec", str(spec))
    assert result.exit_code == 0, result.stderr
    for row in records(result.stdout):
        assert re.fullmatch("[a-z]+( [a-z]+){2}", row["text"])
        assert row["constraints"]["toxicity"]["value"] <= tau


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("  - type: regex\n    pattern: '(unclosed'\n", "not a regular expression"),
        ("  - type: json_schema\n    schema: {propertyNames: {}}\n", "'propertyNames'"),
        ("  - type: json_schema\n    schema: nowhere.json\n", "cannot read nowhere.json"),
        ("  - type: json_schema\n    schema: {type: 7}\n", "not a valid JSON Schema"),
        ("  - type: regex\n    pattern: '(x ){20}'\n", "tokens; the continuation has 16"),
    ],
)
def test_validate_refuses_in_one_line(text_model_dir: Path, tmp_path: Path, body, expected):
    from typer.testing import CliRunner

    from cdd_cli.cli.app import app

    spec = spec_file(tmp_path, f"model: {text_model_dir}\nconstraints:\n{body}")
    result = CliRunner().invoke(app, ["validate", str(spec), "--length", "16"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


@pytest.mark.slow
def test_an_excluded_word_is_kept_out_of_a_pattern_and_a_word_layout_cannot_join_it(
    text_model_dir: Path, tmp_path: Path
):
    """`exclude` is served by the pattern's path (the tokens that read as the word are taken
    out of every edge); a constraint that lays out words beside a pattern is refused."""
    pattern = "  - type: regex\n    pattern: '(the|a|one) (cat|dog)( (the|a|one) (cat|dog))*'\n"
    exclude = "  - type: exclude\n    words: [cat, the]\n"
    spec = spec_file(tmp_path, f"constraints:\n{pattern}{exclude}")
    result = generate(
        text_model_dir, "--prompt", "Pets:", "-n", "4", "--length", "12", "--spec", str(spec)
    )
    assert result.exit_code == 0, result.stderr
    for row in records(result.stdout):
        words = row["text"].split()
        assert words and not {"cat", "the"} & set(words), row["text"]
        assert row["constraints"]["exclude"]["satisfied"]
    spec.write_text(f"constraints:\n{pattern}  - type: word_count\n    max: 4\n")
    refused = generate(text_model_dir, "--prompt", "Pets:", "-n", "1", "--spec", str(spec))
    assert refused.exit_code == 2
    assert "regex and word_count cannot be combined" in refused.stderr


@pytest.mark.slow
def test_a_patterns_layout_takes_the_excluded_words_tokens_out_of_its_edges():
    from cdd_cli.constraints.lexical import Exclude

    regex = RegexConstraint(pattern="(the|a) (cat|dog)")
    cat = TOKENIZER.encode(" cat")
    assert len(cat) == 1
    free = pattern_layout([regex], TOKENIZER, 3, 8)
    assert free.masks[:, cat[0]].any() and (free.start, free.length) == (3, 8)
    kept_out = pattern_layout([regex, Exclude(words=("cat",))], TOKENIZER, 3, 8)
    assert not kept_out.masks[:, cat[0]].any()
    assert kept_out.masks[:, TOKENIZER.encode(" dog")[0]].any()


def readme_section() -> str:
    page = Path(__file__).resolve().parents[2] / "docs" / "structured-output.md"
    return page.read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_readme_structured_output_files_validate(tmp_path: Path, monkeypatch):
    """The files the README's example writes (its heredocs) are what `cdd validate` accepts."""
    from typer.testing import CliRunner

    from cdd_cli.cli.app import app

    section = readme_section()
    files = re.findall(r"cat > (\S+) <<'EOF'\n(.*?)\nEOF\n", section, re.S)
    assert [name for name, _ in files] == ["person.json", "person.yaml", "date.yaml"]
    monkeypatch.chdir(tmp_path)
    for name, body in files:
        Path(name).write_text(body + "\n")
    for spec in ("person.yaml", "date.yaml"):
        result = CliRunner().invoke(app, ["validate", spec, "--length", "32"])
        assert result.exit_code == 0, result.stderr
        assert f"{spec}: ok" in result.stderr


@pytest.mark.slow
def test_the_readme_structured_output_python_example_runs(capsys):
    code = readme_section().split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/structured-output.md", "exec"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        text, satisfied = line.rsplit(" ", 1)
        age = json.loads(text)["age"]
        assert satisfied == "True" and 18 <= age <= 99


def test_a_path_the_model_gives_no_mass_is_still_drawn():
    """A prediction with nothing on any allowed token (as after another projection) still
    yields a path; its positions become uniform over the edge's tokens."""
    layout = pattern_layout([RegexConstraint(pattern="[0-9]{3}")], TOKENIZER, 0, 3)
    probs = torch.zeros(2, 3, len(TOKENIZER))
    probs[..., TOKENIZER.encode(" whale")[0]] = 1.0
    x = torch.full((2, 3), TOKENIZER.mask_id)
    fixed = torch.zeros(2, 3, dtype=torch.bool)
    plans = layout.plan(probs, x, fixed, [torch.Generator().manual_seed(i) for i in range(2)])
    out = layout.apply(probs, plans, fixed)
    for b, plan in enumerate(plans):
        used = [(i, u) for i, u in enumerate(plan.sets) if u != FREE]
        assert used
        for i, u in used:
            allowed = layout.masks[u]
            assert torch.allclose(out[b, i][allowed], torch.tensor(1.0 / int(allowed.sum())))
    ids = out.argmax(-1)
    assert all(re.fullmatch("[0-9]{3}", TOKENIZER.decode(row)) for row in ids.tolist())


def test_a_draw_never_picks_an_index_of_weight_zero():
    """u x total rounds to the total (or past the last partial sum): the index found there is
    the last one, which here weighs nothing; the draw takes the last that weighs instead."""
    from cdd_cli.constraints.pattern_layout import _pick

    weights = torch.tensor([[0.1, 0.2, 0.3, 0.0, 0.0], [0.0, 0.5, 0.0, 0.5, 0.0]])
    rounded_up = torch.ones(2, dtype=torch.float64)  # u x total == total, as rounding can make it
    assert _pick(weights.double(), rounded_up).tolist() == [2, 3]
    assert _pick(weights.double(), torch.zeros(2, dtype=torch.float64)).tolist() == [0, 1]
