"""What every constraint is: a threshold, a differentiable surrogate and an exact judge.

Constraint i holds when its exact score g_i(sequence) is on the right side of tau_i; its
violation is max(0, g_i - tau_i) (or max(0, tau_i - g_i) for a lower bound). The projection
optimises the *surrogate* (which reads soft tokens [B, L, V]); records are certified by the
*judge* (which reads decoded text). Neither the sampler nor the projection knows which
constraint it serves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace

import torch


@dataclass(frozen=True)
class Constraint(ABC):
    tau: float
    # The surrogate aims `margin` inside the bound (tau - margin for an upper bound), so that
    # surrogate error is less likely to leave the judge unsatisfied; repairs tighten it.
    margin: float = 0.0

    name: str = "constraint"
    judge_name: str = "judge"
    upper_bound: bool = True  # satisfied when score <= tau (False: score >= tau)

    @abstractmethod
    def surrogate(self, soft_tokens: torch.Tensor) -> torch.Tensor:
        """Differentiable score per sample [B] from soft tokens [B, L, V]."""

    @abstractmethod
    def judge(self, texts: list[str]) -> list[float | None]:
        """Exact score per decoded text; None when it cannot be scored (always a violation)."""

    def surrogate_violation(self, score: torch.Tensor) -> torch.Tensor:
        if self.upper_bound:
            return torch.relu(score - (self.tau - self.margin))
        return torch.relu((self.tau + self.margin) - score)

    def satisfied(self, value: float | None) -> bool:
        if value is None:
            return False
        return value <= self.tau if self.upper_bound else value >= self.tau

    def tightened(self, extra_margin: float) -> Constraint:
        return replace(self, margin=self.margin + extra_margin)

    def describe(self) -> dict:
        return {"type": self.name, "tau": self.tau}
