"""Errors the CLI reports as one line with exit code 2 (bad input)."""


class InputError(Exception):
    """A user-facing problem with the input: bad flag, spec, checkpoint or prompt."""
