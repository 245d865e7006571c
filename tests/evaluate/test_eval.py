"""`cdd eval`: summaries recomputed from records, and clean failures on bad files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.evaluate.report import toxicity_over_prompts

runner = CliRunner()


def text_record(
    rid: str, text: str, value: float, tau: float = 0.5, seconds: float = 1.0, prompt: str = ""
):
    return {
        "id": rid,
        "prompt": prompt or f"prompt {rid.split('-')[0]}",
        "text": text,
        "satisfied": value <= tau,
        "constraints": {
            "toxicity": {
                "value": value,
                "max": tau,
                "satisfied": value <= tau,
                "judge": "cdd-toxicity-classifier",
            }
        },
        "seconds": seconds,
    }


def test_expected_maximum_and_probability_over_prompts():
    rows = [{"id": "0-0"}, {"id": "0-1"}, {"id": "1-0"}, {"id": "1-1"}]
    rows = [r | {"prompt": f"prompt {r['id'][0]}"} for r in rows]
    report = toxicity_over_prompts(rows, [0.2, 0.7, 0.1, 0.3])
    assert report == {"mean": 0.325, "expected_max": 0.5, "probability": 0.5}


def test_runs_appended_to_one_file_are_grouped_by_prompt_text_not_id(tmp_path: Path):
    # Each run's ids restart at 0-0: two prompts appended in two runs are two prompts.
    path = tmp_path / "r.jsonl"
    rows = [
        text_record("0-0", " a", 0.6, prompt="The people of"),
        text_record("0-1", " b", 0.2, prompt="The people of"),
        text_record("0-0", " c", 0.1, prompt="Other prompt"),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["eval", str(path), "--no-perplexity", "--no-judge"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.splitlines()[0])
    assert report["prompts"] == 2
    assert report["toxicity"]["cdd-toxicity-classifier"]["expected_max"] == 0.35
    pretty = runner.invoke(app, ["eval", str(path), "--no-perplexity", "--no-judge", "--pretty"])
    assert pretty.stdout.startswith("{\n  ") and json.loads(pretty.stdout) == report


def test_text_summary(tmp_path: Path):
    path = tmp_path / "r.jsonl"
    rows = [
        text_record("0-0", " a a a a", 0.6, seconds=1.0),
        text_record("0-1", " b c", 0.2, seconds=3.0),
        text_record("1-0", " d e", 0.1, seconds=2.0),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["eval", str(path), "--no-perplexity", "--no-judge"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.splitlines()[0])
    assert report["kind"] == "text" and report["samples"] == 3 and report["prompts"] == 2
    assert report["constraints"]["toxicity"]["violations"] == 1
    assert math.isclose(report["constraints"]["toxicity"]["violation_rate"], 1 / 3, abs_tol=1e-4)
    # The bound as the records name it, with its side: an upper bound is a "max".
    assert report["constraints"]["toxicity"]["max"] == [0.5]
    assert "tau" not in report["constraints"]["toxicity"]
    tox = report["toxicity"]["cdd-toxicity-classifier"]
    assert tox["expected_max"] == 0.35 and tox["probability"] == 0.5
    # distinct-1 over words: a a a a b c d e -> 5 distinct of 8
    assert report["fluency"]["distinct_1"] == round(5 / 8, 4)
    assert report["seconds_per_sample"] == {"mean": 2.0, "median": 2.0}
    assert "perplexity" not in report["fluency"]


def test_molecule_summary(tmp_path: Path):
    rows = [
        {"id": "0-0", "text": "CCO", "valid": True, "canonical": "CCO", "novel": True,
         "qed": 0.4, "sa": 2.0, "constraints": {}, "seconds": 0.1},
        {"id": "0-1", "text": "OCC", "valid": True, "canonical": "CCO", "novel": True,
         "qed": 0.4, "sa": 2.0, "constraints": {}, "seconds": 0.1},
        {"id": "0-2", "text": "C(", "valid": False, "canonical": None, "novel": None,
         "qed": None, "sa": None, "constraints": {}, "seconds": 0.1},
        {"id": "0-3", "text": "C", "valid": True, "canonical": "C", "novel": False,
         "qed": 0.3, "sa": 1.0, "constraints": {}, "seconds": 0.1},
    ]  # fmt: skip
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["eval", str(path)])
    report = json.loads(result.stdout.splitlines()[0])
    assert report["validity"] == 0.75 and report["uniqueness"] == round(2 / 3, 4)
    assert report["novelty"] == 0.5  # CCO novel, C not, of the 2 unique valid
    assert report["novel_against"] == []  # the records do not say (written before it was said)


def test_bad_record_files_exit_2(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "0-0", "text": "x"}\nnot json\n')
    result = runner.invoke(app, ["eval", str(bad)])
    assert result.exit_code == 2 and "bad.jsonl:2: not a JSON record" in result.stderr
    assert runner.invoke(app, ["eval", str(tmp_path / "missing.jsonl")]).exit_code == 2
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert "no records" in runner.invoke(app, ["eval", str(empty)]).stderr


def test_records_of_the_wrong_shape_exit_2(tmp_path: Path):
    cases = [
        ('{"text": "hello"}', "'id' should be like"),
        ('{"id": 5, "text": "x"}', "'id' should be like"),
        ('{"id": "0-0", "text": "x", "constraints": "x"}', "'constraints' should map"),
        ('{"id": "0-0", "text": "x", "constraints": {"t": {"max": 1}}}', "'constraints' should"),
        ('{"id": "0-0", "text": "hi \\ud800"}', "not valid Unicode"),
    ]
    for line, expected in cases:
        path = tmp_path / "r.jsonl"
        path.write_text(line + "\n")
        result = runner.invoke(app, ["eval", str(path), "--no-perplexity", "--no-judge"])
        assert result.exit_code == 2, (line, result.output)
        assert expected in result.stderr


def test_empty_texts_give_null_not_nan(tmp_path: Path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "0-0", "text": "", "constraints": {}}) + "\n")
    result = runner.invoke(app, ["eval", str(path), "--no-perplexity", "--no-judge"])
    report = json.loads(result.stdout.splitlines()[0])  # strict JSON: NaN would still parse
    assert report["fluency"]["distinct_2"] is None and "NaN" not in result.stdout


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"qed": "x", "valid": True}, "'qed' should be a finite number"),
        ({"valid": "no"}, "'valid' should be true or false"),
        ({"seconds": float("inf")}, "'seconds' should be a finite number"),
        ({"constraints": {"sa": {"satisfied": True, "max": [1]}}}, "'constraints' should map"),
        (
            {"constraints": {"toxicity": {"satisfied": True, "value": 0.1}}},
            "the toxicity report names no 'judge'",
        ),
    ],
)
def test_malformed_records_are_refused_in_one_line(tmp_path: Path, row: dict, expected: str):
    # Each of these used to end in a traceback (TypeError, KeyError) or a wrong summary.
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "0-0", "text": "CCO", **row}) + "\n")
    result = runner.invoke(app, ["eval", str(path), "--no-perplexity", "--no-judge"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"r.jsonl:1: {expected}" in lines[0]


@pytest.mark.slow
def test_unconstrained_text_is_scored_by_the_constraints_judge_too(tmp_path: Path):
    # A baseline drawn without a toxicity constraint must compare with constrained runs, which
    # report the shipped classifier: eval scores it with that classifier, as the constraint does.
    from cdd_cli.constraints.registry import build_constraints
    from cdd_cli.models import registry
    from cdd_cli.spec.entries import constraint_from_flags

    texts = [" you are a stupid worthless idiot", " the weather was mild in the valley"]
    path = tmp_path / "r.jsonl"
    rows = [
        {"id": f"{i}-0", "prompt": f"p{i}", "text": t, "constraints": {}}
        for i, t in enumerate(texts)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["eval", str(path), "--no-perplexity", "--no-judge"])
    assert result.exit_code == 0, result.output
    tox = json.loads(result.stdout)["toxicity"]["cdd-toxicity-classifier"]
    loaded = registry.load("default-text", "text", "cpu")
    (judge,) = build_constraints([constraint_from_flags("toxicity", 0.5)], loaded, "cpu")
    scores = judge.judge(texts)
    assert scores[0] > scores[1]
    assert tox["mean"] == pytest.approx(sum(scores) / 2, abs=1e-4)
    assert tox["probability"] == sum(s >= 0.5 for s in scores) / 2
