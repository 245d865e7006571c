"""Resolving a model's name (`--model`): a shipped default name or a Hugging Face-format
directory. Refusals say `model 'NAME': ...` (the API's words) and carry the command line's
`--model NAME: ...` (`InputError.cli`)."""

from __future__ import annotations

import functools
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cdd_cli.errors import InputError
from cdd_cli.models.a2d import A2DConfig, A2DModel
from cdd_cli.models.checkpoint import (
    ModelConfig,
    load_adapted,
    load_model,
    read_config,
)
from cdd_cli.models.dit import DiffusionModel
from cdd_cli.models.families import load_family, weight_files
from cdd_cli.models.files import file_digest
from cdd_cli.models.tokenizers import MoleculeTokenizer, Tokenizer, load_tokenizer
from cdd_cli.settings import DTYPE_NAMES
from cdd_cli.suggest import did_you_mean

ASSETS = Path(__file__).resolve().parent.parent / "assets"

# Shipped defaults: name -> folder under cdd_cli/assets (each with a MODEL_CARD.md).
SHIPPED = {
    "default-molecules": "qm9-udlm",
    "default-text": "text-mdlm",
    "smollm2-a2d": "smollm2-a2d",
    "moses-mdlm": "moses-mdlm",  # drug-sized (MOSES); not a default: slower, under-trained
    "moses-selfies": "moses-selfies",  # the same as SELFIES: valid whatever it draws
}
DEFAULT_FOR = {"molecules": "default-molecules", "text": "default-text"}


def resolve_device(name: str) -> str:
    """`name` checked against the devices this machine has (InputError otherwise); "auto" is
    the first CUDA device where there is one, else the CPU."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return name
    if name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit()):
        if not torch.cuda.is_available():
            raise InputError(f"device {name!r} requested but CUDA is not available here")
        index = int(name[5:]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise InputError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s)")
        return name
    raise InputError(f"unknown device {name!r} (use auto, cpu, cuda or cuda:K)")


HUB_PREFIX = "hf://"


def resolve_directory(name_or_dir: str, download: bool = True) -> Path:
    """A shipped name, a local directory, or `hf://owner/name` (the only way a hub repository
    is ever fetched: a mistyped local path is never taken for a hub id). `download=False`:
    a hub model is looked up in the local Hugging Face cache only, with no network."""
    if name_or_dir in SHIPPED:
        return ASSETS / SHIPPED[name_or_dir]
    if name_or_dir.startswith(HUB_PREFIX):
        repo_id = name_or_dir[len(HUB_PREFIX) :]
        if repo_id.count("/") != 1 or not all(repo_id.split("/")):
            raise model_error(name_or_dir, "a hub model is hf://owner/name")
        return download_from_hub(repo_id, download)
    path = Path(name_or_dir).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise model_error(
            name_or_dir, "not a directory (expected config.json and model.safetensors inside)"
        )
    raise model_error(
        name_or_dir, f"no such directory, and not a shipped model {missing_model_hint(name_or_dir)}"
    )


def model_error(name: str, problem: str) -> InputError:
    """A refusal of the model `name`, as the API says it and as the command line does."""
    return InputError(f"model {name!r}: {problem}", cli=f"--model {name}: {problem}")


# What a Hugging Face hub id looks like: owner/name, neither starting with "." or "-"; a path
# such as ./runs/x or ~/x is no hub id, whatever its slashes.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def missing_model_hint(name: str) -> str:
    """The end of the refusal of a --model that is neither a folder nor a shipped name: the
    shipped name it misspells, else the shipped names and how to name a hub model."""
    close = did_you_mean(name, SHIPPED)
    if close:
        return f"({', '.join(SHIPPED)}){close}"
    hub = f"{HUB_PREFIX}{name}" if HUB_ID.fullmatch(name) else f"{HUB_PREFIX}org/name"
    return f"({', '.join(SHIPPED)}); for a model on the Hugging Face hub, write {hub}"


HUB_FILES = [
    "config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
]


def download_from_hub(repo_id: str, download: bool = True) -> Path:
    """Fetch a hub repository the user named explicitly; never done for defaults or tests.
    With HF_HUB_OFFLINE=1 or `download=False` only the local Hugging Face cache is read."""
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or not download
    try:
        from huggingface_hub import snapshot_download  # not a dependency: only hf:// needs it
    except ImportError:
        raise model_error(
            f"{HUB_PREFIX}{repo_id}",
            "downloading from the Hugging Face hub needs `pip install huggingface_hub` and a "
            "network (or download the folder yourself and pass its path)",
        ) from None
    try:
        path = snapshot_download(repo_id, allow_patterns=HUB_FILES, local_files_only=offline)
    except Exception as exc:  # network, cache and hub errors come in many types
        if offline:
            why = "HF_HUB_OFFLINE=1" if download else "a check reads no network"
            raise model_error(
                f"{HUB_PREFIX}{repo_id}",
                f"{why} and it is not in the local Hugging Face cache, so no download"
                + ("" if download else " (a run downloads it)"),
            ) from None
        raise model_error(
            f"{HUB_PREFIX}{repo_id}",
            f"download failed ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no network?'})",
        ) from None
    return Path(path)


@dataclass
class LoadedModel:
    """A model with everything needed to sample from it and describe its samples."""

    name: str
    directory: Path
    config: ModelConfig | A2DConfig
    model: DiffusionModel | A2DModel | None  # None: checked, not loaded (`cdd validate`)
    tokenizer: Tokenizer
    meta: dict = field(default_factory=dict)

    @functools.cached_property
    def revision(self) -> str:
        """Which weights these are (see `weights_revision`), read once per loaded model."""
        return weights_revision(self.directory)

    @property
    def default_steps(self) -> int:
        return int(self.meta.get("default_sampling_steps") or 32)

    @property
    def kind(self) -> str:
        """What a method's defaults are chosen by: "smiles" (a molecule tokenizer: SMILES or
        SELFIES), "masked text" or "uniform text" (a text model and its noise)."""
        if isinstance(self.tokenizer, MoleculeTokenizer):
            return "smiles"
        return "masked text" if self.config.noise == "masked" else "uniform text"


DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


def load(
    name_or_dir: str | None,
    kind: str,
    device: str = "cpu",
    dtype: str | None = None,
    weights: bool = True,
) -> LoadedModel:
    """`dtype` (float32, bfloat16, float16; published families only): None keeps the
    checkpoint's on a GPU, float32 on a CPU. `weights=False` (`cdd validate`): a published
    family's weights are checked from their headers but not read (the model is None), and a
    hub model is read from the local Hugging Face cache only (no network)."""
    name = name_or_dir or DEFAULT_FOR[kind]
    directory = resolve_directory(name, download=weights)
    if name in SHIPPED and not (directory / "model.safetensors").is_file():
        raise InputError(f"shipped model {name} is missing from {directory} (broken install?)")
    config, meta, tokenizer = read_model(directory)
    if dtype is not None and dtype not in DTYPES:
        raise InputError(f"dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    if "family" in meta:
        family_dtype = DTYPES[dtype] if dtype else None
        model = load_family(
            directory, config, meta["family"], device, family_dtype, check_only=not weights
        )
    elif dtype not in (None, "float32"):
        problem = "only published families (LLaDA, Dream, A2D) take it"
        raise InputError(f"dtype {dtype!r}: {problem}", cli=f"--dtype {dtype}: {problem}")
    elif isinstance(config, A2DConfig):
        model = load_adapted(directory, config, meta, device)
    else:
        model = load_model(directory, device, config)
    return LoadedModel(name, directory, config, model, tokenizer, meta)


def read_model(directory: Path) -> tuple[ModelConfig | A2DConfig, dict, Tokenizer]:
    """A model folder's config, raw config and tokenizer (checked to agree), no weights.

    A published family's embedding may have more rows than its tokenizer has tokens (padded
    for fast matmuls): the model then outputs only the tokenizer's columns."""
    config, meta = read_config(directory)
    tokenizer = load_tokenizer(directory, config.vocab_size, special=meta)
    padded = "family" in meta and len(tokenizer) < config.vocab_size
    if padded:
        config.n_outputs = len(tokenizer)
    elif len(tokenizer) != config.vocab_size:
        raise InputError(
            f"{directory}: tokenizer has {len(tokenizer):,} tokens but config.json "
            f"says vocab_size {config.vocab_size:,}"
        )
    return config, meta, tokenizer


def weights_revision(directory: Path) -> str:
    """Which weights made a record: the first 12 hex digits of `model.safetensors`' SHA-256,
    or for a sharded checkpoint of its index and each shard's name, size and header (hashing
    16 GB of shards per run would cost more than sampling a few texts)."""
    directory = Path(directory)
    index = directory / "model.safetensors.index.json"
    if not index.is_file():
        return file_digest(directory / "model.safetensors")[:12]
    digest = hashlib.sha256(index.read_bytes())
    for shard in sorted({p.name for p in weight_files(directory).values()}):
        path = directory / shard
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            digest.update(f"{shard}/{path.stat().st_size}/".encode() + f.read(min(size, 1 << 24)))
    return digest.hexdigest()[:12]


def shipped_models() -> list[tuple[str, Path]]:
    return [(name, ASSETS / folder) for name, folder in SHIPPED.items()]
