"""Plugs the projection into a sampler's per-step hook and keeps per-sample accounts."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from cdd_cli.constraints.base import Constraint
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.projection.alm import ALMProgress, ALMSettings, project


class ProjectionHook:
    """Projects p(x_0 | x_t) at the chosen steps; records what each sample cost."""

    def __init__(
        self,
        constraints: Sequence[Constraint],
        settings: ALMSettings,
        fixed_positions: Callable[[torch.Tensor], torch.Tensor],
        generators: Sequence[torch.Generator],
        on_progress: Callable[[ALMProgress], None] | None = None,
    ):
        self.constraints = list(constraints)
        self.settings = settings
        self.fixed_positions = fixed_positions
        self.generators = list(generators)
        self.on_progress = on_progress
        n = len(self.generators)
        self.steps = [0] * n
        self.outer = [0] * n
        self.inner = [0] * n
        self.seconds = [0.0] * n
        self.feasible = [True] * n

    def __call__(self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        final = info.index >= info.steps  # the noise-removal prediction is always projected
        if not final and info.index < self.settings.project_from * info.steps:
            return probs
        with torch.enable_grad():
            result = project(
                probs,
                self.constraints,
                self.settings,
                self.fixed_positions(x),
                self.generators,
                self.on_progress,
            )
        projected = result.projected.tolist()
        share = result.seconds / max(1, sum(projected))  # batched time, split among the active
        for i, was_projected in enumerate(projected):
            self.feasible[i] = bool(result.feasible[i])
            if was_projected:
                self.steps[i] += 1
                self.outer[i] += int(result.outer_iters[i])
                self.inner[i] += int(result.inner_iters[i])
                self.seconds[i] += share
        return result.probs

    def report(self, i: int) -> dict:
        return {
            "steps": self.steps[i],
            "outer_iters": self.outer[i],
            "inner_iters": self.inner[i],
            "seconds": round(self.seconds[i], 4),
        }
