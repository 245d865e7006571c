"""Lexical and counting constraints through `cdd generate`: the word layout satisfies every
judge, unconstrained sampling does not, and impossible specs fail before sampling."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cdd_cli.constraints.lexical import Count, Exclude, Include, WordAt, WordCount
from cdd_cli.errors import InputError
from cdd_cli.evaluate.lexical import split_words
from cdd_cli.models.tokenizers import Gpt2Tokenizer
from cdd_cli.projection.layout import WordLayout
from tests.test_text import generate, records, toxicity_spec

SPEC = """constraints:
  - type: word_count
    equals: 9
  - type: word_at
    position: 2
    word: whale
  - type: word_at
    position: -1
    word: harpooneer
  - type: include
    words: [ship, Ahab]
  - type: exclude
    words: [the, and, of]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_cdd_satisfies_all_lexical_constraints_at_once(text_model_dir: Path, tmp_path: Path):
    spec = write(tmp_path, SPEC)
    args = ["--prompt", "Call me Ishmael.", "-n", "4", "--length", "16", "--spec", str(spec)]
    free = generate(text_model_dir, *args, "--method", "unconstrained")
    assert free.exit_code == 3 and not any(r["satisfied"] for r in records(free.stdout))
    result = generate(text_model_dir, *args)
    assert result.exit_code == 0, result.stderr
    for row in records(result.stdout):
        words = split_words(row["text"])
        assert len(words) == 9 and words[1] == "whale" and words[-1] == "harpooneer"
        assert {"ship", "Ahab"} <= set(words) and not {"the", "and", "of"} & set(words)
        assert set(row["constraints"]) == {
            "word_count", "word_at", "word_at#2", "include", "exclude"
        }  # fmt: skip
        assert all(c["satisfied"] and c["value"] == 1.0 for c in row["constraints"].values())


def test_count_reads_the_prompt(text_model_dir: Path):
    result = generate(
        text_model_dir, "--prompt", "How many r's are in strawberry?", "-c", "count",
        "-n", "3", "--length", "6",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    for row in records(result.stdout):
        assert row["text"].split()[0] == "3"
        assert "'r' occurs 3 time(s)" in row["constraints"]["count"]["detail"]


def test_lexical_with_toxicity_in_one_spec(
    text_model_dir: Path, toxicity_dir: Path, tmp_path: Path
):
    args = ["--prompt", "You are", "-n", "4", "--length", "8"]
    probe = generate(
        text_model_dir,
        *args,
        "--spec",
        str(toxicity_spec(tmp_path, toxicity_dir, 1.0, "continuation")),
    )
    tau = round(sorted(r["constraints"]["toxicity"]["value"] for r in records(probe.stdout))[1], 4)
    spec = toxicity_spec(tmp_path, toxicity_dir, tau, "continuation")
    spec.write_text(
        spec.read_text()
        + "  - type: word_at\n    position: 1\n    word: kind\n"
        + "  - type: word_count\n    max: 6\n"
    )
    result = generate(text_model_dir, *args, "--spec", str(spec))
    assert result.exit_code == 0, result.stderr
    for row in records(result.stdout):
        words = split_words(row["text"])
        assert words[0] == "kind" and len(words) <= 6
        assert row["constraints"]["toxicity"]["value"] <= tau


@pytest.mark.parametrize(
    ("spec", "args", "expected"),
    [
        (
            "constraints:\n  - type: word_at\n    position: 40\n    word: cat\n",
            [],
            "need 40 word(s)",
        ),
        (
            "constraints:\n  - type: word_at\n    position: 1\n    word: cat\n"
            "  - type: word_count\n    max: 0\n",
            [],
            "word_count allows at most 0",
        ),
        (
            "constraints:\n  - type: include\n    words: [antidisestablishmentarianism]\n",
            ["--length", "3"],
            "hold at most",
        ),
        ("constraints:\n  - type: word_at\n    position: 1\n    word: U.S.\n", [], "not one word"),
        ("constraints:\n  - type: count\n", ["--prompt", "Tell me a story"], "does not ask"),
    ],
)
def test_impossible_lexical_specs_fail_before_sampling(
    text_model_dir: Path, tmp_path: Path, spec: str, args: list[str], expected: str
):
    out = tmp_path / "out.jsonl"
    result = generate(
        text_model_dir, "--length", "12", "--spec", str(write(tmp_path, spec)), "-o", str(out),
        *args,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists() or out.read_text() == ""  # nothing sampled


def test_layout_places_include_words_where_they_cost_least():
    tokenizer = Gpt2Tokenizer()
    layout = WordLayout([Include(words=("whale",))], tokenizer, start=2, length=5)
    probs = torch.full((7, len(tokenizer)), 1e-6)
    (whale,) = tokenizer.encode(" whale")
    probs[5, whale] = 1.0  # the model already wants " whale" at the 4th word
    plan = layout.plan(probs)
    assert plan.pinned == {5: whale} and plan.free == [2, 3, 4, 6]


def test_layout_projection_keeps_the_rest_of_each_distribution():
    tokenizer = Gpt2Tokenizer()
    layout = WordLayout(
        [WordAt(position=1, word="Call"), Exclude(words=("whale",)), WordCount(equals=3)],
        tokenizer,
        start=0,
        length=5,
    )
    probs = torch.rand(1, 5, len(tokenizer), generator=torch.Generator().manual_seed(0))
    probs = probs / probs.sum(-1, keepdim=True)
    (plan,) = [layout.plan(probs[0])]
    out = layout.apply(probs, [plan], torch.zeros(1, 5, dtype=torch.bool))
    (call,) = tokenizer.encode(" Call")
    assert out[0, 0, call] == 1.0
    assert torch.all(out[0, 3:, tokenizer.eos_id] == 1.0)  # after 3 words: end of text
    free = out[0, 1]
    allowed = layout.allowed
    assert free[~allowed].sum() == 0 and torch.isclose(free.sum(), torch.tensor(1.0))
    ratio = free[allowed] / probs[0, 1][allowed]
    assert torch.allclose(ratio, ratio[0].expand_as(ratio))  # renormalised, shape kept
    assert not allowed[tokenizer.encode(" whale")[0]]


def test_count_without_a_question_is_refused():
    with pytest.raises(InputError, match="does not ask"):
        Count().with_prompt("Hello there", 2)


def test_validate_catches_words_that_cannot_fit(tmp_path: Path):
    from typer.testing import CliRunner

    from cdd_cli.cli import app

    spec = write(tmp_path, "constraints:\n  - type: word_at\n    position: 500\n    word: cat\n")
    result = CliRunner().invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2 and "need 500 word(s)" in result.stderr
    ok = write(tmp_path, SPEC)
    result = CliRunner().invoke(app, ["validate", str(ok)])
    assert result.exit_code == 0 and "words fit 128 tokens" in result.stderr
