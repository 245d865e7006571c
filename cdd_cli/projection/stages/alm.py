"""The ALM stage: the augmented-Lagrangian projection (`projection/alm.py`) of what no stage
before it settled, on the differentiable constraints' surrogates."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import torch

from cdd_cli.constraints.base import DifferentiableConstraint
from cdd_cli.projection.alm import ALMProgress, Multipliers, project
from cdd_cli.projection.step import Accounts, Step
from cdd_cli.settings import ALMSettings


class ALM:
    """The augmented-Lagrangian projection (`alm.py`) of every sample not settled, on the
    differentiable constraints' surrogates. Its multipliers carry over from a sample's last
    projection. Marks `step.projected`."""

    name: ClassVar[str] = "ALM"
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ("projected",)

    def __init__(
        self,
        constraints: list[DifferentiableConstraint],
        settings: ALMSettings,
        generators: Sequence[torch.Generator],
        on_progress: Callable[[ALMProgress], None] | None,
        at_final: bool = True,
    ):
        self.constraints, self.settings = constraints, settings
        self.generators, self.on_progress = generators, on_progress
        self.at_final = at_final  # whether it projects the final prediction too
        self.multipliers: Multipliers | None = None

    def due(self, step: Step) -> bool:
        return (
            bool(self.constraints)
            and step.due(self.settings.project_from)
            and (self.at_final or not step.final)
            and not bool(step.settled.all())  # the bookkeeping alone would cost 1%
        )

    def run(self, step: Step, accounts: Accounts) -> None:
        with torch.enable_grad():
            result = project(
                step.probs,
                self.constraints,
                self.settings,
                step.fixed | step.settled[:, None],
                self.generators,
                self.on_progress,
                self.multipliers,
                step.x,
            )
        self.multipliers = result.multipliers
        projected = result.projected.tolist()
        for i, seconds in enumerate(result.seconds.tolist()):
            accounts.seconds[i] += seconds
            if projected[i]:
                step.touched[i] = True
                accounts.outer[i] += int(result.outer_iters[i])
                accounts.inner[i] += int(result.inner_iters[i])
        step.probs, step.projected = result.probs, result.projected
