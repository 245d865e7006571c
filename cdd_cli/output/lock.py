"""The advisory lock an output file is written under, so that two processes never append
one run to one file at once."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from cdd_cli.errors import InputError


@contextlib.contextmanager
def output_lock(target: str) -> Iterator[None]:
    """Hold `TARGET.lock` (an advisory lock) for the whole run: two processes appending to
    one file at once would each pass the one-configuration check and interleave their runs.
    The lock dies with its process (a kill leaves an empty, unlocked file behind)."""
    try:
        import fcntl  # POSIX only: Windows has no such module
    except ImportError:  # no advisory locks on this platform
        yield
        return
    if target == "-":
        yield
        return
    path = f"{target}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise InputError(f"-o {target}: cannot create its lock {path} ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise InputError(
            f"-o {target}: another cdd process is writing it (it holds {path}); wait for it "
            "to finish or choose another file"
        ) from None
    try:
        yield
    finally:
        # Removed while still held: a process that opens the path after this makes a new
        # file, and one that opened it before finds it locked.
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)
