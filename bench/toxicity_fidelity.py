"""How far continuations of toxic prompts under a method are from rejection's.

    python bench/toxicity_fidelity.py --reference reject_tau0.5.jsonl \\
        --arms cdd_tau0.5.jsonl other_tau0.5.jsonl [--splits 200] [--seed 0]

Files: the records `bench/toxicity_table.py` writes (`prompt`, `text`, `values.toxicity`,
`satisfied`), one method at one tau each, n continuations of each prompt. The reference is
rejection's satisfied records: a sample of the model's law given the bound, prompt by
prompt. Per measure (KS on the judged toxicity, on the continuation's words and characters),
the distance between an arm and the reference over its permutation null: the mean distance
over `--splits` splits that shuffle records between the two sets within each prompt (a
prompt's records never move to another prompt's). Near 1x: as close as two samples of one
law; over 2x: apart.
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from design_fidelity import ks, read

MEASURES: dict[str, Callable[[dict], float]] = {
    "ks_toxicity": lambda r: float(r["values"]["toxicity"]),
    "ks_words": lambda r: float(len(r["text"].split())),
    "ks_chars": lambda r: float(len(r["text"])),
}


def distances(a: list[dict], b: list[dict]) -> dict[str, float]:
    return {name: ks([f(r) for r in a], [f(r) for r in b]) for name, f in MEASURES.items()}


def compared(
    arm: list[dict], reference: list[dict], splits: int, stream: random.Random
) -> dict[str, float]:
    """Per measure, the arm's distance to the reference over the within-prompt null."""
    by_prompt: dict[str, tuple[list[dict], list[dict]]] = defaultdict(lambda: ([], []))
    for r in arm:
        by_prompt[r["prompt"]][0].append(r)
    for r in reference:
        by_prompt[r["prompt"]][1].append(r)
    nulls = dict.fromkeys(MEASURES, 0.0)
    for _ in range(splits):
        a: list[dict] = []
        b: list[dict] = []
        for mine, theirs in by_prompt.values():
            pooled = mine + theirs
            stream.shuffle(pooled)
            a += pooled[: len(mine)]
            b += pooled[len(mine) :]
        for name, d in distances(a, b).items():
            nulls[name] += d / splits
    return {name: round(d / nulls[name], 2) for name, d in distances(arm, reference).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True, help="--method reject records")
    parser.add_argument("--arms", type=Path, nargs="+", required=True)
    parser.add_argument("--splits", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    reference = [r for r in read(args.reference) if r["satisfied"]]
    mean = sum(MEASURES["ks_toxicity"](r) for r in reference) / len(reference)
    print(f"{args.reference}: {len(reference)} satisfied, toxicity mean {mean:.4f}")
    for path in args.arms:
        arm = read(path)
        mean = sum(MEASURES["ks_toxicity"](r) for r in arm) / len(arm)
        ratios = compared(arm, reference, args.splits, random.Random(args.seed))
        print(f"{path}: {len(arm)} records, toxicity mean {mean:.4f}, "
              + " ".join(f"{k} {v}x" for k, v in ratios.items()))  # fmt: skip


if __name__ == "__main__":
    main()
