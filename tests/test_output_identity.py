"""One run, one file: an output is known by its file (device and inode, links followed),
never by the name it is given; records without their configuration are not added to; a
resume with other prompts or another length is refused; nothing is written beside a stream
or a device; special files are refused without waiting on them; `cdd merge` leaves its
output whole or absent (issue 60, "Mixed or lost output")."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.errors import InputError, Interrupted, Terminated
from cdd_cli.output import lock
from cdd_cli.output.config import (
    INPUTS,
    all_inputs,
    check_inputs,
    check_resolved_config,
    read_config,
    with_inputs,
    write_resolved_config,
)
from cdd_cli.output.distributed import gather
from cdd_cli.output.files import config_path, is_stream, names_a_descriptor, real_path
from cdd_cli.output.jsonl import JsonlWriter, check_output_file, read_jsonl
from cdd_cli.output.lock import output_lock
from cdd_cli.output.resume import existing_records
from cdd_cli.output.shards import merge_shards
from cdd_cli.run.drawing import Prompt
from cdd_cli.run.runner import inputs
from cdd_cli.spec.reader import load_spec
from tests.limits import HANG_S

runner = CliRunner()
SHA = "0" * 64


def text_run(model: Path, *args: str) -> list[str]:
    return ["generate", "-q", "--model", str(model), "--length", "8", "--steps", "2", *args]


def records_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def finishes(call: Callable[[], object], seconds: float = 20) -> object:
    """`call()`'s result or exception, from a thread that must end within `seconds` (a FIFO
    opened for reading would wait for a writer forever)."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed back to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked (a special file opened as a regular one)"
    return outcome[0]


# ------------------------------------------------------------------------------------------
# Two names, one file


@pytest.mark.slow
def test_a_symlink_to_a_file_of_another_run_is_refused_as_the_file_is(tmp_path, text_model_dir):
    out, link = tmp_path / "o.jsonl", tmp_path / "link.jsonl"
    assert runner.invoke(app, [*text_run(text_model_dir, "-n", "2"), "-o", str(out)]).exit_code == 0
    before = out.read_text()
    link.symlink_to(out.name)
    other = runner.invoke(
        app, [*text_run(text_model_dir, "-n", "2", "--seed", "1"), "--steps", "3", "-o", str(link)]
    )
    assert other.exit_code == 2
    said = f"(sampling.steps differs, see {out}.config.yaml: 2 there, 3 in this run)"
    assert said in other.stderr
    assert out.read_text() == before and not Path(f"{link}.config.yaml").exists()
    # The same run's settings through the link: appended to the file, configuration beside it.
    same = runner.invoke(
        app, [*text_run(text_model_dir, "-n", "2", "--seed", "1"), "-o", str(link)]
    )
    assert same.exit_code == 0, same.stderr
    assert len(records_of(out)) == 4 and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "link.jsonl",
        "o.jsonl",
        "o.jsonl.config.yaml",
    ]


@pytest.mark.slow
def test_a_hard_link_is_refused_for_want_of_its_configuration(tmp_path, text_model_dir):
    out, hard = tmp_path / "o.jsonl", tmp_path / "hard.jsonl"
    assert runner.invoke(app, [*text_run(text_model_dir, "-n", "1"), "-o", str(out)]).exit_code == 0
    os.link(out, hard)
    before = out.read_text()
    for extra in ([], ["--resume"]):
        refused = runner.invoke(
            app, [*text_run(text_model_dir, "-n", "1", "--seed", "1"), *extra, "-o", str(hard)]
        )
        assert refused.exit_code == 2
        assert f"has no {hard}.config.yaml beside it" in refused.stderr
    assert out.read_text() == before


def test_two_names_of_one_file_share_its_locks(tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_text('{"id": "0-0", "seed": 0}\n')
    link, hard = tmp_path / "link.jsonl", tmp_path / "hard.jsonl"
    link.symlink_to(out)
    os.link(out, hard)
    with (
        output_lock(str(out)),
        pytest.raises(InputError, match="another cdd process"),
        output_lock(str(link)),  # the same REAL.lock
    ):
        pass
    # Another process holds the file itself (its lock on the inode): every name of it is held.
    with open(out, "rb") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(InputError) as caught, output_lock(str(hard)):
            pass
        problem = (
            "another cdd process is writing it (it holds a lock on the file itself); wait for "
            "it to finish or choose another file"
        )
        assert str(caught.value) == f"output {str(hard)!r}: {problem}"
        assert caught.value.cli == f"-o {hard}: {problem}"
        # A writer refuses a file another process holds at its first record.
        with pytest.raises(InputError, match="another cdd process"), JsonlWriter(str(hard)) as w:
            w.write({"id": "0-1", "seed": 0})
    assert out.read_text().count("\n") == 1
    # This process's own lock is no obstacle to its writer, and goes with the run.
    with output_lock(str(hard)), JsonlWriter(str(hard)) as writer:
        writer.write({"id": "0-1", "seed": 0})
    assert not lock.HELD and out.read_text().count("\n") == 2
    assert not Path(f"{out}.lock").exists() and not Path(f"{hard}.lock").exists()


def test_a_file_made_by_one_name_is_held_by_its_writer(tmp_path):
    out = tmp_path / "o.jsonl"
    with output_lock(str(out)):  # not there yet: its writer locks the file it makes
        writer = JsonlWriter(str(out))
        writer.write({"id": "0-0", "seed": 0})
        hard = tmp_path / "hard.jsonl"
        os.link(out, hard)
        with (
            pytest.raises(InputError, match="it holds a lock on the file itself"),
            output_lock(str(hard)),
        ):
            pass
        writer.close()


def test_the_configuration_is_beside_the_real_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["cdd", "run"])
    folder = tmp_path / "real"
    folder.mkdir()
    out = folder / "o.jsonl"
    out.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(out)
    assert config_path(str(link)) == Path(f"{out}.config.yaml")
    assert real_path(str(link)) == str(out) and real_path("x/y.jsonl") == "x/y.jsonl"
    write_resolved_config({"a": 1}, str(link))
    assert Path(f"{out}.config.yaml").read_text() == "# latest run: cdd run\na: 1\n"
    assert not Path(f"{link}.config.yaml").exists()


# ------------------------------------------------------------------------------------------
# Records without their configuration


def test_foreign_records_are_neither_appended_to_nor_resumed(tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_text('{"id":"0-0","text":"hello","seed":0}\n')
    for extra in ([], ["--resume"]):
        refused = runner.invoke(app, ["molecules", "-q", "-n", "2", "-o", str(out), *extra])
        assert refused.exit_code == 2
        message = refused.stderr.strip()
        assert message == (
            f"cdd: error: -o {out}: is not empty, and has no {out}.config.yaml beside it to say "
            "how its lines were made; cdd adds records only to a file whose configuration it "
            "can check: write to another file"
        )
    assert out.read_text() == '{"id":"0-0","text":"hello","seed":0}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.jsonl"]


# ------------------------------------------------------------------------------------------
# What shapes the records: prompts, their order, the length


@pytest.mark.slow
def test_resume_refuses_other_prompts_their_order_or_another_length(tmp_path, text_model_dir):
    prompts, reordered = tmp_path / "ab.jsonl", tmp_path / "ba.jsonl"
    prompts.write_text('{"prompt": "A"}\n{"prompt": "B"}\n')
    reordered.write_text('{"prompt": "B"}\n{"prompt": "A"}\n')
    out = tmp_path / "o.jsonl"
    first = runner.invoke(
        app, [*text_run(text_model_dir, "-n", "1"), "--prompts", str(prompts), "-o", str(out)]
    )
    assert first.exit_code == 0, first.stderr
    before = out.read_text()
    head = f"cdd: error: -o {out}: its records of seed 0 were made with"
    tail = f"(see {out}.config.yaml); resume with the same"
    for changed, said in (
        (["--prompts", str(reordered)], "other prompts, or the same ones in another order"),
        (["--prompt", "B"], "2 prompt(s), not 1"),
        (["--prompts", str(prompts), "--length", "6"], "--length 8, not 6"),
    ):
        args = text_run(text_model_dir, "-n", "2")
        resumed = runner.invoke(app, [*args, *changed, "-o", str(out), "--resume"])
        assert resumed.exit_code == 2, changed
        assert resumed.stderr.startswith(f"{head} {said} {tail}"), resumed.stderr
        assert resumed.stderr.count("\n") == 1
    assert out.read_text() == before
    # The same inputs resume, and another seed appends whatever its prompts.
    same = [*text_run(text_model_dir, "-n", "2"), "--prompts", str(prompts), "-o", str(out)]
    assert runner.invoke(app, [*same, "--resume"]).exit_code == 0
    other = [*text_run(text_model_dir, "-n", "1", "--seed", "1"), "--prompt", "C", "-o", str(out)]
    assert runner.invoke(app, other).exit_code == 0
    assert [(r["seed"], r["id"], r["prompt"]) for r in records_of(out)] == [
        (0, "0-0", "A"), (0, "1-0", "B"), (0, "0-1", "A"), (0, "1-1", "B"), (1, "0-0", "C"),
    ]  # fmt: skip
    config = read_config(Path(f"{out}.config.yaml"))
    assert [(g["seeds"], g["prompts"], g["length"]) for g in config[INPUTS]] == [
        ([0], 2, 8), ([1], 1, 8),
    ]  # fmt: skip
    # Still a spec: `--spec FILE.config.yaml` repeats the settings (the inputs are a comment).
    assert load_spec(Path(f"{out}.config.yaml")).model == str(text_model_dir.resolve())


def test_a_runs_inputs_are_its_length_and_its_prompts_in_order():
    def run(*texts: str, length: int = 8) -> SimpleNamespace:
        prompts = [Prompt(i, text, id=None, given=None) for i, text in enumerate(texts)]
        return SimpleNamespace(prompts=prompts, length=length)

    ab = inputs(run("A", "B"))
    assert ab == {"length": 8, "prompts": 2, "prompts_sha256": ab["prompts_sha256"]}
    assert inputs(run("A", "B")) == ab  # the same prompts: the same digest
    assert inputs(run("B", "A"))["prompts_sha256"] != ab["prompts_sha256"]
    assert inputs(run("A", "B", length=6))["length"] == 6
    assert inputs(run(None)) == {**inputs(run(None)), "prompts": 1}  # a molecule run's


def group(seeds: list[int], length: int = 8, prompts: int = 1, digest: str = SHA) -> dict:
    return {"seeds": seeds, "length": length, "prompts": prompts, "prompts_sha256": digest}


def test_inputs_are_kept_by_seed():
    assert with_inputs(None, [group([0])]) == [group([0])]
    assert with_inputs([group([0])], [group([1])]) == [group([0, 1])]
    assert with_inputs([group([0, 1])], [group([1], length=6)]) == [group([0]), group([1], 6)]
    assert with_inputs([group([1])], [group([1], length=6)]) == [group([1], 6)]
    assert with_inputs([group([0]), "junk"], None) == [group([0]), "junk"]
    assert all_inputs([[group([0])], None, [group([1]), group([2], 6)]]) == [
        group([0, 1]), group([2], 6),
    ]  # fmt: skip


def test_check_inputs_names_the_first_difference_in_the_apis_words_and_the_clis():
    check_inputs([group([0])], [group([0])], "o.jsonl")
    check_inputs([group([0])], [group([1], 6)], "o.jsonl")  # another seed's: another run
    check_inputs([group([0])], None, "o.jsonl")  # written before cdd recorded them
    with pytest.raises(InputError) as caught:
        check_inputs([group([0], 6)], [group([0])], "o.jsonl")
    assert str(caught.value).startswith(
        "output 'o.jsonl': its records of seed 0 were made with length 8, not 6"
    )
    assert caught.value.cli.startswith(
        "-o o.jsonl: its records of seed 0 were made with --length 8"
    )
    with pytest.raises(InputError, match=r"with other prompts, or the same ones in another order"):
        check_inputs([group([0], digest="1" * 64)], [group([0])], "o.jsonl")


def test_other_prompts_are_refused_naming_one_the_file_was_made_with(tmp_path: Path):
    """Only the prompts' digest is kept: a record's prompt (a design's names its blanks) says
    what the file's were."""
    out = tmp_path / "o.jsonl"
    out.write_text(
        '{"id": "0-0", "seed": 1, "prompt": "other seed"}\nnot json\n'
        '{"id": "0-0", "seed": 0, "prompt": "scaffold *c1ccccc1, blanks 1-3"}\n'
    )
    with pytest.raises(InputError) as caught:
        check_inputs([group([0], digest="1" * 64)], [group([0])], str(out))
    assert caught.value.cli.endswith(
        'or write to another file (one of its prompts: "scaffold *c1ccccc1, blanks 1-3")'
    )
    out.write_text('{"id": "0-0", "seed": 0, "prompt": null}\n')  # unprompted: nothing to show
    with pytest.raises(InputError) as caught:
        check_inputs([group([0], digest="1" * 64)], [group([0])], str(out))
    assert caught.value.cli.endswith("or write to another file")


def test_the_inputs_travel_as_a_comment_at_the_configurations_head(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["cdd", "run"])
    out = tmp_path / "o.jsonl"
    write_resolved_config({"model": "m", INPUTS: [group([3])]}, str(out))
    text = Path(f"{out}.config.yaml").read_text()
    assert text.splitlines()[1] == "# inputs: " + json.dumps([group([3])])
    assert yaml.safe_load(text) == {"model": "m"}
    assert read_config(Path(f"{out}.config.yaml")) == {"model": "m", INPUTS: [group([3])]}
    # Records there: this run's seed joins the file's.
    out.write_text('{"id": "0-0", "seed": 3}\n')
    write_resolved_config({"model": "m", INPUTS: [group([4], length=6)]}, str(out))
    assert read_config(Path(f"{out}.config.yaml"))[INPUTS] == [group([3]), group([4], 6)]
    check_resolved_config(
        {"model": "m", "words": "plain", "sampling": {}, INPUTS: [group([3])]}, str(out)
    )
    Path(f"{out}.config.yaml").write_text("# inputs: [nope\nmodel: m\n")
    with pytest.raises(InputError, match="its inputs line is not JSON"):
        read_config(Path(f"{out}.config.yaml"))


# ------------------------------------------------------------------------------------------
# Streams and devices: nothing beside them


def test_streams_are_told_from_files(tmp_path):
    for name in ("-", "/dev/stdout", "/dev/stderr", "/dev/fd/1", "/proc/self/fd/1", "/dev/null"):
        assert is_stream(name), name
    link = tmp_path / "out"
    link.symlink_to("/dev/stdout")
    assert is_stream(str(link)) and names_a_descriptor(str(link))
    regular = tmp_path / "r.jsonl"
    regular.write_text("")
    assert not is_stream(str(regular)) and not is_stream(str(tmp_path / "new.jsonl"))
    assert not names_a_descriptor("/dev/shm/x.jsonl")


def test_nothing_is_written_beside_a_descriptors_name(tmp_path, monkeypatch):
    """`-o /dev/stdout` with stdout redirected to a file: the file is the shell's, and the
    name is this process's stream (here: a descriptor of this test's own file)."""
    monkeypatch.setattr(sys, "argv", ["cdd", "run"])
    target = tmp_path / "shell.jsonl"
    target.write_text('{"id": "0-0", "seed": 0}\n')  # no configuration: another run's, unseen
    with open(target, "ab") as held:
        name = f"/proc/self/fd/{held.fileno()}"
        check_resolved_config({"model": "m"}, name)  # a stream: nothing to check
        write_resolved_config({"model": "m"}, name)
        with JsonlWriter(name, lambda: write_resolved_config({"model": "m"}, name)) as writer:
            writer.write({"id": "0-1", "seed": 0})
        assert existing_records(name).keys == set()
        with output_lock(name):  # no lock file beside a stream
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shell.jsonl"]
    assert target.read_text().count("\n") == 2


def shard(folder: Path, name: str, ids: list[str], n: int = 2) -> Path:
    path = folder / name
    path.write_text("".join(json.dumps({"id": i, "seed": 0, "text": i}) + "\n" for i in ids))
    Path(f"{path}.config.yaml").write_text(f"model: m\nsampling:\n  n: {n}\n")
    return path


def test_a_merge_into_a_device_writes_nothing_beside_it(tmp_path):
    parts = [shard(tmp_path, "a.jsonl", ["0-0"]), shard(tmp_path, "b.jsonl", ["0-1"])]
    try:
        assert merge_shards("/dev/null", parts) == 2
        assert not Path("/dev/null.config.yaml").exists()
    finally:
        Path("/dev/null.config.yaml").unlink(missing_ok=True)  # (should it ever be made)


# ------------------------------------------------------------------------------------------
# Special files where a regular file is read: refused, never waited on


def test_special_files_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused = finishes(lambda: read_config(fifo))
    assert (
        isinstance(refused, InputError)
        and str(refused) == f"{fifo}: is a pipe (FIFO), not a regular file"
    )
    refused = finishes(lambda: read_jsonl(str(fifo), "record", regular=True))
    assert isinstance(refused, InputError) and "is a pipe (FIFO)" in str(refused)
    # The configuration beside records, a merge's shard and its configuration.
    out = tmp_path / "o.jsonl"
    out.write_text('{"id": "0-0", "seed": 0}\n')
    os.mkfifo(f"{out}.config.yaml")
    refused = finishes(lambda: check_output_file(str(out)))
    assert str(refused) == f"output {str(out)!r}: {out}.config.yaml is a pipe (FIFO)"
    assert refused.cli == f"-o {out}: {out}.config.yaml is a pipe (FIFO)"
    assert isinstance(finishes(lambda: check_resolved_config({}, str(out))), InputError)
    good = shard(tmp_path, "a.jsonl", ["0-0"])
    os.mkfifo(tmp_path / "b.jsonl")
    Path(tmp_path / "b.jsonl.config.yaml").write_text("model: m\nsampling:\n  n: 2\n")
    refused = finishes(
        lambda: merge_shards(str(tmp_path / "m.jsonl"), [good, tmp_path / "b.jsonl"])
    )
    assert str(refused) == f"{tmp_path / 'b.jsonl'}: is a pipe (FIFO), not a shard's file"
    (tmp_path / "c.jsonl").write_text('{"id": "0-1", "seed": 0}\n')
    os.mkfifo(tmp_path / "c.jsonl.config.yaml")
    refused = finishes(
        lambda: merge_shards(str(tmp_path / "m.jsonl"), [good, tmp_path / "c.jsonl"])
    )
    assert (
        str(refused) == f"{tmp_path / 'c.jsonl.config.yaml'}: is a pipe (FIFO), not a regular file"
    )
    assert not (tmp_path / "m.jsonl").exists()


# ------------------------------------------------------------------------------------------
# cdd merge: whole, or nothing at its name


@pytest.mark.parametrize(
    ("stop", "how", "code"),
    [(KeyboardInterrupt, "interrupted", 130), (Terminated, "terminated", 143)],
)
def test_an_interrupted_merge_leaves_no_output_and_says_so(tmp_path, monkeypatch, stop, how, code):
    parts = [
        shard(tmp_path, "a.jsonl", ["0-0", "0-2"], 4),
        shard(tmp_path, "b.jsonl", ["0-1", "0-3"], 4),
    ]
    written = JsonlWriter.write

    def stopped_at_the_third(self, record):
        if self.written == 2:
            raise stop
        written(self, record)

    monkeypatch.setattr(JsonlWriter, "write", stopped_at_the_third)
    out = tmp_path / "all.jsonl"
    with pytest.raises(Interrupted) as caught:
        merge_shards(str(out), parts)
    assert caught.value.code == code
    assert str(caught.value) == f"{how}: the merge stopped before it was whole; {out} not written"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.jsonl", "a.jsonl.config.yaml", "b.jsonl", "b.jsonl.config.yaml",
    ]  # fmt: skip
    monkeypatch.setattr(JsonlWriter, "write", written)
    assert merge_shards(str(out), parts) == 4  # a rerun finds nothing in its way


def test_a_merge_through_a_symlink_writes_its_file(tmp_path):
    parts = [shard(tmp_path, "a.jsonl", ["0-0"]), shard(tmp_path, "b.jsonl", ["0-1"])]
    real, link = tmp_path / "real.jsonl", tmp_path / "link.jsonl"
    link.symlink_to(real.name)  # dangling: the merge makes its file
    assert merge_shards(str(link), parts) == 2
    assert link.is_symlink() and [r["id"] for r in records_of(real)] == ["0-0", "0-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.jsonl", "a.jsonl.config.yaml", "b.jsonl", "b.jsonl.config.yaml",
        "link.jsonl", "real.jsonl", "real.jsonl.config.yaml",
    ]  # fmt: skip


def test_gathering_through_a_symlink_writes_its_file(tmp_path):
    real, link = tmp_path / "real.jsonl", tmp_path / "link.jsonl"
    link.symlink_to(real.name)
    part = tmp_path / "real.jsonl.rank0"
    part.write_text('{"id": "0-0", "seed": 0}\n')
    Path(f"{part}.config.yaml").write_text("model: m\nsampling:\n  n: 1\n")
    assert gather(str(link)) == 1
    assert link.is_symlink() and records_of(real) == [{"id": "0-0", "seed": 0}]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "link.jsonl",
        "real.jsonl",
        "real.jsonl.config.yaml",
    ]


# ------------------------------------------------------------------------------------------
# Whole processes


def python(code: str, cwd: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, **kwargs
    )


@pytest.mark.slow
def test_two_processes_cannot_write_one_file_through_two_names(tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_text("")  # there: its lock is the file's own too
    (tmp_path / "link.jsonl").symlink_to(out.name)
    os.link(out, tmp_path / "hard.jsonl")
    holder = python(
        f"""
        import sys, time
        from cdd_cli.output.lock import output_lock
        with output_lock({str(out)!r}):
            print("held", flush=True)
            sys.stdin.read()
        """,
        tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        for name in ("link.jsonl", "hard.jsonl", "o.jsonl"):
            refused = runner.invoke(app, ["molecules", "-q", "-n", "2", "-o", str(tmp_path / name)])
            assert refused.exit_code == 2, name
            assert "another cdd process is writing it" in refused.stderr
        assert out.read_text() == ""
    finally:
        holder.communicate("", timeout=HANG_S)


MERGE_KILLED = """
import os, signal, sys
from cdd_cli.output.jsonl import JsonlWriter
written = JsonlWriter.write
def stopping(self, record):
    if self.written == 2:
        os.kill(os.getpid(), signal.{signal})
    written(self, record)
JsonlWriter.write = stopping
from cdd_cli.cli.app import main
sys.argv = ["cdd", "merge", "all.jsonl", "a.jsonl", "b.jsonl"]
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGKILL"])
def test_a_killed_merge_leaves_nothing_a_later_command_reads(tmp_path, signum):
    shard(tmp_path, "a.jsonl", ["0-0", "0-2"], 4)
    shard(tmp_path, "b.jsonl", ["0-1", "0-3"], 4)
    merge = python(MERGE_KILLED.format(signal=signum), tmp_path, stderr=subprocess.PIPE, text=True)
    _, stderr = merge.communicate(timeout=HANG_S)
    assert merge.returncode in (143, -signal.SIGKILL)
    if signum == "SIGTERM":
        said = "terminated: the merge stopped before it was whole; all.jsonl not written"
        assert stderr == f"cdd: error: {said}\n"
    assert (
        not (tmp_path / "all.jsonl").exists() and not (tmp_path / "all.jsonl.config.yaml").exists()
    )
    # `cdd eval` finds no file; the merge, run again, writes it whole.
    assert runner.invoke(app, ["eval", str(tmp_path / "all.jsonl")]).exit_code == 2
    again = runner.invoke(
        app,
        [
            "merge",
            str(tmp_path / "all.jsonl"),
            str(tmp_path / "a.jsonl"),
            str(tmp_path / "b.jsonl"),
        ],
    )
    assert again.exit_code == 0, again.stderr
    assert [r["id"] for r in records_of(tmp_path / "all.jsonl")] == ["0-0", "0-1", "0-2", "0-3"]


@pytest.mark.slow
def test_records_to_dev_stdout_leave_nothing_beside_it(tmp_path):
    target = tmp_path / "shell.jsonl"
    target.write_text("")
    with open(target, "ab") as stdout:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cdd_cli",
                "molecules",
                "-q",
                "-n",
                "2",
                "--steps",
                "2",
                "-o",
                "/dev/stdout",
            ],
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=HANG_S,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
    assert done.returncode == 0, done.stderr
    assert len(records_of(target)) == 2
    assert not Path("/dev/stdout.config.yaml").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shell.jsonl"]


@pytest.mark.slow
def test_a_fifo_configuration_with_resume_is_refused_at_once(tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_text('{"id": "0-0", "seed": 0}\n')
    os.mkfifo(f"{out}.config.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "cdd_cli", "molecules", "-q", "-n", "2", "--resume", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert done.returncode == 2
    assert f"{out}.config.yaml beside it is a pipe (FIFO), not a configuration" in done.stderr
