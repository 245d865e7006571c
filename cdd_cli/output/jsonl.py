"""JSONL on disk: one complete line per record, appended whole (a write cut short is cut
back), and JSONL read a line at a time within limits (prompts, records, shards).

Plain data only: nothing here knows a model, a constraint or a spec object."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from cdd_cli.errors import InputError
from cdd_cli.output.files import (
    config_path,
    is_stream,
    kind_of,
    names_stdout,
    open_regular,
    output_error,
)
from cdd_cli.output.lock import claim

# What cdd reads of a JSONL input (prompts, records, shards) before refusing it: each line is
# parsed as it comes and the objects are all held, so a stream without end (`--prompts
# /dev/zero`, `yes | cdd eval -`) must stop at a size, not at the memory's end. A record of
# the longest continuation cdd writes is a few MB.
MAX_LINE_BYTES = 16 << 20
MAX_INPUT_BYTES = 256 << 20
MAX_LINES = 1_000_000


class JsonlWriter:
    """Writes to stdout for "-", else appends to a file (never truncates earlier records).

    The target is checked when the writer is made, and the file is opened (created) at the
    first record, after `before_first()` (e.g. writing the resolved configuration beside it):
    a run that fails before its first record leaves no file behind."""

    def __init__(self, target: str, before_first: Callable[[], None] | None = None):
        self.target = target
        self.failed = False
        self.written = 0
        self.before_first = before_first
        to_stdout = target == "-" or names_stdout(target)
        self.stream: IO[str] | None = sys.stdout if to_stdout else None
        self.fd: int | None = None  # the output file, appended to without a buffer
        if self.stream is not None:
            try:  # a closed stdout says so now, not after the first batch is drawn
                self.stream.write("")
            except BrokenPipeError:
                pass  # a reader gone: the first record's write says so, as the CLI expects
            except OSError as exc:
                raise output_error(target, f"cannot write ({exc.strerror})") from None
        if not is_stream(target):
            check_output_file(target)

    def open(self) -> IO[str] | int:
        if self.before_first is not None:
            self.before_first()
            self.before_first = None
        if self.stream is None and self.fd is None:
            try:
                self.fd = os.open(self.target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                problem = f"cannot open for appending ({exc.strerror})"
                raise output_error(self.target, problem) from None
            try:
                claim(self.fd, self.target)
            except InputError:
                self.close()
                raise
        return self.stream if self.stream is not None else self.fd

    def write(self, record: dict) -> None:
        # Strict JSON: a NaN or infinity is a defect upstream, never a record.
        line = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
        target = self.open()
        try:
            if isinstance(target, int):
                self.write_whole(target, line.encode("utf-8"))
            else:  # stdout: one write call per record, so a reader never sees half a line
                target.write(line)
                target.flush()
            self.written += 1
        except BrokenPipeError:
            raise  # the reader went away: handled by the CLI
        except OSError as exc:
            self.failed = True
            raise output_error(self.target, f"cannot write ({exc.strerror})") from None

    def write_whole(self, fd: int, data: bytes) -> None:
        """Append `data` whole or not at all: a write cut short (a full disk) is cut back to
        where the file ended, so no torn record is left for a later append to bury."""
        end = os.fstat(fd).st_size
        done = 0
        try:
            while done < len(data):
                done += os.write(fd, data[done:])
        except BaseException:  # a full disk, or a signal between two partial writes
            if done < len(data):
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, end)
            raise

    def close(self) -> None:
        if self.fd is not None:  # stdout is not the writer's to close
            try:
                os.close(self.fd)
            except OSError:
                if not self.failed:  # the write already said why
                    raise output_error(self.target, "cannot write (close failed)") from None
            self.fd = None

    def kept(self, total: int, present: int = 0) -> str:
        """What a stopped run leaves: how many of `total` records, each a complete line;
        `present`: those the output already held (a resumed run), counted with the ones
        written now, as the file holds them all."""
        kept = present + self.written
        if not kept and self.target != "-" and not os.path.exists(self.target):
            # The file is made at the first record: none is there to keep anything "in".
            return f"0 of {total} records written (no {self.target} yet)"
        where = "to stdout" if self.target == "-" else f"in {self.target}"
        return f"{kept} of {total} records kept {where}, each a complete line"

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_output_file(target: str) -> None:
    """An output file cdd may append records to: not a folder or a pipe, and, when it has
    content, records (appending to some other file would mix the two)."""
    if not target:
        raise InputError(
            "output '': the file name is empty (give a file, or '-' for stdout)",
            cli="-o: the file name is empty (give a file, or - for stdout)",
        )
    path = Path(target)
    if path.is_dir():
        raise output_error(
            target,
            "is a directory (give a file, or '-' for stdout)",
            "is a directory (give a file, or - for stdout)",
        )
    if path.exists() and stat.S_ISFIFO(path.stat().st_mode):
        raise output_error(
            target,
            "is a pipe (write to stdout with '-' and redirect it)",
            "is a pipe (write to stdout with -o - and redirect it)",
        )
    beside = config_path(target)  # where the resolved configuration goes
    if beside.is_symlink():
        raise output_error(target, f"{beside} is a symbolic link; cdd will not write through it")
    if beside.exists() and not beside.is_file():
        raise output_error(target, f"{beside} is {kind_of(beside.stat().st_mode)}")
    if path.is_file() and path.stat().st_size:
        with open_regular(path) as f:
            first = f.readline(MAX_LINE_BYTES + 1)  # a record may be a few MB
        try:
            record = json.loads(first)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict) or "id" not in record:
            raise output_error(
                target,
                "exists and does not hold cdd records; appending would mix them "
                "into it (choose another file)",
            )


def read_jsonl(
    source: str,
    what: str,
    max_lines: int = MAX_LINES,
    max_bytes: int = MAX_INPUT_BYTES,
    regular: bool = False,
) -> list[tuple[str, dict]]:
    """The JSON objects of a JSONL file or stdin ("-"), each with its "file:line" for error
    messages; blank lines are skipped. `what` names the records in errors. Read a line at a
    time, within `max_lines` objects, `max_bytes` in all and `MAX_LINE_BYTES` a line.
    `regular`: only a regular file will do (a FIFO or device refused, never waited on)."""
    where = "stdin" if source == "-" else source
    items = []
    try:
        with contextlib.ExitStack() as stack:
            if source == "-":
                stream = sys.stdin.buffer
            else:
                opened = open_regular(source) if regular else open(source, "rb")  # noqa: SIM115
                stream = stack.enter_context(opened)
            total = 0
            for number in itertools.count(1):
                raw = stream.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                total += len(raw)
                if len(raw) > MAX_LINE_BYTES:
                    raise InputError(
                        f"{where}:{number}: a line longer than {MAX_LINE_BYTES >> 20} MiB; not a "
                        f"JSON {what}"
                    )
                if total > max_bytes:
                    raise InputError(
                        f"{where}: more than {max_bytes >> 20} MiB of {what}s, the most cdd reads "
                        "at once; split the file"
                    )
                try:
                    item = parse_line(raw, f"{where}:{number}", what, first=number == 1)
                except UnicodeDecodeError as exc:  # named by its byte in the file
                    offset = total - len(raw) + exc.start
                    raise InputError(f"{where}: not UTF-8 (byte {offset})") from None
                if item is None:
                    continue
                if len(items) == max_lines:
                    raise InputError(
                        f"{where}: more than {max_lines:,} {what}s, the most cdd reads at once; "
                        "split the file"
                    )
                items.append((f"{where}:{number}", item))
    except OSError as exc:
        raise InputError(f"{source}: cannot read ({exc.strerror or exc})") from None
    if not items:
        raise InputError(f"{where}: no {what}s")
    return items


def parse_line(raw: bytes, where: str, what: str, first: bool = False) -> dict | None:
    """One JSONL line's object (None: a blank line), or InputError naming the line;
    UnicodeDecodeError where the line is not UTF-8."""
    # A byte-order mark (Windows editors) opening the file is not text.
    line = raw.decode("utf-8-sig" if first else "utf-8")
    if not line.strip():
        return None
    try:
        item = json.loads(line)
    except ValueError as exc:  # JSONDecodeError has .msg; a 5,000-digit number does not
        problem = getattr(exc, "msg", None) or str(exc).split(":")[0]
        raise InputError(f"{where}: not a JSON {what} ({problem})") from None
    except RecursionError:
        raise InputError(f"{where}: not a JSON {what} (nested too deeply)") from None
    if not isinstance(item, dict):
        raise InputError(f"{where}: not a JSON {what} (not an object)")
    return item
