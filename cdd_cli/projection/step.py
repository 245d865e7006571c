"""What the engine's stages pass on at a step (`Step`) and what each sample cost (`Accounts`).

A stage reads the prediction, the sampler's tokens x_t and step (`StepInfo`) and the positions
the step cannot change (`Step.fixed`); it may change `Step.probs` [B, L, V] (in place or
replaced) for the samples its docstring names, and mark `Step.settled` [B] (no later stage need
touch the sample at this step) or `Step.accepted` [B] (the final prediction's judges accept
it). The optional fields are how stages talk: each stage declares those it `needs` and
`provides`, and the engine refuses an order in which a stage reads what none before it sets.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from cdd_cli.diffusion.sampler import StepInfo


@dataclass
class Step:
    """One step's prediction as the stages pass it on."""

    probs: torch.Tensor  # [B, L, V] p(x_0 | x_t), projected stage by stage
    x: torch.Tensor  # [B, L] the sampler's tokens x_t
    info: StepInfo
    fixed: torch.Tensor  # [B, L] positions no draw of this step can change
    touched: list[bool]  # samples some stage worked on (the record's `projection.steps`)
    settled: torch.Tensor  # [B] samples later stages leave alone at this step
    accepted: torch.Tensor | None = None  # [B] final prediction: the judges accept its argmax
    argmax: torch.Tensor | None = None  # [B, L] final prediction: the argmax the judges read
    ahead: torch.Tensor | None = None  # [B, L] the step's draw from the unprojected prediction
    projected: torch.Tensor | None = None  # [B] samples the ALM moved at this step
    plans: dict[int, list] = field(default_factory=dict)  # closed form -> its plans
    unprojected: torch.Tensor | None = None  # [B, L, V] the prediction before the closed forms

    @property
    def final(self) -> bool:
        """The noise removal: its prediction is the output itself."""
        return self.info.index >= self.info.steps

    @property
    def idle(self) -> torch.Tensor | None:
        """[B] samples whose step decides no token (most steps of a masked model): they go on
        unchanged whatever their probabilities. None where every token may change."""
        return None if self.info.changing is None else ~self.info.changing.any(-1)

    def due(self, start: float) -> bool:
        # Steps are indexed 0 .. steps - 2 and the noise removal `steps`, which is always due.
        return self.info.index >= start * self.info.steps


class Accounts:
    """What each sample cost: steps touched, ALM iterations, search nodes, seconds."""

    def __init__(self, n: int):
        self.steps = [0] * n
        self.outer = [0] * n
        self.inner = [0] * n
        self.nodes = [0] * n
        self.seconds = [0.0] * n
        # The last stage that changed each sample's prediction (None: none did, the model's
        # own draws were accepted as they were): what did the work, for the record.
        self.settled_by: list[str | None] = [None] * n

    def charge(self, rows: Sequence[int], started: float) -> None:
        """Time since `started`, shared equally by `rows`."""
        if rows:
            share = (time.perf_counter() - started) / len(rows)
            for i in rows:
                self.seconds[i] += share

    def report(self, i: int) -> dict:
        return {
            "steps": self.steps[i],
            "outer_iters": self.outer[i],
            "inner_iters": self.inner[i],
            "search_nodes": self.nodes[i],
            "seconds": round(self.seconds[i], 4),
            "settled_by": self.settled_by[i],
        }


def decide_as(probs: torch.Tensor, i: int, at: torch.Tensor, tokens: torch.Tensor) -> None:
    """Make sample i's positions `at` [L] one-hot on `tokens`, in place: the sampler's draw
    then decides exactly those tokens there."""
    probs[i, at] = torch.nn.functional.one_hot(tokens, probs.shape[-1]).to(probs.dtype)
