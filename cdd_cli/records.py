"""JSONL output: one complete line per record, flushed as soon as it is final."""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from cdd_cli.errors import InputError


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
        self.stream: IO[str] | None = sys.stdout if target == "-" else None
        self.owned = target != "-"
        if self.owned:
            check_output_file(target)

    def open(self) -> IO[str]:
        if self.before_first is not None:
            self.before_first()
            self.before_first = None
        if self.stream is None:
            try:
                self.stream = Path(self.target).open("a", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise InputError(
                    f"-o {self.target}: cannot open for appending ({exc.strerror})"
                ) from None
        return self.stream

    def write(self, record: dict) -> None:
        # Strict JSON: a NaN or infinity is a defect upstream, never a record.
        line = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
        stream = self.open()
        # One write call per record, so a reader never sees half a line from us.
        try:
            stream.write(line)
            stream.flush()
            self.written += 1
        except BrokenPipeError:
            raise  # the reader went away: handled by the CLI
        except OSError as exc:
            self.failed = True
            raise InputError(f"-o {self.target}: cannot write ({exc.strerror})") from None

    def close(self) -> None:
        if self.owned and self.stream is not None:
            try:
                self.stream.close()
            except OSError:
                if not self.failed:  # the write already said why
                    raise InputError(f"-o {self.target}: cannot write (close failed)") from None

    def kept(self, total: int) -> str:
        """What a stopped run leaves: how many of `total` records, each a complete line."""
        where = "to stdout" if self.target == "-" else f"in {self.target}"
        return f"{self.written} of {total} records kept {where}, each a complete line"

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_output_file(target: str) -> None:
    """An output file cdd may append records to: not a folder or a pipe, and, when it has
    content, records (appending to some other file would mix the two)."""
    if not target:
        raise InputError("-o: the file name is empty (give a file, or - for stdout)")
    path = Path(target)
    if path.is_dir():
        raise InputError(f"-o {target}: is a directory (give a file, or - for stdout)")
    if path.exists() and stat.S_ISFIFO(path.stat().st_mode):
        raise InputError(f"-o {target}: is a pipe (write to stdout with -o - and redirect it)")
    beside = Path(f"{target}.config.yaml")  # where the resolved configuration goes
    if beside.is_dir():
        raise InputError(f"-o {target}: {beside} is a directory")
    if beside.is_symlink():
        raise InputError(f"-o {target}: {beside} is a symbolic link; cdd will not write through it")
    if path.is_file() and path.stat().st_size:
        with path.open("rb") as f:
            first = f.readline(1 << 20)
        try:
            record = json.loads(first)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict) or "id" not in record:
            raise InputError(
                f"-o {target}: exists and does not hold cdd records; appending would mix them "
                "into it (choose another file)"
            )


def read_jsonl(source: str, what: str) -> list[tuple[str, dict]]:
    """The JSON objects of a JSONL file or stdin ("-"), each with its "file:line" for error
    messages; blank lines are skipped. `what` names the records in errors."""
    where = "stdin" if source == "-" else source
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise InputError(f"{source}: cannot read ({exc.strerror})") from None
    try:
        content = raw.decode("utf-8-sig")  # a byte-order mark (Windows editors) is not text
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 (byte {exc.start})") from None
    items = []
    for number, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:  # JSONDecodeError has .msg; a 5,000-digit number does not
            problem = getattr(exc, "msg", None) or str(exc).split(":")[0]
            raise InputError(f"{where}:{number}: not a JSON {what} ({problem})") from None
        except RecursionError:
            raise InputError(f"{where}:{number}: not a JSON {what} (nested too deeply)") from None
        if not isinstance(item, dict):
            raise InputError(f"{where}:{number}: not a JSON {what} (not an object)")
        items.append((f"{where}:{number}", item))
    if not items:
        raise InputError(f"{where}: no {what}s")
    return items
