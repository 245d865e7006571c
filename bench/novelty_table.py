"""The paper's novelty table: unconstrained vs reject vs cdd (`--novel`), in one run.

    python bench/novelty_table.py [--samples 1024] [--batch-size 256] [--model default-molecules]
        [--max-attempts 16] [--out bench/results]

Per method: valid, valid-and-novel (canonical, absent from the model's training set and unique
within the run), mean QED of the valid-and-novel, "violation" = valid but not novel (known, or
a repeat of an earlier sample), seconds per sample (mean, median) and, for reject and cdd, the
overhead over unconstrained (per-sample seconds, same run).
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
from cdd_cli.evaluate.molecules import CANONICALIZER, canonical, describe
from cdd_cli.evaluate.reference import model_reference
from cdd_cli.evaluate.runtime import overhead
from cdd_cli.models import registry
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer, Draw
from cdd_cli.spec.entries import constraint_from_flags
from cdd_cli.spec.model import Spec
from cdd_cli.spec.reader import load_spec


def filled_search(loaded: registry.LoadedModel) -> dict:
    """The search settings cdd ran with (the model's defaults filled in)."""
    spec = Spec()
    fill_defaults(spec, loaded)
    return spec.resolved()["search"]


def run(
    method: str, loaded: registry.LoadedModel, args: argparse.Namespace
) -> tuple[list[Draw], float]:
    spec = load_spec(Path(args.spec)) if args.spec else Spec()
    spec.model, spec.method, spec.constraints = args.model, method, []
    spec.sampling.batch_size = args.batch_size
    fill_defaults(spec, loaded)
    spec.reject.max_attempts = args.max_attempts
    constraints = build_constraints([constraint_from_flags("novelty", None)], loaded, args.device)
    draws: list[Draw] = []
    started = time.perf_counter()
    generation = BatchDrawer(spec, loaded, constraints)
    for start in range(0, args.samples, args.batch_size):
        draws += generation.run(range(start, min(start + args.batch_size, args.samples)))
    return draws, time.perf_counter() - started


def row(method: str, draws: list[Draw], wall: float, reference: frozenset[str]) -> dict:
    seen: set[str] = set()
    valid = novel = 0
    novel_qed: list[float] = []
    for d in draws:
        can = canonical(d.text)
        if can is None:
            continue
        valid += 1
        if can not in reference and can not in seen:
            novel += 1
            novel_qed.append(describe(can, None).qed)
        seen.add(can)
    seconds = [d.seconds for d in draws]
    return {
        "method": method,
        "samples": len(draws),
        "valid": valid,
        "valid_and_novel": novel,
        "violation_pct": round(100 * (valid - novel) / valid, 1) if valid else None,
        "mean_qed_novel": round(statistics.fmean(novel_qed), 3) if novel_qed else None,
        "seconds_mean": round(statistics.fmean(seconds), 4),
        "seconds_median": round(statistics.median(seconds), 4),
        "wall_seconds": round(wall, 1),
        "mean_attempts": round(statistics.fmean(d.attempts for d in draws), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--model", default="default-molecules")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-attempts", type=int, default=16)
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--methods", default="unconstrained,reject,cdd")
    parser.add_argument("--spec", default=None, help="YAML spec whose search settings cdd uses")
    args = parser.parse_args()

    loaded = registry.load(args.model, "molecules", args.device)
    rows = []
    base = None
    for method in args.methods.split(","):
        draws, wall = run(method, loaded, args)
        result = row(method, draws, wall, model_reference(loaded.directory))
        if base is None:
            base = draws
        else:
            result.update(overhead([d.seconds for d in draws], [d.seconds for d in base]))
        rows.append(result)
        print(json.dumps(result), flush=True)

    meta = {
        "model": args.model,
        "steps": loaded.default_steps,
        "device": args.device,
        "batch_size": args.batch_size,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "canonicalizer": CANONICALIZER,
        "search": filled_search(loaded),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "novelty_table.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\n{json.dumps(meta)}\n")
    print(
        "| method | valid | valid & novel | violation % (valid, not novel) | mean QED (novel) |"
        " s/sample mean / median | overhead mean / median | attempts |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratios = f"{r['overhead_mean']}x / {r['overhead_median']}x" if "overhead_mean" in r else ""
        print(
            f"| {r['method']} | {r['valid']} | {r['valid_and_novel']} | {r['violation_pct']} | "
            f"{r['mean_qed_novel']} | {r['seconds_mean']} / {r['seconds_median']} | "
            f"{ratios} | {r['mean_attempts']} |"
        )


if __name__ == "__main__":
    main()
