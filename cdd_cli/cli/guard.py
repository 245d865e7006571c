"""The guard around every command's work: an error becomes one line on stderr and its exit code
(2 bad input, 130/143 interrupted, 1 a defect); and torch's CPU threads, set before the work."""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import typer

from cdd_cli.cli.flags import parse_shard
from cdd_cli.cli.terminal import console
from cdd_cli.errors import InputError, Interrupted, Terminated, one_line, raising_signals
from cdd_cli.output.distributed import launch_from_env


def fail(message: str, code: int = 2) -> typer.Exit:
    """`message` said as the command's error line; the exit to raise with `code`."""
    rank = os.environ.get("RANK", "0") if os.environ.get("WORLD_SIZE", "1") != "1" else "0"
    where = f"rank {rank}: " if rank != "0" else ""  # under torchrun, which process says it
    console.print(f"cdd: error: {where}{message}", markup=False, soft_wrap=True)
    return typer.Exit(code)


def run_guarded(body: Callable[[], None]) -> None:
    """Run a command body: InputError -> one line, exit 2; other errors -> one line, exit 1;
    Ctrl-C or SIGTERM during it -> one line (what a run kept), exit 130 or 143."""
    try:
        with raising_signals():  # the body's writers stop between whole records
            body()
    except typer.Exit:
        raise  # typer.Exit is a RuntimeError: let exit codes through untouched
    except InputError as exc:
        raise fail(one_line(exc.cli)) from None  # the flags' wording of the API's message
    except KeyboardInterrupt as exc:
        if isinstance(exc, Terminated):
            raise fail("terminated", 143) from None
        raise fail("interrupted", 130) from None
    except Interrupted as exc:  # a run stopped by Ctrl-C or SIGTERM: what it kept
        raise fail(one_line(str(exc)), exc.code) from None
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (e.g. `| head`); nothing more to say
        raise typer.Exit(0) from None
    except OSError as exc:
        # The machine refused a path or a write (a name too long, a full disk or stdout, no
        # permission): the input or the environment, not a defect.
        name = f"{one_line(str(exc.filename))}: " if exc.filename else ""
        if len(name) > 80:
            name = f"{name[:60]}...: "
        where = " (writing the output)" if exc.errno == errno.ENOSPC and not name else ""
        raise fail(f"{name}{exc.strerror or type(exc).__name__}{where}") from None
    except RecursionError:
        raise fail("the input is nested too deeply to read") from None
    except Exception as exc:
        # A defect, not bad input: one line (the README's exit 1), the traceback on request.
        if os.environ.get("CDD_TRACEBACK"):
            raise
        where = traceback.extract_tb(exc.__traceback__)[-1]
        message = " ".join(str(exc).split())
        raise fail(
            f"internal error: {type(exc).__name__}: {message} (at {Path(where.filename).name}:"
            f"{where.lineno}; CDD_TRACEBACK=1 shows the traceback)",
            1,
        ) from None


def set_threads(threads: int | None, processes: int = 1) -> None:
    """torch's CPU threads (None: what torch picks, or with `processes` sharing the machine
    (`--shard I/N`), their share of the cores unless OMP_NUM_THREADS says). On a busy machine
    fewer can be faster: two runs at once took 169.6 s against 8.3 s at one thread each."""
    if threads is not None and threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    cores = usable_cores()
    if threads is not None and threads > cores:
        # More threads than cores only adds switching, and each thread's stack is reserved
        # memory: 100,000 of them exhausted it before the model could load.
        console.print(
            f"cdd: warning: --threads {threads} is more than the {cores} CPU core(s) this "
            f"process may use: using {cores}",
            markup=False,
            soft_wrap=True,
        )
        threads = cores
    if threads is None and processes > 1 and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, cores // processes)
    if threads:
        torch.set_num_threads(threads)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the platform says)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on macOS and Windows
        return max(1, os.cpu_count() or 1)


def processes_sharing(shard: str | None) -> int:
    """How many processes of one run share this machine (--shard N, or torchrun's)."""
    launch = launch_from_env()
    return launch.local_world if launch else parse_shard(shard)[1]
