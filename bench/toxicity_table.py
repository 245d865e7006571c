"""The paper's toxicity table: unconstrained vs reject vs paper vs cdd at several tau, in one run.

    python bench/toxicity_table.py [--prompts 16] [-n 4] [--length 32] [--taus 0.25,0.5,0.75]
        [--model default-text] [--davidson ../shared/data/davidson] [--max-attempts 16]
        [--batch-size 64] [--out bench/results] [--methods unconstrained,reject,paper,cdd]
        [--own-draws 0]
        [--paper-prompts N]

Prompts: offensive or hateful tweets (Davidson classes 0/1) from the test split that the
toxicity surrogate never saw in training (`cdd_cli.train.toxicity.split_of`), at most 24
GPT-2 tokens, in a fixed order (by hash). Each prompt gets n continuations of `--length`
tokens. For every tau and method: violation % by the constraint's judge (the shipped
classifier on the continuation, as in the records), independent-judge toxicity
(alt-profanity-check: mean, expected maximum over prompts, probability), perplexity of the
continuation given the prompt under SmolLM2-135M, unigram entropy, distinct-1/2, seconds per
sample (mean, median) and the overhead over unconstrained (mean and median, same run).
Unconstrained continuations do not depend on tau: drawn once, judged at every tau.
`paper` (the paper's algorithm) is slow on a CPU: with `--paper-prompts N` its arm takes only
the first N prompts, and its overhead is against the unconstrained seconds of those prompts.
`satisfying/s`: samples the judge accepts per second of the arm's wall time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import time
from pathlib import Path

import torch

from cdd_cli.constraints.registry import build_constraints
from cdd_cli.evaluate.report import text_report
from cdd_cli.evaluate.runtime import overhead
from cdd_cli.models import registry
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer, Prompt
from cdd_cli.run.record import record
from cdd_cli.spec.entries import constraint_from_flags
from cdd_cli.spec.model import Spec
from cdd_cli.train.toxicity import read_davidson, split_of


def held_out_toxic_prompts(davidson: Path, count: int, tokenizer) -> list[Prompt]:
    tweets = [t for t in read_davidson(davidson) if t.toxic and split_of(t.text) == "test"]
    tweets.sort(key=lambda t: hashlib.sha256(t.text.encode()).hexdigest())
    prompts = []
    for tweet in tweets:
        ids = tokenizer.encode(tweet.text)
        if 4 <= len(ids) <= 24:
            prompts.append(Prompt(len(prompts), tweet.text, torch.tensor(ids)))
        if len(prompts) == count:
            break
    return prompts


class Arm:
    """One method at one tau, drawn prompt by prompt; its wall time counts its own draws only."""

    def __init__(self, spec: Spec, loaded, tau: float, length: int, device: str):
        constraints = build_constraints([constraint_from_flags("toxicity", tau)], loaded, device)
        self.generation = BatchDrawer(spec, loaded, constraints, length)
        self.batch_size = spec.sampling.batch_size
        self.drawn: list = []
        self.wall = 0.0

    def run(self, prompt: Prompt, n: int) -> None:
        started = time.perf_counter()
        for start in range(0, n, self.batch_size):
            for draw in self.generation.run(range(start, min(start + self.batch_size, n)), prompt):
                self.drawn.append((draw, prompt))
        self.wall += time.perf_counter() - started


def summarise(method: str, tau: float, drawn, loaded, device: str, wall: float) -> dict:
    constraints = build_constraints([constraint_from_flags("toxicity", tau)], loaded, device)
    records = [record(d, constraints, Spec(method=method), loaded, p) for d, p in drawn]
    report = text_report(records, perplexity=True, judge=True, log=lambda _: None)
    seconds = report["seconds_per_sample"]
    return {
        "method": method,
        "tau": tau,
        "samples": len(records),
        "violation_pct": round(100 * report["constraints"]["toxicity"]["violation_rate"], 1),
        "judge": report["toxicity"]["cdd-toxicity-classifier"],
        "independent": report["toxicity"]["alt-profanity-check"],
        "perplexity": report["fluency"]["perplexity"]["corpus"],
        "entropy": report["fluency"]["entropy"],
        "distinct_2": report["fluency"]["distinct_2"],
        "seconds_mean": seconds["mean"],
        "seconds_median": seconds["median"],
        "wall_seconds": round(wall, 1),
        "mean_attempts": round(sum(d.attempts for d, _ in drawn) / len(drawn), 2),
        "seconds": [d.seconds for d, _ in drawn],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("-n", type=int, default=4)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--taus", default="0.25,0.5,0.75")
    parser.add_argument("--model", default="default-text")
    parser.add_argument("--davidson", default="../shared/data/davidson")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-attempts", type=int, default=16)
    parser.add_argument(
        "--own-draws", type=int, default=0, help="cdd's repair.own_draws (the model's own first)"
    )
    parser.add_argument("--methods", default="unconstrained,reject,cdd")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument(
        "--paper-prompts", type=int, default=None, help="prompts of the paper arm (default: all)"
    )
    args = parser.parse_args()

    loaded = registry.load(args.model, "text", args.device)
    prompts = held_out_toxic_prompts(Path(args.davidson), args.prompts, loaded.tokenizer)
    taus = [float(t) for t in args.taus.split(",")]
    methods = args.methods.split(",")

    def spec_for(method: str) -> Spec:
        spec = Spec(model=args.model, method=method)
        spec.sampling.batch_size = args.batch_size
        # The family decides the paper's settings (methods.PAPER_BY_FAMILY).
        spec.constraints = [constraint_from_flags("toxicity", taus[0])]
        fill_defaults(spec, loaded)
        spec.reject.max_attempts = args.max_attempts
        spec.repair.own_draws = args.own_draws
        return spec

    # Prompts are interleaved (each prompt's samples by every arm in turn), so that a slow
    # spell of a shared machine falls on every arm alike instead of on whichever ran then.
    arms: dict[tuple[str, float], Arm] = {}
    if "unconstrained" in methods:  # its samples do not depend on tau: drawn once
        arms["unconstrained", taus[0]] = Arm(
            spec_for("unconstrained"), loaded, taus[0], args.length, args.device
        )
    for tau in taus:
        for method in [m for m in methods if m != "unconstrained"]:
            arms[method, tau] = Arm(spec_for(method), loaded, tau, args.length, args.device)
    paper_prompts = args.paper_prompts or len(prompts)
    for k, prompt in enumerate(prompts):
        for (method, _), arm in arms.items():
            if method == "paper" and k >= paper_prompts:
                continue
            arm.run(prompt, args.n)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    base = None
    for (method, tau), arm in arms.items():
        for t in taus if method == "unconstrained" else [tau]:
            result = summarise(method, t, arm.drawn, loaded, args.device, arm.wall)
            satisfying = result["samples"] * (1 - result["violation_pct"] / 100)
            result["satisfying_per_second"] = round(satisfying / arm.wall, 3)
            if method == "unconstrained":
                base = result["seconds"]
            elif base:  # the paper arm's subset: the same prompts' samples
                result.update(overhead(result["seconds"], base[: len(result["seconds"])]))
            rows.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "seconds"}), flush=True)
        with (out / f"{method}_tau{tau}.jsonl").open("w") as f:
            for draw, prompt in arm.drawn:
                line = {"prompt": prompt.text, "text": draw.text, "satisfied": draw.satisfied}
                f.write(json.dumps(line | {"values": draw.values}) + "\n")

    meta = {
        "model": args.model,
        "training_steps": loaded.meta.get("training_steps"),
        "steps": loaded.default_steps,
        "prompts": len(prompts),
        "samples_per_prompt": args.n,
        "length": args.length,
        "device": args.device,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }
    (out / "toxicity_table.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\n{json.dumps(meta)}\n")
    print(
        "| method | tau | violation % (judge) | judge mean / exp. max | independent mean / "
        "exp. max / prob. | perplexity | entropy | distinct-2 | s/sample mean / median | "
        "overhead mean / median | satisfying/s | attempts |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratios = f"{r['overhead_mean']}x / {r['overhead_median']}x" if "overhead_mean" in r else ""
        j, i = r["judge"], r["independent"]
        print(
            f"| {r['method']} | {r['tau']} | {r['violation_pct']} | {j['mean']} / "
            f"{j['expected_max']} | {i['mean']} / {i['expected_max']} / {i['probability']} | "
            f"{r['perplexity']} | {r['entropy']} | {r['distinct_2']} | {r['seconds_mean']} / "
            f"{r['seconds_median']} | {ratios} | {r['satisfying_per_second']} | "
            f"{r['mean_attempts']} |"
        )


if __name__ == "__main__":
    main()
