"""The surrogate folders constraints project through: which one an entry uses, checked to read
the model's tokens, loaded once per folder within one build."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.errors import InputError
from cdd_cli.models.registry import ASSETS, LoadedModel
from cdd_cli.models.surrogate import SoftTokenRegressor, load_surrogate
from cdd_cli.models.tokenizers import MoleculeTokenizer, load_tokenizer

SHIPPED_SURROGATES = {
    "sa": ASSETS / "qm9-sa-surrogate",
    "toxicity": ASSETS / "toxicity-surrogate",
    "properties": ASSETS / "qm9-property-surrogate",
}

# What one build (`build_constraints`) has loaded, by key: entries that share a surrogate
# folder (qed and logp both project through the property surrogate) load it once.
_loaded: ContextVar[dict[str, Any] | None] = ContextVar("surrogates_loaded", default=None)


@contextmanager
def one_build() -> Iterator[None]:
    """Within it, `shared` loads each key once."""
    token = _loaded.set({})
    try:
        yield
    finally:
        _loaded.reset(token)


def shared(key: str, load: Callable[[], Any]) -> Any:
    """`load()`, once per `key` within one build (a load that raises is not kept)."""
    memo = _loaded.get()
    if memo is None:
        return load()
    if key not in memo:
        memo[key] = load()
    return memo[key]


def default_surrogate(kind: str, model: LoadedModel) -> Path:
    """The model's own surrogate for `kind` where its config names one (`surrogates: {kind:
    FOLDER}`, relative to the model's folder), else the shipped one."""
    named = model.meta.get("surrogates")
    if isinstance(named, dict) and isinstance(named.get(kind), str):
        return (Path(model.directory) / named[kind]).resolve()
    return SHIPPED_SURROGATES[kind]


def read_surrogate_config(directory: Path) -> dict:
    try:
        raw = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return {}  # load_surrogate says what is wrong with it
    return raw if isinstance(raw, dict) else {}


def surrogate_for(
    spec: ConstraintSpec,
    model: LoadedModel,
    device: str,
    kind: str | None = None,
    train: str | None = None,
) -> SoftTokenRegressor:
    """The surrogate an entry names (`surrogate: DIR`), else the shipped one of `kind` (the
    entry's type by default), checked to read the model's vocabulary and length. `train`:
    the command that trains one, with the model's {name} or {directory} (default: `cdd train
    surrogate`)."""
    kind = kind or spec.type
    directory = Path(spec.options.get("surrogate") or default_surrogate(kind, model))
    if not directory.is_dir():
        raise InputError(f"{spec.where}: surrogate folder {directory} not found")
    theirs = load_tokenizer(directory, special=read_surrogate_config(directory))
    same = (
        (theirs.kind, theirs.vocab)
        == (model.tokenizer.kind, getattr(model.tokenizer, "vocab", None))
        if isinstance(theirs, MoleculeTokenizer)
        else theirs.same_vocabulary(model.tokenizer)
    )
    if not same:
        how = (train or f"`cdd train surrogate --constraint {spec.type} --model {{name}}`").format(
            name=model.name, directory=model.directory
        )
        raise InputError(
            f"{spec.where}: the {kind} surrogate in {directory} reads another vocabulary "
            f"than model {model.name}; use {how} (a surrogate of your own: `surrogate: DIR`)"
        )
    surrogate = load_surrogate(directory, device)
    if surrogate.config.max_length < model.config.model_length:
        raise InputError(
            f"{spec.where}: the {kind} surrogate in {directory} reads at most "
            f"{surrogate.config.max_length} tokens; model {model.name} makes "
            f"{model.config.model_length}"
        )
    return surrogate
