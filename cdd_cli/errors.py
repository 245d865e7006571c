"""Errors the CLI reports as one line with exit code 2 (bad input)."""


class InputError(Exception):
    """A user-facing problem with the input: bad flag, spec, checkpoint or prompt."""


class Interrupted(Exception):
    """Ctrl-C (exit 130) or SIGTERM (exit 143) during a run: says what was kept."""

    def __init__(self, message: str, code: int = 130):
        super().__init__(message)
        self.code = code


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Python checks for signals: stopped as Ctrl-C stops a run."""


def terminate(signum: int, frame: object) -> None:
    raise Terminated
