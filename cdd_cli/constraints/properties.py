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

from dataclasses import dataclass, field

import torch

from cdd_cli.constraints.base import Constraint, DifferentiableConstraint, ExactConstraint
from cdd_cli.evaluate.properties import (
    PROPERTIES,
    lipinski_violations,
    molecule_property,
    pains_alerts,
    substructure_matches,
    variant,
)
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
