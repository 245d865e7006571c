"""The CLI through Typer's CliRunner: records, exit codes, and one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.cli.flags import resume_command
from tests.limits import HANG_S

runner = CliRunner()

RECORD_FIELDS = {
    "id",
    "prompt",
    "prompt_id",
    "text",
    "seed",
    "sample_seed",
    "model",
    "method",
    "attempts",
    "satisfied",
    "constraints",
    "projection",
    "valid",
    "decode",
    "canonical",
    "qed",
    "sa",
    "novel",
    "novel_against",
    "seconds",
    "model_revision",
    "created",
    "cdd_version",
}


def records_of(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_molecules_writes_one_record_per_sample(uniform_model_dir: Path):
    result = runner.invoke(
        app,
        [
            "molecules",
            "-n",
            "5",
            "--model",
            str(uniform_model_dir),
            "--seed",
            "4",
            "--batch-size",
            "2",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.stderr
    records = records_of(result.stdout)
    assert [r["id"] for r in records] == ["0-0", "0-1", "0-2", "0-3", "0-4"]
    for record in records:
        assert set(record) == RECORD_FIELDS
        assert record["seed"] == 4 and record["prompt"] is None
        assert record["model"] == str(uniform_model_dir)
        assert record["sample_seed"].isdigit()  # a string: no JSON reader rounds it
        assert record["novel_against"] == "training"  # the model ships no held-out molecules
        if record["valid"]:
            assert isinstance(record["canonical"], str) and 0 < record["qed"] <= 1
            assert 1 <= record["sa"] <= 10 and isinstance(record["novel"], bool)
        else:
            assert record["canonical"] is record["qed"] is record["sa"] is record["novel"] is None
    assert "molecules in" in result.stderr and "valid" in result.stderr


@pytest.mark.slow
def test_output_file_is_appended_and_batch_size_does_not_change_records(
    uniform_model_dir: Path, tmp_path: Path
):
    out, other = tmp_path / "out.jsonl", tmp_path / "other.jsonl"
    args = ["molecules", "--model", str(uniform_model_dir), "--quiet"]
    for n, batch_size, target in (("3", "1", out), ("3", "3", other), ("5", "2", out)):
        resume = ["--resume"] if n == "5" else []
        result = runner.invoke(
            app, [*args, "-n", n, "--batch-size", batch_size, "-o", str(target), *resume]
        )
        assert result.exit_code == 0, result.stderr
        assert result.stdout == ""
    records = records_of(out.read_text())  # the first 3, then the 2 the resumed run lacked
    assert [r["id"] for r in records] == ["0-0", "0-1", "0-2", "0-3", "0-4"]
    assert [r["text"] for r in records[:3]] == [r["text"] for r in records_of(other.read_text())]


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cdd: error: ")
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["-n", "0"], "-n must be positive"),
        (["-n", "-3"], "-n must be positive"),
        (["--batch-size", "0"], "--batch-size must be positive"),
        (["--steps", "0"], "--steps must be in [1, 100,000], got 0"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--device", "cuda:x"], "unknown device"),
    ],
)
def test_bad_flags_exit_2_with_one_line(uniform_model_dir: Path, args: list[str], expected: str):
    result = runner.invoke(app, ["molecules", "--model", str(uniform_model_dir), *args])
    assert result.exit_code == 2
    assert expected in one_error_line(result)
    assert result.stdout == ""


def test_missing_model_directory(tmp_path: Path):
    result = runner.invoke(app, ["molecules", "--model", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such directory" in one_error_line(result)
    # The command line names its flag (the API, which has none, says "model '...'").
    assert one_error_line(result).startswith(f"cdd: error: --model {tmp_path / 'nope'}: no such")


def test_directory_without_checkpoint(tmp_path: Path):
    result = runner.invoke(app, ["molecules", "--model", str(tmp_path)])
    assert result.exit_code == 2
    assert "no config.json" in one_error_line(result)


def test_misshaped_checkpoint_exits_2(tmp_path: Path):
    from tests.conftest import build_model_dir

    build_model_dir(tmp_path / "small", hidden_dim=32)
    build_model_dir(tmp_path / "big", hidden_dim=64)
    # Weights of one size under the config of another.
    (tmp_path / "small" / "model.safetensors").write_bytes(
        (tmp_path / "big" / "model.safetensors").read_bytes()
    )
    result = runner.invoke(app, ["molecules", "--model", str(tmp_path / "small")])
    assert result.exit_code == 2
    assert "mis-shaped keys" in one_error_line(result)


def test_unwritable_output(uniform_model_dir: Path, tmp_path: Path):
    result = runner.invoke(
        app, ["molecules", "--model", str(uniform_model_dir), "-o", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "is a directory" in one_error_line(result)


def test_report_needs_an_output_file_and_writes_the_page(uniform_model_dir: Path, tmp_path: Path):
    page = tmp_path / "page.html"
    model = ["molecules", "--model", str(uniform_model_dir), "-n", "2", "--steps", "2"]
    result = runner.invoke(app, [*model, "--report", str(page)])
    assert result.exit_code == 2 and not page.exists()
    assert "--report reads the run's records back" in one_error_line(result)
    result = runner.invoke(app, [*model, "--report", str(tmp_path), "-o", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "is a directory (give an HTML file)" in one_error_line(result)
    out = tmp_path / "run.jsonl"
    result = runner.invoke(app, [*model, "-o", str(out), "--report", str(page), "-q"])
    assert result.exit_code in (0, 3), result.stderr
    assert f"{page}: 2 records (2 shown)" in result.stderr
    assert "all 2 records" in page.read_text(encoding="utf-8")


def test_models_ls_lists_the_default():
    result = runner.invoke(app, ["models", "ls"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "name\tkind\tMB\tfolder"
    assert lines[1].startswith("default-molecules\tdiffusion model\t")
    listed = json.loads(runner.invoke(app, ["models", "ls", "--json"]).stdout)
    assert {row["name"] for row in listed} >= {"default-text", "qm9-sa-surrogate"}
    assert all(row["megabytes"] and row["megabytes"] <= 30 for row in listed)


@pytest.mark.slow
def test_sa_constraint_records_are_certified_by_rdkit(
    shipped_vocab_model_dir: Path, tmp_path: Path
):
    from rdkit import Chem
    from rdkit.Contrib.SA_Score import sascorer

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "projection: {inner_iters: 5, max_outer_iters: 4, project_from: 0.5}\n"
        "repair: {max_redraws: 1}\nsampling: {steps: 6}\n"
    )
    out = tmp_path / "out.jsonl"
    result = runner.invoke(
        app,
        [
            "molecules",
            "--model",
            str(shipped_vocab_model_dir),
            "-n",
            "4",
            "--constraint",
            "sa",
            "--tau",
            "4.0",
            "--spec",
            str(spec),
            "-o",
            str(out),
            "--quiet",
        ],
    )
    records = records_of(out.read_text())
    assert len(records) == 4
    assert result.exit_code == (0 if all(r["satisfied"] for r in records) else 3)
    for r in records:
        sa = r["constraints"]["sa"]
        assert sa["judge"] == "rdkit-sa" and sa["max"] == 4.0
        assert isinstance(sa["surrogate"], float)
        mol = Chem.MolFromSmiles(r["text"]) if r["text"] else None
        if mol is None:
            assert sa["value"] is None and not sa["satisfied"] and not r["satisfied"]
        else:
            assert sa["value"] == pytest.approx(sascorer.calculateScore(mol), abs=1e-3)
            assert sa["satisfied"] == (sa["value"] <= 4.0) == r["satisfied"]
        assert set(r["projection"]) == {
            "steps",
            "outer_iters",
            "inner_iters",
            "search_nodes",
            "seconds",
            "settled_by",
        }
        # Who changed the sample last: a stage of cdd's, or none (the model's own draw).
        stages = {"LinearisedLadder", "LookAhead", "ALM", "RedrawAfterALM", "FlipSearch"}
        assert r["projection"]["settled_by"] in {*stages, None}
        assert (r["projection"]["settled_by"] is None) == (r["projection"]["steps"] == 0)
        assert 1 <= r["attempts"] <= 2
    config = (tmp_path / "out.jsonl.config.yaml").read_text()
    assert "inner_iters: 5" in config and "tau: 4.0" in config
    # Left to the model: a SMILES model's defaults.
    assert "support: 4\n" in config and "mu_init: 4.0\n" in config


@pytest.mark.slow
def test_novel_combines_with_sa():
    """On the shipped QM9 model, --novel with an SA bound: exit 0, and every record is a valid
    molecule absent from the training set and from the run so far, with SA <= tau by RDKit."""
    from rdkit import Chem
    from rdkit.Contrib.SA_Score import sascorer

    from cdd_cli.evaluate.molecules import canonical

    result = runner.invoke(
        app,
        ["molecules", "-n", "8", "--steps", "16", "--novel", "-c", "sa", "--tau", "4.5", "-q"],
    )
    assert result.exit_code == 0, result.stderr
    records = records_of(result.stdout)
    assert len(records) == 8
    kept = [canonical(r["text"]) for r in records]
    assert None not in kept and len(set(kept)) == len(kept)
    for r in records:
        assert set(r["constraints"]) == {"sa", "novelty"}
        assert r["constraints"]["novelty"]["surrogate"] is None
        assert r["satisfied"] and r["valid"] and r["novel"]
        assert sascorer.calculateScore(Chem.MolFromSmiles(r["text"])) <= 4.5


@pytest.mark.parametrize(
    "args, expected",
    [
        (["sa-surrogate", "--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["sa-surrogate", "--lr", "nan"], "--lr must be a positive number"),
        (["sa-surrogate", "--hidden-dim", "3"], "split into the surrogate's 4 heads"),
        (["molecules", "--n-heads", "3"], "must split into 3 heads"),
        (["molecules", "--max-steps", "0"], "--max-steps must be at least 1"),
        (["molecules", "--eval-every", "0"], "--eval-every must be at least 1"),
        (["toxicity-surrogate", "--data", "x", "--epochs", "0"], "--epochs must be at least 1"),
        (["text", "--data", "x", "--length", "0"], "--length must be at least 1"),
    ],
)
def test_training_options_are_checked_before_any_data_is_read(
    tmp_path: Path, args: list[str], expected: str
):
    # No data exists under these paths: the options are refused first.
    result = runner.invoke(app, ["train", args[0], "--out", str(tmp_path / "run"), *args[1:]])
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0]
    assert not (tmp_path / "run").exists()


def test_an_unwritable_output_is_one_line_and_exit_2(tmp_path: Path):
    full = runner.invoke(app, ["molecules", "-n", "2", "-o", "/dev/full", "--quiet"])
    assert full.exit_code == 2
    assert full.stderr.strip().splitlines() == [
        "cdd: error: -o /dev/full: cannot write (No space left on device)"
    ]
    out = tmp_path / "r.jsonl"
    Path(f"{out}.config.yaml").mkdir()
    blocked = runner.invoke(app, ["molecules", "-n", "2", "-o", str(out), "--quiet"])
    assert blocked.exit_code == 2 and "r.jsonl.config.yaml is a directory" in blocked.stderr
    assert not out.exists()  # refused before the output file was made


def test_appending_records_of_other_weights_in_the_same_model_folder_is_refused(tmp_path: Path):
    # `cdd train molecules --out RUN` run again trains RUN further in place: the configuration
    # beside the records names the same folder, but the weights, and so the records, differ.
    from tests.conftest import build_model_dir

    model, out = tmp_path / "run", tmp_path / "r.jsonl"
    args = ["molecules", "--model", str(model), "-n", "1", "--steps", "2", "-o", str(out), "-q"]
    build_model_dir(model, seed=0)
    assert runner.invoke(app, args).exit_code in (0, 3)
    assert runner.invoke(app, [*args, "--seed", "1"]).exit_code in (0, 3)  # same weights
    written = out.read_text()
    build_model_dir(model, seed=1)  # trained further: other weights, same folder
    result = runner.invoke(app, [*args, "--seed", "2"])
    assert result.exit_code == 2, result.stderr
    revisions = {json.loads(line)["model_revision"] for line in written.splitlines()}
    assert "holds records of other weights (model_revision " in one_error_line(result)
    assert revisions < set(one_error_line(result).replace(",", " ").split())
    assert out.read_text() == written  # nothing appended


def test_appending_records_made_from_a_rewritten_reference_file_is_refused(tmp_path: Path):
    # The configuration holds a novelty reference's path, not its contents: a file rewritten
    # between two seeds must not let one output hold records judged against two references.
    reference, out = tmp_path / "ref.smi", tmp_path / "r.jsonl"
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"constraints:\n  - type: novelty\n    reference: {reference}\n")
    args = ["molecules", "--spec", str(spec), "-n", "1", "--steps", "4", "-o", str(out), "-q"]
    reference.write_text("CCO\nCCN\n")
    assert runner.invoke(app, args).exit_code in (0, 3)
    assert runner.invoke(app, [*args, "--seed", "1"]).exit_code in (0, 3)  # same contents
    written = out.read_text()
    reference.write_text("CCO\nCCC\n")
    result = runner.invoke(app, [*args, "--seed", "2"])
    assert result.exit_code == 2, result.stderr
    assert "other contents of the files its settings name" in one_error_line(result)
    assert out.read_text() == written  # nothing appended


@pytest.mark.slow
def test_appending_records_of_other_settings_is_refused(tmp_path: Path):
    out = tmp_path / "r.jsonl"
    first = runner.invoke(app, ["molecules", "-n", "1", "-o", str(out), "-q"])
    assert first.exit_code == 0, first.stderr
    # More samples with another seed: the same setup, appended.
    more = runner.invoke(app, ["molecules", "-n", "1", "--seed", "5", "-o", str(out), "-q"])
    assert more.exit_code == 0, more.stderr
    assert len(out.read_text().splitlines()) == 2
    other = runner.invoke(app, ["molecules", "-n", "1", "-c", "sa", "--tau", "4", "-o", str(out)])
    assert other.exit_code == 2
    assert "holds records made with other settings" in other.stderr
    assert len(out.read_text().splitlines()) == 2  # nothing appended
    config = Path(f"{out}.config.yaml")
    assert config.read_text().startswith("# latest run: cdd")  # (argv is pytest's here)
    assert "seed: 5\n" in config.read_text() and "constraints: []" in config.read_text()
    assert runner.invoke(app, ["validate", str(config)]).exit_code == 0


def test_version_and_short_help():
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.startswith("cdd ")
    assert runner.invoke(app, ["generate", "-h"]).exit_code == 0


def test_an_unexpected_error_is_one_line_and_exit_1(monkeypatch: pytest.MonkeyPatch):
    import cdd_cli.api

    def broken(*args: object) -> int:
        raise RuntimeError("something\nwent wrong")

    monkeypatch.setattr(cdd_cli.api, "write", broken)
    result = runner.invoke(app, ["molecules", "-n", "1", "--quiet"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("cdd: error: internal error: RuntimeError: something went wrong")
    assert "CDD_TRACEBACK=1" in lines[0]


def test_the_written_configuration_names_a_relative_model_folder_absolutely(
    uniform_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # A config written beside -o must mean the same run when used from another directory.
    monkeypatch.chdir(uniform_model_dir.parent)
    out = tmp_path / "sub" / "r.jsonl"
    out.parent.mkdir()
    args = ["molecules", "-n", "1", "--steps", "2", "--quiet", "-o", str(out)]
    result = runner.invoke(app, [*args, "--model", uniform_model_dir.name])
    assert result.exit_code == 0, result.stderr
    config = Path(f"{out}.config.yaml")
    assert f"model: {uniform_model_dir.resolve()}\n" in config.read_text()
    monkeypatch.chdir(out.parent)
    checked = runner.invoke(app, ["validate", config.name])
    assert checked.exit_code == 0, checked.stderr


def test_threads_and_the_long_sample_flag_change_nothing_but_speed(uniform_model_dir: Path):
    base = ["molecules", "--model", str(uniform_model_dir), "--seed", "2", "--quiet"]
    short = runner.invoke(app, [*base, "-n", "3"])
    long = runner.invoke(app, [*base, "--num-samples", "3", "--threads", "1"])
    assert short.exit_code == long.exit_code == 0, short.stderr + long.stderr
    texts = [[r["text"] for r in records_of(result.stdout)] for result in (short, long)]
    assert texts[0] == texts[1] and len(texts[0]) == 3


def test_device_auto_is_the_cpu_without_cuda():
    import torch

    from cdd_cli.models.registry import resolve_device

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.slow
def test_without_a_terminal_progress_is_plain_lines(uniform_model_dir: Path):
    import re

    args = ["molecules", "--model", str(uniform_model_dir), "-n", "4", "--batch-size", "2"]
    result = runner.invoke(app, args)  # CliRunner's stderr is no terminal
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    clock = r"\d+:\d\d:\d\d"  # from the run's start: a loaded machine may take minutes
    first = next(line for line in lines if "loading the model" not in line)  # (a slow load)
    assert re.fullmatch(rf"molecules 0/4, {clock} elapsed, pass 1, 2 samples, step 0 of 8", first)
    assert lines[-2].startswith("molecules 4/4 in ") and "/s); valid " in lines[-2]
    assert lines[-1].startswith("4 molecules in ")  # the summary
    quiet = runner.invoke(app, [*args, "-q"])
    assert quiet.stderr.splitlines() == [quiet.stderr.splitlines()[-1]]  # the summary alone


@pytest.mark.slow
def test_ctrl_c_says_what_was_kept(tmp_path: Path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out.jsonl"
    command = [sys.executable, "-m", "cdd_cli", "molecules", "-n", "100000", "--batch-size", "8"]
    # A shell that starts jobs in the background (nohup ... &) ignores SIGINT, and children
    # inherit that; the child restores the default so that Python installs its handler.
    run = subprocess.Popen(
        [*command, "-q", "-o", str(out)],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        # The first record, however long a loaded machine takes to get there (the deadline
        # is a hang guard, not a speed check): a signal before it finds nothing kept.
        deadline = time.monotonic() + HANG_S
        while not (out.exists() and out.read_text().count("\n")) and run.poll() is None:
            assert time.monotonic() < deadline, "the run wrote no record: hung"
            time.sleep(0.2)
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=HANG_S)
    finally:
        run.kill()  # never left running when an assertion or a timeout ends the test
    lines = out.read_text().splitlines()
    assert run.returncode == 130 and lines
    assert [json.loads(line)["id"] for line in lines] == [f"0-{i}" for i in range(len(lines))]
    assert stderr.splitlines() == [
        f"cdd: error: interrupted: {len(lines)} of 100000 records kept in {out}, each a "
        f"complete line; finish it with: cdd molecules -n 100000 --batch-size 8 -q -o {out} "
        "--resume"
    ]


@pytest.mark.slow
def test_every_sa_constrained_record_of_the_shipped_model_meets_tau():
    """The positive end of the contract, on the real QM9 model: `-c sa --tau 3.5` exits 0 and
    every record is a valid molecule whose SA, recomputed here by RDKit, is at most 3.5."""
    from rdkit import Chem
    from rdkit.Contrib.SA_Score import sascorer

    result = runner.invoke(
        app, ["molecules", "-n", "12", "--steps", "16", "-c", "sa", "--tau", "3.5", "--quiet"]
    )
    assert result.exit_code == 0, result.stderr
    records = records_of(result.stdout)
    assert len(records) == 12
    for r in records:
        mol = Chem.MolFromSmiles(r["text"])
        assert mol is not None and r["valid"] and r["satisfied"]
        assert sascorer.calculateScore(mol) <= 3.5


@pytest.mark.parametrize(
    "command",
    [["molecules"], ["generate"], ["eval"], ["validate"], ["merge"], ["train", "text"],
     ["train", "molecules"], ["train", "adapt"], ["train", "property-surrogate"]],
)  # fmt: skip
def test_help_reads_whole_at_80_columns(command: list[str]):
    """No option name is cut short ("…") in an 80-column terminal."""
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0
    assert "…" not in result.output, result.output


@pytest.mark.slow
def test_the_live_view_on_a_terminal_shows_rate_eta_and_no_stale_rows(tmp_path: Path):
    """`cdd molecules` under a pseudo-terminal: the run's row (count, rate, elapsed and
    remaining time), the batch's denoising row, the projection row while a step projects
    (in words) and gone once the step is done."""
    import os
    import pty
    import re
    import select
    import subprocess
    import sys
    import time

    master, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": "140", "TERM": "xterm-256color", "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "cdd_cli", "molecules", "-n", "6", "--batch-size", "3"]
    args += ["-c", "sa", "--tau", "3.0", "--steps", "8", "-o", str(tmp_path / "out.jsonl")]
    run = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal, env=env
    )
    os.close(terminal)
    chunks = []
    deadline = time.monotonic() + HANG_S  # a hang guard, not a speed check
    try:
        while True:
            assert time.monotonic() < deadline, "the run did not end: hung"
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the terminal closed with the process
                    break
                if not data:
                    break
                chunks.append(data)
            elif run.poll() is not None:
                break
        assert run.wait(timeout=HANG_S) == 0
    finally:
        run.kill()
        os.close(master)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    rows = [row.strip() for row in re.split(r"[\r\n]+", screen) if row.strip()]
    summary = next(i for i, row in enumerate(rows) if row.startswith("6 molecules in "))
    last_frame = rows[summary - 2 : summary]  # the run's row and the batch's, as left on screen
    clock = r"\d+:\d\d:\d\d"
    assert re.match(rf"molecules .* 6/6 {clock} {clock} \d+\.\d\d/s, valid 6/6", last_frame[0])
    assert re.match(rf"denoising .* 8/8 {clock} {clock}", last_frame[1])
    projecting = [row for row in rows if row.startswith("projection")]
    assert projecting and any("judges accept" in row for row in projecting), projecting
    assert "λ" not in screen  # the multipliers only with --verbose


def test_without_a_terminal_progress_is_plain_log_lines():
    """A log file or a pipe gets no live view but plain lines: as the run begins, then at
    least every 10 s (tests/test_progress.py), and at its end: records done, pass, step,
    the rate and what the records say so far."""
    import re

    args = ["molecules", "-n", "3", "--batch-size", "1", "--steps", "4"]
    result = runner.invoke(app, [*args, "-c", "sa", "--tau", "6"])
    assert result.exit_code in (0, 3), result.stderr
    lines = [line for line in result.stderr.splitlines() if "loading the model" not in line]
    clock = r"\d+:\d\d:\d\d"  # from the run's start: a loaded machine may take minutes
    assert re.fullmatch(rf"molecules 0/3, {clock} elapsed, pass 1, 1 sample, step 0 of 4", lines[0])
    assert re.fullmatch(r"molecules 3/3 in \d:\d\d:\d\d \(\d+\.\d\d/s\); valid \d/3, violating \d",
                        lines[-2]), lines[-2]  # fmt: skip
    assert "\x1b[" not in result.stderr  # no control codes in a log
    quiet = runner.invoke(app, [*args, "--quiet"])
    assert quiet.exit_code == 0 and not re.search(r"molecules \d/3", quiet.stderr)


@pytest.mark.slow
def test_the_command_lets_torch_threads_wait_passively_unless_told(tmp_path: Path):
    """Spinning OpenMP threads took a busy machine's cores (README, --threads): the command
    sets OMP_WAIT_POLICY=PASSIVE before torch loads, and keeps a value the user set."""
    import os
    import subprocess
    import sys

    show = "import os, cdd_cli.__main__; print(os.environ['OMP_WAIT_POLICY'])"
    for given, expected in ((None, "PASSIVE"), ("ACTIVE", "ACTIVE")):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if given is not None:
            env["OMP_WAIT_POLICY"] = given
        done = subprocess.run([sys.executable, "-c", show], env=env, capture_output=True,
                              text=True, timeout=600, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected


def test_the_resume_command_is_this_command_line_with_resume_once(monkeypatch):
    """What an interrupted run says finishes it (the CLI hands it to the output layer)."""
    monkeypatch.setattr(sys, "argv", ["/bin/cdd", "run", "--resume", "x y", "-o", "a\nb"])
    assert resume_command() == "cdd run 'x y' -o 'a b' --resume"
