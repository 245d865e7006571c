"""Checkpoints in the Hugging Face directory format: `config.json` + `model.safetensors`.

Real kuleshov-group MDLM/UDLM directories and our own load through the same path. Our own
config adds a few fields the MDLM format lacks (`noise`, `cdd_version`); when they are absent
they are inferred (`model_type` mdlm -> masked noise, udlm -> uniform noise).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from cdd_cli import __version__
from cdd_cli.errors import InputError
from cdd_cli.models.dit import DiffusionModel, DiTConfig

NOISE_OF_MODEL_TYPE = {"mdlm": "masked", "udlm": "uniform"}
MAX_LENGTH = 65536  # tokens per sequence; mdlm-owt has 1,024
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
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise InputError(f"{where}: missing field(s) {', '.join(missing)}")
    model_type = raw["model_type"]
    if model_type not in NOISE_OF_MODEL_TYPE:
        raise InputError(f"{where}: model_type {model_type!r} is not one of mdlm, udlm")
    values = {}
    for f in fields(ModelConfig):
        if f.name not in raw:
            continue
        value = raw[f.name]
        expected = {"int": int, "float": (int, float), "bool": bool, "str": str}[str(f.type)]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise InputError(f"{where}: field {f.name} should be {f.type}, got {value!r}")
        values[f.name] = value
    values.setdefault("noise", NOISE_OF_MODEL_TYPE[model_type])
    if values["noise"] not in ("masked", "uniform"):
        raise InputError(f"{where}: noise must be masked or uniform, got {values['noise']!r}")
    config = ModelConfig(**values)
    for name in ("vocab_size", "hidden_dim", "cond_dim", "n_blocks", "n_heads"):
        if getattr(config, name) < 1:
            raise InputError(f"{where}: field {name} must be >= 1, got {getattr(config, name)}")
    if not 2 <= config.model_length <= MAX_LENGTH:
        raise InputError(
            f"{where}: field model_length must be in [2, {MAX_LENGTH}], got {config.model_length}"
        )
    steps = raw.get("default_sampling_steps")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
        raise InputError(
            f"{where}: field default_sampling_steps must be an int >= 1, got {steps!r}"
        )
    if not splits_into_heads(config.hidden_dim, config.n_heads):
        raise InputError(
            f"{where}: hidden_dim {config.hidden_dim} must split into "
            f"{config.n_heads} heads of even size"
        )
    return config


def read_config(directory: Path) -> tuple[ModelConfig, dict]:
    """The parsed config and the raw JSON (which may carry our own extra fields)."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise InputError(f"{directory}: no config.json (expected a Hugging Face model directory)")
    try:
        raw = json.loads(path.read_text())
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a JSON object")
    return parse_config(raw, str(path)), raw


def _summarise(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def load_state_strict(model: torch.nn.Module, path: Path) -> None:
    """Load safetensors weights, refusing missing, unexpected or mis-shaped keys by name."""
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read safetensors file ({exc})") from None
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshaped = [
        f"{k} {tuple(state[k].shape)} vs {tuple(expected[k].shape)}"
        for k in sorted(set(state) & set(expected))
        if state[k].shape != expected[k].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing keys: {_summarise(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {_summarise(unexpected)}")
    if misshaped:
        problems.append(f"mis-shaped keys (file vs config): {_summarise(misshaped)}")
    if problems:
        raise InputError(f"{path}: checkpoint does not match config.json; " + "; ".join(problems))
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()}, strict=True)


def load_model(
    directory: Path, device: str | torch.device = "cpu", config: ModelConfig | None = None
) -> DiffusionModel:
    directory = Path(directory)
    config = config or read_config(directory)[0]
    weights = directory / "model.safetensors"
    if not weights.is_file():
        raise InputError(f"{directory}: no model.safetensors")
    model = DiffusionModel(config)
    load_state_strict(model, weights)
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
