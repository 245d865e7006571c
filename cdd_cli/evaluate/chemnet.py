"""The Fréchet ChemNet Distance (Preuer et al. 2018) through the `fcd` package (the `fcd`
extra): its ChemNet weights and its one-hot reading of a SMILES (padded to 350 characters,
as the published numbers were), batched here in this process (the package's own loader starts
a worker process); the test sets' activation statistics are cached like the other MOSES ones,
part by part as they are computed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from importlib.metadata import version

import numpy as np
import torch
from rdkit import Chem

from cdd_cli.evaluate.parts import computed_in_parts, forget_parts
from cdd_cli.evaluate.reference import cache_dir

PAD = 350  # the package's default length, with which FCDs are published
BATCH = 256


@functools.cache
def _chemnet() -> torch.nn.Module:
    from fcd import load_ref_model  # the optional extra: imported when FCD is asked for

    return load_ref_model()


def padded_width(smiles: Sequence[str]) -> int:
    """The package pads every SMILES of a list to one length: 350, or the longest one's."""
    return max([PAD] + [len(s) + 1 for s in smiles])


def activations(smiles: Sequence[str], width: int | None = None) -> np.ndarray:
    """ChemNet's last-layer activations of each SMILES ([n, 512]), padded to `width` (None:
    `padded_width` of these)."""
    from fcd.utils import get_one_hot  # the optional extra

    model = _chemnet()
    width = width or padded_width(smiles)
    out = []
    with torch.no_grad():
        for start in range(0, len(smiles), BATCH):
            batch = [get_one_hot(s, pad_len=width) for s in smiles[start : start + BATCH]]
            x = np.stack(batch).astype(np.float32) / batch[0].shape[1]  # as the package scales
            out.append(model(torch.from_numpy(x).transpose(1, 2)).numpy())
    return np.concatenate(out) if out else np.zeros((0, 512), dtype=np.float32)


def statistics(smiles: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the activations."""
    acts = activations(smiles).astype(np.float64)
    return acts.mean(0), np.cov(acts.T)


def frechet_distance(smiles: Sequence[str], reference: tuple[np.ndarray, np.ndarray]) -> float:
    """FCD of canonical SMILES to a reference's (mean, covariance)."""
    from fcd import calculate_frechet_distance  # the optional extra

    mu, sigma = statistics(smiles)
    return float(calculate_frechet_distance(mu, sigma, reference[0], reference[1]))


def _activations_part(smiles: list[str], width: int) -> dict[str, np.ndarray]:
    return {"activations": activations(smiles, width)}


def split_statistics(
    smiles: list[str], digest: str, name: str, log: Callable[[str], None]
) -> tuple[np.ndarray, np.ndarray]:
    """ChemNet statistics of a MOSES split (canonical SMILES, as MOSES computes them),
    cached by the file's SHA-256 and the package's version; the activations are computed in
    parts (`computed_in_parts`, in this process: torch's threads share the cores), each
    cached as it finishes, so that a first run stopped half-way resumes."""
    cached = cache_dir() / f"moses-{name}-{digest[:16]}-fcd-{version('fcd')}.npz"
    if cached.is_file():
        with np.load(cached, allow_pickle=False) as data:
            return data["mu"], data["sigma"]
    canonical = [canonical_or_same(s) for s in smiles]
    # Every part padded as the whole split would be, in the same batches: the same numbers.
    work = functools.partial(_activations_part, width=padded_width(canonical))
    folder = cached.with_name(f"{cached.stem}-parts")
    parts = computed_in_parts(work, canonical, folder, f"MOSES {name} ChemNet statistics", log)
    acts = np.concatenate([p["activations"] for p in parts]).astype(np.float64)
    mu, sigma = acts.mean(0), np.cov(acts.T)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.npz")
        np.savez_compressed(partial, mu=mu, sigma=sigma)
        partial.replace(cached)
        forget_parts(folder)
    except OSError:
        pass  # a read-only home only costs the computation next time
    return mu, sigma


def canonical_or_same(smiles: str) -> str:
    mol = Chem.MolFromSmiles(smiles)
    return smiles if mol is None else Chem.MolToSmiles(mol)
