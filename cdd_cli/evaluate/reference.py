"""Reference sets of canonical SMILES (a model's training molecules), for novelty.

The file beside a model (`reference.smi.gz`) names the RDKit that canonicalised it. Canonical
SMILES can change between RDKit releases, so when the installed RDKit differs, the set is
canonicalised again once and cached under the user's cache folder.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cdd_cli.evaluate.molecules import CANONICALIZER, canonical
from cdd_cli.train.qm9 import read_smiles, write_smiles


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
