"""The advisory locks an output file is written under, so that two processes never append
to one file at once, whatever names they give it (a symbolic link, a hard link)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

from cdd_cli.errors import InputError
from cdd_cli.output.files import identity, is_stream, output_error, real_path

try:
    import fcntl  # POSIX only: Windows has no such module
except ImportError:  # no advisory locks on this platform
    fcntl = None

# The files (device, inode) this process holds under `output_lock`: a writer it opens on
# one of them must not lock it again (two descriptors' locks of one process conflict).
HELD: set[tuple[int, int]] = set()


def refused(target: str, holder: str) -> InputError:
    return output_error(
        target,
        f"another cdd process is writing it (it holds {holder}); wait for it "
        "to finish or choose another file",
    )


@contextlib.contextmanager
def output_lock(target: str) -> Iterator[None]:
    """Hold two locks for the whole run: `REAL.lock` beside the file's real name (every
    symbolic link to it names the same lock, and a file not yet made has no other), and the
    file itself where it is there (a hard link is the same file under another name). Two
    processes appending at once would each pass the one-configuration check and interleave
    their runs. The locks die with their process (a kill leaves an empty `.lock` behind)."""
    if fcntl is None or is_stream(target):
        yield
        return
    path = f"{real_path(target)}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        folder = os.path.dirname(path) or "."
        if not os.path.isdir(folder):  # the folder is what to fix, not the lock beside it
            raise output_error(target, f"its folder {folder} does not exist") from None
        raise output_error(target, f"cannot create its lock {path} ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise refused(target, path) from None
    try:
        with contextlib.ExitStack() as stack:
            hold_file(target, stack)
            yield
    finally:
        # Removed while still held: a process that opens the path after this makes a new
        # file, and one that opened it before finds it locked.
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def hold_file(target: str, stack: contextlib.ExitStack) -> None:
    """The lock on the output file itself, where it is there and regular, held until
    `stack` closes (InputError: another process holds it)."""
    found = identity(target)
    if found is None or found in HELD:
        return
    try:  # (never blocks: a FIFO is opened without waiting, and refused by the writer)
        # For writing: NFS emulates flock with locks that need it.
        fd = os.open(target, os.O_RDWR | os.O_NONBLOCK)
    except OSError:
        return  # not writable: the writer says why
    stack.callback(os.close, fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode) or not locked(fd, target):
        return
    HELD.add(found)
    stack.callback(HELD.discard, found)


def claim(fd: int, target: str) -> None:
    """A writer's lock on the file it opened (`fd`), held while the descriptor is open,
    unless this process already holds that file under `output_lock`: a file another
    process made under another name meanwhile is refused at its first record."""
    if fcntl is None:
        return
    found = os.fstat(fd)
    if stat.S_ISREG(found.st_mode) and (found.st_dev, found.st_ino) not in HELD:
        locked(fd, target)


def locked(fd: int, target: str) -> bool:
    """The file of `fd` locked by this process (False: its file system keeps no locks);
    InputError where another process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise refused(target, "a lock on the file itself") from None
    except OSError:
        return False
    return True
