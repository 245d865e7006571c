"""The exact method's calibration: its proposal's design and the bound M, once per setting.

    python bench/exact.py --setting sa3.5 [--steering gradient] [--tempering 0.5,1,2]
        [--steer-from 0.5,0.85] [--samples 128] [--truncation 0.01]

It draws `--samples` single proposals per candidate design (tempering l, first steered
share of the steps) with the stored bound left aside (one attempt each), and reads each draw's
importance weight w 1[C] (`projection/exact.py`). For a bound M the acceptance per draw is the
mean of min(1, w / M) and the truncated mass the weight above M over all the weight; M is the
smallest whose truncated mass is at most `--truncation`, the design the one of highest
acceptance per second of drawing. Also printed: the mean weight (P(C) under the model, with its
standard error), the effective sample size, and the mean log-weight of the satisfying draws (how
much less likely the model makes the proposal's own satisfying trajectories). Whatever the
proposal, the acceptance is E_q[min(1, w 1[C] / M)] <= E_q[w 1[C]] / M = P(C) / M: it beats
rejection's P(C) only with M < 1, a proposal likelier than the model on every satisfying path.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.constraints.sa import rdkit_sa
from cdd_cli.methods import EXACT_BY_SETTING
from cdd_cli.models import registry
from cdd_cli.models.registry import LoadedModel
from cdd_cli.projection.exact import ExactSetting
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer
from cdd_cli.spec.entries import check_constraint
from cdd_cli.spec.model import Spec

SETTINGS: dict[str, list[tuple[str, dict]]] = {
    "sa4.0": [("sa", {"tau": 4.0})],
    "sa3.5": [("sa", {"tau": 3.5})],
    "sa3.0": [("sa", {"tau": 3.0})],
}
SEED = 21


def drawer(
    loaded: LoadedModel, name: str, method: str, batch: int, overrides: dict | None = None
) -> BatchDrawer:
    spec = Spec()
    spec.model, spec.method = loaded.name, method
    spec.constraints = [ConstraintSpec(t, dict(o), f"exact {name}") for t, o in SETTINGS[name]]
    for s in spec.constraints:
        check_constraint(s)
    spec.sampling.batch_size = batch
    spec.sampling.seed = SEED
    fill_defaults(spec, loaded)
    for key, value in (overrides or {}).items():
        section, field = key.split(".")
        setattr(getattr(spec, section), field, value)
    return BatchDrawer(spec, loaded, build_constraints(spec.constraints, loaded, "cpu"))


def key_of(loaded: LoadedModel, name: str) -> tuple[str, str]:
    """The setting's key in EXACT_BY_SETTING."""
    specs = [ConstraintSpec(t, dict(o), f"exact {name}") for t, o in SETTINGS[name]]
    labels = sorted(c.label() for c in build_constraints(specs, loaded, "cpu"))
    return loaded.revision, ", ".join(labels)


def weight_summary(weights: list[float], truncation: float) -> dict:
    """P(C) estimate, ESS, the bound M of truncated mass <= `truncation`, the acceptance."""
    n, total = len(weights), sum(weights)
    positive = sorted(w for w in weights if w > 0)
    mean = total / n
    sd = statistics.pstdev(weights) if n > 1 else 0.0
    bound = positive[-1] if positive else 1.0
    for candidate in positive:  # the smallest M whose truncated mass is small enough
        if sum(max(0.0, w - candidate) for w in positive) <= truncation * total:
            bound = candidate
            break
    accept = sum(min(1.0, w / bound) for w in weights) / n
    truncated = sum(max(0.0, w - bound) for w in positive) / total if total else 0.0
    return {
        "p_c": round(mean, 4),
        "p_c_se": round(sd / math.sqrt(max(n - 1, 1)), 4),
        "ess": round(total**2 / sum(w * w for w in weights), 1) if total else 0.0,
        "satisfied": len(positive),
        "mean_log_w_satisfied": round(statistics.fmean(math.log(w) for w in positive), 3)
        if positive
        else None,
        "max_w": round(positive[-1], 3) if positive else None,
        "bound": round(bound, 4),
        "acceptance": round(accept, 4),
        "truncated": round(truncated, 4),
    }


def calibrate(args: argparse.Namespace) -> None:
    loaded = registry.load(args.model, "molecules")
    key = key_of(loaded, args.setting)
    print(f"key: {key}", flush=True)
    for tempering in [float(v) for v in args.tempering.split(",")]:
        for steer_from in [float(v) for v in args.steer_from.split(",")]:
            EXACT_BY_SETTING[key] = ExactSetting(
                tempering, steer_from, 0.0, args.steering, args.twist
            )
            gen = drawer(loaded, args.setting, "exact", args.batch_size,
                         {"reject.max_attempts": 1, "sampling.seed": args.seed})  # fmt: skip
            rdkit_sa.cache_clear()
            started = time.perf_counter()
            draws = gen.run(range(args.samples))
            seconds = (time.perf_counter() - started) / args.samples
            weights = [d.weights[0] for d in draws]
            summary = weight_summary(weights, args.truncation)
            if args.at_bound:  # a given M's truncated mass and acceptance on these draws
                total = sum(weights) or 1.0
                summary["at_bound"] = {
                    "bound": args.at_bound,
                    "truncated": round(
                        sum(max(0.0, w - args.at_bound) for w in weights) / total, 4
                    ),
                    "acceptance": round(
                        sum(min(1.0, w / args.at_bound) for w in weights) / len(weights), 4
                    ),
                }
            accepted = seconds / summary["acceptance"] if summary["acceptance"] else None
            row = {"setting": args.setting, "steering": args.steering, "twist": args.twist,
                   "tempering": tempering,
                   "steer_from": steer_from, "n": args.samples,
                   "s_per_draw": round(seconds, 4), **summary,
                   "s_per_accepted": round(accepted, 4) if accepted else None}  # fmt: skip
            print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default-molecules")
    parser.add_argument("--setting", default="sa3.5")
    parser.add_argument("--tempering", default="0.5,1,2")
    parser.add_argument("--steer-from", default="0.5,0.85")
    parser.add_argument("--steering", default="gradient", choices=["alm", "gradient", "twist"])
    # A folder under cdd_cli/assets, or any folder by its absolute path (`cdd train twist`).
    parser.add_argument("--twist", default=None)
    parser.add_argument("--samples", type=int, default=128)
    # Another seed than the calibration's checks its M out of sample.
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--at-bound", type=float, default=None)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--truncation", type=float, default=0.01)
    args = parser.parse_args()
    calibrate(args)


if __name__ == "__main__":
    main()
