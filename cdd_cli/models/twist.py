"""A twist: a small network that reads the model's prediction p(x_0 | x_t) at time t and
estimates P(C | x_t), the probability that the model, continued from x_t, ends where a
constraint accepts it, for a grid of bounds tau at once.

The exact method steers its proposal by the twist's gradient (`projection/exact.py`): a
proposal x' exp(l d log P(C | x_t) / d x') lifts the trajectories the model is likelier to
finish inside the bound, and the importance weights keep the law exact whatever the twist
gets wrong; the better the twist, the more proposals are kept. It is trained on the model's
own rollouts judged exactly (`cdd train twist`), stored like the surrogates: `config.json` +
`model.safetensors`.

One output per bound, ordered so that satisfaction grows along the grid (tau ascending for an
upper bound, descending for a lower one); each output's logit is the first one's plus a sum of
softplus steps, so the estimate never falls along the grid: a looser bound is never predicted
harder to meet.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from cdd_cli.errors import InputError
from cdd_cli.models.checkpoint import load_checked
from cdd_cli.models.rows import floor_rows, with_rows
from cdd_cli.models.surrogate import Encoder, read_small_config
from cdd_cli.version import __version__

TIME_FEATURES = 8  # sine and cosine of t at 8 frequencies each


@dataclass
class TwistConfig:
    vocab_size: int
    max_length: int
    constraint: str  # the constraint type it estimates, e.g. "sa"
    upper_bound: bool  # satisfied when the score is at most tau (False: at least)
    taus: list[float]  # the grid, satisfaction growing along it
    hidden_dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    model_type: str = "cdd-twist"
    trained_for: str = ""  # the diffusion model's name
    revision: str = ""  # and its revision: a twist reads one model's predictions
    held_out: dict = field(default_factory=dict)


class Twist(nn.Module):
    def __init__(self, config: TwistConfig):
        super().__init__()
        self.config = config
        d = config.hidden_dim
        self.embedding = nn.Parameter(torch.empty(config.vocab_size, d).normal_(std=0.02))
        self.positions = nn.Parameter(torch.empty(config.max_length, d).normal_(std=0.02))
        self.time = nn.Linear(2 * TIME_FEATURES, d)
        self.encoder = Encoder(d, config.n_heads, config.n_layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, len(config.taus)))

    def forward(self, probs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Logits [B, K] of P(C_k | x_t) from the prediction `probs` [B, L, V] at times t [B]."""
        frequencies = torch.pi * 2.0 ** torch.arange(TIME_FEATURES, device=t.device)
        angles = t.float()[:, None] * frequencies
        when = self.time(torch.cat([angles.sin(), angles.cos()], -1).to(self.embedding.dtype))
        x = with_rows(lambda p: p @ self.embedding, probs.to(self.embedding.dtype))
        x = x + self.positions[: x.shape[1]] + when[:, None]
        raw = self.head(self.norm(self.encoder(x, None)).mean(dim=1))
        # Monotone along the grid: the first logit, then softplus steps up.
        return torch.cat([raw[:, :1], raw[:, :1] + F.softplus(raw[:, 1:]).cumsum(-1)], -1)

    def log_value(self, probs: torch.Tensor, t: torch.Tensor, tau: float) -> torch.Tensor:
        """[B] log P(C | x_t) at bound `tau`: the grid's logits interpolated linearly (held
        at the grid's ends outside it)."""
        taus = self.config.taus
        logits = self(probs, t)
        position = grid_position(taus, tau)
        low = math.floor(position)
        high = min(low + 1, len(taus) - 1)
        share = position - low
        logit = (1 - share) * logits[:, low] + share * logits[:, high]
        return F.logsigmoid(logit)


def grid_position(taus: list[float], tau: float) -> float:
    """Where `tau` falls along the grid, as a fractional index (clamped to its ends)."""
    for k in range(len(taus) - 1):
        a, b = taus[k], taus[k + 1]
        if min(a, b) <= tau <= max(a, b):
            return k + (tau - a) / (b - a)
    ends = [abs(tau - taus[0]), abs(tau - taus[-1])]
    return 0.0 if ends[0] <= ends[1] else float(len(taus) - 1)


def save_twist(model: Twist, directory: Path) -> None:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"))
    config = {**asdict(model.config), "cdd_version": __version__}
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def load_twist(directory: Path, device: str = "cpu") -> Twist:
    """The twist in `directory`, its config checked before anything is built from it."""
    directory = Path(directory)
    path = directory / "config.json"
    config = read_small_config(directory, TwistConfig, "twist", "cdd-twist")
    sizes = ("vocab_size", "max_length", "hidden_dim", "n_layers", "n_heads")
    for name in sizes:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{path}: field {name} should be an int >= 1, got {value!r}")
    if config.hidden_dim % config.n_heads:
        raise InputError(f"{path}: hidden_dim {config.hidden_dim} does not split into heads")
    taus = config.taus
    if not (
        isinstance(taus, list) and len(taus) >= 2 and all(isinstance(v, (int, float)) for v in taus)
    ):
        raise InputError(f"{path}: field taus should be a list of at least two numbers")
    model = load_checked(lambda: Twist(config), directory / "model.safetensors")
    model.requires_grad_(False)  # gradients flow to the prediction, never to the weights
    return floor_rows(model.to(device).eval())
