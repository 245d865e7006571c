"""Molecular property specs on the shipped molecule model: unconstrained vs reject vs cdd.

    python bench/properties_table.py [--samples 256] [--batch-size 64] [--specs bench/properties]
        [--model default-molecules] [--max-attempts 16] [--methods unconstrained,reject,cdd]
        [--out bench/results/properties_table]

Each spec (one YAML file of --specs, its constraints only) is run by every method. Per spec and
method: violation % by RDKit over all samples (a molecule RDKit cannot parse counts as
violating, as for every constraint), valid, unique (distinct canonical among the valid), novel
(valid and not in the model's training set, the MOSES convention), mean QED of the valid,
seconds per sample (mean, median), cdd's overhead over unconstrained (same samples, same run),
valid-and-satisfying molecules per second of wall time, and cdd's rate over reject's.
Unconstrained samples do not depend on the spec: drawn once, judged by each spec's
constraints. Batches are interleaved over the arms (batch 1 by every arm, then batch 2 ...):
a slow spell of the machine falls on every arm alike. Every arm forgets the verdicts cached
by the judges before each batch: an arm stands for a run of its own.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from cdd_cli.constraints.novelty import NoveltyConstraint
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.constraints.sa import rdkit_sa
from cdd_cli.evaluate.molecules import CANONICALIZER, canonical, describe
from cdd_cli.evaluate.properties import clear_caches
from cdd_cli.evaluate.reference import model_reference
from cdd_cli.evaluate.runtime import overhead
from cdd_cli.models import registry
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer, Draw, judge
from cdd_cli.spec.reader import load_spec


class Arm:
    """One method on one spec, drawn batch by batch; its wall time counts its own batches."""

    def __init__(self, spec_file: Path, method: str, loaded, args):
        spec = load_spec(spec_file)
        spec.model, spec.method = args.model, method
        spec.sampling.batch_size = args.batch_size
        spec.reject.max_attempts = args.max_attempts
        # Each arm builds its own constraints: novelty's seen set is the arm's own run.
        self.constraints = build_constraints(spec.constraints, loaded, args.device)
        used = [] if method == "unconstrained" else self.constraints
        fill_defaults(spec, loaded)
        self.generation = BatchDrawer(spec, loaded, used)
        self.draws: list[Draw] = []
        self.wall = 0.0

    def run(self, indices: range) -> None:
        rdkit_sa.cache_clear()
        clear_caches()
        started = time.perf_counter()
        self.draws += self.generation.run(indices)
        self.wall += time.perf_counter() - started


def row(name: str, method: str, arm: Arm, draws: list[Draw], wall: float, reference) -> dict:
    """The judges of the spec (`arm`'s constraints) read `draws` afresh: an unconstrained
    arm's samples are judged by each spec's constraints alike."""
    texts = [d.text for d in draws]
    clear_caches()
    for c in arm.constraints:
        if isinstance(c, NoveltyConstraint):
            c.seen.clear()  # judged afresh, in order: a repeat of an earlier sample is known
    values = judge(arm.constraints, texts)
    ok = [
        canonical(t) is not None and all(c.satisfied(v[c.name]) for c in arm.constraints)
        for t, v in zip(texts, values, strict=True)
    ]
    reports = [describe(t, reference) for t in texts]
    valid = [r for r in reports if r.valid]
    seconds = [d.seconds for d in draws]
    return {
        "spec": name,
        "method": method,
        "samples": len(draws),
        "violation_pct": round(100 * (len(draws) - sum(ok)) / len(draws), 1),
        "valid": len(valid),
        "unique": len({r.canonical for r in valid}),
        "novel": sum(1 for r in valid if r.novel),
        "mean_qed": round(statistics.fmean(r.qed for r in valid), 3) if valid else None,
        "seconds_mean": round(statistics.fmean(seconds), 4),
        "seconds_median": round(statistics.median(seconds), 4),
        "wall_seconds": round(wall, 1),
        "valid_satisfying": sum(ok),
        "valid_satisfying_per_second": round(sum(ok) / wall, 2),
        "mean_attempts": round(statistics.fmean(d.attempts for d in draws), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--specs", default="bench/properties")
    parser.add_argument("--model", default="default-molecules")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-attempts", type=int, default=16)
    parser.add_argument("--methods", default="unconstrained,reject,cdd")
    parser.add_argument("--out", default="bench/results/properties_table")
    args = parser.parse_args()

    loaded = registry.load(args.model, "molecules", args.device)
    specs = sorted(Path(args.specs).glob("*.yaml"))
    methods = args.methods.split(",")
    arms: dict[tuple[str, str], Arm] = {}
    for spec_file in specs:
        for method in methods:
            if method == "unconstrained" and arms:
                continue  # drawn once, judged by every spec below
            arms[spec_file.stem, method] = Arm(spec_file, method, loaded, args)
    for start in range(0, args.samples, args.batch_size):
        for arm in arms.values():
            arm.run(range(start, min(start + args.batch_size, args.samples)))

    reference = model_reference(loaded.directory)
    base = next((a for (_, m), a in arms.items() if m == "unconstrained"), None)
    rows: list[dict] = []
    for spec_file in specs:
        name = spec_file.stem
        rates = {}
        for method in methods:
            arm = base if method == "unconstrained" else arms[name, method]
            judged_by = arms.get((name, "cdd")) or arms.get((name, "reject")) or arm
            result = row(name, method, judged_by, arm.draws, arm.wall, reference)
            if base is not None and method != "unconstrained":
                result.update(
                    overhead([d.seconds for d in arm.draws], [d.seconds for d in base.draws])
                )
            rates[method] = result["valid_satisfying_per_second"]
            if method == "cdd" and rates.get("reject"):
                result["rate_vs_reject"] = round(rates["cdd"] / rates["reject"], 2)
            rows.append(result)
            print(json.dumps(result), flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "model": args.model,
        "steps": loaded.default_steps,
        "device": args.device,
        "batch_size": args.batch_size,
        "samples": args.samples,
        "max_attempts": args.max_attempts,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "canonicalizer": CANONICALIZER,
        "specs": {s.stem: s.read_text() for s in specs},
    }
    (out / "properties_table.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [
        "| spec | method | violation % | valid | unique | novel | mean QED | s/sample mean / "
        "median | overhead mean / median | valid+satisfying /s | vs reject | attempts |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratios = f"{r['overhead_mean']}x / {r['overhead_median']}x" if "overhead_mean" in r else ""
        lines.append(
            f"| {r['spec']} | {r['method']} | {r['violation_pct']} | {r['valid']} | "
            f"{r['unique']} | {r['novel']} | {r['mean_qed']} | {r['seconds_mean']} / "
            f"{r['seconds_median']} | {ratios} | {r['valid_satisfying_per_second']} | "
            f"{r.get('rate_vs_reject', '')} | {r['mean_attempts']} |"
        )
    (out / "properties_table.md").write_text("\n".join(lines) + "\n")
    print(f"\n{json.dumps({k: v for k, v in meta.items() if k != 'specs'})}\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
