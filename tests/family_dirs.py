"""Tiny random-weight checkpoints of the published diffusion LM families, in their hub layout.

Each directory holds what the family publishes: `config.json` with the family's own keys,
weights in bfloat16 split over two shards with `model.safetensors.index.json`, and a
`tokenizer.json` (SmolLM2's byte-level BPE with the family's mask token added at the config's
id). The embedding has a few padded rows past the tokenizer, as Dream's and LLaDA's do.

The weights come from transformers' own Llama/Qwen2/Qwen3 modules (`reference()` rebuilds one
with the same weights), renamed to LLaDA's tensor names for LLaDA.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

ASSETS = Path(__file__).resolve().parent.parent / "cdd_cli" / "assets"
SMOLLM2_TOKENS = 49152
MASK_ID = SMOLLM2_TOKENS  # the added mask token
EOS_ID = 0  # SmolLM2's <|endoftext|>
VOCAB_ROWS = SMOLLM2_TOKENS + 8  # padded past the tokenizer's 49,153 tokens

SIZES = dict(hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, theta=500000.0, eps=1e-5)
MASK_TOKEN = {"llada": "<|mdm_mask|>", "Dream": "<|mask|>"}


def needs_transformers() -> None:
    """Skips the calling test (or fixture's tests) where transformers is absent: it is the
    `fluency` extra's, not the `test` extra's, and it lays out these weights."""
    pytest.importorskip(
        "transformers",
        reason="transformers is not installed (pip install -e '.[fluency]'): the model "
        "families' test weights are laid out by its modules",
    )


def reference_config(family: str, vocab_rows: int = VOCAB_ROWS):
    """transformers' config of the architecture the family's weights are laid out in."""
    needs_transformers()
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    common = dict(
        vocab_size=vocab_rows,
        hidden_size=SIZES["hidden"],
        num_hidden_layers=SIZES["layers"],
        num_attention_heads=SIZES["heads"],
        num_key_value_heads=SIZES["kv_heads"],
        intermediate_size=SIZES["ffn"],
        rope_theta=SIZES["theta"],
        rms_norm_eps=SIZES["eps"],
        max_position_embeddings=256,
    )
    if family == "llada":
        return LlamaConfig(**common, tie_word_embeddings=False)
    if family == "a2d-llama":
        return LlamaConfig(**common, tie_word_embeddings=True)
    if family == "Dream":
        return Qwen2Config(**common, tie_word_embeddings=False)
    if family == "a2d-qwen3":  # heads wider than hidden / heads, as Qwen3's are
        return Qwen3Config(**common, head_dim=16, tie_word_embeddings=True)
    raise ValueError(family)


def reference(family: str, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """transformers' model of that layout holding `state` (Hugging Face names), float32."""
    needs_transformers()
    from transformers import AutoModelForCausalLM

    config = reference_config(family)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config).float().eval()
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    if config.tie_word_embeddings:
        model.tie_weights()
    return model


def bidirectional_logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The reference's logits with every position attending to every other (a 4D additive
    mask of zeros is used as given), float32."""
    b, n = ids.shape
    open_mask = torch.zeros(b, 1, n, n)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=open_mask).logits


def hf_config(family: str, vocab_rows: int = VOCAB_ROWS, mask_id: int = MASK_ID) -> dict:
    s = SIZES
    if family == "llada":
        return {
            "model_type": "llada",
            "architectures": ["LLaDAModelLM"],
            "auto_map": {"AutoModel": "modeling_llada.LLaDAModelLM"},
            "d_model": s["hidden"],
            "n_heads": s["heads"],
            "n_kv_heads": s["kv_heads"],
            "n_layers": s["layers"],
            "mlp_hidden_size": s["ffn"],
            "mlp_ratio": 2,
            "vocab_size": vocab_rows,
            "embedding_size": vocab_rows,
            "rope_theta": s["theta"],
            "rms_norm_eps": s["eps"],
            "layer_norm_type": "rms",
            "block_type": "llama",
            "activation_type": "silu",
            "rope": True,
            "alibi": False,
            "include_bias": False,
            "include_qkv_bias": False,
            "weight_tying": False,
            "mask_token_id": mask_id,
            "eos_token_id": EOS_ID,
            "max_sequence_length": 256,
            "torch_dtype": "bfloat16",
        }
    base = {
        "vocab_size": vocab_rows,
        "hidden_size": s["hidden"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv_heads"],
        "intermediate_size": s["ffn"],
        "rope_theta": s["theta"],
        "rms_norm_eps": s["eps"],
        "max_position_embeddings": 256,
        "mask_token_id": mask_id,
        "eos_token_id": EOS_ID,
        "torch_dtype": "bfloat16",
        "rope_scaling": None,
    }
    if family == "Dream":
        return {
            **base,
            "model_type": "Dream",
            "architectures": ["DreamModel"],
            "auto_map": {"AutoModel": "modeling_dream.DreamModel"},
            "tie_word_embeddings": False,
            "pad_token_id": EOS_ID,
        }
    base = {k: v for k, v in base.items() if k != "mask_token_id"}  # dllm: the tokenizer's
    if family == "a2d-qwen3":
        return {
            **base,
            "model_type": "a2d-qwen3",
            "architectures": ["A2DQwen3LMHeadModel"],
            "head_dim": 16,
            "attention_bias": False,
            "tie_word_embeddings": True,
        }
    if family == "a2d-llama":
        return {
            **base,
            "model_type": "a2d-llama",
            "architectures": ["A2DLlamaLMHeadModel"],
            "tie_word_embeddings": True,
        }
    raise ValueError(family)


LLADA_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "q_proj",
    "self_attn.k_proj": "k_proj",
    "self_attn.v_proj": "v_proj",
    "self_attn.o_proj": "attn_out",
    "post_attention_layernorm": "ff_norm",
    "mlp.gate_proj": "ff_proj",
    "mlp.up_proj": "up_proj",
    "mlp.down_proj": "ff_out",
}


def llada_name(name: str) -> str:
    globals_ = {
        "model.embed_tokens.weight": "model.transformer.wte.weight",
        "model.norm.weight": "model.transformer.ln_f.weight",
        "lm_head.weight": "model.transformer.ff_out.weight",
    }
    if name in globals_:
        return globals_[name]
    _, _, layer, rest = name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"model.transformer.blocks.{layer}.{LLADA_NAMES[module]}.{kind}"


def random_state(
    family: str, seed: int = 0, vocab_rows: int = VOCAB_ROWS
) -> dict[str, torch.Tensor]:
    """transformers' parameters of the layout, drawn wider than its init (std 0.02 makes every
    logit nearly equal, so a swapped tensor would hardly show), rounded to bfloat16."""
    needs_transformers()
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = reference_config(family, vocab_rows)
    model = AutoModelForCausalLM.from_config(config)
    state = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        if name.endswith("norm.weight"):
            value = 1.0 + 0.2 * torch.randn_like(tensor)
        else:
            value = torch.randn_like(tensor) * (0.3 if name.endswith("bias") else 0.15)
        state[name] = value.to(torch.bfloat16)
    return state


def with_mask(family: str, tokenizer_file: Path) -> tuple[str, int]:
    """A tokenizers file with the family's mask token added, and the mask's id."""
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    mask = MASK_TOKEN.get(family, "<|mask|>")
    tok.add_special_tokens([AddedToken(mask, special=True)])
    return tok.to_str(), tok.token_to_id(mask)


def build(
    folder: Path, family: str, seed: int = 0, tokenizer_file: Path | None = None
) -> tuple[Path, dict[str, torch.Tensor]]:
    """The directory, and its weights under Hugging Face Llama/Qwen names (for `reference`).
    `tokenizer_file`: another vocabulary than SmolLM2's (its first token ends a text)."""
    tokenizer, mask_id = with_mask(
        family, tokenizer_file or ASSETS / "smollm2-a2d" / "tokenizer.json"
    )
    vocab_rows = mask_id + 8
    state = random_state(family, seed, vocab_rows)
    stored = {llada_name(k) if family == "llada" else k: v for k, v in state.items()}
    folder.mkdir(parents=True)
    names = sorted(stored)
    halves = {"model-00001-of-00002.safetensors": names[::2]}
    halves["model-00002-of-00002.safetensors"] = names[1::2]
    weight_map = {}
    for shard, keys in halves.items():
        save_file({k: stored[k].contiguous() for k in keys}, str(folder / shard))
        weight_map.update(dict.fromkeys(keys, shard))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    config = hf_config(family, vocab_rows, mask_id)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "tokenizer.json").write_text(tokenizer)
    return folder, state
