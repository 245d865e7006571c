"""What a sampling run tells as it goes: the reporter interface (no torch imported here, so
the CLI can subclass it without paying for torch at start-up)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdd_cli.diffusion.sampler import StepInfo
    from cdd_cli.projection.alm import ALMProgress


class Reporter:
    """Every method does nothing here: the CLI's live display overrides them
    (`cli.RichReporter`), and so may any caller of the Python API."""

    def run_started(self, label: str, total: int) -> None:
        """A run of `total` records of `label` ("molecules", "samples") begins."""

    def records_done(self, done: int, info: str) -> None:
        """`done` records are final; `info`: a short tally (valid, violating)."""

    def step(self, info: StepInfo) -> None:
        """A denoising step of the batch at hand ended (index 0 begins a batch)."""

    def alm(self, progress: ALMProgress) -> None:
        """An ALM outer iteration ended."""


class Display(Reporter):
    """A reporter that is also a context: a live display runs inside it."""

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
