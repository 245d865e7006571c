"""Where cdd's time goes: unconstrained vs cdd sampling, and each engine stage's share.

    python bench/stage_times.py [--samples 256] [--batch-size 64] [--seed 21] [--tau 3.5]
        [--threads 1,2] [--repeats 2]

Runs what a new user runs (`cdd molecules -n 256 --seed 21` with and without `-c sa --tau
3.5`, the shipped model, passes of 64) in one process, at each thread count, each arm a whole
run (the redraws ride in later passes, as in `cdd molecules`), the arms alternating which
goes first, repeated. Prints, per thread count: each arm's wall seconds, the ratio, and the
cdd arm's seconds per engine stage (summed over passes; wall time of the stage's calls, which
includes the judges it asks), "redraws": the redrawn samples' share of the passes' wall time
(it includes their share of the stages' time again), and the passes and draws.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from cdd_cli.constraints.registry import build_constraints
from cdd_cli.constraints.sa import rdkit_sa
from cdd_cli.models import registry
from cdd_cli.reporting import Reporter
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer
from cdd_cli.spec.entries import constraint_from_flags
from cdd_cli.spec.model import Spec


def generation(loaded, method: str, tau: float, batch_size: int, seed: int) -> BatchDrawer:
    spec = Spec(method=method)
    spec.sampling.batch_size, spec.sampling.seed = batch_size, seed
    specs = [constraint_from_flags("sa", tau)] if method == "cdd" else []
    spec.constraints = specs
    fill_defaults(spec, loaded)
    constraints = build_constraints(specs, loaded, "cpu")
    return BatchDrawer(spec, loaded, constraints)


class Passes(Reporter):
    """Counts the sampler's passes and the draws in them."""

    passes = draws = 0

    def pass_started(self, samples: int, redraws: int, steps: int) -> None:
        self.passes, self.draws = self.passes + 1, self.draws + samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--tau", type=float, default=3.5)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    loaded = registry.load(None, "molecules")
    results = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        walls = {"unconstrained": 0.0, "cdd": 0.0}
        stages: dict[str, float] = {}
        passes = draws = 0
        for repeat in range(args.repeats):
            arms = {m: generation(loaded, m, args.tau, args.batch_size, args.seed) for m in walls}
            counter = Passes()
            arms["cdd"].reporter = counter
            for method in sorted(arms, reverse=bool(repeat % 2)):  # alternate which goes first
                rdkit_sa.cache_clear()  # no arm profits from another's verdicts
                started = time.perf_counter()
                arms[method].run(range(args.samples))
                walls[method] += time.perf_counter() - started
            for name, seconds in arms["cdd"].stage_seconds.items():
                stages[name] = stages.get(name, 0.0) + seconds
            passes, draws = passes + counter.passes, draws + counter.draws
        n = args.repeats
        row = {
            "threads": threads,
            "unconstrained_s": round(walls["unconstrained"] / n, 2),
            "cdd_s": round(walls["cdd"] / n, 2),
            "ratio": round(walls["cdd"] / walls["unconstrained"], 3),
            "stages_s": {k: round(v / n, 3) for k, v in stages.items()},
            "passes": passes / n,
            "draws": draws / n,
        }
        results.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"machine": platform.machine(), "torch": torch.__version__}))
    stage_names = " | ".join(results[0]["stages_s"])
    print(f"\n| threads | unconstrained s | cdd s | ratio | passes | draws | {stage_names} |")
    print("|---" * (6 + len(results[0]["stages_s"])) + "|")
    for r in results:
        cells = " | ".join(str(v) for v in r["stages_s"].values())
        head = f"| {r['threads']} | {r['unconstrained_s']} | {r['cdd_s']} | {r['ratio']} |"
        print(f"{head} {r['passes']:g} | {r['draws']:g} | {cells} |")


if __name__ == "__main__":
    main()
