"""Building constraints from validated spec entries (cdd_cli.spec)."""

from __future__ import annotations

from pathlib import Path

from cdd_cli.constraints.base import Constraint
from cdd_cli.constraints.novelty import NoveltyConstraint
from cdd_cli.constraints.sa import SAConstraint
from cdd_cli.errors import InputError
from cdd_cli.models.registry import ASSETS, LoadedModel
from cdd_cli.models.surrogate import load_surrogate
from cdd_cli.models.tokenizers import load_tokenizer
from cdd_cli.spec import ConstraintSpec

SHIPPED_SURROGATES = {"sa": ASSETS / "qm9-sa-surrogate"}


def _surrogate_for(spec: ConstraintSpec, model: LoadedModel, device: str):
    directory = Path(spec.options.get("surrogate") or SHIPPED_SURROGATES[spec.type])
    if not directory.is_dir():
        raise InputError(f"{spec.where}: surrogate folder {directory} not found")
    vocab = load_tokenizer(directory).vocab
    if vocab != model.tokenizer.vocab:
        raise InputError(
            f"{spec.where}: the {spec.type} surrogate in {directory} reads another vocabulary "
            f"than model {model.name}; train one with `cdd train sa-surrogate --model "
            f"{model.directory} --out DIR` and give `surrogate: DIR`"
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
    for spec in specs:
        if spec.type == "sa":
            built.append(
                SAConstraint(
                    tau=float(spec.tau),
                    margin=float(spec.options.get("margin", SAConstraint.default_margin)),
                    net=_surrogate_for(spec, model, device),
                )
            )
        elif spec.type == "novelty":
            if model.reference is None:
                raise InputError(
                    f"{spec.where}: model {model.name} has no reference set "
                    f"({model.directory}/reference.smi.gz) to judge novelty against"
                )
            built.append(NoveltyConstraint(reference=model.reference))
        else:  # spec validation admits only implemented types
            raise InputError(f"{spec.where}: constraint type '{spec.type}' is not available")
    return built
