"""JSONL output: one complete line per record, flushed as soon as it is final."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO

from cdd_cli.errors import InputError


class JsonlWriter:
    """Writes to stdout for "-", else appends to a file (never truncates earlier records)."""

    def __init__(self, target: str):
        self.target = target
        self.failed = False
        if target == "-":
            self.stream: IO[str] = sys.stdout
            self.owned = False
        else:
            path = Path(target)
            if not target:
                raise InputError("-o: the file name is empty (give a file, or - for stdout)")
            if path.is_dir():
                raise InputError(f"-o {target}: is a directory (give a file, or - for stdout)")
            beside = Path(f"{target}.config.yaml")  # where the resolved configuration goes
            if beside.is_dir():
                raise InputError(f"-o {target}: {beside} is a directory")
            try:
                self.stream = path.open("a", encoding="utf-8")
            except OSError as exc:
                raise InputError(
                    f"-o {target}: cannot open for appending ({exc.strerror})"
                ) from None
            self.owned = True

    def write(self, record: dict) -> None:
        # One write call per record, so a reader never sees half a line from us.
        try:
            self.stream.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.stream.flush()
        except BrokenPipeError:
            raise  # the reader went away: handled by the CLI
        except OSError as exc:
            self.failed = True
            raise InputError(f"-o {self.target}: cannot write ({exc.strerror})") from None

    def close(self) -> None:
        if self.owned:
            try:
                self.stream.close()
            except OSError:
                if not self.failed:  # the write already said why
                    raise InputError(f"-o {self.target}: cannot write (close failed)") from None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        except ValueError as exc:
            raise InputError(f"{where}:{number}: not a JSON {what} ({exc.msg})") from None
        if not isinstance(item, dict):
            raise InputError(f"{where}:{number}: not a JSON {what} (not an object)")
        items.append((f"{where}:{number}", item))
    if not items:
        raise InputError(f"{where}: no {what}s")
    return items
