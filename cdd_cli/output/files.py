"""What an output's name stands for. A file is known by what it is (its device and inode,
symbolic links followed), not by the name it was given: the lock, the configuration beside
it, resume and merge all go by the file, so two names of one file never hold two runs.
A stream (stdout, `/dev/stdout`, `/proc/self/fd/1`, a device such as `/dev/null`) is
written as it is: nothing beside it, nothing to lock or resume."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import BinaryIO

from cdd_cli.errors import InputError


def output_error(
    output: str, problem: str, cli_problem: str | None = None, line: int | None = None
) -> InputError:
    """A problem with an output file, in the API's words (`output 'out.jsonl': ...`) and the
    command line's (`-o out.jsonl: ...`; `cli_problem` where the two differ, as a remedy
    that is a flag does); `line`: the file's line it is about (`, line 3` and `:3`)."""
    at = "" if line is None else f", line {line}"
    cli_at = "" if line is None else f":{line}"
    return InputError(
        f"output {output!r}{at}: {problem}",
        cli=f"-o {output}{cli_at}: {problem if cli_problem is None else cli_problem}",
    )


# Names of an open file descriptor: what they point at is this process's stream, whatever
# that is (a terminal, a pipe, or a file the shell opened), never a file cdd owns.
DESCRIPTOR_NAME = re.compile(
    r"/dev/(stdin|stdout|stderr|fd/[0-9]+)|/proc/(self|thread-self|[0-9]+)(/task/[0-9]+)?/fd/[0-9]+"
)
# Symbolic links followed before a name is taken for a file's (the kernel's own limit).
MAX_LINKS = 40


def descriptor_named(name: str) -> str | None:
    """The descriptor's name that `name`, or a symbolic link it leads through, is (e.g.
    "/dev/stdout", "/proc/self/fd/1"); None where it names no open descriptor."""
    path = os.path.abspath(name)
    for _ in range(MAX_LINKS):
        if DESCRIPTOR_NAME.fullmatch(path):
            return path
        try:
            link = os.readlink(path)
        except OSError:  # not a link (or not there): the name is the file's
            return None
        path = os.path.normpath(os.path.join(os.path.dirname(path), link))
    return None


def names_a_descriptor(name: str) -> bool:
    """Whether `name`, or a symbolic link it leads through, names an open descriptor."""
    return descriptor_named(name) is not None


def names_stdout(name: str) -> bool:
    """Whether `name` is this process's standard output by another name (`/dev/stdout`,
    `/dev/fd/1`, `/proc/self/fd/1`): the CLI points descriptor 1 at stderr while it runs, so
    that nothing but records reaches the real stdout, and records for such a name go where
    "-" sends them."""
    found = descriptor_named(name)
    own = (r"self", r"thread-self", str(os.getpid()))
    return found is not None and (
        found in ("/dev/stdout", "/dev/fd/1")
        or any(re.fullmatch(rf"/proc/{p}(/task/[0-9]+)?/fd/1", found) for p in own)
    )


def is_stream(output: str) -> bool:
    """stdout ("-"), a descriptor's name or a device: written as it is, with no
    configuration beside it, no lock and no records to resume."""
    if output == "-" or names_a_descriptor(output):
        return True
    try:
        mode = os.stat(output).st_mode
    except (OSError, ValueError):  # not there yet (or no name at all): a file to make
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def real_path(output: str) -> str:
    """The name the output's file has once symbolic links are followed (the name as given
    where it is not a link, so that messages keep the user's words)."""
    return os.path.realpath(output) if os.path.islink(output) else output


def config_path(output: str) -> Path:
    """Where the resolved configuration of an output's records lives: beside its file."""
    return Path(f"{real_path(output)}.config.yaml")


def identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file `path` names, links followed; None where there is none."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino


KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """What a file of `mode` is, in words ("a regular file" for one)."""
    return next((word for test, word in KINDS if test(mode)), "a regular file")


def open_regular(path: str | Path) -> BinaryIO:
    """`path` opened for reading when it is a regular file; InputError naming what it is
    otherwise. Opened without blocking: opening a FIFO for reading waits for a writer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"{path}: is {kind_of(mode)}, not a regular file")
    return os.fdopen(fd, "rb")
