"""The records writer's contract, read directly (the CLI tests reach it through whole runs):
appended whole lines, never a truncation or a torn record, one clear error per bad target."""

from __future__ import annotations

import errno
import io
import json
import os
import re
from pathlib import Path

import pytest

from cdd_cli.errors import InputError
from cdd_cli.output.jsonl import JsonlWriter, check_output_file, read_jsonl
from cdd_cli.output.lock import output_lock
from cdd_cli.output.resume import Existing, cut_torn_tail, existing_records, resume_from


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def said(caught: pytest.ExceptionInfo[InputError], api: str, cli: str) -> None:
    """The output layer's error matches `api` in the API's words (its message) and `cli` in
    the command line's (`.cli`, what the `cdd` command prints)."""
    assert re.search(api, str(caught.value)), str(caught.value)
    assert re.search(cli, caught.value.cli), caught.value.cli


def test_records_are_appended_after_what_the_file_holds(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "0-0", "seed": 0}\n')
    with JsonlWriter(str(out)) as writer:
        writer.write({"id": "0-1", "seed": 0, "text": "é≤"})
        writer.write({"id": "0-2", "seed": 0})
        assert writer.written == 2
    assert [r["id"] for r in lines(out)] == ["0-0", "0-1", "0-2"]
    # UTF-8 as it is, not \u escapes: a reader greps the text it asked for.
    assert "é≤" in out.read_text(encoding="utf-8")
    assert writer.fd is None  # closed by the context


def test_the_file_is_made_at_the_first_record_after_before_first(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    umask = os.umask(0o022)
    try:
        JsonlWriter(str(tmp_path / "mode.jsonl")).write({"id": "0-0", "seed": 0})
    finally:
        os.umask(umask)
    assert (tmp_path / "mode.jsonl").stat().st_mode & 0o777 == 0o644  # rw-r--r--, not executable
    calls = []
    writer = JsonlWriter(str(out), before_first=lambda: calls.append(out.exists()))
    assert not out.exists() and calls == []  # a run failing before its first record leaves none
    assert writer.kept(5) == f"0 of 5 records written (no {out} yet)"  # not "kept in" it
    writer.write({"id": "0-0", "seed": 0})
    writer.write({"id": "0-1", "seed": 0})
    writer.close()
    assert calls == [False]  # once, before the file was opened
    assert len(lines(out)) == 2
    assert writer.kept(5) == f"2 of 5 records kept in {out}, each a complete line"


def test_stdout_gets_one_flushed_line_per_record(tmp_path: Path, monkeypatch):
    flushed: list[str] = []

    class Stream(io.StringIO):
        def flush(self) -> None:
            flushed.append(self.getvalue())

    stream = Stream()
    monkeypatch.setattr("sys.stdout", stream)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").mkdir()  # a folder named "-" is no output file: "-" is stdout
    writer = JsonlWriter("-")
    writer.write({"id": "0-0", "seed": 0})
    writer.write({"id": "0-1", "seed": 0})
    writer.close()  # stdout is not the writer's to close
    assert not stream.closed
    assert flushed == [
        '{"id": "0-0", "seed": 0}\n',
        '{"id": "0-0", "seed": 0}\n{"id": "0-1", "seed": 0}\n',
    ]
    assert writer.kept(3) == "2 of 3 records kept to stdout, each a complete line"
    assert [p.name for p in tmp_path.iterdir()] == ["-"] and (tmp_path / "-").is_dir()


def test_a_nan_is_never_written(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    writer = JsonlWriter(str(out))
    with pytest.raises(ValueError):
        writer.write({"id": "0-0", "seed": 0, "score": float("nan")})
    writer.close()
    assert writer.written == 0 and (not out.exists() or out.read_text() == "")


def test_a_short_write_is_continued_until_the_record_is_whole(tmp_path: Path, monkeypatch):
    out = tmp_path / "out.jsonl"
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:3]))
    with JsonlWriter(str(out)) as writer:
        writer.write({"id": "0-0", "seed": 0, "text": "a longer text"})
    assert lines(out) == [{"id": "0-0", "seed": 0, "text": "a longer text"}]


def test_a_failed_write_is_cut_back_to_where_the_file_ended(tmp_path: Path, monkeypatch):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "0-0", "seed": 0}\n')
    size = out.stat().st_size
    real_write, calls = os.write, []

    def fails_second_time(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(errno.EIO, "Input/output error")
        return real_write(fd, data[:5])

    monkeypatch.setattr(os, "write", fails_second_time)
    writer = JsonlWriter(str(out))
    with pytest.raises(InputError) as caught:
        writer.write({"id": "0-1", "seed": 0})
    said(
        caught,
        r"^output '.*out.jsonl': cannot write \(Input/output error\)$",
        r"^-o .*out.jsonl: cannot write \(Input/output error\)$",
    )
    assert writer.failed and writer.written == 0
    monkeypatch.setattr(os, "close", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "x")))
    fd = writer.fd
    writer.close()  # the write already said why: closing adds no second error
    monkeypatch.undo()
    os.close(fd)
    assert out.stat().st_size == size


def test_a_failed_cut_back_still_reports_the_write_error(tmp_path: Path, monkeypatch):
    out = tmp_path / "out.jsonl"
    writer = JsonlWriter(str(out))

    def fails(*args: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "write", lambda fd, data: fails())
    monkeypatch.setattr(os, "ftruncate", fails)
    with pytest.raises(InputError, match=r"cannot write \(Input/output error\)$"):
        writer.write({"id": "0-0", "seed": 0})


def test_a_failed_close_is_an_error_when_nothing_else_said_so(tmp_path: Path, monkeypatch):
    out = tmp_path / "out.jsonl"
    writer = JsonlWriter(str(out))
    writer.write({"id": "0-0", "seed": 0})
    fd, real_close = writer.fd, os.close
    monkeypatch.setattr(os, "close", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "x")))
    with pytest.raises(InputError, match=r"cannot write \(close failed\)"):
        writer.close()
    real_close(fd)


def test_a_reader_that_went_away_is_not_a_write_error(monkeypatch):
    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    monkeypatch.setattr("sys.stdout", Closed())
    writer = JsonlWriter("-")
    with pytest.raises(BrokenPipeError):
        writer.write({"id": "0-0", "seed": 0})
    assert not writer.failed and writer.written == 0


def test_an_output_that_cannot_be_opened_is_one_line(tmp_path: Path, monkeypatch):
    out = tmp_path / "out.jsonl"
    writer = JsonlWriter(str(out))
    monkeypatch.setattr(os, "open", lambda *a: (_ for _ in ()).throw(OSError(errno.EACCES, "no")))
    with pytest.raises(InputError) as caught:
        writer.write({"id": "0-0", "seed": 0})
    said(
        caught,
        r"^output '.*out.jsonl': cannot open for appending \(no\)$",
        r"^-o .*out.jsonl: cannot open for appending \(no\)$",
    )


@pytest.mark.parametrize(
    ("content", "refused"),
    [
        ("", False),  # empty: nothing to mix with
        ('{"id": "0-0", "seed": 0}\nnot json\n', False),  # only the first line is read
        ('{"id": "0-0"}', False),
        ("hello\n", True),
        ('["id"]\n', True),
        ('{"seed": 0}\n', True),
        ("[" * 100_000 + "\n", True),  # too deep to parse is not a record either
    ],
)
def test_an_existing_file_must_hold_records(tmp_path: Path, content: str, refused: bool):
    out = tmp_path / "out.jsonl"
    out.write_text(content)
    if refused:
        with pytest.raises(InputError) as caught:
            check_output_file(str(out))
        problem = (
            "exists and does not hold cdd records; appending would mix them into it "
            "(choose another file)"
        )
        assert str(caught.value) == f"output {str(out)!r}: {problem}"
        assert caught.value.cli == f"-o {out}: {problem}"
    else:
        check_output_file(str(out))
    check_output_file(str(tmp_path / "new.jsonl"))  # not there yet: fine


def test_bad_output_targets_are_refused_with_why(tmp_path: Path):
    def why(target: str) -> tuple[str, str]:
        """What the API says (`output 'x': ...`) and what the command line says (`-o x: ...`)."""
        with pytest.raises(InputError) as caught:
            check_output_file(target)
        api, cli = str(caught.value), caught.value.cli
        if target:
            assert api.startswith(f"output {target!r}: ") and cli.startswith(f"-o {target}: ")
        return api, cli

    assert why("") == (
        "output '': the file name is empty (give a file, or '-' for stdout)",
        "-o: the file name is empty (give a file, or - for stdout)",
    )
    api, cli = why(str(tmp_path))
    assert api.endswith(": is a directory (give a file, or '-' for stdout)")
    assert cli.endswith(": is a directory (give a file, or - for stdout)")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    api, cli = why(str(fifo))
    assert api.endswith("is a pipe (write to stdout with '-' and redirect it)")
    assert cli.endswith("is a pipe (write to stdout with -o - and redirect it)")
    (tmp_path / "a.jsonl.config.yaml").mkdir()
    for said_so in why(str(tmp_path / "a.jsonl")):
        assert said_so.endswith("a.jsonl.config.yaml is a directory")
    (tmp_path / "b.jsonl.config.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    for said_so in why(str(tmp_path / "b.jsonl")):
        assert "is a symbolic link" in said_so
    with pytest.raises(InputError, match="is a directory"):
        JsonlWriter(str(tmp_path))  # checked when the writer is made, before any work


def test_existing_records_reads_keys_satisfied_texts_and_a_torn_tail(tmp_path: Path, monkeypatch):
    out = tmp_path / "out.jsonl"
    records = [
        {"id": "0-0", "seed": 0, "satisfied": True, "text": "CC"},
        {"id": "0-1", "seed": 0, "satisfied": False, "text": "CO"},
        {"id": "0-0", "seed": "7", "satisfied": True, "text": "N"},
        {"id": "1-0", "seed": 0, "satisfied": True},
    ]
    body = "\n".join(json.dumps(r) for r in records[:2]) + "\n\n"  # a blank line between
    body += "\n".join(json.dumps(r) for r in records[2:]) + "\n"
    out.write_text(body + '{"id": "0-2", "se')
    found = existing_records(str(out))
    assert found.keys == {(0, "0-0"), (0, "0-1"), (7, "0-0"), (0, "1-0")}
    assert found.satisfied == {0: ["CC", ""], 7: ["N"]}
    assert found.torn_bytes == len('{"id": "0-2", "se')
    cut_torn_tail(str(out), found.torn_bytes)
    assert out.read_text() == body
    assert existing_records(str(out)).torn_bytes == 0
    assert existing_records("-") == existing_records(str(tmp_path / "none.jsonl"))
    # stdout holds nothing to resume, even beside a file named "-"
    (tmp_path / "-").write_text(body)
    monkeypatch.chdir(tmp_path)
    assert existing_records("-") == Existing(set(), {}, 0)
    # A record whose text is not valid UTF-8 (a hand-edited file) is still read as one.
    out.write_bytes(b'{"id": "0-0", "seed": 0, "satisfied": true, "text": "C\xffC"}\n')
    assert existing_records(str(out)).satisfied == {0: ["C\ufffdC"]}


@pytest.mark.parametrize(
    ("second", "problem"),
    [
        ('{"id": "0-0", "seed": 0}', r"a second record 0-0 of seed 0$"),
        ('{"id": "0-1"}', r"not a cdd record; choose another file$"),
        ('{"id": "0-1", "seed": "x"}', r"not a cdd record"),
        ('{"id": "0-1", "seed": null}', r"not a cdd record"),
        ("[1]", r"not a cdd record"),
        ("[" * 100_000, r"not a cdd record"),
    ],
)
def test_existing_records_refuses_what_is_no_record(tmp_path: Path, second: str, problem: str):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "0-0", "seed": 0}\n' + second + "\n")
    with pytest.raises(InputError) as caught:
        existing_records(str(out))
    said(caught, r"out.jsonl', line 2: " + problem, r"out.jsonl:2: " + problem)


def test_read_jsonl_names_each_item_by_file_and_line(tmp_path: Path, monkeypatch):
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n  \n{"b": 2}\n')  # a byte-order mark first
    assert read_jsonl(str(source), "prompt") == [
        (f"{source}:1", {"a": 1}),
        (f"{source}:4", {"b": 2}),
    ]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b'{"c": 3}\n')))
    assert read_jsonl("-", "prompt") == [("stdin:1", {"c": 3})]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"a": 1}\n{"a": \n', r"^in.jsonl:2: not a JSON prompt \(Expecting value\)$"),
        (b'{"a": 1}\n[1, 2]\n', r"^in.jsonl:2: not a JSON prompt \(not an object\)$"),
        (b"[" * 100_000 + b"\n", r"^in.jsonl:1: not a JSON prompt \(nested too deeply\)$"),
        (b'{"a": 1}\n\xff\n', r"^in.jsonl: not UTF-8 \(byte 9\)$"),
        (b"\n  \n", r"^in.jsonl: no prompts$"),
        # A ValueError without JSONDecodeError's msg: the message before its first colon.
        (
            b'{"n": ' + b"9" * 5000 + b"}\n",
            r"^in.jsonl:1: not a JSON prompt \(Exceeds the limit \(\d+ digits\) for integer "
            r"string conversion\)$",
        ),
    ],
)
def test_read_jsonl_refuses_in_one_line(tmp_path: Path, monkeypatch, content: bytes, message: str):
    monkeypatch.chdir(tmp_path)
    Path("in.jsonl").write_bytes(content)
    with pytest.raises(InputError, match=message):
        read_jsonl("in.jsonl", "prompt")


def test_read_jsonl_of_a_missing_file_says_so(tmp_path: Path):
    with pytest.raises(InputError, match=r"none.jsonl: cannot read \(No such file or directory\)$"):
        read_jsonl(str(tmp_path / "none.jsonl"), "prompt")


def test_the_output_lock_is_held_for_the_run_and_removed_after(tmp_path: Path):
    out = str(tmp_path / "out.jsonl")
    with output_lock(out):
        assert Path(f"{out}.lock").exists()
        with pytest.raises(InputError, match="another cdd process is writing it"), output_lock(out):
            pass
    assert not Path(f"{out}.lock").exists()
    with output_lock(out):  # released: a second run takes it
        pass
    with output_lock("-"):  # stdout has no file to lock
        assert list(tmp_path.iterdir()) == []
    # `-o none/out.jsonl`, no folder `none`: the folder is named, not the lock file.
    with pytest.raises(InputError) as info, output_lock(str(tmp_path / "none" / "out.jsonl")):
        pass
    assert info.value.cli == f"-o {tmp_path / 'none' / 'out.jsonl'}: its folder " + (
        f"{tmp_path / 'none'} does not exist"
    )


def test_resuming_counts_the_draws_of_the_shares_records_already_written(tmp_path: Path):
    """`resume_from` sums the `attempts` of this run's records of this shard (1 where a
    record names none), which the reporter's `resumed` is told."""
    out = tmp_path / "out.jsonl"
    rows = [
        {"id": "0-0", "seed": 7, "attempts": 3},
        {"id": "0-1", "seed": 7, "attempts": 1},
        {"id": "0-2", "seed": 7},  # an old record: one draw
        {"id": "0-3", "seed": 7, "attempts": 5},  # the other shard's
        {"id": "0-4", "seed": 9, "attempts": 4},  # another seed's
    ]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    share = resume_from(str(out), 7, (1, 8), True, lambda line: None, (0, 1))
    assert share.ids == {"0-0", "0-1", "0-2", "0-3"} and share.draws == 10
    share = resume_from(str(out), 7, (1, 8), True, lambda line: None, (0, 2))
    assert share.ids == {"0-0", "0-2"} and share.draws == 4
