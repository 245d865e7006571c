"""The one Rich console on stderr that every message and display of the command line goes
through: a second console printing during a live display would garble it."""

from __future__ import annotations

from rich.console import Console

console = Console(stderr=True, highlight=False)


def log(message: str) -> None:
    """One line on stderr, as written (no markup)."""
    console.print(message, markup=False, soft_wrap=True)


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning (e.g. a plugin's slow judge) as one line, like every message of the CLI."""
    console.print(f"cdd: warning: {message}", markup=False, soft_wrap=True)
