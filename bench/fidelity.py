"""How far constrained samples drift from the model's own satisfying samples (molecules).

    python bench/fidelity.py [--samples 384] [--settings sa4.0,sa3.5,qed0.5,logp0-2,novel]
        (also sa3.0 and qed0.6, the drug-sized rows of bench/moses_table.py)
        [--pool 6144] [--batch-size 256] [--model default-molecules] [--device cpu]
        [--variants JSON] [--paper-samples 0] [--out DIR]

The distribution a user asks for is the model's, conditioned on the constraints; rejection
sampling draws exactly from it. For each setting the reference is drawn by rejection: a pool
of unconstrained samples (one seed, drawn once and shared by every setting) judged in order by
the setting's exact judges (validity included; novelty remembers what it accepted, as a run
does), the accepted ones split into two reference sets A and B of `--samples` each. Each arm
(`unconstrained`, each variant of `--variants`, a JSON object of label -> settings, cdd's
unless "method" names another, e.g. '{"cdd": {}, "surrogates first":
{"repair.surrogates_from": 1}, "reject": {"method": "reject", "reject.max_attempts": 64},
"exact": {"method": "exact", "reject.max_attempts": 64}}' (an exact arm's row adds its draws
per sample, how many were accepted by weight, the mean weight and the truncated mass),
and optionally `paper`
on its first `--paper-samples`) draws `--samples` with another seed, and is compared with A;
B against A is the noise floor at the same size.

Measures: two-sample Kolmogorov-Smirnov distance on QED, SA, logP, molecular weight, heavy
atoms and rings of the valid molecules; MMD (squared, biased) under the Tanimoto kernel on
Morgan fingerprints (radius 2, 2,048 bits); the absolute difference of validity, uniqueness
and novelty (against the model's training set) rates. A measure passes when the arm's
distance is at most twice the floor's. One pair of sets only estimates the floor: beside it
are the expected values under the null, 0.87 * sqrt(2 / n) for KS and sqrt(2 p (1 - p) / n)
for the novelty rate p.

cdd's samples are also split by what settled them (the record's `projection.settled_by`,
"redrawn" for samples drawn again whole): count, mean heavy atoms, KS on heavy atoms to A. The
arms draw batch by batch in turn (interleaved), so their seconds per sample compare.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from rdkit import DataStructs
from rdkit.Chem import QED, Crippen, Descriptors, rdFingerprintGenerator, rdMolDescriptors

from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.constraints.sa import rdkit_sa
from cdd_cli.evaluate.molecules import canonical, parse
from cdd_cli.evaluate.reference import model_reference
from cdd_cli.models import registry
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer, Draw
from cdd_cli.spec.entries import check_constraint
from cdd_cli.spec.model import Spec

# Each setting: its constraints as a spec would give them.
SETTINGS: dict[str, list[tuple[str, dict]]] = {
    "sa4.0": [("sa", {"tau": 4.0})],
    "sa3.5": [("sa", {"tau": 3.5})],
    "sa3.0": [("sa", {"tau": 3.0})],  # bench/moses_table.py's SA row (drug size)
    "qed0.6": [("qed", {"min": 0.6})],  # and its QED row
    "qed0.5": [("qed", {"min": 0.5})],
    "logp0-2": [("logp", {"min": 0.0, "max": 2.0})],
    "novel": [("novelty", {})],
}
PROPERTIES = ("qed", "sa", "logp", "mw", "heavy_atoms", "rings")
POOL_SEED, ARM_SEED = 1, 2
FINGERPRINTS = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)


@dataclass
class Molecule:
    smiles: str
    canonical: str | None
    values: dict[str, float]  # PROPERTIES, for valid molecules
    fingerprint: object | None


def measure(smiles: str) -> Molecule:
    parsed = parse(smiles)
    if parsed is None:
        return Molecule(smiles, None, {}, None)
    can, mol = parsed
    values = {
        "qed": QED.qed(mol),
        "sa": rdkit_sa(can),
        "logp": Crippen.MolLogP(mol),
        "mw": Descriptors.MolWt(mol),
        "heavy_atoms": float(mol.GetNumHeavyAtoms()),
        "rings": float(rdMolDescriptors.CalcNumRings(mol)),
    }
    return Molecule(smiles, can, values, FINGERPRINTS.GetFingerprint(mol))


def ks(a: list[float], b: list[float]) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    if not a or not b:
        return math.nan
    a, b = sorted(a), sorted(b)
    i = j = 0
    gap = 0.0
    while i < len(a) and j < len(b):
        x = min(a[i], b[j])
        while i < len(a) and a[i] == x:
            i += 1
        while j < len(b) and b[j] == x:
            j += 1
        gap = max(gap, abs(i / len(a) - j / len(b)))
    return gap


def tanimoto_mmd(a: list[Molecule], b: list[Molecule]) -> float:
    """Squared MMD (biased estimate) under the Tanimoto kernel, a positive-definite kernel on
    bit vectors: k(a, a) + k(b, b) - 2 k(a, b), each the mean over all pairs."""
    fa = [m.fingerprint for m in a if m.fingerprint is not None]
    fb = [m.fingerprint for m in b if m.fingerprint is not None]
    if not fa or not fb:
        return math.nan

    def mean_kernel(xs: list, ys: list) -> float:
        return statistics.fmean(s for x in xs for s in DataStructs.BulkTanimotoSimilarity(x, ys))

    return mean_kernel(fa, fa) + mean_kernel(fb, fb) - 2 * mean_kernel(fa, fb)


def rates(molecules: list[Molecule], training: frozenset[str] | None) -> dict[str, float]:
    valid = [m for m in molecules if m.canonical is not None]
    unique = {m.canonical for m in valid}
    novel = {c for c in unique if training is not None and c not in training}
    return {
        "validity": len(valid) / len(molecules) if molecules else math.nan,
        "uniqueness": len(unique) / len(valid) if valid else math.nan,
        "novelty": len(novel) / len(unique) if unique else math.nan,
    }


def distances(
    arm: list[Molecule], reference: list[Molecule], training: frozenset[str] | None
) -> dict[str, float]:
    valid, ref = (
        [m for m in molecules if m.canonical is not None] for molecules in (arm, reference)
    )
    out = {
        f"ks_{p}": ks([m.values[p] for m in valid], [m.values[p] for m in ref]) for p in PROPERTIES
    }
    out["mmd_tanimoto"] = tanimoto_mmd(valid, ref)
    arm_rates, ref_rates = rates(arm, training), rates(reference, training)
    out.update({f"{k}_gap": abs(arm_rates[k] - ref_rates[k]) for k in arm_rates})
    return out


def mean(molecules: list[Molecule], key: str) -> float | None:
    values = [m.values[key] for m in molecules if m.canonical is not None]
    return round(statistics.fmean(values), 3) if values else None


class Arm:
    """One method drawing one setting's samples batch by batch."""

    def __init__(self, generation: BatchDrawer):
        self.generation = generation
        self.draws: list[Draw] = []
        self.wall = 0.0

    def run(self, indices: range) -> None:
        rdkit_sa.cache_clear()  # each arm stands for a run of its own
        started = time.perf_counter()
        self.draws += self.generation.run(indices)
        self.wall += time.perf_counter() - started


def accept_in_order(constraints: list, texts: list[str], batch: int) -> list[str]:
    """The texts a rejection sampler keeps, in order: valid, every judge satisfied, and each
    constraint told what was kept (novelty then refuses a repeat), a batch at a time as a
    run tells it."""
    kept: list[str] = []
    for start in range(0, len(texts), batch):
        chunk = texts[start : start + batch]
        ok = [canonical(t) is not None for t in chunk]
        for c in constraints:
            values = c.judge(chunk)
            ok = [good and c.satisfied(v) for good, v in zip(ok, values, strict=True)]
        accepted = [t for t, good in zip(chunk, ok, strict=True) if good]
        for c in constraints:
            c.remember(accepted)
        kept += accepted
    return kept


def stage_split(
    draws: list[Draw], molecules: list[Molecule], reference: list[Molecule]
) -> dict[str, dict]:
    groups: dict[str, list[Molecule]] = {}
    for d, m in zip(draws, molecules, strict=True):
        by = "redrawn" if d.attempts > 1 else (d.projection.get("settled_by") or "none")
        groups.setdefault(by, []).append(m)
    ref_atoms = [m.values["heavy_atoms"] for m in reference if m.canonical is not None]
    return {
        by: {
            "count": len(ms),
            "mean_heavy_atoms": mean(ms, "heavy_atoms"),
            "ks_heavy_atoms": round(
                ks([m.values["heavy_atoms"] for m in ms if m.canonical is not None], ref_atoms), 3
            ),
        }
        for by, ms in sorted(groups.items())
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=384)
    parser.add_argument("--settings", default="sa4.0,sa3.5,qed0.5,logp0-2,novel")
    parser.add_argument("--pool", type=int, default=6144, help="unconstrained draws judged")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--model", default="default-molecules")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variants", default='{"cdd": {}}', help="JSON: label -> settings")
    parser.add_argument("--paper-samples", type=int, default=0)
    parser.add_argument("--out", default="bench/results/fidelity")
    args = parser.parse_args()

    loaded = registry.load(args.model, "molecules", args.device)
    training = model_reference(loaded.directory)
    settings = args.settings.split(",")
    # Each arm: its method and the settings it overrides ("section.key": value).
    variants: dict[str, tuple[str, dict]] = {"unconstrained": ("unconstrained", {})}
    for label, o in json.loads(args.variants).items():  # "method" names another than cdd
        variants[label] = (o.pop("method", "cdd"), o)
    if args.paper_samples:
        variants["paper"] = ("paper", {})

    def constraint_specs(name: str) -> list[ConstraintSpec]:
        specs = [ConstraintSpec(t, dict(o), f"fidelity {name}") for t, o in SETTINGS[name]]
        for s in specs:
            check_constraint(s)
        return specs

    def generation(method: str, name: str | None, overrides: dict | None = None) -> BatchDrawer:
        spec = Spec()
        spec.model, spec.method = args.model, method
        spec.constraints = constraint_specs(name) if name else []
        spec.sampling.batch_size = args.batch_size
        fill_defaults(spec, loaded)
        spec.sampling.seed = POOL_SEED if name is None else ARM_SEED
        for key, value in (overrides or {}).items():
            section, field = key.split(".")
            setattr(getattr(spec, section), field, value)
        constraints = build_constraints(spec.constraints, loaded, args.device)
        return BatchDrawer(spec, loaded, constraints)

    # The pool: unconstrained draws, one seed for every setting.
    started = time.perf_counter()
    pool_gen = generation("unconstrained", None)
    pool: list[str] = []
    for start in range(0, args.pool, args.batch_size):
        pool += [
            d.text for d in pool_gen.run(range(start, min(start + args.batch_size, args.pool)))
        ]
    print(f"pool: {len(pool)} draws in {time.perf_counter() - started:.0f} s", flush=True)

    arms: dict[tuple[str, str], Arm] = {}
    for name in settings:
        for label, (method, overrides) in variants.items():
            arms[name, label] = Arm(generation(method, name, overrides))
    for start in range(0, args.samples, args.batch_size):
        for (_, label), arm in arms.items():
            if label == "paper" and start >= args.paper_samples:
                continue
            arm.run(range(start, min(start + args.batch_size, args.samples)))

    rows: list[dict] = []
    for name in settings:
        judges = build_constraints(constraint_specs(name), loaded, args.device)
        accepted = accept_in_order(judges, pool, args.batch_size)
        n = args.samples
        enough = len(accepted) >= 2 * n
        size = n if enough else len(accepted) // 2
        ref_a = [measure(t) for t in accepted[:size]]
        ref_b = [measure(t) for t in accepted[size : 2 * size]]
        floor = distances(ref_b, ref_a, training)
        base = {
            "setting": name,
            "acceptance": round(len(accepted) / len(pool), 4),
            "reference_size": size,
            "ks_expected_floor": round(0.87 * math.sqrt(2 / size), 3) if size else None,
        }
        novel = rates(ref_a, training)["novelty"]
        if size and not math.isnan(novel):
            base["novelty_expected_floor"] = round(math.sqrt(2 * novel * (1 - novel) / size), 3)
        rows.append(
            {
                **base,
                "arm": "floor (B vs A)",
                "n": size,
                **rnd(floor),
                "mean_heavy_atoms": mean(ref_b, "heavy_atoms"),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        for label in variants:
            arm = arms[name, label]
            molecules = [measure(d.text) for d in arm.draws]
            d = distances(molecules, ref_a, training)
            row = {
                **base,
                "arm": label,
                "n": len(molecules),
                **rnd(d),
                "mean_heavy_atoms": mean(molecules, "heavy_atoms"),
                "max_heavy_atoms": max(
                    (m.values["heavy_atoms"] for m in molecules if m.canonical), default=None
                ),
                "satisfied": sum(x.satisfied for x in arm.draws),
                "seconds_per_sample": round(arm.wall / max(len(arm.draws), 1), 4),
            }
            row["over_2x_floor"] = [k for k in d if d[k] > 2 * floor[k] + 1e-12]
            weights = [w for x in arm.draws for w in x.weights]  # the exact method's draws
            if weights:
                row["exact"] = {
                    "draws_per_sample": round(len(weights) / len(arm.draws), 2),
                    "accepted_by_weight": sum(bool(x.accepted) for x in arm.draws),
                    "p_c_mean_weight": round(statistics.fmean(weights), 4),
                    "truncated": round(sum(x.above_bound for x in arm.draws) / sum(weights), 4)
                    if sum(weights)
                    else 0.0,
                }
            if label != "unconstrained":
                row["by_stage"] = stage_split(arm.draws, molecules, ref_a)
            rows.append(row)
            print(json.dumps(row), flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "model": args.model,
        "samples": args.samples,
        "pool": args.pool,
        "batch_size": args.batch_size,
        "device": args.device,
        "variants": variants,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }
    (out / "fidelity.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(table(rows))


def rnd(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in d.items()}


def table(rows: list[dict]) -> str:
    keys = [f"ks_{p}" for p in PROPERTIES] + ["mmd_tanimoto", "validity_gap", "novelty_gap"]
    head = "| setting | arm | n | " + " | ".join(keys) + " | heavy atoms | s/sample |"
    lines = [head, "|" + "---|" * (len(keys) + 5)]
    fmt: Callable[[object], str] = lambda v: "" if v is None else str(v)  # noqa: E731
    for r in rows:
        lines.append(
            f"| {r['setting']} | {r['arm']} | {r['n']} | "
            + " | ".join(fmt(r.get(k)) for k in keys)
            + f" | {fmt(r.get('mean_heavy_atoms'))} | {fmt(r.get('seconds_per_sample'))} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
