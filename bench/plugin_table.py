"""A plugin constraint judged only, and with a surrogate `cdd train surrogate` fitted to its
judge: how many molecules satisfy it, and at what cost, beside unconstrained sampling.

    python bench/plugin_table.py --surrogate DIR [--samples 128] [--tau 7,8] [--seed 0]

Uses the example plugin's `max_heavy_atoms` (pip install -e examples/cdd-plugin-example) on
the shipped molecule model; DIR is the surrogate trained by

    cdd train surrogate -c max_heavy_atoms --tau 8 --out DIR --threads 1

Per tau, three arms over the same seeds: unconstrained, cdd with the judge alone (search
stages), cdd with the trained surrogate (the ALM too). Prints satisfying and valid counts, the
mean judge score, and wall seconds per molecule; the surrogate's held-out agreement with the
judge is read from its config.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

import cdd_cli as cdd


def arm(n: int, seed: int, method: str, entry) -> dict:
    started = time.perf_counter()
    records = list(cdd.molecules(n=n, constraints=[entry], method=method, seed=seed))
    seconds = time.perf_counter() - started
    values = [r["constraints"]["max_heavy_atoms"]["value"] for r in records]
    scored = [v for v in values if v is not None]
    return {
        "satisfied": sum(r["satisfied"] for r in records),
        "valid": sum(r["valid"] for r in records),
        "mean_heavy_atoms": round(statistics.mean(scored), 2) if scored else None,
        "s_per_molecule": round(seconds / n, 4),
        "redrawn": sum(r["attempts"] > 1 for r in records),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--surrogate", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--tau", default="7,8")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    held_out = json.loads((args.surrogate / "config.json").read_text())["held_out"]
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; surrogate held-out: {json.dumps(held_out)}"
    )
    print("tau\tarm\tsatisfied\tvalid\tmean heavy atoms\ts/molecule\tredrawn")
    for tau in [float(t) for t in args.tau.split(",")]:
        arms = {
            "unconstrained": ("unconstrained", cdd.constraint("max_heavy_atoms", tau=tau)),
            "judge only": ("cdd", cdd.constraint("max_heavy_atoms", tau=tau)),
            "trained surrogate": (
                "cdd",
                cdd.constraint("max_heavy_atoms", tau=tau, surrogate=str(args.surrogate)),
            ),
        }
        for name, (method, entry) in arms.items():
            row = arm(args.samples, args.seed, method, entry)
            n = args.samples
            print(
                f"{tau:g}\t{name}\t{row['satisfied']}/{n}\t{row['valid']}/{n}\t"
                f"{row['mean_heavy_atoms']}\t{row['s_per_molecule']}\t{row['redrawn']}"
            )


if __name__ == "__main__":
    main()
