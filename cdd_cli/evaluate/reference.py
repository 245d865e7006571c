"""Reference sets of canonical SMILES (a model's training molecules), for novelty.

The file beside a model (`reference.smi.gz`) names the RDKit that canonicalised it. Canonical
SMILES can change between RDKit releases, so when the installed RDKit differs, the set is
canonicalised again once and cached under the user's cache folder.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
from pathlib import Path

from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import CANONICALIZER, canonical

REFERENCE_HEADER = "# cdd-reference v1"


def write_smiles(path: Path, smiles: list[str], source: str) -> None:
    """A gzip'd list with a versioned header naming the canonicaliser (novelty depends on it)."""
    with gzip.open(path, "wt") as f:
        f.write(f"{REFERENCE_HEADER} canonicalizer={CANONICALIZER} source={source}\n")
        f.writelines(s + "\n" for s in smiles)


def read_smiles(path: Path) -> tuple[str, list[str]]:
    with gzip.open(path, "rt") as f:
        header = f.readline().rstrip("\n")
        if not header.startswith(REFERENCE_HEADER):
            raise InputError(f"{path}: not a cdd reference file (header {header[:40]!r})")
        return header, [line.rstrip("\n") for line in f if line.strip()]


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "cdd"


def load_reference(path: Path) -> frozenset[str] | None:
    if not path.is_file():
        return None
    header, smiles = read_smiles(path)
    if f"canonicalizer={CANONICALIZER}" in header.split():
        return frozenset(smiles)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    cached = cache_dir() / f"reference-{digest}-{CANONICALIZER}.smi.gz"
    if cached.is_file():
        return frozenset(read_smiles(cached)[1])
    recanonicalised = sorted({c for s in smiles if (c := canonical(s)) is not None})
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_smiles(cached, recanonicalised, f"{path} re-canonicalised")
    except OSError:
        pass  # a read-only home only costs the re-canonicalisation next time
    return frozenset(recanonicalised)


def model_reference(directory: Path) -> frozenset[str] | None:
    """The canonical training molecules a model folder ships (`reference.smi.gz`), for
    novelty; None when it ships none. Read once per file version and process."""
    path = Path(directory) / "reference.smi.gz"
    if not path.is_file():
        return None
    stat = path.stat()
    return _reference(path.resolve(), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _reference(path: Path, mtime_ns: int, size: int) -> frozenset[str] | None:
    return load_reference(path)
