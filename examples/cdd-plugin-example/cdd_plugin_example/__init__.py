"""Two cdd constraint plugins.

- `max_heavy_atoms` (molecules, judge only): at most `tau` heavy atoms, or atoms of one
  `element`. cdd satisfies it by searching token flips the judge accepts.
- `uppercase` (text, judge and surrogate): at most a fraction `tau` of the continuation's
  letters are capitals. The surrogate is the same fraction in expectation over soft tokens,
  so the ALM can move probability away from capitalised tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from rdkit import Chem, RDLogger

from cdd_cli.plugins import ConstraintPlugin, Option

RDLogger.DisableLog("rdApp.*")  # an unparsable SMILES is a None score, not a log line


def heavy_atoms(smiles: list[str], options: Mapping[str, Any]) -> list[float | None]:
    element = options.get("element")
    scores: list[float | None] = []
    for text in smiles:
        mol = Chem.MolFromSmiles(text) if text else None
        if mol is None:
            scores.append(None)  # not a molecule: never satisfied
        elif element is None:
            scores.append(float(mol.GetNumHeavyAtoms()))
        else:
            scores.append(float(sum(a.GetSymbol() == element for a in mol.GetAtoms())))
    return scores


def check_element(options: Mapping[str, Any]) -> None:
    element = options.get("element")
    if element is None:
        return
    try:
        Chem.GetPeriodicTable().GetAtomicNumber(element)
    except RuntimeError:  # RDKit's answer to a symbol it does not know
        raise ValueError(f"key 'element': {element!r} is not an element symbol") from None


max_heavy_atoms = ConstraintPlugin(
    name="max_heavy_atoms",
    domain="molecules",
    description="At most tau heavy atoms (or atoms of `element`) in the molecule.",
    judge=heavy_atoms,
    bound="upper",
    tau_range=(0, 200),
    options={"element": Option(str, help="Count only this element, e.g. N.")},
    check=check_element,
    # What an unreadable sequence counts as when a surrogate is trained on this judge: more
    # than QM9's 9 heavy atoms, so the surrogate steers away from unreadable sequences too.
    worst=12.0,
)


def uppercase_fraction(texts: list[str], options: Mapping[str, Any]) -> list[float | None]:
    scores: list[float | None] = []
    for text in texts:
        letters = [c for c in text if c.isalpha()]
        scores.append(sum(c.isupper() for c in letters) / len(letters) if letters else 0.0)
    return scores


def uppercase_surrogate(options: Mapping[str, Any], vocabulary: list[str]):
    """Expected capitals over expected letters, summed over the continuation's positions."""
    capitals = torch.tensor([float(sum(c.isupper() for c in t)) for t in vocabulary])
    letters = torch.tensor([float(sum(c.isalpha() for c in t)) for t in vocabulary])

    def fraction(soft) -> torch.Tensor:  # soft: cdd's SoftTokens, [B, L, V]
        expected_capitals = soft.expect(capitals).sum(-1)
        expected_letters = soft.expect(letters).sum(-1)
        return expected_capitals / expected_letters.clamp_min(1.0)

    return fraction


uppercase = ConstraintPlugin(
    name="uppercase",
    domain="text",
    description="At most a fraction tau of the continuation's letters are capitals.",
    judge=uppercase_fraction,
    bound="upper",
    tau_range=(0.0, 1.0),
    surrogate=uppercase_surrogate,
)
