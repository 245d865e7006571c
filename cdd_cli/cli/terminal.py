"""The one Rich console on stderr that every message and display of the command line goes
through (a second console printing during a live display would garble it), and the standard
streams as the command takes them over at its start (`standard_streams`)."""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import NoReturn

from rich.console import Console

console = Console(stderr=True, highlight=False)


def log(message: str) -> None:
    """One line on stderr, as written (no markup)."""
    console.print(message, markup=False, soft_wrap=True)


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning (e.g. a plugin's slow judge) as one line, like every message of the CLI."""
    console.print(f"cdd: warning: {message}", markup=False, soft_wrap=True)


class StreamClosed(OSError):
    """Reading or writing a standard stream the command was started without."""


class ClosedStream(io.TextIOBase):
    """stdin or stdout when the command was started with it closed (`<&-`, `>&-`): reading or
    writing it is refused in one line (exit 2), never done on another file."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    @property
    def buffer(self) -> ClosedStream:  # what binary readers and writers take
        return self

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def refuse(self, *args: object) -> NoReturn:
        raise StreamClosed(errno.EBADF, f"{self.name} is closed")

    read = readline = write = refuse


def standard_streams() -> None:
    """The records' stdout kept for whole JSON lines, before any plugin or library runs.

    A closed standard stream (0, 1 or 2) is opened on /dev/null first, so that no file the
    command opens lands on its number (the records would go to a file named `-`, a lock to
    stdin), and a closed stdin or stdout is refused where it is used. The real stdout is
    duplicated for `sys.stdout`, in UTF-8 whatever the locale or PYTHONIOENCODING, and file
    descriptor 1 points at stderr: what a plugin or a library writes there (`print` at
    import, `os.write(1, ...)`, a shell's `echo`) goes to stderr, not among the records."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free number: `fd`
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    if 0 in closed:
        sys.stdin = ClosedStream("stdin")
    if 1 in closed:
        sys.stdout = ClosedStream("stdout")
    else:
        if sys.stdout is not None:
            sys.stdout.flush()
        records = os.dup(1)
        tty = os.isatty(records)
        sys.stdout = open(records, "w", encoding="utf-8", buffering=1 if tty else -1)  # noqa: SIM115
    os.dup2(2, 1)
