"""Building constraints from validated spec entries (cdd_cli.spec)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from cdd_cli import plugins
from cdd_cli.constraints.base import Constraint
from cdd_cli.constraints.lexical import lexical_from_spec
from cdd_cli.constraints.novelty import NoveltyConstraint
from cdd_cli.constraints.plugin import plugin_constraint
from cdd_cli.constraints.sa import SAConstraint, rdkit_sa
from cdd_cli.constraints.toxicity import ToxicityConstraint
from cdd_cli.errors import InputError
from cdd_cli.evaluate.reference import model_reference
from cdd_cli.models.registry import ASSETS, LoadedModel
from cdd_cli.models.surrogate import load_surrogate
from cdd_cli.models.tokenizers import SmilesTokenizer, TextTokenizer, load_tokenizer
from cdd_cli.spec import (
    BUILTIN,
    LEXICAL_TYPES,
    ConstraintSpec,
    domain_of,
    option_defaults,
    plugin_of,
)

SHIPPED_SURROGATES = {
    "sa": ASSETS / "qm9-sa-surrogate",
    "toxicity": ASSETS / "toxicity-surrogate",
}


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


def _surrogate_for(spec: ConstraintSpec, model: LoadedModel, device: str):
    """The surrogate an entry names (`surrogate: DIR`), else the type's shipped one, checked
    to read the model's vocabulary and length."""
    directory = Path(spec.options.get("surrogate") or default_surrogate(spec.type, model))
    if not directory.is_dir():
        raise InputError(f"{spec.where}: surrogate folder {directory} not found")
    theirs = load_tokenizer(directory, special=read_surrogate_config(directory))
    same = (
        theirs.vocab == getattr(model.tokenizer, "vocab", None)
        if isinstance(theirs, SmilesTokenizer)
        else theirs.same_vocabulary(model.tokenizer)
    )
    if not same:
        how = {
            "sa": f"`cdd train sa-surrogate --model {model.directory} --out DIR`",
            "toxicity": f"`cdd train toxicity-surrogate --model {model.name} --out DIR`",
        }.get(spec.type, f"`cdd train surrogate --constraint {spec.type} --model {model.name}`")
        raise InputError(
            f"{spec.where}: the {spec.type} surrogate in {directory} reads another vocabulary "
            f"than model {model.name}; use {how} (a surrogate of your own: `surrogate: DIR`)"
        )
    surrogate = load_surrogate(directory, device)
    if surrogate.config.max_length < model.config.model_length:
        raise InputError(
            f"{spec.where}: the {spec.type} surrogate in {directory} reads at most "
            f"{surrogate.config.max_length} tokens; model {model.name} makes "
            f"{model.config.model_length}"
        )
    return surrogate


def build_constraints(
    specs: list[ConstraintSpec], model: LoadedModel, device: str
) -> list[Constraint]:
    built: list[Constraint] = []
    text_model = isinstance(model.tokenizer, TextTokenizer)
    for spec in specs:
        if text_model != (domain_of(spec.type) == "text"):
            needs = "a text model (`cdd generate`)" if not text_model else "molecules"
            raise InputError(
                f"{spec.where}: '{spec.type}' applies to {needs}; {model.name} is "
                + ("a text model" if text_model else "a molecule model")
            )
        options = {**option_defaults(spec.type), **spec.options}
        plugin = plugin_of(spec.type)
        if plugin is not None:
            trained = _surrogate_for(spec, model, device) if "surrogate" in options else None
            package = plugins.find(spec.type, BUILTIN).package
            built.append(
                plugin_constraint(plugin, package, options, model.tokenizer.token_texts, trained)
            )
        elif spec.type == "sa":
            # RDKit reads its SA fragment table on the first score (~0.3 s once a process):
            # now, rather than in the first sample's projection time.
            rdkit_sa("C")
            built.append(
                SAConstraint(
                    tau=float(spec.tau),
                    margin=float(options["margin"]),
                    net=_surrogate_for(spec, model, device),
                )
            )
        elif spec.type == "novelty":
            reference = model_reference(model.directory)
            if reference is None:
                raise InputError(
                    f"{spec.where}: model {model.name} has no reference set "
                    f"({model.directory}/reference.smi.gz) to judge novelty against"
                )
            built.append(NoveltyConstraint(reference=reference))
        elif spec.type == "toxicity":
            built.append(
                ToxicityConstraint(
                    tau=float(spec.tau),
                    margin=float(options["margin"]),
                    net=_surrogate_for(spec, model, device),
                    tokenizer=model.tokenizer,
                    scope=options["scope"],
                )
            )
        elif spec.type in LEXICAL_TYPES:
            built.append(lexical_from_spec(spec.type, spec.options))
        else:  # spec validation admits only implemented types
            raise InputError(f"{spec.where}: constraint type '{spec.type}' is not available")
    return unique_names(built)


def unique_names(constraints: list[Constraint]) -> list[Constraint]:
    """Records key constraints by name: a second `word_at` becomes `word_at#2`."""
    seen: dict[str, int] = {}
    out = []
    for c in constraints:
        seen[c.name] = seen.get(c.name, 0) + 1
        out.append(c if seen[c.name] == 1 else replace(c, name=f"{c.name}#{seen[c.name]}"))
    return out
