"""The molecules `cdd train molecules --data` reads: QM9, MOSES, or a user's file of SMILES.

MOSES' training set is `moses/dataset/data/train.csv.gz` of the `molsets` wheel, read by path
as QM9 is (train/qm9.py): `moses` itself is never imported (its dependencies are old). A
user's `.smi`, `.csv` or `.csv.gz` is read line by line under the caps of `cdd eval`'s
reference files (evaluate/reference.py), so that no line over `MAX_SMILES_CHARS` reaches RDKit;
bad lines (empty, unparsable, over a cap) are counted, never fatal. Every source is
canonicalised as QM9 is: stereochemistry removed, RDKit's canonical SMILES, de-duplicated in
file order. Nothing is downloaded: the data stays on the machine.
"""

from __future__ import annotations

import csv
import gzip
import io
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rdkit import Chem

from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import MAX_SMILES_CHARS
from cdd_cli.evaluate.moses import installed_molsets
from cdd_cli.evaluate.reference import MAX_LINE_BYTES, bounded_lines, over_cores
from cdd_cli.train import qm9

MOSES_TRAIN = "moses/dataset/data/train.csv.gz"
MOSES_PIP = "pip download --no-deps molsets==0.3.1"
SMILES_SUFFIXES = (".smi", ".csv", ".csv.gz", ".smi.gz", ".txt")
HEADER_NAMES = ("smiles", "SMILES")


@dataclass
class SmilesRead:
    """Canonical, de-duplicated SMILES of a source and its lines that gave none."""

    smiles: list[str] = field(default_factory=list)
    lines: int = 0
    empty: int = 0
    too_long: int = 0
    unparsable: int = 0

    @property
    def bad(self) -> int:
        return self.empty + self.too_long + self.unparsable

    def bad_summary(self, name: str) -> str:
        parts = [
            f"{self.unparsable:,} unparsable",
            f"{self.empty:,} empty",
            f"{self.too_long:,} over {MAX_SMILES_CHARS:,} characters (or {MAX_LINE_BYTES:,} bytes)",
        ]
        return f"{self.bad:,} of {self.lines:,} lines of {name}: " + ", ".join(parts)


@dataclass
class MoleculeData:
    """A training source: its name in messages, its name in the model's files, its reader."""

    name: str
    source: str
    read: Callable[[], SmilesRead]


def stereo_free_canonical(smiles: list[str]) -> list[str | None]:
    """Each SMILES canonicalised as QM9's are (None: RDKit cannot read it, or no atom)."""
    out: list[str | None] = []
    for s in smiles:
        mol = Chem.MolFromSmiles(s)
        if mol is None or not mol.GetNumAtoms():
            out.append(None)
            continue
        Chem.RemoveStereochemistry(mol)
        out.append(Chem.MolToSmiles(mol))
    return out


def canonicalise(smiles: list[str]) -> list[str | None]:
    """`stereo_free_canonical` of all, over every core for a large set (MOSES: 1.6M)."""
    return over_cores(stereo_free_canonical, smiles, 50_000)


def collect(fields: Iterable[str | None]) -> SmilesRead:
    """Count and canonicalise one field per line (None: a line over its byte cap)."""
    read, candidates = SmilesRead(), []
    for text in fields:
        read.lines += 1
        if text is None or len(text) > MAX_SMILES_CHARS:
            read.too_long += 1
        elif not text:
            read.empty += 1
        else:
            candidates.append(text)
    seen: dict[str, None] = {}
    for canonical in canonicalise(candidates):
        if canonical is None:
            read.unparsable += 1
        else:
            seen.setdefault(canonical)
    read.smiles = list(seen)
    return read


def is_csv(path: Path) -> bool:
    return path.name.lower().endswith((".csv", ".csv.gz"))


def smiles_fields(lines: Iterable[bytes | None], path: Path, csv_columns: bool) -> Iterator:
    """Each line's SMILES field ("" for a blank line, None for one over its cap; # lines are
    comments). A first line naming a `smiles`/`SMILES` column is the header (that column is
    read, else the first)."""
    column = 0
    for number, line in enumerate(lines, 1):
        if line is None:
            yield None
            continue
        try:
            text = line.decode("utf-8-sig" if number == 1 else "utf-8").strip()
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: line {number:,} is not UTF-8 (byte {exc.start})") from None
        if text.startswith("#"):  # a comment, as in `cdd eval`'s reference files
            continue
        cells = next(csv.reader([text]), []) if csv_columns else text.split()
        cells = [c.strip() for c in cells]
        if number == 1 and any(c in HEADER_NAMES for c in cells):
            column = next(i for i, c in enumerate(cells) if c in HEADER_NAMES)
            continue
        yield cells[column] if column < len(cells) else ""


def read_smiles_file(path: Path) -> SmilesRead:
    """A user's `.smi`/`.csv`/`.csv.gz` of SMILES, one molecule a line, gzip'd or not."""
    try:
        with open(path, "rb") as raw:
            zipped = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if zipped else open(path, "rb") as f:
            return collect(smiles_fields(bounded_lines(f, path), path, is_csv(path)))
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"{path}: cannot read the SMILES ({exc})") from None


def locate_moses(path: Path | None) -> Path:
    """The molsets wheel or folder holding MOSES' train.csv.gz: the given path, else the
    installed package's."""
    if path is None:
        path = installed_molsets()
        if path is None:
            raise InputError(
                f"MOSES not found: `{MOSES_PIP}` and pass --data PATH (the wheel or its "
                "unpacked folder)"
            )
    if moses_train_text_source(path) is None:
        raise InputError(f"{path}: no {MOSES_TRAIN} (`{MOSES_PIP}` gives the wheel)")
    return path


def moses_train_text_source(path: Path) -> Callable[[], bytes] | None:
    """A reader of the gzip'd train.csv.gz in a molsets wheel or folder; None if it has none."""
    if path.is_file() and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as wheel:
            if MOSES_TRAIN not in wheel.namelist():
                return None

        def from_wheel() -> bytes:
            with zipfile.ZipFile(path) as wheel:
                return wheel.read(MOSES_TRAIN)

        return from_wheel
    if path.is_dir() and (path / MOSES_TRAIN).is_file():
        return (path / MOSES_TRAIN).read_bytes
    return None


def read_moses(path: Path) -> SmilesRead:
    """MOSES' 1.58M training SMILES (its `SMILES` column), canonicalised."""
    reader = moses_train_text_source(path)
    if reader is None:
        raise InputError(f"{path}: no {MOSES_TRAIN}")
    with gzip.open(io.BytesIO(reader()), "rb") as f:
        return collect(smiles_fields(bounded_lines(f, path), path, csv_columns=True))


def holds_qm9(path: Path) -> bool:
    if path.is_file() and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as wheel:
            return any(Path(n).name == qm9.CSV_NAMES[0] for n in wheel.namelist())
    return path.is_dir() and any(path.rglob(qm9.CSV_NAMES[0]))


def qm9_data(path: Path) -> MoleculeData:
    def read() -> SmilesRead:
        return SmilesRead(qm9.read_qm9_smiles(path))  # qm9pack's rows are all readable

    return MoleculeData("QM9", "qm9pack-1.0.3", read)


def moses_data(path: Path) -> MoleculeData:
    return MoleculeData("MOSES", "molsets-0.3.1", lambda: read_moses(path))


def molecule_data(data: str, qm9_path: Path | None) -> MoleculeData:
    """`--data`: qm9 (from --qm9 or the installed qm9pack), moses (the installed molsets), a
    molsets or qm9pack wheel or folder, or a file of SMILES."""
    if data == "qm9":
        return qm9_data(qm9.locate_qm9(qm9_path))
    if qm9_path is not None:
        raise InputError(f"--qm9 is for --data qm9, not --data {data}")
    if data == "moses":
        return moses_data(locate_moses(None))
    path = Path(data)
    if not path.exists():
        raise InputError(f"--data {data}: not qm9, moses, or an existing file or folder")
    if path.is_dir() or zipfile.is_zipfile(path):
        if moses_train_text_source(path) is not None:
            return moses_data(path)
        if holds_qm9(path):
            return qm9_data(path)
        raise InputError(f"--data {data}: neither a molsets nor a qm9pack wheel or folder")
    if not path.name.lower().endswith(SMILES_SUFFIXES):
        raise InputError(
            f"--data {data}: not a SMILES file ({', '.join(SMILES_SUFFIXES)}, one molecule a line)"
        )
    # Only the file's name goes into the model's files, never its folder.
    return MoleculeData(path.name, path.name, lambda: read_smiles_file(path))
