"""`alerts`: no structural alert of the chosen filter families, judged exactly by RDKit.

The families: RDKit's FilterCatalog sets `pains` (PAINS A-C, 480 alerts), `brenk` (Brenk et
al. 2008's unwanted groups, 105), `nih` (NCATS' reactive and assay-interfering groups, 180)
and `zinc` (ZINC's drug-likeness filters, 50), and `mcf`, MOSES' 22 medicinal-chemistry
filters (`cdd_cli/assets/moses-mcf/mcf.csv`, MIT), matched against the molecule with explicit
hydrogens as MOSES matches them. The value is how many alerts the molecule matches (each
named in the record's `detail`); satisfied at 0. A SMILES RDKit cannot parse has no value.
Exact and not differentiable: the search stages ask the judge directly, as for `pains`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from rdkit import Chem
from rdkit.Chem.FilterCatalog import FilterCatalog, FilterCatalogParams

from cdd_cli.constraints.base import ExactConstraint
from cdd_cli.constraints.descriptor import ConstraintSpec, Descriptor, Key
from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import parse
from cdd_cli.models.registry import ASSETS, LoadedModel
from cdd_cli.suggest import did_you_mean

MCF_FILE = ASSETS / "moses-mcf" / "mcf.csv"

# RDKit's catalog per family name (`mcf` is read from the vendored file instead).
CATALOGS = {
    "pains": FilterCatalogParams.FilterCatalogs.PAINS,
    "brenk": FilterCatalogParams.FilterCatalogs.BRENK,
    "nih": FilterCatalogParams.FilterCatalogs.NIH,
    "zinc": FilterCatalogParams.FilterCatalogs.ZINC,
}
FAMILIES = (*CATALOGS, "mcf")
# PAINS for assay interference, Brenk for reactive and unstable groups (peroxides among them)
# and MOSES' MCF: the union MOSES' `filters` metric and Brenk's screening-library rules share.
DEFAULT_FILTERS = ("pains", "brenk", "mcf")


@cache
def catalog(family: str) -> Any:
    """RDKit's FilterCatalog of one family."""
    params = FilterCatalogParams()
    params.AddCatalog(CATALOGS[family])
    return FilterCatalog(params)


@cache
def mcf_patterns() -> tuple[tuple[str, Any], ...]:
    """MOSES' medicinal-chemistry filters: (name, compiled SMARTS), in the file's order."""
    with MCF_FILE.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return tuple((row["names"], Chem.MolFromSmarts(row["smarts"])) for row in rows)


def family_alerts(family: str, mol: Any) -> list[str]:
    """The alerts of `family` that the RDKit molecule `mol` matches, by name."""
    if family == "mcf":
        with_hydrogens = Chem.AddHs(mol)
        return [name for name, p in mcf_patterns() if with_hydrogens.HasSubstructMatch(p)]
    return [m.GetDescription() for m in catalog(family).GetMatches(mol)]


@lru_cache(maxsize=1 << 16)
def alerts_of(smiles: str, families: tuple[str, ...]) -> tuple[str, ...] | None:
    """Every alert of `families` the molecule matches, as "family:name"; None when RDKit
    cannot parse it."""
    parsed = parse(smiles)
    if parsed is None:
        return None
    return tuple(f"{f}:{name}" for f in families for name in family_alerts(f, parsed[1]))


@dataclass(frozen=True)
class AlertsConstraint(ExactConstraint):
    """Value: how many alerts of `filters` the molecule matches; satisfied at 0."""

    tau: float = 0.0
    filters: tuple[str, ...] = DEFAULT_FILTERS
    name: str = "alerts"
    judge_name: str = "rdkit-filter-catalog"

    def judge(self, texts: list[str]) -> list[float | None]:
        return [None if (a := alerts_of(t, self.filters)) is None else float(len(a)) for t in texts]

    def explain(self, text: str) -> str | None:
        alerts = alerts_of(text, self.filters)
        return f"structural alerts: {', '.join(alerts)}" if alerts else None

    def label(self) -> str:
        return f"no structural alert ({', '.join(self.filters)})"


def check_filters(entry: ConstraintSpec) -> None:
    """`filters`: one or more family names."""
    names = entry.options.get("filters", DEFAULT_FILTERS)
    if not names:
        known = ", ".join(FAMILIES)
        raise InputError(f"{entry.where}: key 'filters' names no family (known: {known})")
    for name in names:
        if name not in FAMILIES:
            raise InputError(
                f"{entry.where}: key 'filters': unknown filter family {name!r}"
                f"{did_you_mean(str(name), FAMILIES)} (known: {', '.join(FAMILIES)})"
            )


def build_alerts(
    entry: ConstraintSpec, model: LoadedModel, device: str, words: str
) -> list[AlertsConstraint]:
    return [AlertsConstraint(filters=tuple(dict.fromkeys(entry.options["filters"])))]


DESCRIPTOR = Descriptor(
    name="alerts",
    domain="molecules",
    description="no structural alert of the filters named (pains, brenk, nih, zinc, mcf; "
    f"default {', '.join(DEFAULT_FILTERS)})",
    keys={"filters": Key((list,))},
    defaults={"filters": list(DEFAULT_FILTERS)},
    check=check_filters,
    build=build_alerts,
)
