"""Interrupted runs finished with --resume: records keyed by (seed, id), torn tails repaired,
other settings refused, and the result equal to an uninterrupted run's."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.errors import InputError
from cdd_cli.methods import REPAIR_BY_MODEL
from cdd_cli.output.jsonl import JsonlWriter
from cdd_cli.output.resume import existing_records
from cdd_cli.run.defaults import TEXT_TOP_P
from tests.limits import HANG_S

runner = CliRunner()
MOLECULES = ["molecules", "-q", "-n", "8", "--batch-size", "3", "-c", "sa", "--tau", "4", "--novel"]


def same_records(a: Path, b: Path) -> bool:
    """Equal records, in any order, timing fields (seconds, created) aside."""

    def rows(path: Path) -> list[str]:
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for r in records:
            del r["seconds"], r["created"]
            if r["projection"]:
                del r["projection"]["seconds"]
        return sorted(json.dumps(r) for r in records)

    return rows(a) == rows(b)


@pytest.mark.slow
def test_a_rerun_is_refused_and_a_resumed_run_ends_as_an_uninterrupted_one(tmp_path: Path):
    whole, part = tmp_path / "whole.jsonl", tmp_path / "part.jsonl"
    assert runner.invoke(app, [*MOLECULES, "-o", str(whole)]).exit_code == 0
    again = runner.invoke(app, [*MOLECULES, "-o", str(whole)])
    assert again.exit_code == 2
    assert "already holds 8 of this run's 8 records (seed 0); add --resume" in again.stderr
    # A kill mid-write: three whole records and part of the fourth.
    lines = whole.read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:3]) + lines[3][:50])
    (tmp_path / "part.jsonl.config.yaml").write_bytes(
        (tmp_path / "whole.jsonl.config.yaml").read_bytes()
    )
    torn = runner.invoke(app, [*MOLECULES, "-o", str(part)])
    assert torn.exit_code == 2 and "ends with an incomplete record" in torn.stderr
    resumed = runner.invoke(app, [*MOLECULES, "-o", str(part), "--resume"])
    assert resumed.exit_code == 0, resumed.stderr
    assert "dropped an incomplete last line (50 bytes)" in resumed.stderr
    assert "resuming: 3 of 8 records already there" in resumed.stderr
    assert same_records(whole, part)
    # Nothing left to do: a second resume writes nothing, and says so.
    complete = runner.invoke(app, [*MOLECULES, "-o", str(part), "--resume"])
    assert complete.exit_code == 0
    assert complete.stderr.strip().splitlines()[-1] == (
        "nothing left to draw: all 8 molecules were already written"
    )
    assert same_records(whole, part)


@pytest.mark.slow
def test_resume_refuses_other_settings_naming_the_first(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    base = ["molecules", "-q", "-n", "2", "-o", str(out)]
    assert runner.invoke(app, [*base, "-c", "sa", "--tau", "4"]).exit_code == 0
    for changed, differs in (
        (["-c", "sa", "--tau", "4", "--steps", "8"], "sampling.steps differs"),
        (["-c", "sa", "--tau", "3"], "constraints[0].tau differs"),
    ):
        result = runner.invoke(app, [*base, "--resume", *changed])
        assert result.exit_code == 2
        assert differs in result.stderr, result.stderr
    # Another seed is another set of records: no overlap, nothing to resume or refuse.
    other = runner.invoke(app, [*base, "-c", "sa", "--tau", "4", "--seed", "5"])
    assert other.exit_code == 0, other.stderr
    assert len(existing_records(str(out)).keys) == 4


def test_a_full_disk_leaves_no_torn_record(tmp_path: Path, monkeypatch):
    out = tmp_path / "out.jsonl"
    writer = JsonlWriter(str(out))
    writer.write({"id": "0-0", "seed": 0, "text": "C"})
    size = out.stat().st_size
    real_write = os.write

    def full_after_half(fd: int, data: bytes) -> int:
        if len(data) > 8:
            real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_after_half)
    with pytest.raises(InputError, match="cannot write \\(No space left on device\\)"):
        writer.write({"id": "0-1", "seed": 0, "text": "CC" * 50})
    monkeypatch.setattr(os, "write", real_write)
    writer.close()
    assert out.stat().st_size == size and out.read_text().endswith("\n")
    assert existing_records(str(out)).torn_bytes == 0


def test_text_runs_resume_per_prompt(tmp_path: Path, text_model_dir: Path):
    args = ["generate", "-q", "--model", str(text_model_dir), "-n", "3", "--length", "8"]
    args += ["--batch-size", "2", "--prompt", "The whale"]
    whole, part = tmp_path / "whole.jsonl", tmp_path / "part.jsonl"
    assert runner.invoke(app, [*args, "-o", str(whole)]).exit_code == 0
    lines = whole.read_text().splitlines(keepends=True)
    part.write_text(lines[1])  # record 0-1 only: 0-0 and 0-2 are missing
    (tmp_path / "part.jsonl.config.yaml").write_bytes(
        (tmp_path / "whole.jsonl.config.yaml").read_bytes()
    )
    resumed = runner.invoke(app, [*args, "-o", str(part), "--resume"])
    assert resumed.exit_code == 0, resumed.stderr
    assert same_records(whole, part)
    complete = runner.invoke(app, [*args, "-o", str(part), "--resume"])
    assert complete.exit_code == 0, complete.stderr
    assert complete.stderr.strip().splitlines()[-1] == (
        "nothing left to draw: all 3 samples were already written"
    )


@pytest.mark.slow
def test_the_same_seed_writes_the_same_records_at_any_batch_size_or_shard_count(
    tmp_path: Path, text_model_dir: Path
):
    # Where the ALM projects: a sample's numbers must not depend on its batch-mates
    # (models/rows.py), nor on which process draws it.
    jobs = {
        "sa": ["molecules", "-q", "-n", "12", "--seed", "3", "-c", "sa", "--tau", "3.5"],
        "toxicity": [
            "generate", "-q", "--model", str(text_model_dir), "-n", "6", "--length", "12",
            "--prompt", "The whale", "-c", "toxicity", "--tau", "0.5",
        ],
    }  # fmt: skip
    for name, args in jobs.items():
        whole = tmp_path / f"{name}.jsonl"
        assert runner.invoke(app, [*args, "-o", str(whole)]).exit_code == 0
        for batch in ("1", "5"):
            out = tmp_path / f"{name}-batch-{batch}.jsonl"
            done = runner.invoke(app, [*args, "--batch-size", batch, "-o", str(out)])
            assert done.exit_code == 0, done.stderr
            assert same_records(whole, out), (name, batch)
        for count in (2, 3):
            out = tmp_path / f"{name}-{count}-shards.jsonl"
            for index in range(count):
                shard = ["--shard", f"{index}/{count}", "-o", f"{out}.{index}"]
                assert runner.invoke(app, [*args, *shard]).exit_code == 0
            out.write_text("".join(Path(f"{out}.{i}").read_text() for i in range(count)))
            assert same_records(whole, out), (name, count)


@pytest.mark.slow
def test_text_defaults_to_a_nucleus_and_a_file_drawn_under_another_keeps_its_own(
    tmp_path: Path, text_model_dir: Path
):
    args = ["generate", "-q", "--model", str(text_model_dir), "-n", "3", "--length", "8"]
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    # A run made before text defaulted to the nucleus: top_p 1 in its resolved config.
    assert runner.invoke(app, [*args, "--top-p", "1", "-o", str(old)]).exit_code == 0
    assert runner.invoke(app, [*args, "-o", str(new)]).exit_code == 0
    assert f"top_p: {TEXT_TOP_P}" in (tmp_path / "new.jsonl.config.yaml").read_text()
    assert not same_records(old, new)  # the nucleus changes what is drawn
    # Left to the default, more samples of the old file are drawn under its own top_p 1 ...
    more = [*args[:-4], "-n", "5", "--length", "8", "--resume", "-o", str(old)]
    appended = runner.invoke(app, more)
    assert appended.exit_code == 0, appended.stderr
    assert "top_p: 1.0" in (tmp_path / "old.jsonl.config.yaml").read_text()
    whole = tmp_path / "whole.jsonl"
    assert runner.invoke(app, [*more[:-1], str(whole), "--top-p", "1"]).exit_code == 0
    assert same_records(old, whole)
    # ... and a nucleus named for it is another configuration, refused.
    named = runner.invoke(app, [*args, "--top-p", "0.5", "--seed", "1", "-o", str(old)])
    assert named.exit_code == 2 and "sampling.top_p differs" in named.stderr


@pytest.mark.slow
def test_a_molecule_file_drawn_before_the_exact_search_came_first_resumes_as_it_began(
    tmp_path: Path,
):
    """Files written before `repair.surrogates_from` existed had the surrogates move every
    draw's final prediction (the value 1): resumed, they go on that way; the default
    (`REPAIR_BY_MODEL`) applies to new files only."""
    args = ["molecules", "-q", "-n", "8", "-c", "sa", "--tau", "3.5", "--batch-size", "8"]
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    assert runner.invoke(app, [*args, "-o", str(new)]).exit_code in (0, 3)
    default = REPAIR_BY_MODEL["smiles"]["surrogates_from"]
    assert default > 1 and f"surrogates_from: {default}\n" in Path(f"{new}.config.yaml").read_text()
    spec = tmp_path / "first.yaml"
    spec.write_text(
        "constraints:\n  - type: sa\n    tau: 3.5\nsampling:\n  batch_size: 8\n"
        "repair:\n  surrogates_from: 1\n"
    )
    first = ["molecules", "-q", "-n", "8", "--spec", str(spec), "-o", str(old)]
    assert runner.invoke(app, first).exit_code in (0, 3)
    config = Path(f"{old}.config.yaml")
    # As a file written before the setting existed: no such key.
    config.write_text(config.read_text().replace("  surrogates_from: 1\n", ""))
    assert "surrogates_from" not in config.read_text()
    more = [*args[:3], "16", *args[4:], "--resume", "-o", str(old)]
    resumed = runner.invoke(app, more)
    assert resumed.exit_code in (0, 3), resumed.stderr
    assert "surrogates_from: 1\n" in config.read_text()
    whole = tmp_path / "whole.jsonl"
    run = ["molecules", "-q", "-n", "16", "--spec", str(spec), "-o", str(whole)]
    assert runner.invoke(app, run).exit_code in (0, 3)
    assert same_records(old, whole)


def test_molecules_keep_the_full_mass_by_default(tmp_path: Path):
    out = tmp_path / "mols.jsonl"
    assert runner.invoke(app, ["molecules", "-q", "-n", "2", "-o", str(out)]).exit_code == 0
    assert "top_p: 1.0" in (tmp_path / "mols.jsonl.config.yaml").read_text()


# Records written one batch of one at a time: a loaded machine's test process, woken late,
# still finds the run under way (64 records in batches of 2 were once all written first).
KILLED = [sys.executable, "-m", "cdd_cli", "molecules", "-q", "-n", "96", "--batch-size", "1"]
KILLED += ["-c", "pains", "-c", "lipinski", "--threads", "1"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    whole = tmp_path_factory.mktemp("whole") / "whole.jsonl"
    subprocess.run([*KILLED, "-o", str(whole)], check=True, capture_output=True, timeout=HANG_S)
    return whole


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_killed_at_a_random_moment_then_resumed(tmp_path: Path, signum: int, uninterrupted: Path):
    args, whole, part = KILLED, uninterrupted, tmp_path / "part.jsonl"
    process = subprocess.Popen(
        [*args, "-o", str(part)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        # The first record, however long a loaded machine takes to start the run: a signal
        # before it finds nothing kept. (The deadline is a hang guard, not a speed check.)
        deadline = time.monotonic() + HANG_S
        while not (part.is_file() and part.stat().st_size) and process.poll() is None:
            assert time.monotonic() < deadline, "the run wrote no record: hung"
            time.sleep(0.05)
        time.sleep(random.Random(signum).uniform(0.0, 0.5))
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=HANG_S)
    finally:
        process.kill()
    kept = len(existing_records(str(part)).keys)
    assert 0 < kept < 96
    if signum != signal.SIGKILL:  # stopped after a whole record, saying how to finish
        assert process.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum]
        (line,) = stderr.decode().splitlines()
        how = "interrupted" if signum == signal.SIGINT else "terminated"
        assert line.startswith(f"cdd: error: {how}: {kept} of 96 records kept")
        assert line.endswith(f"-o {part} --resume")
    done = subprocess.run(
        [*args, "-o", str(part), "--resume"], capture_output=True, timeout=HANG_S, text=True
    )
    assert done.returncode == 0, done.stderr
    assert same_records(whole, part)


@pytest.mark.slow
def test_shards_merge_into_the_one_process_run(tmp_path: Path, text_model_dir: Path):
    args = ["generate", "-q", "--model", str(text_model_dir), "-n", "3", "--length", "6"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "The whale"}\n{"prompt": "A ship"}\n')
    args += ["--prompts", str(prompts)]
    one, merged = tmp_path / "one.jsonl", tmp_path / "merged.jsonl"
    assert runner.invoke(app, [*args, "-o", str(one)]).exit_code == 0
    shards = [tmp_path / f"shard{i}.jsonl" for i in range(3)]
    for i, shard in enumerate(shards):  # each with its own batch size: it changes nothing
        extra = ["--shard", f"{i}/3", "--batch-size", str(i + 1)]
        assert runner.invoke(app, [*args, *extra, "-o", str(shard)]).exit_code == 0
    # Interleaved: samples k = 3 p + i of the run go to shard k % 3.
    assert sorted(existing_records(str(shards[1])).keys) == [(0, "0-1"), (0, "1-1")]
    short = runner.invoke(app, ["merge", str(merged), *map(str, shards[:2])])
    assert short.exit_code == 2 and "the shards lack 2 record(s), e.g. 0-2" in short.stderr
    twice = runner.invoke(app, ["merge", str(merged), str(shards[0]), str(shards[0])])
    assert twice.exit_code == 2 and "is also at" in twice.stderr
    result = runner.invoke(app, ["merge", str(merged), *map(str, shards)])
    assert result.exit_code == 0, result.stderr
    assert one.read_text().count("\n") == 6 and same_records(one, merged)
    ids = [json.loads(line)["id"] for line in merged.read_text().splitlines()]
    assert ids == ["0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]
    other = tmp_path / "other.jsonl"
    assert (
        runner.invoke(app, [*args, "--steps", "3", "--shard", "2/3", "-o", str(other)]).exit_code
        == 0
    )
    mixed = runner.invoke(
        app, ["merge", str(tmp_path / "m2.jsonl"), *map(str, shards[:2]), str(other)]
    )
    assert mixed.exit_code == 2 and "another configuration" in mixed.stderr
    assert "sampling.steps" in mixed.stderr


def torchrun(processes: int, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc-per-node N -m cdd_cli ARGS` (gloo on the CPU)."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    launcher += ["--nproc-per-node", str(processes), "-m", "cdd_cli", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        launcher, cwd=cwd, capture_output=True, text=True, env=env, timeout=HANG_S
    )


@pytest.mark.slow
def test_torchrun_processes_write_the_one_process_records_and_resume_with_another_count(
    tmp_path: Path,
):
    args = ["molecules", "-q", "-n", "7", "--seed", "3", "-c", "sa", "--tau", "4"]
    one, out = tmp_path / "one.jsonl", tmp_path / "out.jsonl"
    single = subprocess.run(
        [sys.executable, "-m", "cdd_cli", *args, "-o", str(one)],
        capture_output=True,
        timeout=HANG_S,
    )
    assert single.returncode in (0, 3), single.stderr
    two = torchrun(2, [*args, "-o", str(out)], tmp_path)
    assert two.returncode == 0, two.stderr
    assert f"7 records from 2 processes in {out}" in two.stderr
    assert same_records(one, out)
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert ids == [f"0-{i}" for i in range(7)]  # gathered in order, no part left beside
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["one.jsonl", "one.jsonl.config.yaml", "out.jsonl", "out.jsonl.config.yaml"]
    )
    # A run stopped with parts left (rank files of 3 processes): one process finishes it.
    lines = one.read_text().splitlines(keepends=True)
    out.write_text(lines[0])
    for rank, line in enumerate(lines[1:4]):
        part = tmp_path / f"out.jsonl.rank{rank}"
        part.write_text(line + '{"id": "0-6", "se')  # each with a torn last line
    again = runner.invoke(app, [*args, "-o", str(out)])
    assert again.exit_code == 2 and "add --resume" in again.stderr
    resumed = runner.invoke(app, [*args, "-o", str(out), "--resume"])
    assert resumed.exit_code in (0, 3), resumed.stderr
    assert "resuming: 4 of 7 records already there" in resumed.stderr
    assert same_records(one, out) and not list(tmp_path.glob("out.jsonl.rank*"))


def ranks(processes: int, args: list[str], cwd: Path) -> list[tuple[int, str]]:
    """`python -m cdd_cli ARGS` as each rank of a torchrun run, started here with the
    environment torchrun gives its processes (gloo on the CPU): each rank's exit code and
    stderr. torchrun itself reports any rank's nonzero exit, 3 included, as its own failure
    (exit 1) and stops the other ranks, so a run's exit 3 is seen only rank by rank."""
    import socket

    with socket.socket() as free:  # a port for the ranks' rendezvous
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    started = []
    for rank in range(processes):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
        env |= {"MASTER_PORT": str(port), "WORLD_SIZE": str(processes), "RANK": str(rank)}
        env |= {"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(processes)}
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "cdd_cli", *args],
                cwd=cwd,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        told = [p.communicate(timeout=HANG_S)[1] for p in started]
        return [(p.returncode, stderr) for p, stderr in zip(started, told, strict=True)]
    finally:
        for p in started:
            p.kill()


@pytest.mark.slow
def test_a_torchrun_run_with_violations_exits_3_with_its_records_gathered(tmp_path: Path):
    """Exit 3 (written, some records violate) is a finished run: OUT holds every rank's
    records in order and no part is left, as after exit 0. Few of QM9's molecules reach a QED
    of 0.65 (its highest is 0.67), and unconstrained nothing steers them there."""
    args = ["molecules", "-q", "-n", "4", "--steps", "8", "--method", "unconstrained"]
    args += ["-c", "qed", "--tau", "0.65"]
    out = tmp_path / "out.jsonl"
    (lead, told), (other, _) = ranks(2, [*args, "-o", str(out)], tmp_path)
    assert (lead, other) == (3, 3), told
    assert f"4 records from 2 processes in {out}" in told
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == [f"0-{i}" for i in range(4)]
    for rank in (0, 1):  # each rank's share (sample k goes to rank k % 2) has a violation
        assert not all(r["satisfied"] for r in records[rank::2]), records
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out.jsonl.config.yaml"]


@pytest.mark.slow
def test_torchrun_generate_resumes_a_one_process_run(tmp_path: Path, text_model_dir: Path):
    args = ["generate", "-q", "--model", str(text_model_dir), "-n", "3", "--length", "6"]
    args += ["--prompt", "The whale", "--seed", "2"]
    whole, out = tmp_path / "whole.jsonl", tmp_path / "out.jsonl"
    assert runner.invoke(app, [*args, "-o", str(whole)]).exit_code == 0
    assert runner.invoke(app, [*args, "-n", "1", "-o", str(out)]).exit_code == 0
    refused = torchrun(2, [*args, "-o", str(out)], tmp_path)
    assert refused.returncode != 0 and "add --resume" in refused.stderr
    done = torchrun(2, [*args, "-o", str(out), "--resume"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert same_records(whole, out)


def test_a_second_process_writing_the_same_file_is_refused(tmp_path: Path):
    import fcntl

    out = tmp_path / "out.jsonl"
    args = ["molecules", "-q", "-n", "2", "-o", str(out)]
    with open(f"{out}.lock", "w") as held:  # another run holds the file
        fcntl.flock(held, fcntl.LOCK_EX)
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2 and "another cdd process is writing it" in refused.stderr
        assert not out.exists()
    done = runner.invoke(app, args)  # released (a stale lock file is no lock)
    assert done.exit_code == 0, done.stderr
    assert len(out.read_text().splitlines()) == 2 and not Path(f"{out}.lock").exists()
