"""Molecule metrics with the MOSES / GuacaMol conventions.

Validity: RDKit parses the SMILES (the empty string is invalid). Uniqueness: distinct canonical
SMILES among the valid. Novelty: valid canonical SMILES absent from a canonicalised reference
set (a run's records: the model's training molecules and its held-out ones where it ships
them, named in each record's `novel_against`). Both sides are canonicalised by the same RDKit
(`Chem.MolToSmiles`, isomeric, the version installed), which the reports name.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from rdkit import Chem, RDLogger, rdBase
from rdkit.Chem import QED
from rdkit.Contrib.SA_Score import sascorer

RDLogger.DisableLog("rdApp.*")  # invalid samples are expected; RDKit's warnings are noise here

CANONICALIZER = f"rdkit-{rdBase.rdkitVersion}"
# RDKit canonicalises a SMILES in time quadratic in its length, recursively: measured on a
# carbon chain (RDKit 2026.09.1, 8 MiB stack), 0.07 s at 2,000 characters, 2 s at 10,000,
# 13 s at 18,000, and a segmentation fault at 20,000. A longer string is never handed to it
# (a record's text, a reference line): it counts as invalid. Drug-like SMILES are well under
# 200 characters.
MAX_SMILES_CHARS = 2_000


def read_smiles(smiles: str) -> tuple[str, Chem.Mol] | None:
    """(canonical SMILES, the molecule read back from it), or None when RDKit cannot parse
    the SMILES (the empty string and one past `MAX_SMILES_CHARS` count as invalid) or cannot
    read back its own canonical SMILES (rare charged aromatic rings: such a molecule can be
    neither scored nor compared, so it counts as invalid too)."""
    if not smiles or len(smiles) > MAX_SMILES_CHARS:
        return None
    mol = Chem.MolFromSmiles(smiles)
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    can = Chem.MolToSmiles(mol)
    mol = Chem.MolFromSmiles(can)
    return None if mol is None else (can, mol)


# Several judges read each string the searches try (novelty, a substructure, a property):
# parsed once. The molecules are shared: no caller may change one. Wrapped rather than
# decorated: mutation testing (bench/mutation.sh) skips decorated functions.
parse = lru_cache(maxsize=4096)(read_smiles)


def canonical(smiles: str) -> str | None:
    """RDKit canonical SMILES, or None for an invalid molecule (see `parse`)."""
    parsed = parse(smiles)
    return None if parsed is None else parsed[0]


@dataclass
class MoleculeReport:
    text: str
    valid: bool
    canonical: str | None
    qed: float | None
    sa: float | None
    novel: bool | None

    def fields(self) -> dict:
        return {
            "valid": self.valid,
            "canonical": self.canonical,
            "qed": self.qed,
            "sa": self.sa,
            "novel": self.novel,
        }


def describe(smiles: str, reference: set[str] | frozenset[str] | None) -> MoleculeReport:
    """Everything the record says about one molecule; novel is None without a reference set."""
    parsed = parse(smiles)
    if parsed is None:
        return MoleculeReport(smiles, False, None, None, None, None)
    can, mol = parsed
    return MoleculeReport(
        smiles,
        True,
        can,
        round(QED.qed(mol), 4),
        round(sascorer.calculateScore(mol), 4),
        None if reference is None else can not in reference,
    )


@dataclass
class MoleculeSummary:
    total: int
    valid: int
    unique: int
    novel: int | None
    mean_qed: float | None
    mean_sa: float | None

    @property
    def validity(self) -> float:
        return self.valid / self.total if self.total else 0.0

    @property
    def uniqueness(self) -> float:
        return self.unique / self.valid if self.valid else 0.0

    @property
    def novelty(self) -> float | None:
        """Share of unique valid molecules absent from the reference (MOSES' definition)."""
        if self.novel is None or not self.unique:
            return None
        return self.novel / self.unique


def summarise(reports: Iterable[MoleculeReport]) -> MoleculeSummary:
    reports = list(reports)
    valid = [r for r in reports if r.valid]
    distinct = {r.canonical: r for r in valid}
    novel = None
    if valid and all(r.novel is not None for r in valid):
        novel = sum(1 for r in distinct.values() if r.novel)

    def mean(values: list[float]) -> float | None:
        return round(statistics.fmean(values), 4) if values else None

    return MoleculeSummary(
        len(reports),
        len(valid),
        len(distinct),
        novel,
        mean([r.qed for r in valid]),
        mean([r.sa for r in valid]),
    )
