"""Constraints on molecular properties, each certified by RDKit (evaluate/properties.py).

- A property bound (`qed`, `logp`, `mw`, `hbd`, `hba`, `rotatable_bonds`, `rings`, `tpsa`):
  the property on the right side of one bound. A spec entry with both `min` and `max` is two
  constraints, `NAME.min` and `NAME.max`, each with its own multiplier in the ALM. Projected
  through the multi-property surrogate's head for the property where the model has one
  (`cdd train property-surrogate`), else by the exact search stages alone.
- `substructure`: a SMARTS pattern present (at least one match) or absent (none).
- `lipinski`: at most `max_violations` of the rule of five's four limits broken.
- `pains`: no PAINS alert (RDKit's FilterCatalog, families A-C).
The last three are exact: the engine's search stages ask their judges directly. A SMILES that
RDKit cannot parse has no value and satisfies none of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cdd_cli.constraints.base import Constraint, DifferentiableConstraint, ExactConstraint
from cdd_cli.constraints.descriptor import NUMBER, ConstraintSpec, Descriptor, Key
from cdd_cli.constraints.surrogates import (
    default_surrogate,
    read_surrogate_config,
    shared,
    surrogate_for,
)
from cdd_cli.errors import InputError
from cdd_cli.evaluate.properties import (
    PROPERTIES,
    Property,
    lipinski_violations,
    molecule_property,
    pains_alerts,
    smarts_pattern,
    substructure_matches,
    variant,
)
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.surrogate import SoftTokenRegressor, Tokens


class JudgedProperty:
    """What a property bound is, projected by a surrogate or not: RDKit's value of
    `quantity`, with the bound's natural repair step."""

    quantity: str
    unit: float

    @property
    def repair_unit(self) -> float:
        return self.unit

    def judge(self, texts: list[str]) -> list[float | None]:
        return [molecule_property(self.quantity, t) for t in texts]

    def label(self) -> str:
        return f"{self.quantity} {'<=' if self.upper_bound else '>='} {self.tau:g}"


@dataclass(frozen=True)
class PropertyBound(JudgedProperty, ExactConstraint):
    quantity: str = "qed"
    unit: float = 1.0
    judge_name: str = "rdkit-descriptors"


@dataclass(frozen=True)
class ProjectedPropertyBound(JudgedProperty, DifferentiableConstraint):
    quantity: str = "qed"
    unit: float = 1.0
    judge_name: str = "rdkit-descriptors"
    net: SoftTokenRegressor | None = field(default=None, compare=False, repr=False)
    head: int = 0  # the surrogate's output that predicts `quantity`

    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        return self.net(soft_tokens)[:, self.head]


def property_bounds(
    kind: str, options: dict, net: SoftTokenRegressor | None
) -> list[PropertyBound | ProjectedPropertyBound]:
    """The constraints of one property entry (its options, defaults filled): one per bound
    given. `net`: a multi-property surrogate that predicts the entry's quantity, or None."""
    quantity = variant(kind, options)
    given = [b for b in ("min", "max") if b in options]
    bounds = []
    for bound in given:
        common = {
            "tau": float(options[bound]),
            "margin": float(options.get("margin", 0.0)),
            "name": kind if len(given) == 1 else f"{kind}.{bound}",
            "upper_bound": bound == "max",
            "quantity": quantity,
            "unit": PROPERTIES[kind].unit,
        }
        if net is None:
            bounds.append(PropertyBound(**common))
        else:
            head = net.config.targets.index(quantity)
            bounds.append(ProjectedPropertyBound(**common, net=net, head=head))
    return bounds


@dataclass(frozen=True)
class SubstructureConstraint(ExactConstraint):
    """Value: how often the pattern matches (unique atom sets). Present: at least once
    (tau 1, a lower bound); absent: never (tau 0, an upper bound)."""

    smarts: str = ""
    name: str = "substructure"
    judge_name: str = "rdkit-substructure"

    def judge(self, texts: list[str]) -> list[float | None]:
        return [
            None if (n := substructure_matches(self.smarts, t)) is None else float(n) for t in texts
        ]

    def label(self) -> str:
        return f"{'no ' if self.upper_bound else ''}{self.smarts}"


def substructure(options: dict) -> SubstructureConstraint:
    present = options.get("present", True)
    return SubstructureConstraint(
        tau=1.0 if present else 0.0, upper_bound=not present, smarts=options["smarts"]
    )


@dataclass(frozen=True)
class LipinskiConstraint(ExactConstraint):
    """Value: how many of the rule of five's limits the molecule breaks (0-4)."""

    name: str = "lipinski"
    judge_name: str = "rdkit-rule-of-five"

    def judge(self, texts: list[str]) -> list[float | None]:
        return [None if (n := lipinski_violations(t)) is None else float(n) for t in texts]

    def label(self) -> str:
        return f"rule of five (<= {self.tau:g} broken)"


@dataclass(frozen=True)
class PainsConstraint(ExactConstraint):
    """Value: how many PAINS alerts the molecule matches; satisfied at 0."""

    tau: float = 0.0
    name: str = "pains"
    judge_name: str = "rdkit-pains"

    def judge(self, texts: list[str]) -> list[float | None]:
        return [None if (a := pains_alerts(t)) is None else float(len(a)) for t in texts]

    def explain(self, text: str) -> str | None:
        alerts = pains_alerts(text)
        return f"PAINS alerts: {', '.join(alerts)}" if alerts else None

    def label(self) -> str:
        return "no PAINS alert"


def exact_molecule_constraint(kind: str, options: dict) -> Constraint:
    """The constraint of a `substructure`, `lipinski` or `pains` entry."""
    if kind == "substructure":
        return substructure(options)
    if kind == "lipinski":
        return LipinskiConstraint(tau=float(options["max_violations"]))
    return PainsConstraint()


# ------------------------------------------------------------------------------------------
# The types: one descriptor per property, then the exact ones.

PROPERTY_TRAINING = "`cdd train property-surrogate --model {directory} --out DIR`"


def property_surrogate(
    entry: ConstraintSpec, model: LoadedModel, device: str
) -> SoftTokenRegressor | None:
    """The multi-property surrogate that projects a property entry: the one it names
    (`surrogate: DIR`, which must fit), else the model's or the shipped one where it reads
    the model's tokens, else None (the exact search stages alone). A bound that no molecule
    the surrogate was trained on reaches is refused as infeasible."""
    options = entry.options
    named = options.get("surrogate")
    key = str(named or default_surrogate("properties", model))

    def load() -> SoftTokenRegressor | None:
        try:
            return surrogate_for(entry, model, device, "properties", PROPERTY_TRAINING)
        except InputError:
            if named:
                raise
            return None  # another model's vocabulary: no projection, still certified

    net = shared(f"properties {key}", load)
    quantity = variant(entry.type, options)
    if net is None:
        return None
    if quantity not in (net.config.targets or []):
        if named:
            raise InputError(f"{entry.where}: the surrogate in {named} does not predict {quantity}")
        return None
    seen = read_surrogate_config(Path(key)).get("label_range", {}).get(quantity)
    if isinstance(seen, list) and len(seen) == 2:
        low, high = seen
        if options.get("min", -math.inf) > high or options.get("max", math.inf) < low:
            raise InputError(
                f"{entry.where}: {quantity} in [{options.get('min', '-inf')}, "
                f"{options.get('max', 'inf')}] looks infeasible for model {model.name}: no "
                f"molecule it was trained on is in it ({quantity} ranges over [{low:g}, {high:g}])"
            )
    return net


def check_bounds(entry: ConstraintSpec) -> None:
    """At least one bound, min <= max (each inside the property's domain: its keys' range)."""
    prop = PROPERTIES[entry.type]
    given = {b: entry.options[b] for b in prop.bounds if b in entry.options}
    if not given:
        raise InputError(f"{entry.where}: '{entry.type}' needs {' or '.join(prop.bounds)}")
    if given.get("min", -math.inf) > given.get("max", math.inf):
        raise InputError(f"{entry.where}: min {given['min']:g} > max {given['max']:g}")


def build_bounds(
    entry: ConstraintSpec, model: LoadedModel, device: str, words: str
) -> list[PropertyBound | ProjectedPropertyBound]:
    net = property_surrogate(entry, model, device)
    return property_bounds(entry.type, entry.options, net)


def property_descriptor(name: str, prop: Property) -> Descriptor:
    extra = {
        "mw": ({"weight": Key((str,), choices=("average", "exact"))}, {"weight": "average"}),
        "rings": ({"aromatic": Key((bool,))}, {"aromatic": False}),
    }
    keys, defaults = extra.get(name, ({}, {}))
    return Descriptor(
        name=name,
        domain="molecules",
        description=prop.description,
        keys={
            **{bound: Key(NUMBER, range=prop.domain) for bound in prop.bounds},
            "surrogate": Key((str,)),
            "margin": Key(NUMBER),
            **keys,
        },
        defaults={**defaults, "margin": 0.0},
        tau_flag=prop.flag,  # --tau is the property's natural bound: qed's min, mw's max
        needs_tau=True,
        check=check_bounds,
        build=build_bounds,
    )


def check_substructure(entry: ConstraintSpec) -> None:
    if smarts_pattern(entry.options["smarts"]) is None:
        smarts = entry.options["smarts"]
        raise InputError(f"{entry.where}: key 'smarts': RDKit cannot read {smarts!r} as SMARTS")


def check_lipinski(entry: ConstraintSpec) -> None:
    if not 0 <= entry.options.get("max_violations", 0) <= 3:
        raise InputError(
            f"{entry.where}: key 'max_violations' must be in [0, 3] (4 allows anything)"
        )


def build_exact(entry: ConstraintSpec, model: LoadedModel, device: str, words: str) -> list:
    return [exact_molecule_constraint(entry.type, entry.options)]


DESCRIPTORS = (
    *(property_descriptor(name, prop) for name, prop in PROPERTIES.items()),
    Descriptor(
        name="substructure",
        domain="molecules",
        description="the SMARTS pattern present (present: false: absent)",
        keys={"smarts": Key((str,), required=True), "present": Key((bool,))},
        defaults={"present": True},
        spec_only=True,
        check=check_substructure,
        build=build_exact,
    ),
    Descriptor(
        name="lipinski",
        domain="molecules",
        description="Lipinski's rule of five, at most max_violations (default 0) of its limits "
        "broken",
        keys={"max_violations": Key((int,))},
        defaults={"max_violations": 0},
        check=check_lipinski,
        build=build_exact,
    ),
    Descriptor(
        name="pains",
        domain="molecules",
        description="no PAINS alert (RDKit's FilterCatalog, families A-C)",
        keys={},
        build=build_exact,
    ),
)
