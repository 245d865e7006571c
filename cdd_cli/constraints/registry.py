"""Building constraints from validated spec entries (cdd_cli.spec)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from cdd_cli import plugins
from cdd_cli.constraints.base import Constraint
from cdd_cli.constraints.lexical import lexical_from_spec
from cdd_cli.constraints.novelty import NoveltyConstraint
from cdd_cli.constraints.plugin import plugin_constraint
from cdd_cli.constraints.properties import exact_molecule_constraint, property_bounds
from cdd_cli.constraints.sa import SAConstraint, rdkit_sa
from cdd_cli.constraints.structured import JsonSchemaConstraint, RegexConstraint
from cdd_cli.constraints.toxicity import ToxicityConstraint
from cdd_cli.errors import InputError
from cdd_cli.evaluate.properties import PROPERTIES, variant
from cdd_cli.evaluate.reference import novelty_reference
from cdd_cli.evaluate.schema_regex import load_schema
from cdd_cli.models.registry import ASSETS, LoadedModel
from cdd_cli.models.surrogate import SoftTokenRegressor, load_surrogate
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
    "properties": ASSETS / "qm9-property-surrogate",
}
EXACT_MOLECULE_TYPES = ("substructure", "lipinski", "pains")


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


def _surrogate_for(
    spec: ConstraintSpec, model: LoadedModel, device: str, kind: str | None = None
) -> SoftTokenRegressor:
    """The surrogate an entry names (`surrogate: DIR`), else the shipped one of `kind` (the
    entry's type by default), checked to read the model's vocabulary and length."""
    kind = kind or spec.type
    directory = Path(spec.options.get("surrogate") or default_surrogate(kind, model))
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
            "properties": f"`cdd train property-surrogate --model {model.directory} --out DIR`",
        }.get(kind, f"`cdd train surrogate --constraint {spec.type} --model {model.name}`")
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


def build_constraints(
    specs: list[ConstraintSpec], model: LoadedModel, device: str, words: str = "plain"
) -> list[Constraint]:
    """The constraints of `specs` for `model`; lexical ones judged and laid out under the word
    rules `words` (a spec's `words:`)."""
    built: list[Constraint] = []
    text_model = isinstance(model.tokenizer, TextTokenizer)
    nets: dict[str, SoftTokenRegressor | None] = {}  # property surrogates, one load a folder
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
            reference, known = novelty_reference(model, options.get("reference"), spec.where)
            built.append(
                NoveltyConstraint(reference=reference, judge_name=f"canonical-lookup in {known}")
            )
        elif spec.type in PROPERTIES:
            net = _property_surrogate(spec, options, model, device, nets)
            built += property_bounds(spec.type, options, net)
        elif spec.type in EXACT_MOLECULE_TYPES:
            built.append(exact_molecule_constraint(spec.type, options))
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
            built.append(lexical_from_spec(spec.type, spec.options, words))
        elif spec.type == "regex":
            built.append(
                RegexConstraint(pattern=options["pattern"], ignore_case=options["ignore_case"])
            )
        elif spec.type == "json_schema":
            schema_text, source = load_schema(options["schema"], spec.where)
            built.append(JsonSchemaConstraint(schema_text=schema_text, source=source))
        else:  # spec validation admits only implemented types
            raise InputError(f"{spec.where}: constraint type '{spec.type}' is not available")
    return unique_names(built)


def _property_surrogate(
    spec: ConstraintSpec,
    options: dict,
    model: LoadedModel,
    device: str,
    nets: dict[str, SoftTokenRegressor | None],
) -> SoftTokenRegressor | None:
    """The multi-property surrogate that projects a property entry: the one it names
    (`surrogate: DIR`, which must fit), else the model's or the shipped one where it reads
    the model's tokens, else None (the exact search stages alone). A bound that no molecule
    the surrogate was trained on reaches is refused as infeasible."""
    named = options.get("surrogate")
    key = str(named or default_surrogate("properties", model))
    if key not in nets:
        try:
            nets[key] = _surrogate_for(spec, model, device, "properties")
        except InputError:
            if named:
                raise
            nets[key] = None  # another model's vocabulary: no projection, still certified
    net = nets[key]
    quantity = variant(spec.type, options)
    if net is None:
        return None
    if quantity not in (net.config.targets or []):
        if named:
            raise InputError(f"{spec.where}: the surrogate in {named} does not predict {quantity}")
        return None
    seen = read_surrogate_config(Path(key)).get("label_range", {}).get(quantity)
    if isinstance(seen, list) and len(seen) == 2:
        low, high = seen
        if options.get("min", -math.inf) > high or options.get("max", math.inf) < low:
            raise InputError(
                f"{spec.where}: {quantity} in [{options.get('min', '-inf')}, "
                f"{options.get('max', 'inf')}] looks infeasible for model {model.name}: no "
                f"molecule it was trained on is in it ({quantity} ranges over [{low:g}, {high:g}])"
            )
    return net


def unique_names(constraints: list[Constraint]) -> list[Constraint]:
    """Records key constraints by name: a second `word_at` becomes `word_at#2`."""
    seen: dict[str, int] = {}
    out = []
    for c in constraints:
        seen[c.name] = seen.get(c.name, 0) + 1
        out.append(c if seen[c.name] == 1 else replace(c, name=f"{c.name}#{seen[c.name]}"))
    return out
