"""The molecular properties chemists constrain, each computed exactly by RDKit.

A property is read from a molecule RDKit parsed (`evaluate.molecules.parse`, so every judge
sees the same canonical molecule); a SMILES RDKit cannot parse has no property value, and a
constraint on it is never satisfied. Definitions, where several exist:

- `mw`: average molecular weight (`Descriptors.MolWt`, standard atomic weights, hydrogens
  included); `weight: exact` takes the monoisotopic mass (`Descriptors.ExactMolWt`).
- `hbd` / `hba`: RDKit's H-bond donor / acceptor definitions (`CalcNumHBD`, `CalcNumHBA`);
  the rule of five uses Lipinski's own counts (N-H and O-H bonds; N and O atoms), as RDKit's
  `CalcNumLipinskiHBD` / `CalcNumLipinskiHBA` compute them.
- `logp`: Wildman-Crippen logP (`"Crippen.MolLogP"`); `tpsa`: Ertl's topological polar surface
  area, N and O contributions only (`CalcTPSA`); `rings`: SSSR ring count (`CalcNumRings`), or
  aromatic rings only (`aromatic: true`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from rdkit import Chem, RDLogger
from rdkit.Chem import Crippen, Descriptors
from rdkit.Chem import rdMolDescriptors as descriptors
from rdkit.Chem.FilterCatalog import FilterCatalog, FilterCatalogParams

from cdd_cli.evaluate.molecules import parse


@dataclass(frozen=True)
class Property:
    """A number RDKit computes for a molecule, and how constraints on it read."""

    rdkit: str  # the function computing it: "module.function" of rdkit.Chem
    description: str
    bounds: tuple[str, ...]  # which of "min" / "max" a spec entry may give
    flag: str  # what `--constraint NAME --tau X` means: X is this bound
    domain: tuple[float, float]  # where a bound can lie at all (validation)
    unit: float  # one repair redraw moves the surrogate's aim this far per margin_step
    integer: bool = False


INF = float("inf")
PROPERTIES: dict[str, Property] = {
    "qed": Property(
        "QED.qed", "QED drug-likeness (0..1) at least min", ("min",), "min", (0.0, 1.0), 0.05
    ),
    "logp": Property(
        "Crippen.MolLogP", "Wildman-Crippen logP in [min, max]", ("min", "max"), "max",
        (-INF, INF), 0.25,
    ),
    "mw": Property(
        "Descriptors.MolWt",
        "molecular weight in daltons in [min, max] (average; weight: exact for monoisotopic)",
        ("min", "max"), "max", (0.0, INF), 5.0,
    ),
    "hbd": Property(
        "rdMolDescriptors.CalcNumHBD", "H-bond donors (RDKit's definition) at most max",
        ("max",), "max", (0.0, INF), 0.5, integer=True,
    ),
    "hba": Property(
        "rdMolDescriptors.CalcNumHBA", "H-bond acceptors (RDKit's definition) at most max",
        ("max",), "max", (0.0, INF), 0.5, integer=True,
    ),
    "rotatable_bonds": Property(
        "rdMolDescriptors.CalcNumRotatableBonds", "rotatable bonds at most max", ("max",),
        "max", (0.0, INF), 0.5, integer=True,
    ),
    "rings": Property(
        "rdMolDescriptors.CalcNumRings",
        "rings (SSSR) in [min, max]; aromatic: true counts aromatic rings only",
        ("min", "max"), "min", (0.0, INF), 0.5, integer=True,
    ),
    "tpsa": Property(
        "rdMolDescriptors.CalcTPSA", "topological polar surface area (N, O) in [min, max]",
        ("min", "max"), "max", (0.0, INF), 5.0,
    ),
}  # fmt: skip
# Variants an option selects (`weight: exact`, `aromatic: true`): what the surrogate predicts
# and the judge computes under the same name.
VARIANTS = {
    "mw_exact": "Descriptors.ExactMolWt",
    "aromatic_rings": "rdMolDescriptors.CalcNumAromaticRings",
}
QUANTITIES = {**{k: p.rdkit for k, p in PROPERTIES.items()}, **VARIANTS}


@cache
def computer(quantity: str) -> Callable[[Any], float]:
    """The RDKit function computing `quantity` (a key of QUANTITIES)."""
    module, function = QUANTITIES[quantity].split(".")
    return getattr(importlib.import_module(f"rdkit.Chem.{module}"), function)


def variant(name: str, options: dict) -> str:
    """The quantity a property entry judges: `mw` with `weight: exact` is `mw_exact`, `rings`
    with `aromatic: true` is `aromatic_rings`."""
    if name == "mw" and options.get("weight", "average") == "exact":
        return "mw_exact"
    if name == "rings" and options.get("aromatic", False):
        return "aromatic_rings"
    return name


def property_value(quantity: str, smiles: str) -> float | None:
    """`quantity` (a key of COMPUTE) of the molecule `smiles`, None when it does not parse."""
    parsed = parse(smiles)
    return None if parsed is None else round(float(computer(quantity)(parsed[1])), 4)


def rule_of_five_violations(mol: Any) -> int:
    """Lipinski's rule of five: MW <= 500, logP <= 5, <= 5 N-H/O-H donors, <= 10 N/O."""
    return sum(
        (
            Descriptors.MolWt(mol) > 500,
            Crippen.MolLogP(mol) > 5,
            descriptors.CalcNumLipinskiHBD(mol) > 5,
            descriptors.CalcNumLipinskiHBA(mol) > 10,
        )
    )


@lru_cache(maxsize=1)
def pains_catalog() -> Any:
    """RDKit's PAINS filters (families A, B and C: 480 substructure alerts)."""
    params = FilterCatalogParams()
    params.AddCatalog(FilterCatalogParams.FilterCatalogs.PAINS)
    return FilterCatalog(params)


def pains_alerts_of(smiles: str) -> tuple[str, ...] | None:
    """The PAINS alerts the molecule matches (by name), None when it does not parse."""
    parsed = parse(smiles)
    if parsed is None:
        return None
    return tuple(m.GetDescription() for m in pains_catalog().GetMatches(parsed[1]))


def lipinski_violations_of(smiles: str) -> int | None:
    parsed = parse(smiles)
    return None if parsed is None else rule_of_five_violations(parsed[1])


@lru_cache(maxsize=1024)
def smarts_pattern(smarts: str) -> Any:
    """The query molecule of a SMARTS pattern, None when RDKit cannot read it."""
    RDLogger.DisableLog("rdApp.*")  # the caller says what is wrong, in one line
    return Chem.MolFromSmarts(smarts) if smarts.strip() else None


def substructure_matches_of(smarts: str, smiles: str) -> int | None:
    """How many times the pattern matches (unique atom sets), None when `smiles` does not
    parse."""
    parsed = parse(smiles)
    if parsed is None:
        return None
    return len(parsed[1].GetSubstructMatches(smarts_pattern(smarts), uniquify=True))


# The judges' verdicts, cached: the projection's searches and the record judge the same strings
# again. Wrapped rather than decorated: mutation testing (bench/mutation.sh) skips decorated
# functions, and these are judges.
molecule_property = lru_cache(maxsize=1 << 16)(property_value)
pains_alerts = lru_cache(maxsize=1 << 16)(pains_alerts_of)
lipinski_violations = lru_cache(maxsize=1 << 16)(lipinski_violations_of)
substructure_matches = lru_cache(maxsize=1 << 16)(substructure_matches_of)


def clear_caches() -> None:
    """Forget every cached verdict (a benchmark arm stands for a run of its own)."""
    for cached in (molecule_property, pains_alerts, lipinski_violations, substructure_matches):
        cached.cache_clear()
    parse.cache_clear()
