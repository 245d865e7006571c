"""The log-linear noise schedule of MDLM/UDLM (eps = 1e-3)."""

from __future__ import annotations

import torch


class LogLinearSchedule:
    """Corruption probability `move(t) = (1 - eps) t`; signal `alpha(t) = 1 - move(t)`;
    total noise `sigma(t) = -log(alpha(t))`, which is what the DiT is conditioned on."""

    def __init__(self, eps: float = 1e-3):
        self.eps = eps

    def move(self, t: torch.Tensor) -> torch.Tensor:
        return (1 - self.eps) * t

    def alpha(self, t: torch.Tensor) -> torch.Tensor:
        return 1 - self.move(t)

    def sigma(self, t: torch.Tensor) -> torch.Tensor:
        return -torch.log1p(-self.move(t))
