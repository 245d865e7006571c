"""The paper's SA table: unconstrained vs reject vs cdd at several tau, in one run.

    python bench/sa_table.py [--samples 1024] [--taus 3.0,3.5,4.0,4.5] [--batch-size 256]
        [--model default-molecules] [--device cpu] [--max-attempts 16] [--out bench/results]

For every tau and method: valid molecules, unique (distinct canonical SMILES among the valid),
novel (valid, canonical, not in the model's training set), mean QED of the valid, violation %
among the valid (RDKit SA > tau), seconds per sample (mean), and for cdd its overhead over
unconstrained (per-sample seconds, mean and median, same run) plus valid-and-satisfying
molecules per second for reject and cdd.
Unconstrained samples do not depend on tau: they are drawn once and judged at every tau.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from rich.progress import Progress

from cdd_cli.constraints.registry import build_constraints
from cdd_cli.evaluate.molecules import CANONICALIZER, describe
from cdd_cli.evaluate.runtime import overhead
from cdd_cli.models import registry
from cdd_cli.pipeline import Draw, Generation, fill_model_defaults
from cdd_cli.spec import Spec, constraint_from_flags, load_spec


def run(
    spec: Spec, loaded: registry.LoadedModel, tau: float, n: int, device: str
) -> tuple[list[Draw], float]:
    constraints = build_constraints([constraint_from_flags("sa", tau)], loaded, device)
    draws: list[Draw] = []
    started = time.perf_counter()
    with Progress(disable=True) as progress:
        generation = Generation(spec, loaded, constraints, spec.sampling.steps, progress)
        for start in range(0, n, spec.sampling.batch_size):
            draws += generation.run(range(start, min(start + spec.sampling.batch_size, n)))
    return draws, time.perf_counter() - started


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
    args = parser.parse_args()

    loaded = registry.load(args.model, "molecules", args.device)
    taus = [float(t) for t in args.taus.split(",")]
    methods = args.methods.split(",")
    rows: list[dict] = []

    def spec_for(method: str) -> Spec:
        spec = load_spec(Path(args.spec)) if args.spec else Spec()
        spec.model, spec.method, spec.constraints = args.model, method, []
        spec.sampling.batch_size = args.batch_size
        fill_model_defaults(spec, loaded)
        spec.reject.max_attempts = args.max_attempts
        return spec

    base: list[Draw] = []
    if "unconstrained" in methods:
        base, wall = run(spec_for("unconstrained"), loaded, taus[0], args.samples, args.device)
        for tau in taus:
            rows.append(row("unconstrained", tau, base, wall, loaded.reference))
            print(json.dumps(rows[-1]), flush=True)
    for tau in taus:
        for method in [m for m in methods if m != "unconstrained"]:
            draws, wall = run(spec_for(method), loaded, tau, args.samples, args.device)
            result = row(method, tau, draws, wall, loaded.reference)
            if base:
                result.update(overhead([d.seconds for d in draws], [d.seconds for d in base]))
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
