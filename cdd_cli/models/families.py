"""Published diffusion LMs in their own Hugging Face layout: LLaDA, Dream and A2D conversions.

Their `config.json` names remote modeling code, which cdd never runs. The architectures are
all Llama-shaped (RMSNorm, SwiGLU, rotary positions, optionally grouped KV heads, attention
over the whole sequence), so each family is read into `A2DModel` (a2d.py), the one model file
cdd already tests against transformers' Llama: a family here is only a config translation and
a table of tensor names. Reusing transformers' own Llama/Qwen modules with a non-causal mask
was the alternative; it ties the forward pass to private mask-building code that changes
between transformers releases, and still needs LLaDA's names translated. The tests check our
logits against those modules instead, with the same weights.

- `llada` (LLaDA-8B Base/Instruct): weights under `model.transformer.*`; no logit shift.
- `Dream` (Dream-v0 7B): a Qwen2 layout (q/k/v biases); its generation code reads position j's
  distribution from the hidden state at j - 1 (position 0 from itself); cdd does the same.
- A2D conversions (dllm's `a2d-llama`, `a2d-qwen2`, `a2d-qwen3`): a Llama/Qwen2/Qwen3 layout
  read with bidirectional attention and no shift; the mask token is `mask_token_id` where the
  config has one, else the tokenizer's added `<|mask|>` (dllm adds it to the tokenizer only).
  A plain `llama`/`qwen2`/`qwen3` config is a causal model and is refused: it would load and
  write noise.

Loading reads every shard's header first and checks each tensor's name and shape against the
config before any weight is allocated; weights keep their dtype unless `dtype` says otherwise.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from cdd_cli.errors import InputError
from cdd_cli.models.a2d import HF_CONFIG_NAMES, A2DConfig, A2DModel
from cdd_cli.models.files import regular_file
from cdd_cli.models.safetensors_file import (
    FLOAT_DTYPES,
    READ_ERRORS,
    open_safetensors,
    read_header,
    read_headers,
    reading_problem,
)
from cdd_cli.models.skeleton import meta_build

# Published checkpoints are others' models, of any size: 2^17 leaves room past the widest
# open ones (Llama 3.1 405B: 126 layers, hidden 16,384, feed-forward 53,248); a wider layer
# is a broken config, refused before any tensor is built. cdd's own formats have a narrower
# limit (checkpoint.MAX_OWN_WIDTH).
MAX_LAYERS = 512
MAX_PUBLISHED_WIDTH = 1 << 17


@dataclass(frozen=True)
class Family:
    """A published family: how it is named and sampled, and where its checkpoints differ from
    a plain Hugging Face Llama (the traits the config translation and the loader read)."""

    name: str  # as README and errors name it
    sampler: str  # the family's own sampler (see diffusion/processes.py)
    block_length: int  # its default semi-autoregressive block (0: one block)
    llada_format: bool = False  # LLaDA's own config keys, tensor names and default ids
    attention_bias: bool = False  # biases on q, k and v (the Qwen2 layout)
    qk_norm: bool = False  # an RMSNorm on each head's queries and keys (Qwen3)
    explicit_head_dim: bool = False  # head width from `head_dim`, not hidden / heads (Qwen3)
    logit_shift: bool = False  # position j's distribution read at j - 1 (Dream)
    mask_from_tokenizer: bool = False  # no mask_token_id: the tokenizer's <|mask|> (dllm)


FAMILIES = {
    "llada": Family("LLaDA", "confidence", 32, llada_format=True),
    "Dream": Family("Dream", "entropy", 0, attention_bias=True, logit_shift=True),
    "a2d-llama": Family("A2D (Llama layout)", "ancestral", 0, mask_from_tokenizer=True),
    "a2d-qwen2": Family(
        "A2D (Qwen2 layout)", "ancestral", 0, attention_bias=True, mask_from_tokenizer=True
    ),
    "a2d-qwen3": Family(
        "A2D (Qwen3 layout)",
        "ancestral",
        0,
        qk_norm=True,
        explicit_head_dim=True,
        mask_from_tokenizer=True,
    ),
}
CAUSAL = ("llama", "qwen2", "qwen3")
MASK_TOKEN = "<|mask|>"  # what dllm adds to an A2D conversion's tokenizer


def supported() -> str:
    return "mdlm, udlm, a2d (cdd train adapt), llada, Dream, and llama/qwen2/qwen3 A2D conversions"


def family_of(raw: dict) -> str | None:
    """Which published family a config describes; None for cdd's own formats."""
    model_type = raw.get("model_type")
    return model_type if model_type in FAMILIES else None


def refuse_causal(raw: dict, where: str) -> None:
    """A causal LM's config (what an A2D conversion starts from) gets a line that says so."""
    if raw.get("model_type") in CAUSAL:
        raise InputError(
            f"{where}: model_type {raw['model_type']!r} is a causal language model, not a "
            f"diffusion model; cdd reads its A2D conversion (model_type a2d-{raw['model_type']})"
        )


def mask_in_tokenizer(directory: Path) -> int | None:
    """The id of the tokenizer's added `<|mask|>` token, if it has one."""
    try:
        added = json.loads((directory / "tokenizer.json").read_text()).get("added_tokens") or []
    except (OSError, ValueError, AttributeError):
        return None
    return next((t.get("id") for t in added if t.get("content") == MASK_TOKEN), None)


def _int(raw: dict, key: str, where: str, default: int | None = None) -> int:
    value = raw.get(key, default)
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        value = value[0]  # eos_token_id may list several; the first ends a text
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{where}: field {key} should be an integer, got {value!r}")
    return value


def _number(raw: dict, key: str, where: str, default: float) -> float:
    value = raw.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise InputError(f"{where}: field {key} should be a positive number, got {value!r}")
    return float(value)


LLADA_CONFIG_NAMES = {  # LLaDA's config keys -> ours (embedding_size, where given, wins)
    "vocab_size": "vocab_size",
    "embedding_size": "vocab_size",
    "d_model": "hidden_dim",
    "n_layers": "n_layers",
    "n_heads": "n_heads",
    "n_kv_heads": "n_kv_heads",
    "mlp_hidden_size": "ffn_dim",
    "rope_theta": "rope_theta",
    "rms_norm_eps": "rms_eps",
    "weight_tying": "tie_word_embeddings",
    "include_qkv_bias": "attention_bias",
}
REQUIRED = ("vocab_size", "hidden_dim", "n_layers", "n_heads", "ffn_dim")


def config_values(raw: dict, names: dict[str, str], where: str) -> dict:
    """The A2DConfig fields a config gives under `names` (theirs -> ours), each checked as
    its field's kind; a required one missing is refused."""
    kinds = {f.name: str(f.type) for f in fields(A2DConfig)}
    values: dict = {}
    for theirs, ours in names.items():
        if raw.get(theirs) is None:
            continue
        if kinds[ours] == "bool":
            values[ours] = bool(raw[theirs])
        elif kinds[ours] == "float":
            values[ours] = _number(raw, theirs, where, 0.0)
        else:
            values[ours] = _int(raw, theirs, where)
    missing = [ours for ours in REQUIRED if ours not in values]
    if missing:
        wanted = [theirs for theirs, ours in names.items() if ours in missing]
        raise InputError(f"{where}: missing field(s) {', '.join(wanted)}")
    return values


def parse_family_config(
    raw: dict, family: str, directory: Path, where: str
) -> tuple[A2DConfig, dict]:
    """The A2DConfig of a published family's config.json, and the facts the rest of cdd reads
    from it (`prefix_id`: end of text, `mask_id`, `family`)."""
    traits = FAMILIES[family]
    if raw.get("rope_scaling"):
        raise InputError(f"{where}: rope_scaling {raw['rope_scaling']!r} is not supported")
    if traits.llada_format:
        if raw.get("block_type", "llama") != "llama" or raw.get("alibi") or not raw.get("rope", 1):
            raise InputError(f"{where}: only LLaDA's llama blocks with rotary positions are read")
        if raw.get("activation_type", "silu") not in ("silu", "swiglu"):
            raise InputError(f"{where}: activation_type {raw['activation_type']!r} not supported")
        if raw.get("include_bias"):
            raise InputError(f"{where}: include_bias is not supported (LLaDA-8B has none)")
        values = config_values(raw, LLADA_CONFIG_NAMES, where)
        values.update(logit_shift=False)
        mask_id = _int(raw, "mask_token_id", where, 126336)
        eos_id = _int(raw, "eos_token_id", where, 126081)
    else:
        names = (
            {**HF_CONFIG_NAMES, "head_dim": "head_size"}
            if traits.explicit_head_dim
            else HF_CONFIG_NAMES
        )
        values = {"rms_eps": 1e-6, "attention_bias": traits.attention_bias}
        values.update(config_values(raw, names, where))
        values.update(qk_norm=traits.qk_norm, logit_shift=traits.logit_shift)
        if raw.get("mask_token_id") is not None:
            mask_id = _int(raw, "mask_token_id", where)
        elif traits.mask_from_tokenizer and mask_in_tokenizer(directory) is not None:
            mask_id = int(mask_in_tokenizer(directory))
        else:
            raise InputError(f"{where}: no mask_token_id, and no {MASK_TOKEN} in tokenizer.json")
        eos_id = _int(raw, "eos_token_id", where)
    values.setdefault("n_kv_heads", values["n_heads"])
    config = A2DConfig(
        **values,
        mask_id=mask_id,
        prefix_id=-1,
        mask_embedding=False,
        model_length=_int(raw, "max_sequence_length", where, raw.get("max_position_embeddings"))
        if ("max_sequence_length" in raw or "max_position_embeddings" in raw)
        else 4096,
    )
    check_sizes(config, where)
    meta = {"prefix_id": eos_id, "mask_id": mask_id, "family": family}
    return config, meta


def check_sizes(config: A2DConfig, where: str) -> None:
    for name in ("vocab_size", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim"):
        if getattr(config, name) < 1:
            raise InputError(f"{where}: {name} must be >= 1, got {getattr(config, name)}")
    if config.n_layers > MAX_LAYERS or max(config.hidden_dim, config.ffn_dim) > MAX_PUBLISHED_WIDTH:
        raise InputError(f"{where}: layers or widths past what cdd runs")
    if config.head_dim % 2 or config.n_heads % config.n_kv_heads:
        raise InputError(
            f"{where}: {config.n_heads} heads of width {config.head_dim} (even) shared by "
            f"{config.n_kv_heads} key-value heads do not fit"
        )
    if not config.head_size and config.hidden_dim % config.n_heads:
        raise InputError(f"{where}: hidden size {config.hidden_dim} / {config.n_heads} heads")
    for name in ("mask_id",):
        if not 0 <= getattr(config, name) < config.vocab_size:
            raise InputError(f"{where}: {name} {getattr(config, name)} outside the vocabulary")


# LLaDA's tensor names (per block and global) for the Hugging Face Llama ones A2DModel uses.
LLADA_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "q_proj": "self_attn.q_proj",
    "k_proj": "self_attn.k_proj",
    "v_proj": "self_attn.v_proj",
    "attn_out": "self_attn.o_proj",
    "ff_norm": "post_attention_layernorm",
    "ff_proj": "mlp.gate_proj",  # LLaDA's SwiGLU: act(ff_proj(x)) * up_proj(x)
    "up_proj": "mlp.up_proj",
    "ff_out": "mlp.down_proj",
}
LLADA_GLOBAL_NAMES = {
    "model.transformer.wte.weight": "model.embed_tokens.weight",
    "model.transformer.ln_f.weight": "model.norm.weight",
    "model.transformer.ff_out.weight": "lm_head.weight",
}
LLADA_BLOCK = re.compile(r"model\.transformer\.blocks\.(\d+)\.(\w+)\.(weight|bias)")


def our_name(family: str, name: str) -> str | None:
    """A2DModel's name for a checkpoint tensor; None for a name the family does not have."""
    if not FAMILIES[family].llada_format:
        return name
    if name in LLADA_GLOBAL_NAMES:
        return LLADA_GLOBAL_NAMES[name]
    found = LLADA_BLOCK.fullmatch(name)
    if found and found[2] in LLADA_BLOCK_NAMES:
        return f"model.layers.{found[1]}.{LLADA_BLOCK_NAMES[found[2]]}.{found[3]}"
    return None


def weight_files(directory: Path) -> dict[str, Path]:
    """Each tensor's file: `model.safetensors`, or the shards `model.safetensors.index.json`
    maps (its weight_map read, every shard it names checked to exist)."""
    index = regular_file(directory / "model.safetensors.index.json", "a safetensors index")
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{index}: not a safetensors index ({exc})") from None
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) and "/" not in v and "\\" not in v for v in weight_map.values()
        ):
            raise InputError(f"{index}: weight_map must map tensor names to shard file names")
        shards = {regular_file(directory / v, "a shard") for v in weight_map.values()}
        missing = sorted(p.name for p in shards if not p.is_file())
        if missing:
            raise InputError(f"{index}: shard(s) missing: {', '.join(missing[:3])}")
        return {k: directory / v for k, v in weight_map.items()}
    single = regular_file(directory / "model.safetensors", "model.safetensors")
    if not single.is_file():
        raise InputError(f"{directory}: no model.safetensors or model.safetensors.index.json")
    return dict.fromkeys(read_header(single), single)


def shape_problems(
    expected: dict[str, tuple[int, ...]],
    found: dict[str, tuple[int, ...]],
    shown=lambda name: name,
) -> list[str]:
    """What keeps a checkpoint's tensors (`found`: name -> shape) from being a module's
    (`expected`), each kind in a few words; `shown`: a key as the checkpoint names it."""
    missing = sorted(set(expected) - set(found))
    extra = sorted(shown(k) for k in set(found) - set(expected))
    misshaped = [
        f"{shown(k)} {found[k]} vs {expected[k]}"
        for k in sorted(set(expected) & set(found))
        if found[k] != expected[k]
    ]
    problems = []
    if missing:
        problems.append(f"missing keys: {_names(missing)}")
    if extra:
        problems.append(f"unexpected keys: {_names(extra)}")
    if misshaped:
        problems.append(f"mis-shaped keys (file vs config): {_names(misshaped)}")
    return problems


def _names(items: list[str], limit: int = 3) -> str:
    return ", ".join(items[:limit]) + (
        f" and {len(items) - limit} more" if len(items) > limit else ""
    )


def load_family(
    directory: Path,
    config: A2DConfig,
    family: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    check_only: bool = False,
) -> A2DModel | None:
    """The model of a published family's directory, its weights checked against `config`
    from the headers before any is allocated. `dtype`: None keeps the checkpoint's (float32
    on a CPU, where half-precision matmuls are slow and inexact). `check_only`: the checks
    alone, no weight read (`cdd validate` of an 8B checkpoint takes no 32 GB)."""
    directory = Path(directory)
    headers = read_headers(weight_files(directory))
    skeleton = meta_build(lambda: A2DModel(config))
    expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight")
    renamed: dict[str, str] = {}  # ours -> the checkpoint's
    unknown = []
    for name in sorted(headers):
        ours = our_name(family, name)
        if ours is None:
            unknown.append(name)
        else:
            renamed[ours] = name
    if unknown:
        raise InputError(f"{directory}: tensors {family} does not have: {_names(unknown)}")
    found = {ours: headers[name][2] for ours, name in renamed.items()}
    problems = shape_problems(expected, found, lambda ours: renamed.get(ours, ours))
    not_float = sorted(k for k, (_, kind, _) in headers.items() if kind not in FLOAT_DTYPES)
    if not_float:
        problems.append(f"not floating point: {_names(not_float)}")
    if problems:
        raise InputError(f"{directory}: weights do not match config.json: " + "; ".join(problems))
    if check_only:
        return None
    if dtype is None:
        kinds = {headers[renamed[k]][1] for k in expected}
        stored = {"F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float32}
        dtype = stored.get(kinds.pop(), torch.float32) if len(kinds) == 1 else torch.float32
        if torch.device(device).type == "cpu":
            dtype = torch.float32
    state: dict[str, torch.Tensor] = {}
    by_file: dict[Path, list[str]] = {}
    for ours in expected:
        by_file.setdefault(headers[renamed[ours]][0], []).append(ours)
    for path, names in by_file.items():
        with open_safetensors(path) as f:
            for ours in names:
                try:
                    tensor = f.get_tensor(renamed[ours])
                except READ_ERRORS as exc:
                    problem = reading_problem(exc)
                    raise InputError(f"{path}: cannot read {renamed[ours]} ({problem})") from None
                tensor = tensor.to(device=device, dtype=dtype)
                if not torch.isfinite(tensor).all():
                    raise InputError(f"{path}: NaN or infinite values in {renamed[ours]}")
                state[ours] = tensor
    model = skeleton
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    left = [k for k, v in model.state_dict().items() if v.is_meta]
    if left:  # a parameter no tensor filled: a bug in the tables above, never silent
        raise InputError(f"{directory}: no weights for {_names(left)}")
    return model.eval()
