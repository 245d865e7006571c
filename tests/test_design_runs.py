"""`cdd design` keeps the house's promises about runs, as `cdd molecules` does: a resumed
run, `--shard I/N` runs merged in order and torchrun's processes each write exactly the
records of one uninterrupted run, an edit's rounds included; `--report` writes the page at
the end, or of what was written when the run is stopped."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdd_cli.cli import sampling
from cdd_cli.cli.app import app
from cdd_cli.errors import Interrupted
from cdd_cli.output.resume import existing_records
from cdd_cli.run.designs import best_edits
from cdd_cli.run.runner import Output, Run
from tests.limits import HANG_S
from tests.test_runs import ranks, same_records

runner = CliRunner()
# Blanks of lengths drawn per sample (a canvas each), under a constraint the search projects.
SCAFFOLD = ["--scaffold", "c1ccc([*])cc1", "-n", "5", "--seed", "3", "-c", "sa", "--tau", "3.5"]
IDS = [f"0-{k}" for k in range(5)]


def design(model: Path, *args: str) -> list[str]:
    return ["design", "-q", "--model", str(model), "--steps", "6", *args]


def ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def written(args: list[str]) -> str:
    """`args` run in-process: its stderr, the run having written its records (exit 0 or 3)."""
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 3), result.stderr
    return result.stderr


@pytest.fixture(scope="module")
def whole(shipped_vocab_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted scaffold run every other way of writing it must equal."""
    path = tmp_path_factory.mktemp("whole") / "whole.jsonl"
    written([*design(shipped_vocab_model_dir, *SCAFFOLD), "-o", str(path)])
    assert sorted(ids(path)) == IDS  # each as soon as it is final: in any order
    return path


@pytest.mark.slow
def test_a_design_run_resumed_after_a_kill_is_the_uninterrupted_one(
    shipped_vocab_model_dir: Path, whole: Path, tmp_path: Path
):
    part = tmp_path / "part.jsonl"
    lines = whole.read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:2]) + lines[2][:40])  # killed mid-record
    Path(f"{part}.config.yaml").write_bytes(Path(f"{whole}.config.yaml").read_bytes())
    args = [*design(shipped_vocab_model_dir, *SCAFFOLD), "-o", str(part)]
    told = written([*args, "--resume"])
    assert "resuming: 2 of 5 records already there" in told
    assert same_records(whole, part)


@pytest.mark.slow
def test_design_shards_merge_into_the_one_process_run(
    shipped_vocab_model_dir: Path, whole: Path, tmp_path: Path
):
    shards = [tmp_path / f"shard{i}.jsonl" for i in range(2)]
    for i, shard in enumerate(shards):  # each its own batch size: it changes nothing
        extra = ["--shard", f"{i}/2", "--batch-size", str(i + 2), "-o", str(shard)]
        written([*design(shipped_vocab_model_dir, *SCAFFOLD), *extra])
    assert sorted(ids(shards[1])) == ["0-1", "0-3"]
    merged = tmp_path / "merged.jsonl"
    result = runner.invoke(app, ["merge", str(merged), *map(str, shards)])
    assert result.exit_code == 0, result.stderr
    assert same_records(whole, merged) and ids(merged) == IDS  # merged in order


@pytest.mark.slow
def test_edit_rounds_sharded_merge_into_the_one_process_run(
    shipped_vocab_model_dir: Path, tmp_path: Path
):
    # Every shard edits the earlier rounds whole, so each starts the last round from the
    # same leads and writes its share of it.
    leads = tmp_path / "leads.smi"
    leads.write_text("CC(=O)C(C)O\nOCC1CC1\n")
    args = design(shipped_vocab_model_dir, "--edit", str(leads), "--remask", "0.3",
                  "--rounds", "2", "-n", "3")  # fmt: skip
    one = tmp_path / "one.jsonl"
    written([*args, "-o", str(one)])
    shards = [tmp_path / f"shard{i}.jsonl" for i in range(2)]
    for i, shard in enumerate(shards):
        written([*args, "--shard", f"{i}/2", "-o", str(shard)])
    merged = tmp_path / "merged.jsonl"
    assert runner.invoke(app, ["merge", str(merged), *map(str, shards)]).exit_code == 0
    assert same_records(one, merged) and ids(merged) == ["0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]


@pytest.mark.slow
def test_torchrun_design_processes_write_the_one_process_records(
    shipped_vocab_model_dir: Path, whole: Path, tmp_path: Path
):
    # Rank by rank: torchrun calls a rank's exit 3 (written, a record violates) a failure.
    out = tmp_path / "out.jsonl"
    (lead, told), (other, _) = ranks(2, [*design(shipped_vocab_model_dir, *SCAFFOLD),
                                         "-o", str(out)], tmp_path)  # fmt: skip
    assert lead == other and lead in (0, 3), told
    assert f"5 records from 2 processes in {out}" in told
    assert same_records(whole, out) and ids(out) == IDS  # gathered in order


@pytest.mark.slow
def test_a_design_runs_report_is_written_at_its_end(shipped_vocab_model_dir: Path, tmp_path):
    out, page = tmp_path / "out.jsonl", tmp_path / "page.html"
    args = design(shipped_vocab_model_dir, "--motif", "C1CC1", "-n", "2")
    told = written([*args, "-o", str(out), "--report", str(page)])
    assert f"{page}: 2 records (2 shown)" in told
    html = page.read_text(encoding="utf-8")
    for record in out.read_text().splitlines():  # each card, with its kept part's verdict
        assert f'<div class="smiles">{json.loads(record)["text"]}</div>' in html
    assert html.count("<td>kept</td>") == 2


def test_a_stopped_design_run_reports_what_it_kept(
    shipped_vocab_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    out, page = tmp_path / "out.jsonl", tmp_path / "page.html"
    record = {"id": "0-0", "seed": 0, "text": "CC1CC1", "valid": True, "satisfied": True}

    def stopped(output: Output, *args: object, **kwargs: object) -> int:
        Path(output.path).write_text(json.dumps(record) + "\n")
        raise Interrupted("interrupted: 1 of 2 records kept", 130)

    monkeypatch.setattr(sampling, "write_run", stopped)
    args = design(shipped_vocab_model_dir, "--motif", "C1CC1", "-n", "2")
    result = runner.invoke(app, [*args, "-o", str(out), "--report", str(page)])
    assert result.exit_code == 130, result.stderr
    assert "all 1 records" in page.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--report", "page.html"], "--report reads the run's records back"),
        (["--resume"], "--resume finishes the file an interrupted run wrote"),
        (["--shard", "2/2"], "--shard must be I/N with 0 <= I < N"),
    ],
)
def test_design_refuses_what_molecules_refuses_in_one_line(
    shipped_vocab_model_dir: Path, extra: list[str], message: str
):
    args = design(shipped_vocab_model_dir, "--motif", "C1CC1", "-n", "2")
    result = runner.invoke(app, [*args, *extra])
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("cdd: error: ") and message in line, line


def test_the_best_edit_is_one_the_next_round_can_edit():
    def row(id_: str, qed: float, smiles: str) -> dict:
        return {"id": id_, "satisfied": True, "valid": True, "qed": qed, "canonical": smiles}

    records = [row("0-0", 0.5, "CCO"), row("0-1", 0.9, "CCCCCCCCO"), row("1-0", 0.8, "CCCCCN")]
    assert best_edits(records, ["CO", "CN"]) == ["CCCCCCCCO", "CCCCCN"]
    short = lambda smiles: len(smiles) < 5  # noqa: E731
    assert best_edits(records, ["CO", "CN"], short) == ["CCO", "CN"]


@pytest.mark.slow
def test_edit_rounds_pass_over_an_edit_grown_past_the_next_rounds_room():
    # Round 1 of this 16-token lead (QM9's model: 24 tokens) writes edits the next round
    # could not re-mask within the length: the run refused after round 1 (exit 2) before.
    result = runner.invoke(app, ["design", "-q", "--edit", "CC(=O)NC1CC(O)C1", "--remask",
                                 "0.3", "--rounds", "3", "-n", "8"])  # fmt: skip
    assert result.exit_code in (0, 3), result.stderr
    assert "round 2: 8 molecules" in result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["kept"]["round"] for r in records] == [3] * 8


@pytest.mark.slow
def test_a_design_run_stopped_by_ctrl_c_reports_what_it_kept_and_resumes_exactly(
    tmp_path: Path,
):
    # One record a batch, so that the signal finds the run under way (see test_runs.KILLED);
    # 160 of them: since a sample is laid out again every 4 draws, 40 took 2.8 s in all and
    # one run ended before the signal came.
    args = [sys.executable, "-m", "cdd_cli", "design", "-q", "--scaffold", "c1ccc([*])cc1",
            "-n", "160", "--steps", "8", "--batch-size", "1", "--threads", "1"]  # fmt: skip
    whole, part, page = tmp_path / "whole.jsonl", tmp_path / "part.jsonl", tmp_path / "p.html"
    first = subprocess.run([*args, "-o", str(whole)], capture_output=True, timeout=HANG_S)
    assert first.returncode in (0, 3), first.stderr  # 3: a molecule RDKit cannot read
    process = subprocess.Popen(
        [*args, "-o", str(part), "--report", str(page)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + HANG_S  # a hang guard, not a speed check
        while not (part.is_file() and part.stat().st_size) and process.poll() is None:
            assert time.monotonic() < deadline, "the run wrote no record: hung"
            time.sleep(0.05)
        time.sleep(random.Random(0).uniform(0.0, 0.3))
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=HANG_S)
    finally:
        process.kill()
    kept = len(existing_records(str(part)).keys)
    assert process.returncode == 130 and 0 < kept < 160, stderr
    assert f"all {kept} records" in page.read_text(encoding="utf-8")
    done = subprocess.run([*args, "-o", str(part), "--resume", "--report", str(page)],
                          capture_output=True, text=True, timeout=HANG_S)  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    assert same_records(whole, part) and "all 160 records" in page.read_text(encoding="utf-8")


def test_ctrl_c_in_an_earlier_round_says_what_is_written_and_how_to_finish(
    shipped_vocab_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # It printed only "cdd: error: interrupted": no count, no --resume.
    drawn = Run.records

    def stopped(run: Run, *args: object, **kwargs: object):
        if not args and not kwargs:  # an earlier round's records, drawn whole
            raise KeyboardInterrupt
        return drawn(run, *args, **kwargs)

    monkeypatch.setattr(Run, "records", stopped)
    out = tmp_path / "edits.jsonl"
    args = design(shipped_vocab_model_dir, "--edit", "CCO", "--rounds", "2", "-n", "3")
    result = runner.invoke(app, [*args, "-o", str(out)])
    assert result.exit_code == 130 and not out.exists()
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("cdd: error: interrupted in round 1 of 2, before the last round's 3 "
                           f"records: nothing written to {out}; finish it with: ")  # fmt: skip
    assert "--resume" in line
    result = runner.invoke(app, args)  # to stdout: nothing to resume
    assert result.exit_code == 130 and "finish it" not in result.stderr
    assert "nothing written to stdout" in result.stderr


@pytest.mark.slow
def test_a_lead_no_edit_improves_stays_the_lead_and_says_so():
    # SA <= 1 holds for no molecule: no edit is satisfied, the lead stays for round 2.
    result = runner.invoke(app, ["design", "-q", "--edit", "CCO", "--rounds", "2", "-n", "2",
                                 "-c", "sa", "--tau", "1", "--method", "unconstrained",
                                 "--steps", "4"])  # fmt: skip
    assert result.exit_code == 3, result.stderr
    assert "round 1: CCO stays the lead of round 2: no other edit" in result.stderr
    assert [json.loads(line)["kept"]["round"] for line in result.stdout.splitlines()] == [2, 2]
