"""Errors the CLI reports as one line with exit code 2 (bad input), and how the `cdd`
command stops on Ctrl-C or SIGTERM (exit 130 or 143, one line, only whole records written)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

# Every line break Python's str.splitlines knows, written as its escape.
LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def one_line(text: str | BaseException) -> str:
    """A message on one line, as every error cdd reports is: line breaks written as escapes
    (a value holding one reads back as it was given); an exception without a message is
    named by its type."""
    message = str(text)
    if isinstance(text, BaseException) and not message.strip():
        message = type(text).__name__
    return message.translate(LINE_BREAKS)


class InputError(Exception):
    """A user-facing problem with the input: bad flag, spec, checkpoint or prompt. The
    message is in the API's words (`model 'x'`); `cli` is the same problem in the command
    line's (`--model x`), where the two differ: the CLI reports that one."""

    def __init__(self, message: str, cli: str | None = None):
        super().__init__(message)
        self.cli = message if cli is None else cli


class Interrupted(Exception):
    """Ctrl-C (exit 130) or SIGTERM (exit 143) during a run: says what was kept."""

    def __init__(self, message: str, code: int = 130):
        super().__init__(message)
        self.code = code


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Python checks for signals: stopped as Ctrl-C stops a run."""


def terminate(signum: int, frame: object) -> None:
    raise Terminated


class Stopping:
    """Where the `cdd` command is when a signal lands (`on_signal` reads it)."""

    # Inside a command's work (`raising_signals`): the signal is raised as an exception, so
    # that a writer stops between two whole records and the command says what it kept.
    raising = False
    # One was raised: the command is winding down, and a second signal stops it at once.
    raised = False


STOPPING = Stopping()


def on_signal(signum: int, frame: object) -> None:
    """The `cdd` command's Ctrl-C and SIGTERM handler, installed before anything slow."""
    if STOPPING.raising and not STOPPING.raised:
        STOPPING.raised = True
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
    # Outside a command's work (imports, parsing the command line) nothing is being written,
    # and an exception there would unwind through code that does not expect one: one line,
    # and out, with the shell's code for the signal (130, 143).
    word = "terminated" if signum == signal.SIGTERM else "interrupted"
    with contextlib.suppress(OSError):
        os.write(2, f"cdd: error: {word}\n".encode())
    os._exit(128 + signum)


def handle_signals() -> None:
    """Ctrl-C and SIGTERM answered by `on_signal` (from the main thread). A signal the
    parent ignores stays ignored, as Python leaves it (`nohup`, a shell's background job)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, on_signal)


@contextlib.contextmanager
def raising_signals() -> Iterator[None]:
    """Within: Ctrl-C raises KeyboardInterrupt and SIGTERM `Terminated`, once (where
    `on_signal` is the handler; elsewhere Python's own KeyboardInterrupt stands)."""
    outer = STOPPING.raising
    if not outer:
        STOPPING.raised = False
    STOPPING.raising = True
    try:
        yield
    finally:
        STOPPING.raising = outer
