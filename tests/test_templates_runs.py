"""`cdd generate --template` keeps the house's promises about runs: a resumed run, shards
merged in order and torchrun's processes each write exactly the records of one uninterrupted
run; `--report` writes its page; the API takes `template=`; and a plugin cannot declare the
spec's `blank` key as its own option."""

from __future__ import annotations

import json
import math
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cdd_cli as cdd
from cdd_cli import plugins
from cdd_cli.cli.app import app
from cdd_cli.errors import InputError
from cdd_cli.plugins import ConstraintPlugin, Option
from tests.test_runs import same_records, torchrun

runner = CliRunner()
LETTER = "Dear {name:1-3}, thank you for {4-6}."


def template_args(model: Path) -> list[str]:
    return ["generate", "-q", "--model", str(model), "--steps", "4", "--seed", "3", "-n", "5",
            "--template", LETTER]  # fmt: skip


def ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def whole(text_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run every other way of writing it must equal."""
    path = tmp_path_factory.mktemp("whole") / "whole.jsonl"
    result = runner.invoke(app, [*template_args(text_model_dir), "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    assert ids(path) == [f"0-{k}" for k in range(5)]
    return path


@pytest.mark.slow
def test_a_template_run_resumed_after_a_kill_is_the_uninterrupted_one(
    text_model_dir: Path, whole: Path, tmp_path: Path
):
    part = tmp_path / "part.jsonl"
    lines = whole.read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:2]) + lines[2][:40])  # killed mid-record
    Path(f"{part}.config.yaml").write_bytes(Path(f"{whole}.config.yaml").read_bytes())
    args = [*template_args(text_model_dir), "-o", str(part)]
    resumed = runner.invoke(app, [*args, "--resume"])
    assert resumed.exit_code == 0, resumed.stderr
    assert "resuming: 2 of 5 records already there" in resumed.stderr
    assert same_records(whole, part) and ids(part) == ids(whole)
    # Another template is another run: refused, the file untouched.
    other = [a if a != LETTER else "Dear {name:1-3}, thanks for {4-6}." for a in args]
    refused = runner.invoke(app, [*other, "--resume"])
    assert refused.exit_code == 2 and "\n" not in refused.stderr.strip(), refused.stderr
    assert same_records(whole, part)


@pytest.mark.slow
def test_template_shards_merge_into_the_one_process_run(
    text_model_dir: Path, whole: Path, tmp_path: Path
):
    shards = [tmp_path / f"shard{i}.jsonl" for i in range(2)]
    for i, shard in enumerate(shards):  # each its own batch size: it changes nothing
        extra = ["--shard", f"{i}/2", "--batch-size", str(i + 2)]
        result = runner.invoke(app, [*template_args(text_model_dir), *extra, "-o", str(shard)])
        assert result.exit_code == 0, result.stderr
    assert ids(shards[1]) == ["0-1", "0-3"]
    merged = tmp_path / "merged.jsonl"
    result = runner.invoke(app, ["merge", str(merged), *map(str, shards)])
    assert result.exit_code == 0, result.stderr
    assert same_records(whole, merged) and ids(merged) == ids(whole)


@pytest.mark.slow
def test_torchrun_template_processes_write_the_one_process_records(
    text_model_dir: Path, whole: Path, tmp_path: Path
):
    out = tmp_path / "out.jsonl"
    done = torchrun(2, [*template_args(text_model_dir)[:-2], "--template", LETTER,
                        "-o", str(out)], tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"5 records from 2 processes in {out}" in done.stderr
    assert same_records(whole, out) and ids(out) == ids(whole)


@pytest.mark.slow
def test_a_template_runs_report_is_written_at_its_end(text_model_dir: Path, tmp_path: Path):
    out, page = tmp_path / "out.jsonl", tmp_path / "page.html"
    args = [*template_args(text_model_dir), "-n", "2", "-o", str(out), "--report", str(page)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert f"{page}: 2 records" in result.stderr
    assert "thank you for" in page.read_text()


@pytest.mark.slow
def test_the_api_takes_a_template_and_writes_the_clis_records(
    text_model_dir: Path, whole: Path, tmp_path: Path
):
    generator = cdd.Generator(str(text_model_dir), steps=4, seed=3)
    records = list(generator.generate(n=5, template=LETTER))
    expected = [json.loads(line) for line in whole.read_text().splitlines()]
    assert [r["text"] for r in records] == [r["text"] for r in expected]
    assert [r["blanks"] for r in records] == [r["blanks"] for r in expected]
    out = tmp_path / "api.jsonl"
    code, summary = generator.write(str(out), 5, template=LETTER, say=lambda line: None)
    assert code == 0 and "5 " in summary
    assert same_records(whole, out)
    assert [r["text"] for r in cdd.generate(n=2, model=str(text_model_dir), steps=4, seed=3,
                                            template=LETTER)] == [r["text"] for r in expected[:2]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda g: g.generate("Hi", template=LETTER), "give no prompts beside it"),
        (lambda g: g.generate(template=LETTER, length=8), "give no --length"),
        (lambda g: g.generate(template=["Dear {2}"]), "template: expected a text"),
        (lambda g: g.generate(template="no blank"), "no blank"),
    ],
)
def test_a_template_the_api_cannot_draw_is_one_line(text_model_dir: Path, call, message: str):
    generator = cdd.Generator(str(text_model_dir), steps=4)
    with pytest.raises(InputError, match=message) as info:
        list(call(generator))
    assert "\n" not in str(info.value)


blank_option = ConstraintPlugin(
    name="blank_option",
    domain="text",
    judge=lambda texts, options: [float(len(t)) for t in texts],
    tau_range=(0.0, math.inf),
    options={"blank": Option(int)},
)


def test_a_plugin_declaring_the_blank_key_is_refused():
    # A spec entry's `blank` names the template's blank it judges: a plugin's option of that
    # name would never reach the plugin.
    assert "blank" in plugins.RESERVED_OPTIONS
    entry = EntryPoint("blank_option", f"{__name__}:blank_option", plugins.GROUP)
    plugin, problem = plugins._problem_of(entry, builtin=())
    assert plugin is None and problem.startswith("declares a reserved option (")
    assert "blank" in problem
