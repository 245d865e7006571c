"""The paper's SA table: unconstrained vs reject vs paper vs cdd at several tau, in one run.

    python bench/sa_table.py [--samples 1024] [--taus 3.0,3.5,4.0,4.5] [--batch-size 256]
        [--model default-molecules] [--device cpu] [--max-attempts 16] [--out bench/results]
        [--spec FILE.yaml] [--surrogate DIR] [--methods unconstrained,reject,paper,cdd]
        [--paper-samples N]

For every tau and method: valid molecules, unique (distinct canonical SMILES among the valid),
novel (valid, canonical, not in the model's training set), mean QED of the valid, violation %
among the valid (RDKit SA > tau), seconds per sample (mean), and for cdd its overhead over
unconstrained (per-sample seconds, mean and median, same run) plus valid-and-satisfying
molecules per second for reject and cdd.
`paper` (the paper's algorithm, `--method paper`) costs minutes a molecule on a CPU: with
`--paper-samples N` its arm draws only the first N samples (whole batches), and its overhead
is against the unconstrained seconds of those same samples.
Unconstrained samples do not depend on tau: they are drawn once and judged at every tau.
Every arm (method and tau) draws batch 1, then every arm batch 2, and so on: on a shared
machine a slow spell then falls on every arm alike.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from cdd_cli.constraints.registry import build_constraints
from cdd_cli.constraints.sa import rdkit_sa
from cdd_cli.evaluate.molecules import CANONICALIZER, describe
from cdd_cli.evaluate.reference import model_reference
from cdd_cli.evaluate.runtime import overhead
from cdd_cli.models import registry
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer, Draw
from cdd_cli.spec.entries import constraint_from_flags
from cdd_cli.spec.model import Spec
from cdd_cli.spec.reader import load_spec


class Arm:
    """One method at one tau, drawn batch by batch; its wall time counts its own batches only."""

    def __init__(
        self,
        spec: Spec,
        loaded: registry.LoadedModel,
        tau: float,
        device: str,
        surrogate: str | None = None,
    ):
        constraint = constraint_from_flags("sa", tau)
        if surrogate:
            constraint.options["surrogate"] = surrogate
        constraints = build_constraints([constraint], loaded, device)
        self.generation = BatchDrawer(spec, loaded, constraints)
        self.draws: list[Draw] = []
        self.wall = 0.0

    def run(self, indices: range) -> None:
        # Each arm stands for a run of its own: no verdict another arm reached is remembered
        # (the same seed draws the same molecules in every arm).
        rdkit_sa.cache_clear()
        started = time.perf_counter()
        self.draws += self.generation.run(indices)
        self.wall += time.perf_counter() - started


def row(method: str, tau: float, draws: list[Draw], wall: float, reference) -> dict:
    reports = [describe(d.text, reference) for d in draws]
    valid = [r for r in reports if r.valid]
    violating = [r for r in valid if r.sa > tau]
    seconds = [d.seconds for d in draws]
    return {
        "method": method,
        "tau": tau,
        "samples": len(draws),
        "valid": len(valid),
        "unique": len({r.canonical for r in valid}),
        "novel": sum(1 for r in valid if r.novel),
        "mean_qed": round(statistics.fmean(r.qed for r in valid), 3) if valid else None,
        "violation_pct": round(100 * len(violating) / len(valid), 1) if valid else None,
        "valid_satisfying": len(valid) - len(violating),
        "seconds_mean": round(statistics.fmean(seconds), 4),
        "seconds_median": round(statistics.median(seconds), 4),
        "wall_seconds": round(wall, 1),
        "valid_satisfying_per_second": round((len(valid) - len(violating)) / wall, 2),
        "mean_attempts": round(statistics.fmean(d.attempts for d in draws), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--taus", default="3.0,3.5,4.0,4.5")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--model", default="default-molecules")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-attempts", type=int, default=16)
    parser.add_argument("--methods", default="unconstrained,reject,cdd")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument(
        "--spec", default=None, help="YAML spec whose projection/repair settings cdd uses"
    )
    parser.add_argument("--surrogate", default=None, help="SA surrogate folder (default: shipped)")
    parser.add_argument(
        "--paper-samples", type=int, default=None, help="samples of the paper arm (default: all)"
    )
    args = parser.parse_args()

    loaded = registry.load(args.model, "molecules", args.device)
    taus = [float(t) for t in args.taus.split(",")]
    methods = args.methods.split(",")
    rows: list[dict] = []

    def spec_for(method: str) -> Spec:
        spec = load_spec(Path(args.spec)) if args.spec else Spec()
        spec.model, spec.method, spec.constraints = args.model, method, []
        spec.sampling.batch_size = args.batch_size
        fill_defaults(spec, loaded)
        spec.reject.max_attempts = args.max_attempts
        return spec

    # Batches are interleaved (each batch of samples by every arm in turn), so that a slow
    # spell of a shared machine falls on every arm alike instead of on whichever ran then.
    arms: dict[tuple[str, float], Arm] = {}
    if "unconstrained" in methods:  # its samples do not depend on tau: drawn once
        first = Arm(spec_for("unconstrained"), loaded, taus[0], args.device)
        arms["unconstrained", taus[0]] = first
    for tau in taus:
        for method in [m for m in methods if m != "unconstrained"]:
            arms[method, tau] = Arm(spec_for(method), loaded, tau, args.device, args.surrogate)
    paper_samples = args.paper_samples or args.samples
    for start in range(0, args.samples, args.batch_size):
        for (method, _), arm in arms.items():
            if method == "paper" and start >= paper_samples:
                continue
            arm.run(range(start, min(start + args.batch_size, args.samples)))
    reference = model_reference(loaded.directory)
    base = arms.get(("unconstrained", taus[0]))
    if base is not None:
        for tau in taus:
            rows.append(row("unconstrained", tau, base.draws, base.wall, reference))
            print(json.dumps(rows[-1]), flush=True)
    for (method, tau), arm in arms.items():
        if method == "unconstrained":
            continue
        result = row(method, tau, arm.draws, arm.wall, reference)
        if base is not None:
            same = base.draws[: len(arm.draws)]  # the paper arm's subset: the same samples
            result.update(overhead([d.seconds for d in arm.draws], [d.seconds for d in same]))
        rows.append(result)
        print(json.dumps(result), flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "model": args.model,
        "steps": loaded.default_steps,
        "device": args.device,
        "batch_size": args.batch_size,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "canonicalizer": CANONICALIZER,
    }
    (out / "sa_table.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\n{json.dumps(meta)}\n")
    print(
        "| method | tau | valid | unique | novel | mean QED | violation % of valid | "
        "s/sample mean | overhead mean / median | valid+satisfying /s | attempts |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratios = f"{r['overhead_mean']}x / {r['overhead_median']}x" if "overhead_mean" in r else ""
        print(
            f"| {r['method']} | {r['tau']} | {r['valid']} | {r['unique']} | {r['novel']} | "
            f"{r['mean_qed']} | "
            f"{r['violation_pct']} | {r['seconds_mean']} | {ratios} | "
            f"{r['valid_satisfying_per_second']} | {r['mean_attempts']} |"
        )


if __name__ == "__main__":
    main()
