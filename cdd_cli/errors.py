"""Errors the CLI reports as one line with exit code 2 (bad input)."""


class InputError(Exception):
    """A user-facing problem with the input: bad flag, spec, checkpoint or prompt."""


class Interrupted(Exception):
    """Ctrl-C during a run: says what was kept (the CLI exits 130 with it)."""
