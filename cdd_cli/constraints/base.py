"""What every constraint is: a threshold and an exact judge, plus a way to be projected.

Constraint i holds when its exact score g_i(text) is on the right side of tau_i; records are
certified by the *judge*, which reads decoded text. Two kinds, by how they are projected:

- `DifferentiableConstraint`: a *surrogate* reads soft tokens [B, L, V]; the ALM projection
  optimises its violation max(0, g - tau) (or max(0, tau - g) for a lower bound).
- `ExactConstraint`: not differentiable (novelty, lexical); projected by a search or a
  closed form that asks the judge directly.

Neither the sampler nor the projection knows which constraint it serves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from cdd_cli.models.surrogate import Tokens


@dataclass(frozen=True)
class Constraint(ABC):
    tau: float
    # The surrogate aims `margin` inside the bound (tau - margin for an upper bound), so that
    # surrogate error is less likely to leave the judge unsatisfied; repairs tighten it.
    margin: float = 0.0

    name: str = "constraint"
    judge_name: str = "judge"
    upper_bound: bool = True  # satisfied when score <= tau (False: score >= tau)
    # The fixed prompt of the samples at hand: judges read the continuation text; soft tokens
    # [B, L, V] cover prompt and continuation, the prompt in the first `prompt_length` rows.
    prompt: str = ""
    prompt_length: int = 0

    @abstractmethod
    def judge(self, texts: list[str]) -> list[float | None]:
        """Exact score per decoded text; None when it cannot be scored (always a violation)."""

    def satisfied(self, value: float | None) -> bool:
        if value is None:
            return False
        return value <= self.tau if self.upper_bound else value >= self.tau

    # How far one repair redraw moves the surrogate's aim, per unit of `repair.margin_step`
    # (the score's natural scale: 1 SA unit; a class constant, not a field).
    repair_unit = 1.0

    def tightened(self, extra_margin: float) -> Constraint:
        return replace(self, margin=self.margin + extra_margin)

    def with_prompt(self, prompt: str, prompt_length: int) -> Constraint:
        return replace(self, prompt=prompt, prompt_length=prompt_length)

    def label(self) -> str:
        return f"{self.name} {'<=' if self.upper_bound else '>='} {self.tau:g}"

    def explain(self, text: str) -> str | None:
        """Why the judge says what it says, in words, where a number alone does not tell."""
        return None

    def remember(self, texts: list[str]) -> None:
        """Told the final, accepted outputs (novelty keeps them; most constraints need not)."""
        return None


class DifferentiableConstraint(Constraint):
    @abstractmethod
    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        """Differentiable score per sample [B] from token ids [B, L] (a one-hot reading),
        probabilities [B, L, V] or probabilities over a support (`SparseTokens`)."""

    def surrogate_excess(self, score: torch.Tensor) -> torch.Tensor:
        """How far `score` is past the surrogate's aim (negative: that far inside)."""
        if self.upper_bound:
            return score - (self.tau - self.margin)
        return (self.tau + self.margin) - score

    def surrogate_violation(self, score: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.surrogate_excess(score))


class ExactConstraint(Constraint):
    """Projected by search over the decoded text: `accepts(text)` must be cheap."""

    def accepts(self, text: str) -> bool:
        return self.satisfied(self.judge([text])[0])
