"""The DiT backbone of MDLM/UDLM, in plain PyTorch.

Parameter names and shapes match the kuleshov-group Hugging Face checkpoints exactly
(`backbone.vocab_embed.embedding`, `backbone.blocks.{i}.attn_qkv.weight`, ...), so their
`model.safetensors` loads with a strict key check. Attention is SDPA (no flash-attn), so the
model runs on CPU and GPU, in float32 or bfloat16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cdd_cli.models.rows import linear_rows, with_rows


@dataclass
class DiTConfig:
    vocab_size: int
    model_length: int
    hidden_dim: int = 768
    cond_dim: int = 128
    n_blocks: int = 12
    n_heads: int = 12
    dropout: float = 0.1
    time_conditioning: bool = False
    # Our own field (MDLM never ties): the output projection reuses the input embedding table,
    # which halves a small model's size when V = 50,258 dominates it.
    tie_word_embeddings: bool = False


class LayerNorm(nn.Module):
    """Weight-only LayerNorm computed in float32, as in MDLM."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x.float(), [self.dim])
        return (y * self.weight.float()).to(x.dtype)


class TokenEmbedding(nn.Module):
    """A bare [V, d] table: `embedding[ids]` for ids, `probs @ embedding` for soft tokens."""

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.embedding = nn.Parameter(torch.empty(vocab_size, dim))
        nn.init.kaiming_uniform_(self.embedding, a=math.sqrt(5))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.is_floating_point():  # soft tokens [B, L, V]
            return with_rows(lambda t: t @ self.embedding, tokens.to(self.embedding.dtype))
        return self.embedding[tokens]


class TimestepEmbedder(nn.Module):
    """256-dim sinusoidal features of sigma (cos half, then sin half) through a 2-layer MLP."""

    frequency_dim = 256

    def __init__(self, cond_dim: int):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(self.frequency_dim, cond_dim, bias=True),
            nn.SiLU(),
            nn.Linear(cond_dim, cond_dim, bias=True),
        )

    def forward(self, sigma: torch.Tensor) -> torch.Tensor:
        half = self.frequency_dim // 2
        freqs = torch.exp(
            -math.log(10000) * torch.arange(half, dtype=torch.float32, device=sigma.device) / half
        )
        args = sigma.float()[:, None] * freqs[None]
        features = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.mlp(features.to(self.mlp[0].weight.dtype))


class Rotary(nn.Module):
    """Rotary position embedding, base 10000, rotate-half (GPT-NeoX) convention."""

    def __init__(self, head_dim: int):
        super().__init__()
        # On the CPU whatever the default device: under `torch.device("meta")` (a checkpoint's
        # shapes are checked on a meta build first) this arithmetic would load torch's meta
        # decompositions, 1.5-2 s of every start.
        steps = torch.arange(0, head_dim, 2, device="cpu").float()
        inv_freq = 1.0 / (10000 ** (steps / head_dim))
        self.register_buffer("inv_freq", inv_freq)  # persistent: it is a checkpoint key

    def forward(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(length, device=device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq.float().to(device))
        angles = torch.cat([freqs, freqs], dim=-1)  # [L, head_dim]
        return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, H, L, Dh]; cos/sin: [L, Dh]
    return (x.float() * cos + rotate_half(x.float()) * sin).to(x.dtype)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class DiTBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int, cond_dim: int, dropout: float):
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.norm1 = LayerNorm(dim)
        self.attn_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attn_out = nn.Linear(dim, dim, bias=False)
        self.norm2 = LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim, bias=True),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * dim, dim, bias=True),
        )
        self.adaLN_modulation = nn.Linear(cond_dim, 6 * dim, bias=True)
        nn.init.zeros_(self.adaLN_modulation.weight)
        nn.init.zeros_(self.adaLN_modulation.bias)

    def forward(self, x: torch.Tensor, cond: torch.Tensor, rotary: tuple) -> torch.Tensor:
        batch, length, dim = x.shape
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = self.adaLN_modulation(cond)[
            :, None
        ].chunk(6, dim=2)
        h = modulate(self.norm1(x), shift_a, scale_a)
        # qkv is laid out as (three, heads, head_dim) along the last axis.
        qkv = self.attn_qkv(h).view(batch, length, 3, self.n_heads, dim // self.n_heads)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, L, Dh]
        cos, sin = rotary
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        attn = F.scaled_dot_product_attention(q, k, v)  # bidirectional, no padding mask
        attn = attn.transpose(1, 2).reshape(batch, length, dim)
        drop = self.dropout if self.training else 0.0
        x = x + gate_a * F.dropout(self.attn_out(attn), drop, self.training)
        h = modulate(self.norm2(x), shift_m, scale_m)
        return x + gate_m * F.dropout(self.mlp(h), drop, self.training)


class FinalLayer(nn.Module):
    """Norm, adaLN modulation, then logits; a tied layer borrows the embedding table as weight
    and owns only its bias (`output_layer.bias`), so no tensor is stored twice."""

    def __init__(self, dim: int, vocab_size: int, cond_dim: int, tied: bool = False):
        super().__init__()
        self.norm_final = LayerNorm(dim)
        if tied:
            self.linear = None
            self.bias = nn.Parameter(torch.zeros(vocab_size))
        else:
            self.linear = nn.Linear(dim, vocab_size)
            nn.init.zeros_(self.linear.weight)
            nn.init.zeros_(self.linear.bias)
        self.adaLN_modulation = nn.Linear(cond_dim, 2 * dim, bias=True)
        nn.init.zeros_(self.adaLN_modulation.weight)
        nn.init.zeros_(self.adaLN_modulation.bias)

    def forward(
        self, x: torch.Tensor, cond: torch.Tensor, embedding: torch.Tensor | None = None
    ) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(cond)[:, None].chunk(2, dim=2)
        h = modulate(self.norm_final(x), shift, scale)
        if self.linear is None:
            return linear_rows(h, embedding, self.bias)
        return self.linear(h)


class DiT(nn.Module):
    """Bidirectional transformer over a sequence, conditioned on the noise level sigma.

    `forward(tokens, sigma)` takes token ids [B, L] or soft tokens [B, L, V] (probabilities)
    and returns raw logits [B, L, V]; parameterisations (SUBS etc.) are the caller's business.
    """

    def __init__(self, config: DiTConfig):
        super().__init__()
        self.config = config
        dim = config.hidden_dim
        self.vocab_embed = TokenEmbedding(config.vocab_size, dim)
        self.sigma_map = TimestepEmbedder(config.cond_dim)
        self.rotary_emb = Rotary(dim // config.n_heads)
        self.blocks = nn.ModuleList(
            DiTBlock(dim, config.n_heads, config.cond_dim, config.dropout)
            for _ in range(config.n_blocks)
        )
        self.output_layer = FinalLayer(
            dim, config.vocab_size, config.cond_dim, config.tie_word_embeddings
        )

    def forward(
        self, tokens: torch.Tensor, sigma: torch.Tensor, where: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits [B, L, V]; with a boolean `where` [B, L], only those positions' [N, V]
        (training needs logits at masked positions only, and V-wide rows dominate the cost)."""
        x = self.vocab_embed(tokens)
        if not self.config.time_conditioning:
            sigma = torch.zeros_like(sigma)
        cond = F.silu(self.sigma_map(sigma))
        rotary = self.rotary_emb(x.shape[1], x.device)
        for block in self.blocks:
            x = block(x, cond, rotary)
        embedding = self.vocab_embed.embedding if self.config.tie_word_embeddings else None
        if where is None:
            return self.output_layer(x, cond, embedding)
        rows = where.nonzero()[:, 0]
        return self.output_layer(x[where][:, None], cond[rows], embedding)[:, 0]


class DiffusionModel(nn.Module):
    """Wrapper whose state-dict keys carry the `backbone.` prefix of the HF checkpoints."""

    def __init__(self, config: DiTConfig):
        super().__init__()
        self.backbone = DiT(config)

    @property
    def config(self) -> DiTConfig:
        return self.backbone.config

    def forward(
        self, tokens: torch.Tensor, sigma: torch.Tensor, where: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.backbone(tokens, sigma, where)
