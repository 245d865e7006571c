"""Small networks that read soft tokens: the differentiable surrogates of constraints.

A surrogate reads a probability tensor [B, L, V] over a diffusion model's vocabulary through
its own embedding table (`probs @ embedding`), so gradients reach every token probability.
It is stored like the diffusion models: `config.json` + `model.safetensors` (+ tokenizer.json).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from cdd_cli.errors import InputError
from cdd_cli.models.checkpoint import MAX_LENGTH, load_checked
from cdd_cli.models.rows import floor_rows, linear_rows, with_rows
from cdd_cli.version import __version__


@dataclass(frozen=True)
class SparseTokens:
    """Token distributions that put mass on a few candidate ids per position: `weights`
    [B, L, K] over `ids` [B, L, K]. The projection moves mass within such a support; read
    through the embedding table this costs K instead of V per position (GPT-2: 256 against
    50,258, about 6x less time per ALM step for the toxicity surrogate on a CPU)."""

    weights: torch.Tensor
    ids: torch.Tensor

    def __getitem__(self, index: Any) -> SparseTokens:
        """Rows and positions, as for a [B, L, V] tensor (never the token axis)."""
        return SparseTokens(self.weights[index], self.ids[index])

    def __len__(self) -> int:
        return len(self.weights)


# What a surrogate reads: token ids [B, L] (a one-hot reading), probabilities [B, L, V], or
# probabilities over a support (SparseTokens).
Tokens = torch.Tensor | SparseTokens


def token_mass(tokens: Tokens, token: int) -> torch.Tensor:
    """[B, L] probability of `token` at each position, whatever form `tokens` take."""
    if isinstance(tokens, SparseTokens):
        return (tokens.weights * (tokens.ids == token)).sum(-1)
    if not tokens.is_floating_point():
        return (tokens == token).float()
    return tokens[..., token]


@dataclass
class SurrogateConfig:
    vocab_size: int
    max_length: int
    target: str  # what it predicts, e.g. "sa"
    hidden_dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    model_type: str = "cdd-surrogate"
    # A multi-property surrogate: one output per named quantity ([B, K] instead of [B]), each
    # predicted in units of its label's spread (`scale`) about its mean (`shift`), so that a
    # molecular weight and a QED weigh alike in training.
    targets: list[str] | None = None
    shift: list[float] | None = None
    scale: list[float] | None = None

    @property
    def outputs(self) -> int:
        return 1 if self.targets is None else len(self.targets)


class SelfAttention(nn.Module):
    """Multi-head self-attention with `nn.MultiheadAttention`'s parameter names and layout
    (one [3d, d] input projection), so the shipped weights load as they were saved."""

    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: torch.Tensor, keys: torch.Tensor | None) -> torch.Tensor:
        """`keys` [B, 1, 1, L]: the positions each query may attend to (None: all)."""
        b, length, dim = x.shape
        qkv = linear_rows(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = qkv.view(b, length, 3, self.n_heads, dim // self.n_heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=keys)
        return self.out_proj(attended.transpose(1, 2).reshape(b, length, dim))


class EncoderLayer(nn.Module):
    """A pre-norm transformer layer (GELU, no dropout), the arithmetic of
    `nn.TransformerEncoderLayer(norm_first=True)` and its parameter names, written out: the
    judge and the ALM call it on a few short rows at every step, where torch's module spent
    as long checking for its fast path as computing (the layer is 30% faster this way, with
    gradients too)."""

    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = SelfAttention(dim, n_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.linear1 = nn.Linear(dim, 4 * dim)
        self.linear2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, keys: torch.Tensor | None) -> torch.Tensor:
        x = x + self.self_attn(self.norm1(x), keys)
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class Encoder(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_layers: int):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(dim, n_heads) for _ in range(n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        keys = None if mask is None else mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, keys)
        return x


class SoftTokenRegressor(nn.Module):
    """Token embedding + learned positions -> pre-norm transformer encoder -> mean pool -> MLP."""

    def __init__(self, config: SurrogateConfig):
        super().__init__()
        self.config = config
        d = config.hidden_dim
        # Filled in place, not `randn(...) * 0.02`: arithmetic on the meta device (where a
        # checkpoint's shapes are checked first) loads torch's reference implementations.
        self.embedding = nn.Parameter(torch.empty(config.vocab_size, d).normal_(std=0.02))
        self.positions = nn.Parameter(torch.empty(config.max_length, d).normal_(std=0.02))
        self.encoder = Encoder(d, config.n_heads, config.n_layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, config.outputs))
        if config.targets is not None:
            # Plain attributes, not weights: they come from config.json.
            self.shift = torch.tensor(config.shift or [0.0] * config.outputs)
            self.scale = torch.tensor(config.scale or [1.0] * config.outputs)

    def embed(self, tokens: Tokens) -> torch.Tensor:
        """[B, L, d] from ids [B, L], probabilities [B, L, V] or SparseTokens."""
        if isinstance(tokens, SparseTokens):
            b, length, k = tokens.ids.shape
            bags = F.embedding_bag(
                tokens.ids.reshape(-1, k),
                self.embedding,
                per_sample_weights=tokens.weights.reshape(-1, k).to(self.embedding.dtype),
                mode="sum",
            )
            return bags.view(b, length, -1)
        if tokens.is_floating_point():
            return with_rows(lambda t: t @ self.embedding, tokens.to(self.embedding.dtype))
        return self.embedding[tokens]

    def score(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Score per sequence [B] (a multi-property surrogate: [B, K], in the labels' units)
        from embedded tokens; `mask` [B, L] marks real tokens (padded batches of texts of
        different lengths)."""
        out = self.head_outputs(x, mask)
        if self.config.targets is None:
            return out.squeeze(-1)
        return out * self.scale.to(out) + self.shift.to(out)

    def head_outputs(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The head's outputs [B, outputs] from embedded tokens: a multi-property surrogate's
        in units of each label's spread about its mean (what it is trained on)."""
        x = self.norm(self.encoder(x + self.positions[: x.shape[1]], mask))
        if mask is None:
            pooled = x.mean(dim=1)
        else:
            weights = mask.to(x.dtype)[..., None]
            pooled = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
        return self.head(pooled)

    def normalised(self, tokens: Tokens, mask: torch.Tensor | None = None) -> torch.Tensor:
        """A multi-property surrogate's outputs [B, K] before scale and shift (training)."""
        return self.head_outputs(self.embed(tokens), mask)

    def forward(self, tokens: Tokens, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.score(self.embed(tokens), mask)


def save_surrogate(model: SoftTokenRegressor, directory: Path, extra: dict | None = None) -> None:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"))
    config = {**asdict(model.config), "cdd_version": __version__, **(extra or {})}
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def check_surrogate_config(config: SurrogateConfig, path: Path) -> None:
    """Sizes a surrogate's config gives, checked before anything is built from them."""
    for name in ("vocab_size", "max_length", "hidden_dim", "n_layers", "n_heads"):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{path}: field {name} should be an int >= 1, got {value!r}")
    if config.max_length > MAX_LENGTH:
        raise InputError(f"{path}: field max_length {config.max_length} > {MAX_LENGTH}")
    if config.hidden_dim % config.n_heads:
        raise InputError(
            f"{path}: hidden_dim {config.hidden_dim} does not split into {config.n_heads} heads"
        )
    if config.targets is None:
        return
    targets = config.targets
    if not (isinstance(targets, list) and targets and all(isinstance(t, str) for t in targets)):
        raise InputError(f"{path}: field targets should be a list of names, got {targets!r}")
    for name in ("shift", "scale"):
        values = getattr(config, name)
        numbers = isinstance(values, list) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        )
        if not numbers or len(values) != len(targets):
            raise InputError(
                f"{path}: field {name} should be {len(targets)} numbers (one a target)"
            )
    if any(v <= 0 for v in config.scale):
        raise InputError(f"{path}: field scale should be positive numbers")


def read_small_config(directory: Path, kind: type, what: str, model_type: str) -> Any:
    """The dataclass `kind` from `directory`/config.json (keys it does not know ignored), of
    `model_type`: a surrogate's or a twist's, refused in one line where it is not one."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise InputError(f"{directory}: no config.json for the {what}")
    try:
        raw = json.loads(path.read_text())
        names = kind.__dataclass_fields__
        config = kind(**{k: v for k, v in raw.items() if k in names})
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise InputError(f"{path}: not a {what} config ({exc})") from None
    if config.model_type != model_type:
        raise InputError(f"{path}: model_type {config.model_type!r} is not {model_type}")
    return config


def load_surrogate(directory: Path, device: str = "cpu") -> SoftTokenRegressor:
    directory = Path(directory)
    path = directory / "config.json"
    config = read_small_config(directory, SurrogateConfig, "surrogate", "cdd-surrogate")
    check_surrogate_config(config, path)
    model = load_checked(lambda: SoftTokenRegressor(config), directory / "model.safetensors")
    model.requires_grad_(False)  # gradients flow to the input tokens, never to the weights
    return floor_rows(model.to(device).eval())  # a sample's score whoever shares its batch
