"""The `cdd` command's entry point (`python -m cdd_cli`, and the console script's `main`).

Ctrl-C and SIGTERM are answered from here on, before the command line's imports (torch and
the whole API: seconds) run: a signal during start-up is one line and exit 130 or 143, never
a traceback or a silent kill. The package's `__init__` imports nothing heavy for this reason.
"""

from cdd_cli.errors import handle_signals

handle_signals()

# After the handlers, on purpose: these imports are the slow part of start-up.
from cdd_cli.cli import main  # noqa: E402

__all__ = ["main"]

if __name__ == "__main__":
    main()
