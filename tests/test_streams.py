"""Odd standard streams and a lost torchrun peer: a closed stdin or stdout, an ASCII
PYTHONIOENCODING, a C or POSIX locale are one line and exit 2, or correct output (records in
UTF-8 JSON whatever the locale), never a file named `-`; a rank whose peer was killed says
which and how to resume."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from cdd_cli import torchrun
from cdd_cli.cli.terminal import ClosedStream
from cdd_cli.errors import InputError, Interrupted
from cdd_cli.output.distributed import Launch, Ranks
from cdd_cli.output.jsonl import JsonlWriter, read_jsonl
from cdd_cli.run.runner import Output
from tests.limits import HANG_S

ROOT = Path(__file__).parents[1]


def cdd(shell: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`cdd` run by a shell (which can close a stream: `>&-`), in `cwd`."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    command = f"{sys.executable} -m cdd_cli {shell}"
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, cwd=cwd, env=environment, timeout=HANG_S
    )


def test_a_closed_stream_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path):
    stdout = ClosedStream("stdout")
    with pytest.raises(OSError) as raised:
        stdout.write("{}\n")
    assert (raised.value.errno, raised.value.strerror) == (errno.EBADF, "stdout is closed")
    monkeypatch.setattr(sys, "stdout", stdout)
    with pytest.raises(InputError) as refused:
        JsonlWriter("-")  # at once: no batch is drawn for a stdout that cannot take it
    assert str(refused.value) == "output '-': cannot write (stdout is closed)"
    assert refused.value.cli == "-o -: cannot write (stdout is closed)"
    monkeypatch.setattr(sys, "stdin", ClosedStream("stdin"))
    with pytest.raises(InputError, match=r"^-: cannot read \(stdin is closed\)$"):
        read_jsonl("-", "prompt")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_closed_stdout_and_stdin(tmp_path: Path):
    closed = cdd("molecules -n 3 -q >&-", tmp_path)
    assert closed.returncode == 2
    assert closed.stderr.decode().splitlines() == [
        "cdd: error: -o -: cannot write (stdout is closed)"
    ]
    for command in ("--help", "--version", "constraints ls"):
        listed = cdd(f"{command} >&-", tmp_path)
        assert listed.returncode == 2
        assert listed.stderr.decode().splitlines() == ["cdd: error: stdout is closed"]
    assert os.listdir(tmp_path) == []  # never a file named `-`
    # Refused before the records are read: were they read first, this file's error would show.
    (tmp_path / "m.jsonl").write_text("not a record\n")
    evaluated = cdd("eval m.jsonl >&-", tmp_path)
    assert evaluated.returncode == 2
    assert evaluated.stderr.decode().splitlines() == ["cdd: error: stdout is closed"]
    (tmp_path / "m.jsonl").unlink()
    # Records to a file need no stdout.
    to_file = cdd("molecules -n 2 -q -o out.jsonl >&-", tmp_path)
    assert to_file.returncode == 0, to_file.stderr
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2
    no_stdin = cdd("generate --prompts - -n 1 <&-", tmp_path)
    assert no_stdin.returncode == 2
    assert no_stdin.stderr.decode().splitlines() == [
        "cdd: error: -: cannot read (stdin is closed)"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_stdout_by_another_name_gets_the_records_not_stderr(tmp_path: Path, name: str):
    """Descriptor 1 points at stderr while the CLI runs (a plugin's print never reaches the
    records): an output named as stdout is written where "-" is."""
    done = cdd(f"molecules -n 2 -q --steps 4 -o {name}", tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.decode().splitlines()) == 2
    assert "{" not in done.stderr.decode() and os.listdir(tmp_path) == []


def test_only_this_process_stdout_is_stdout_by_another_name(tmp_path: Path):
    from cdd_cli.output.files import names_stdout

    link = tmp_path / "out"
    link.symlink_to("/dev/stdout")
    assert names_stdout("/dev/stdout") and names_stdout(str(link))
    assert names_stdout(f"/proc/{os.getpid()}/fd/1")
    assert not names_stdout("/dev/stderr") and not names_stdout("/dev/fd/2")
    assert not names_stdout(f"/proc/{os.getpid() + 1}/fd/1")
    assert not names_stdout(str(tmp_path / "file.jsonl")) and not names_stdout("-1")


@pytest.mark.slow
@pytest.mark.parametrize(
    "env",
    [
        {"PYTHONIOENCODING": "ascii"},
        {"LC_ALL": "C"},
        {"LC_ALL": "POSIX"},
    ],
)
def test_records_are_utf_8_json_whatever_the_locale(tmp_path: Path, env: dict[str, str]):
    done = cdd("generate --prompt 'Café' -n 2 --length 8 -q", tmp_path, **env)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]
    assert [r["prompt"] for r in records] == ["Café", "Café"]
    assert "Café".encode() in done.stdout  # UTF-8, not escaped


@pytest.mark.slow
def test_an_error_naming_non_ascii_under_an_ascii_stderr_is_one_line(tmp_path: Path):
    done = cdd("validate Café.yaml", tmp_path, PYTHONIOENCODING="ascii")
    assert done.returncode == 2
    assert done.stderr.decode("ascii").splitlines() == [
        "cdd: error: Caf\\xe9.yaml: no such spec file"
    ]


def test_a_rank_whose_peer_was_killed_says_which_and_how_to_resume(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    def peer_gone(self, code: int) -> tuple[int, int]:
        raise dist.DistBackendError(
            "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            "[127.0.0.1]:29500"
        )

    monkeypatch.setattr(torchrun, "launch_from_env", lambda: Launch(0, 2, 0, 2))
    monkeypatch.setattr(Ranks, "start", lambda self: None)
    monkeypatch.setattr(Ranks, "finish", peer_gone)
    job = lambda part, device, lead: 0  # noqa: E731
    with pytest.raises(Interrupted) as raised:
        torchrun.write_run(Output(str(tmp_path / "out.jsonl")), "cpu", job)
    assert raised.value.code == 1
    assert str(raised.value) == (
        "rank 1 of the run's 2 processes stopped without a word (killed?); the records written "
        "are kept: rerun the same command with --resume to finish"
    )
    # Any other error of the run is its own.
    monkeypatch.setattr(Ranks, "finish", lambda self, code: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        torchrun.write_run(Output(str(tmp_path / "out.jsonl")), "cpu", job)
