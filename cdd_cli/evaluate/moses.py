"""The MOSES benchmark's metrics (Polykovskiy et al. 2020), computed without importing `moses`.

Definitions follow the reference implementation in `molsets==0.3.1` (moses/metrics): valid
is the share of samples RDKit reads; the other metrics read the valid ones as canonical SMILES
in sample order, duplicates kept. unique@k: distinct among the first k valid. Novelty: distinct
valid not in the model's training set. Filters: no MCF or PAINS match (on the molecule with
explicit hydrogens), atoms only C N S O F Cl Br H, no formal charge, no ring of 8 or more atoms.
IntDiv_p: 1 - mean over molecules of (mean Tanimoto^p to every molecule, itself included)^(1/p),
Morgan radius 2, 1024 bits. SNN: mean over molecules of the greatest Tanimoto to the test set.
Frag / Scaf: cosine similarity of BRICS fragment / Bemis-Murcko scaffold (2 rings or more)
counts with the test set's. logP, SA, QED, weight: Wasserstein-1 distance to the test set's.

The data (test sets, filter lists) is read by path from the installed `molsets` package, an
unpacked folder or the wheel; the test sets' statistics are computed once (in parallel) and
cached under the user's cache folder by the data's SHA-256 and the RDKit version, part by
part as they are computed (a first run stopped half-way resumes where it stopped).
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import importlib.util
import io
import os
import zipfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rdkit import Chem
from rdkit.Chem import QED, Crippen, Descriptors, rdFingerprintGenerator
from rdkit.Chem.Scaffolds import MurckoScaffold
from rdkit.Contrib.SA_Score import sascorer

from cdd_cli.errors import InputError
from cdd_cli.evaluate.chemnet import frechet_distance, split_statistics
from cdd_cli.evaluate.molecules import CANONICALIZER, canonical, parse
from cdd_cli.evaluate.parts import computed_in_parts, forget_parts
from cdd_cli.evaluate.reference import cache_dir, map_chunks

DATA_FILES = {
    "test": "moses/dataset/data/test.csv.gz",
    "test_scaffolds": "moses/dataset/data/test_scaffolds.csv.gz",
    "mcf": "moses/metrics/mcf.csv",
    "pains": "moses/metrics/wehi_pains.csv",
}
INSTALL_HINT = "pip install --no-deps molsets==0.3.1, or give --moses-data WHEEL|FOLDER"
ALLOWED_ATOMS = frozenset({"C", "N", "S", "O", "F", "Cl", "Br", "H"})
PROPERTIES = ("logP", "SA", "QED", "weight")
FINGERPRINT_BITS = 1024
# Tanimoto by a bfloat16 matrix product: exact while every count it sums stays at most 256
# (bfloat16 holds the integers to 256); a molecule with more bits set is scored in float32.
BF16_EXACT = 256
PROCESSES_FROM = 2_000  # molecules: below this, statistics are computed in this process


def installed_molsets() -> Path | None:
    """The folder the installed `molsets` package's `moses` lies in (found, never imported:
    its own imports are of 2020); None where it is not installed. Each caller says in its own
    words what to do without it (`cdd eval --moses-data`, `cdd train molecules --data`)."""
    spec = importlib.util.find_spec("moses")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(spec.submodule_search_locations[0]).parent


def locate_moses(path: Path | None) -> Path:
    """The wheel or folder holding the MOSES test data: the given path, else the installed
    `molsets`."""
    if path is None:
        root = installed_molsets()
        if root is None:
            raise InputError(f"MOSES data not found: {INSTALL_HINT}")
        return root
    if not Path(path).exists():
        raise InputError(f"{path}: no such file or folder (the MOSES data: {INSTALL_HINT})")
    return Path(path)


def read_data(root: Path, name: str) -> tuple[bytes, str]:
    """The bytes of one MOSES data file and where they were read."""
    inner = DATA_FILES[name]
    if root.is_file():
        if not zipfile.is_zipfile(root):
            raise InputError(f"{root}: not a wheel or folder of the MOSES data")
        with zipfile.ZipFile(root) as wheel:
            try:
                return wheel.read(inner), f"{root}:{inner}"
            except KeyError:
                raise InputError(f"{root}: {inner} not found in the wheel") from None
    for candidate in (root / inner, root / Path(inner).relative_to("moses")):
        if candidate.is_file():
            return candidate.read_bytes(), str(candidate)
    raise InputError(f"{root}: {inner} not found ({INSTALL_HINT})")


def read_split(root: Path, name: str) -> tuple[list[str], str]:
    """A split's SMILES (the CSV's SMILES column) and the SHA-256 of its file."""
    data, where = read_data(root, name)
    try:
        text = gzip.decompress(data).decode()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot read ({exc})") from None
    rows = csv.DictReader(io.StringIO(text))
    if "SMILES" not in (rows.fieldnames or []):
        raise InputError(f"{where}: no SMILES column")
    return [r["SMILES"] for r in rows], hashlib.sha256(data).hexdigest()


def read_filters(root: Path) -> list[Chem.Mol]:
    """MOSES' MCF and PAINS patterns (PAINS lines: a quoted SMARTS, then its name)."""
    patterns = []
    for name in ("mcf", "pains"):
        data, where = read_data(root, name)
        rows = list(csv.reader(io.StringIO(data.decode())))
        if name == "mcf":
            rows = [[r[1]] for r in rows[1:]]  # names,smarts with a header
        for row in rows:
            if not row:
                continue
            pattern = Chem.MolFromSmarts(row[0].strip())
            if pattern is None:
                raise InputError(f"{where}: RDKit cannot read the SMARTS {row[0][:60]!r}")
            patterns.append(pattern)
    return patterns


def passes_filters(mol: Chem.Mol, patterns: Sequence[Chem.Mol]) -> bool:
    if any(len(ring) >= 8 for ring in mol.GetRingInfo().AtomRings()):
        return False
    atoms = mol.GetAtoms()
    if any(a.GetFormalCharge() != 0 or a.GetSymbol() not in ALLOWED_ATOMS for a in atoms):
        return False
    with_h = Chem.AddHs(mol)
    if any(with_h.HasSubstructMatch(p) for p in patterns):
        return False
    plain = Chem.MolToSmiles(mol, isomericSmiles=False)
    return bool(plain) and Chem.MolFromSmiles(plain) is not None


@dataclass
class Features:
    """What the metrics read of a list of molecules (one entry each, in order)."""

    fingerprints: np.ndarray  # [n, 1024] uint8 bits
    fragments: Counter
    scaffolds: Counter
    properties: dict[str, np.ndarray]  # PROPERTIES -> [n] float64


def _scaffold(mol: Chem.Mol) -> str | None:
    try:
        scaffold = MurckoScaffold.GetScaffoldForMol(mol)
    except (ValueError, RuntimeError):
        return None
    smiles = Chem.MolToSmiles(scaffold)
    return smiles if smiles and scaffold.GetRingInfo().NumRings() >= 2 else None


_MORGAN = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=FINGERPRINT_BITS)


def _features_chunk(
    smiles: list[str], properties: bool
) -> tuple[np.ndarray, Counter, list, list]:
    """Fingerprints, fragment counts, scaffolds and (if asked) properties of the SMILES RDKit
    reads (the others are left out)."""
    fingerprints = []
    fragments: Counter = Counter()
    scaffolds, values = [], []
    for s in smiles:
        mol = Chem.MolFromSmiles(s)
        if mol is None:
            continue
        fingerprints.append(_MORGAN.GetFingerprintAsNumPy(mol).astype(np.uint8))
        fragments.update(Chem.MolToSmiles(Chem.FragmentOnBRICSBonds(mol)).split("."))
        scaffolds.append(_scaffold(mol))
        if properties:
            values.append(
                (Crippen.MolLogP(mol), sascorer.calculateScore(mol), QED.qed(mol),
                 Descriptors.MolWt(mol))
            )  # fmt: skip
    shape = (len(fingerprints), FINGERPRINT_BITS)
    return np.array(fingerprints, dtype=np.uint8).reshape(shape), fragments, scaffolds, values


def features(smiles: Sequence[str], properties: bool = True, workers: int = 1) -> Features:
    """`Features` of the SMILES RDKit reads (about 4 ms a molecule with properties, 1 ms
    without), over `workers` processes."""
    work = functools.partial(_features_chunk, properties=properties)
    parts = map_chunks(work, list(smiles), PROCESSES_FROM, workers)
    fragments: Counter = Counter()
    for part in parts:
        fragments.update(part[1])
    values = np.array([v for p in parts for v in p[3]], dtype=np.float64).reshape(-1, 4)
    return Features(
        np.concatenate([p[0] for p in parts]),
        fragments,
        Counter(s for p in parts for s in p[2] if s is not None),
        {name: values[:, k] for k, name in enumerate(PROPERTIES)},
    )


def _counter_arrays(prefix: str, counts: Counter) -> dict[str, np.ndarray]:
    keys = sorted(counts)
    return {f"{prefix}_keys": np.array(keys, dtype=str),
            f"{prefix}_counts": np.array([counts[k] for k in keys], dtype=np.int64)}  # fmt: skip


def _counter(data, prefix: str) -> Counter:
    keys, counts = data[f"{prefix}_keys"].tolist(), data[f"{prefix}_counts"].tolist()
    return Counter(dict(zip(keys, counts, strict=True)))


def _features_part(smiles: list[str], properties: bool) -> dict[str, np.ndarray]:
    """`_features_chunk` of a part of a split, as the arrays its cache file holds."""
    fingerprints, fragments, scaffolds, values = _features_chunk(smiles, properties)
    return {
        "fingerprints": np.packbits(fingerprints, axis=1),
        **_counter_arrays("fragments", fragments),
        **_counter_arrays("scaffolds", Counter(s for s in scaffolds if s is not None)),
        "properties": np.array(values, dtype=np.float64).reshape(-1, 4),
    }


def split_features(
    smiles: list[str], digest: str, name: str, properties: bool, log: Callable[[str], None]
) -> Features:
    """`features` of a MOSES split, cached by its file's SHA-256 and the RDKit version;
    computed in parts (`computed_in_parts`), so that a first run stopped half-way resumes."""
    cached = cache_dir() / f"moses-{name}-{digest[:16]}-{CANONICALIZER}.npz"
    if cached.is_file():
        with np.load(cached, allow_pickle=False) as data:
            return Features(
                np.unpackbits(data["fingerprints"], axis=1, count=FINGERPRINT_BITS),
                _counter(data, "fragments"),
                _counter(data, "scaffolds"),
                {p: data[p] for p in PROPERTIES if p in data},
            )
    folder = cached.with_name(f"{cached.stem}-{'properties-' if properties else ''}parts")
    work = functools.partial(_features_part, properties=properties)
    # Below PROCESSES_FROM molecules, starting the processes costs more than they save.
    workers = min(os.cpu_count() or 1, 16) if len(smiles) >= PROCESSES_FROM else 1
    parts = computed_in_parts(work, smiles, folder, f"MOSES {name} statistics", log, workers)
    fragments: Counter = Counter()
    scaffolds: Counter = Counter()
    for part in parts:
        fragments.update(_counter(part, "fragments"))
        scaffolds.update(_counter(part, "scaffolds"))
    values = np.concatenate([p["properties"] for p in parts])
    found = Features(
        np.unpackbits(np.concatenate([p["fingerprints"] for p in parts]), axis=1,
                      count=FINGERPRINT_BITS),
        fragments,
        scaffolds,
        {n: values[:, k] for k, n in enumerate(PROPERTIES)} if properties else {},
    )  # fmt: skip
    arrays = {
        "fingerprints": np.concatenate([p["fingerprints"] for p in parts]),
        **_counter_arrays("fragments", found.fragments),
        **_counter_arrays("scaffolds", found.scaffolds),
        **found.properties,
    }
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.npz")
        np.savez_compressed(partial, **arrays)
        partial.replace(cached)
        forget_parts(folder)
    except OSError:
        pass  # a read-only home only costs the computation next time
    return found


def _tanimoto_blocks(gen: np.ndarray, ref: np.ndarray, block: int = 256):
    """Yield (gen rows, Tanimoto matrix block of those rows against all of ref); a block
    against the 176,074 test molecules is 180 MB of float32."""
    ref_t = torch.from_numpy(ref)
    ref_bits = ref_t.sum(1, dtype=torch.float32)
    ref_bf = ref_t.to(torch.bfloat16)
    for start in range(0, len(gen), block):
        rows = torch.from_numpy(gen[start : start + block])
        bits = rows.sum(1, dtype=torch.float32)
        if bits.max() <= BF16_EXACT:
            common = (rows.to(torch.bfloat16) @ ref_bf.T).float()
        else:
            common = rows.float() @ ref_t.float().T
        union = bits[:, None] + ref_bits[None, :] - common
        # Two empty fingerprints are alike (MOSES: 0/0 counts as 1).
        similarity = torch.where(union > 0, common / union.clamp(min=1), torch.ones(()))
        yield slice(start, start + len(rows)), similarity


def nearest_similarity(gen: np.ndarray, ref: np.ndarray) -> float:
    """SNN: the mean over gen of the greatest Tanimoto similarity to any of ref."""
    best = np.zeros(len(gen))
    for rows, similarity in _tanimoto_blocks(gen, ref):
        best[rows] = similarity.max(1).values.double().numpy()
    return float(best.mean())


def internal_diversity(fingerprints: np.ndarray, p: int) -> float:
    """IntDiv_p: 1 - mean_i (mean_j T(i, j)^p)^(1/p), every pair including i = j."""
    per = np.zeros(len(fingerprints))
    for rows, similarity in _tanimoto_blocks(fingerprints, fingerprints):
        per[rows] = similarity.double().pow(p).mean(1).pow(1 / p).numpy()
    return float(1 - per.mean())


def cosine_similarity(ref: Counter, gen: Counter) -> float | None:
    """Of two count vectors over the union of their keys; None when either is empty."""
    if not ref or not gen:
        return None
    keys = list(ref.keys() | gen.keys())
    a = np.array([ref.get(k, 0) for k in keys], dtype=np.float64)
    b = np.array([gen.get(k, 0) for k in keys], dtype=np.float64)
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def wasserstein(a: np.ndarray, b: np.ndarray) -> float:
    """The Wasserstein-1 distance of two 1-D samples: the area between their CDFs."""
    a, b = np.sort(a), np.sort(b)
    every = np.sort(np.concatenate([a, b]))
    widths = np.diff(every)
    cdf_a = np.searchsorted(a, every[:-1], side="right") / len(a)
    cdf_b = np.searchsorted(b, every[:-1], side="right") / len(b)
    return float(np.sum(np.abs(cdf_a - cdf_b) * widths))


@dataclass
class MosesReference:
    """What generated molecules are compared with: the test sets' features, the filter
    patterns, the training molecules (canonical; None: no novelty) and, where the `fcd`
    package is installed, the test sets' ChemNet statistics."""

    test: Features
    test_scaffolds: Features | None
    filters: list[Chem.Mol]
    train: frozenset[str] | None
    fcd: dict[str, tuple[np.ndarray, np.ndarray]] | None = None


def load_reference(
    path: Path | None,
    train: frozenset[str] | None,
    log: Callable[[str], None],
    fcd: bool,
) -> MosesReference:
    """The MOSES test and test-scaffold sets of the installed `molsets` (or `path`)."""
    root = locate_moses(path)
    splits = {name: read_split(root, name) for name in ("test", "test_scaffolds")}
    reference = MosesReference(
        split_features(*splits["test"], "test", True, log),
        split_features(*splits["test_scaffolds"], "test_scaffolds", False, log),
        read_filters(root),
        train,
    )
    if fcd:
        reference.fcd = {n: split_statistics(*splits[n], n, log) for n in splits}
    return reference


def moses_metrics(
    samples: Sequence[str],
    reference: MosesReference,
    ks: Sequence[int] = (1000, 10000),
    workers: int = 1,
    log: Callable[[str], None] = lambda _: None,
) -> dict:
    """The MOSES table's metrics of generated SMILES (in sample order), keyed as MOSES
    names them; a metric with nothing to read (no valid molecule, no scaffold) is None."""
    valid = [c for s in samples if (c := canonical(s)) is not None]
    metrics: dict = {"samples": len(samples), "valid": len(valid) / len(samples)}
    for k in ks:
        if len(valid) < k:
            log(f"unique@{k}: over the {len(valid):,} valid molecules (fewer than {k:,})")
        metrics[f"unique@{k}"] = len(set(valid[:k])) / len(valid[:k]) if valid else None
    if not valid:
        return metrics
    distinct = set(valid)
    if reference.train is not None:
        metrics["Novelty"] = len(distinct - reference.train) / len(distinct)
    if reference.fcd is not None:
        # One molecule has no covariance: fcd's matrix square root of a NaN matrix never
        # returns, so FCD needs two valid molecules.
        for label, name in (("Test", "test"), ("TestSF", "test_scaffolds")):
            fcd = frechet_distance(valid, reference.fcd[name]) if len(valid) > 1 else None
            metrics[f"FCD/{label}"] = fcd
    found = features(valid, workers=workers)
    for label, test in (("Test", reference.test), ("TestSF", reference.test_scaffolds)):
        if test is not None:
            metrics[f"SNN/{label}"] = nearest_similarity(found.fingerprints, test.fingerprints)
            metrics[f"Frag/{label}"] = cosine_similarity(test.fragments, found.fragments)
            metrics[f"Scaf/{label}"] = cosine_similarity(test.scaffolds, found.scaffolds)
    metrics["IntDiv"] = internal_diversity(found.fingerprints, 1)
    metrics["IntDiv2"] = internal_diversity(found.fingerprints, 2)
    passing = {s: passes_filters(parse(s)[1], reference.filters) for s in distinct}
    metrics["Filters"] = sum(passing[s] for s in valid) / len(valid)
    for name in PROPERTIES:
        metrics[name] = wasserstein(found.properties[name], reference.test.properties[name])
    return metrics


def fcd_installed() -> bool:
    """Whether the `fcd` extra (ChemNet, for FCD) is installed."""
    return importlib.util.find_spec("fcd") is not None
