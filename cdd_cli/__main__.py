"""The `cdd` command's entry point (`python -m cdd_cli`, and the console script's `main`).

Ctrl-C and SIGTERM are answered from here on, before the command line's imports (torch and
the whole API: seconds) run: a signal during start-up is one line and exit 130 or 143, never
a traceback or a silent kill. The package's `__init__` imports nothing heavy for this reason.
"""

import contextlib
import os
import sys

from cdd_cli.errors import handle_signals

handle_signals()

# torch's OpenMP threads wait for work by spinning, which on a machine busy with other work
# takes the cores that work and the other threads need: `cdd molecules -n 128 -c sa --tau
# 3.5` (two threads, two cores at load 3.5-5) took 55-81 s spinning and 19-28 s waiting
# passively, the same records. Read when torch loads OpenMP; a value the user set stays.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# After the handlers, on purpose: these imports are the slow part of start-up.
from cdd_cli.cli.app import main as run  # noqa: E402

__all__ = ["main"]


def main() -> None:
    """The command, then out at once with its exit code, its output flushed. Python's own
    exit would first tear the interpreter down (a second or more with torch loaded), with
    the default signal handlers back in place, and it kills itself with SIGINT (exit -2)
    after a Ctrl-C that some C extension's embedded Python code saw first, however cdd
    handled it: neither is the one line and exit 130 the command gave."""
    try:
        run()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"), as Python reports it
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        # Closed, or its reader went away: nothing to add.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
