"""Molecules drawn by RDKit as small SVG images, and the properties a page plots beside the
recorded ones (logP, molecular weight, heavy atoms).

Each drawing is an `<img>` of a base64 `data:` URI: the browser shows it without fetching
anything and runs no script inside it, and the SVG namespace's URL stays out of the page's
text. RDKit's SVG is made smaller first by dropping what repeats SVG's defaults.
"""

from __future__ import annotations

import base64
import re
from functools import lru_cache

from rdkit import Chem
from rdkit.Chem import Crippen, Descriptors
from rdkit.Chem.Draw import rdMolDraw2D

from cdd_cli.evaluate.molecules import parse

SIZE = (150, 110)
# Declarations equal to SVG's defaults, or classes only RDKit's tools read: bytes to drop.
DEFAULTS = re.compile(
    r"stroke-linecap:butt;|stroke-linejoin:miter;|;?stroke-opacity:1|fill-rule:evenodd;"
    r"| class='[^']*'|<!-- END OF HEADER -->\n?"
)


# Longer strings, or any not ASCII, are no SMILES RDKit should be asked to read.
MAX_SMILES = 1_000


def molecule(smiles: str) -> Chem.Mol | None:
    """The molecule RDKit reads from a SMILES (None where it is none)."""
    if len(smiles) > MAX_SMILES or not smiles.isascii():
        return None
    parsed = parse(smiles)
    return None if parsed is None else parsed[1]


@lru_cache(maxsize=4096)
def drawing(smiles: str) -> str | None:
    """A `data:` URI of the molecule's SVG drawing (None where RDKit cannot read it)."""
    mol = molecule(smiles)
    if mol is None:
        return None
    draw = rdMolDraw2D.MolDraw2DSVG(*SIZE, -1, -1, True)  # atom labels as <text>: smaller
    draw.drawOptions().clearBackground = False
    draw.DrawMolecule(mol)
    draw.FinishDrawing()
    svg = DEFAULTS.sub("", draw.GetDrawingText())
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")


@lru_cache(maxsize=16384)  # each chart asks for one of the three
def extra_properties(smiles: str) -> dict[str, float]:
    """logP, molecular weight and heavy atoms of a SMILES RDKit reads (empty otherwise);
    shared between callers: read it, never change it."""
    mol = molecule(smiles)
    if mol is None:
        return {}
    return {
        "logp": round(Crippen.MolLogP(mol), 4),
        "mw": round(Descriptors.MolWt(mol), 4),
        "heavy_atoms": float(mol.GetNumHeavyAtoms()),
    }
