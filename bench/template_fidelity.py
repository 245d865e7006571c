"""How far a template's fills under a method are from rejection's fills.

    python bench/template_fidelity.py --blank 2 --reference reject.jsonl \\
        --arms cdd.jsonl unconstrained.jsonl [--splits 200] [--seed 0] [--out rows.json]

Each file holds the records of one `cdd generate --template T --spec S` run whose spec scopes
one constraint to blank `--blank` (e.g. `{type: toxicity, tau: 0.05, blank: "2"}`). The
reference is rejection's (`--method reject`): its satisfied records, a sample of the model's
own law given the constraint. An arm (the default method, `unconstrained`) is all the
records it wrote, violations included: what its user gets. Per measure of the fills, the
distance between an arm and the reference is read against its permutation null, the mean
distance over `--splits` random splits of the pooled records into sets of the two sizes.
Goal (issue 63): every ratio <= 2 for the default method.

The measures: two-sample KS on the constrained blank's judged score and surrogate score, on
its fill's length in characters and in whitespace words, on the other blanks' fills' length
in characters, and the total variation between the two sets' word-unigram distributions of
the constrained blank's fills. `unconstrained, satisfied` (that arm's satisfied records,
rejection's law by definition) says how near 1x a sample of the same law reads.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from design_fidelity import ks, read

Measure = Callable[[list[dict], list[dict]], float]


def score(key: str, blank: str) -> Callable[[dict], float]:
    """A record's judged value (`key` "value") or surrogate score (`key` "surrogate") of the
    constraint scoped to `blank`."""

    def read(record: dict) -> float:
        (entry,) = [c for c in record["constraints"].values() if c.get("blank") == blank]
        return float(entry[key])

    return read


def fill_chars(blank: str) -> Callable[[dict], float]:
    return lambda record: float(len(record["blanks"][blank]))


def fill_words(blank: str) -> Callable[[dict], float]:
    return lambda record: float(len(record["blanks"][blank].split()))


def other_chars(blank: str) -> Callable[[dict], float]:
    return lambda record: float(sum(len(f) for b, f in record["blanks"].items() if b != blank))


def fixed_kept(record: dict) -> bool:
    """Whether the record's text is its template's fixed parts with its blanks' fills between
    them, in order: a string match of this bench's own, not the record's verdict."""
    fixed = re.split(r"\{[^{}]*\}", record["template"])
    fills = list(record["blanks"].values())
    if len(fills) != len(fixed) - 1:
        return False
    return record["text"] == "".join(a + b for a, b in zip(fixed, [*fills, ""], strict=True))


def ks_of(read: Callable[[dict], float]) -> Measure:
    return lambda a, b: ks([read(r) for r in a], [read(r) for r in b])


def unigram_tv(blank: str) -> Measure:
    """The total variation between the word-unigram distributions of two sets' fills."""

    def tv(a: list[dict], b: list[dict]) -> float:
        counts = [Counter(w for r in s for w in r["blanks"][blank].split()) for s in (a, b)]
        totals = [max(sum(c.values()), 1) for c in counts]
        words = set(counts[0]) | set(counts[1])
        return 0.5 * sum(abs(counts[0][w] / totals[0] - counts[1][w] / totals[1]) for w in words)

    return tv


def measures(blank: str) -> dict[str, Measure]:
    return {
        "ks_value": ks_of(score("value", blank)),
        "ks_surrogate": ks_of(score("surrogate", blank)),
        "ks_fill_chars": ks_of(fill_chars(blank)),
        "ks_fill_words": ks_of(fill_words(blank)),
        "ks_other_chars": ks_of(other_chars(blank)),
        "tv_unigram": unigram_tv(blank),
    }


def compared(
    arm: list[dict], reference: list[dict], blank: str, splits: int, stream: random.Random
) -> dict[str, dict[str, float]]:
    """Per measure: its distance between `arm` and `reference`, the permutation null (the
    mean over `splits` random splits of the pooled records into sets of the two sizes, every
    measure on the same splits) and their ratio."""
    named = measures(blank)
    nulls = dict.fromkeys(named, 0.0)
    pooled = arm + reference
    for _ in range(splits):
        stream.shuffle(pooled)
        a, b = pooled[: len(arm)], pooled[len(arm) :]
        for name, measure in named.items():
            nulls[name] += measure(a, b) / splits
    out = {}
    for name, measure in named.items():
        distance = measure(arm, reference)
        # A null of 0: every pooled record alike in this measure (the distance 0 too).
        ratio = round(distance / nulls[name], 2) if nulls[name] > 0 else None
        out[name] = {"distance": round(distance, 4), "null": round(nulls[name], 4),
                     "ratio": ratio}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blank", required=True, help="the blank the constraint is scoped to")
    parser.add_argument("--reference", type=Path, required=True, help="--method reject records")
    parser.add_argument("--arms", type=Path, nargs="+", required=True)
    parser.add_argument("--splits", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    drawn = read(args.reference)
    reference = [r for r in drawn if r["satisfied"]]
    print(f"reference {args.reference}: {len(reference)} satisfied of {len(drawn)}")
    arms = []
    for path in args.arms:
        records = read(path)
        arms.append((path.stem, path, records))  # the file names the arm (two may share a method)
        if records[0]["method"] == "unconstrained":
            arms.append((f"{path.stem}, satisfied", path, [r for r in records if r["satisfied"]]))
    rows = []
    value = score("value", args.blank)
    for name, path, records in arms:
        stream = random.Random(args.seed)
        row: dict = {
            "arm": name, "method": records[0]["method"], "records": str(path), "n": len(records),
            "satisfied": sum(r["satisfied"] for r in records),
            "fixed_kept": sum(map(fixed_kept, records)),
            "value_mean": round(sum(map(value, records)) / len(records), 4),
            **compared(records, reference, args.blank, args.splits, stream),
        }  # fmt: skip
        rows.append(row)
        ratios = " ".join(f"{k} {v['ratio']}x" for k, v in row.items() if isinstance(v, dict))
        print(f"{name} ({row['satisfied']}/{row['n']} satisfied, fixed parts kept "
              f"{row['fixed_kept']}/{row['n']}): {ratios}")  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
