"""Files a model is read from (weights, tokenizers, GGUF bases, reference sets): each must be a
regular file, and each is hashed no further than its size. A FIFO blocks a reader forever and
a device such as /dev/zero never ends, so neither is ever opened where a file is needed."""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from pathlib import Path

from cdd_cli.errors import InputError

KINDS = (  # (test, what a user is told the path is)
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_kind(path: Path) -> str | None:
    """What `path` (links followed) is when it exists and is not a regular file, else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return next((said for test, said in KINDS if test(mode)), "not a regular file")


def regular_file(path: Path, what: str) -> Path:
    """`path`, refused in one line (InputError) where it exists but is not a regular file;
    `what` names its role ("tokenizer.json", "base weights")."""
    kind = special_kind(path)
    if kind is not None:
        raise InputError(f"{path}: {what} must be a regular file, not {kind}")
    return Path(path)


def file_digest(path: Path) -> str:
    """SHA-256 of a regular file, once per file version in a process; no more bytes are read
    than the file's size said when it was opened (a file that grows meanwhile is refused)."""
    path = regular_file(Path(path), "a hashed file")
    status = path.stat()
    return _file_digest(str(path.resolve()), status.st_mtime_ns, status.st_size)


@functools.cache
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    left = size
    with open(path, "rb") as f:
        while left > 0:
            block = f.read(min(left, 1 << 20))
            if not block:
                break
            digest.update(block)
            left -= len(block)
        if left or f.read(1):
            raise InputError(f"{path}: changed while it was read ({size:,} bytes expected)")
    return digest.hexdigest()
