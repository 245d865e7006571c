"""Lexical constraints on COLLIE and letter counting: unconstrained vs reject vs cdd.

    python bench/lexical_table.py [--records 10] [-n 2] [--length 48] [--max-attempts 8]
        [--collie ../shared/data/collie/collie.jsonl] [--model default-text] [--out bench/results]
        [--methods unconstrained,reject,cdd] [--sets c05,c07,c09,count] [--words plain|collie]

Sets (the first `--records` of each, in file order), each record translated completely:
- c05: exact word count plus given words at given positions;
- c07: must contain the given words;
- c09: an exact sentence count plus forbidden words;
- count: "How many X's are in WORD?" for words drawn from the text corpus vocabulary (fixed
  seed), letters drawn from each word; the continuation's first number must be the count.

COLLIE's own prompts are instructions for chat models; our models are not instruction-tuned,
so COLLIE sets are generated unconditionally with the record's constraints, the counting set
with its question as the prompt. `--words` picks the word rules the constraints are judged
and laid out by, as a spec's `words:` does: `plain` (the CLI's default) or `collie` (COLLIE's
own NLTK-style words and punkt-style sentences, as its checker scores them; see
cdd_cli/constraints/lexical/rules.py). For
each set and method: violation % (samples whose record is not satisfied), perplexity
(SmolLM2-135M), entropy, distinct-2, seconds per sample (mean / median), overhead over
unconstrained (same run) and the reject attempts.

Perplexity depends on length (a text's first tokens, with no context, are the least
predictable), and constraints such as c05's word count end texts early. So each constrained row
also reports `perplexity_same_length`: the unconstrained texts of the same run, each cut to the
word count of its paired constrained text (same job and sample index), and
`perplexity_free`: its own texts with the tokens of the words the constraints dictate (placed
words, include words, the count's answer) read as context but not scored, which separates the
surprisal of the requested words from how the text around them was written. Records are
written to `OUT/lexical_{set}_{method}.jsonl`.

`--rejudge DIR` judges the records a run wrote to DIR again, under both word rules, with
`check` of bench/collie_rules.py (not the records' own verdicts): which texts made under one
rules would fail the other's judges.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collie_rules import check, collie_constraints

from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.lexical import SCHEMES
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.evaluate.report import text_report
from cdd_cli.evaluate.runtime import overhead
from cdd_cli.evaluate.text import Perplexity, corpus_perplexity
from cdd_cli.models import registry
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer, Prompt
from cdd_cli.run.record import record
from cdd_cli.spec.entries import check_constraint
from cdd_cli.spec.model import Spec

WORDS_FOR_COUNTING = [
    "strawberry", "whale", "harpooneer", "leviathan", "constitution", "government",
    "congress", "mississippi", "parliament", "tempest", "committee", "bookkeeper",
    "assessment", "occurrence", "independence", "necessary", "possession", "successful",
    "embarrass", "millennium",
]  # fmt: skip


def collie_sets(path: Path, count: int) -> dict[str, list[list[ConstraintSpec]]]:
    sets: dict[str, list[list[ConstraintSpec]]] = {"c05": [], "c07": [], "c09": []}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        family = row["family"]
        if family not in sets or len(sets[family]) >= count:
            continue
        specs = []
        for c in collie_constraints(row):
            options = {k: v for k, v in c.items() if k != "type"}
            spec = ConstraintSpec(c["type"], options, f"{row['id']}")
            check_constraint(spec)
            specs.append(spec)
        sets[family].append(specs)
    return sets


def rejudge(folder: Path, sets: dict, names: list[str], methods: list[str]) -> None:
    """Print, for each records file in `folder`, how many texts fail each rules' judges."""
    print("| set | method | records | fail plain judges | fail collie judges |")
    print("|---|---|---|---|---|")
    for name in names:
        for method in methods:
            path = folder / f"lexical_{name}_{method}.jsonl"
            if not path.is_file():
                continue
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            failed = dict.fromkeys(SCHEMES, 0)
            for row in rows:
                specs, _ = sets[name][int(row["id"].split("-")[0])]
                wanted = [{"type": c.type, **c.options} for c in specs]
                for scheme in SCHEMES:
                    failed[scheme] += not all(check(row["text"], c, scheme=scheme) for c in wanted)
            print(f"| {name} | {method} | {len(rows)} | {failed['plain']} | {failed['collie']} |")


def counting_prompts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        word = rng.choice(WORDS_FOR_COUNTING)
        prompts.append(f"How many {rng.choice(sorted(set(word)))}'s are in {word}?")
    return prompts


def cut_to_words(text: str, words: int) -> str:
    """The prefix of `text` holding its first `words` whitespace-separated words."""
    ends = [m.end() for m in re.finditer(r"\S+", text)]
    if words >= len(ends):
        return text
    return text[: ends[words - 1]] if words > 0 else ""


def same_length_perplexity(baseline: list[dict], records: list[dict]) -> float | None:
    """Perplexity of the unconstrained texts cut to their paired constrained texts' lengths."""
    cut = [
        {**b, "text": cut_to_words(b["text"], len(r["text"].split()))}
        for b, r in zip(baseline, records, strict=True)
    ]
    report = text_report(cut, perplexity=True, judge=False, log=lambda _: None)
    return report["fluency"]["perplexity"]["corpus"]


def dictated_spans(text: str, words: set[str]) -> list[tuple[int, int]]:
    """Character spans of `words` standing as whole words in `text`."""
    spans = []
    for word in words:
        pattern = r"(?<![A-Za-z0-9])" + re.escape(word) + r"(?![A-Za-z0-9])"
        spans += [m.span() for m in re.finditer(pattern, text)]
    return spans


def free_perplexity(records: list[dict], dictated: list[set[str]]) -> float:
    """Perplexity of the text around the words the constraints dictate: their tokens are
    context, not scored (their own surprisal is the price of the request, not of how the
    text around them was written)."""
    scorer = Perplexity()
    texts = [r["text"] for r in records]
    spans = [dictated_spans(t, words) for t, words in zip(texts, dictated, strict=True)]
    return round(corpus_perplexity(scorer.nll([r["prompt"] for r in records], texts, spans)), 2)


def run(method, loaded, jobs, n, length, max_attempts, device, words):
    """`jobs`: (constraint specs, prompt text or None) pairs; n samples each, judged under
    the word rules `words`. Returns the records, their seconds and attempts, the wall time
    and each record's dictated words."""
    spec = Spec(method=method, words=words)
    fill_defaults(spec, loaded)
    spec.reject.max_attempts = max_attempts
    records, seconds, attempts, dictated = [], [], [], []
    started = time.perf_counter()
    for index, (specs, prompt_text) in enumerate(jobs):
        constraints = build_constraints(specs, loaded, device, words)
        ids = loaded.tokenizer.encode(prompt_text) if prompt_text else []
        prompt = Prompt(index, prompt_text, torch.tensor(ids, dtype=torch.long))
        told = [c.with_prompt(prompt_text or "", len(ids)) for c in constraints]
        placed = {w for c in told for w in [*c.pinned().values(), *c.included()]}
        generation = BatchDrawer(spec, loaded, constraints, length)
        for draw in generation.run(range(n), prompt):
            records.append(record(draw, told, spec, loaded, prompt))
            seconds.append(draw.seconds)
            attempts.append(draw.attempts)
            dictated.append(placed)
    return records, seconds, attempts, time.perf_counter() - started, dictated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("-n", type=int, default=2)
    parser.add_argument("--length", type=int, default=48)
    parser.add_argument("--max-attempts", type=int, default=8)
    parser.add_argument("--collie", default="../shared/data/collie/collie.jsonl")
    parser.add_argument("--model", default="default-text")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--methods", default="unconstrained,reject,cdd")
    parser.add_argument("--sets", default="c05,c07,c09,count")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--words", default="plain", choices=("plain", "collie"))
    parser.add_argument("--rejudge", type=Path, help="judge a run's records again, both rules")
    args = parser.parse_args()
    if args.rejudge:
        sets = {
            name: [(specs, None) for specs in jobs]
            for name, jobs in collie_sets(Path(args.collie), args.records).items()
        }
        rejudge(args.rejudge, sets, args.sets.split(","), args.methods.split(","))
        return

    loaded = registry.load(args.model, "text", args.device)
    sets = {
        name: [(specs, None) for specs in jobs]
        for name, jobs in collie_sets(Path(args.collie), args.records).items()
    }
    counting = [ConstraintSpec("count", {}, "--constraint count")]
    sets["count"] = [(counting, p) for p in counting_prompts(args.records)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.sets.split(","):
        jobs = sets[name]
        base = baseline = None
        for method in args.methods.split(","):
            records, seconds, attempts, wall, dictated = run(
                method,
                loaded,
                jobs,
                args.n,
                args.length,
                args.max_attempts,
                args.device,
                args.words,
            )
            report = text_report(records, perplexity=True, judge=False, log=lambda _: None)
            result = {
                "set": name,
                "words": args.words,
                "method": method,
                "samples": len(records),
                "violation_pct": round(
                    100 * sum(not r["satisfied"] for r in records) / len(records), 1
                ),
                "perplexity": report["fluency"]["perplexity"]["corpus"],
                "entropy": report["fluency"]["entropy"],
                "distinct_2": report["fluency"]["distinct_2"],
                "seconds_mean": report["seconds_per_sample"]["mean"],
                "seconds_median": report["seconds_per_sample"]["median"],
                "mean_attempts": round(sum(attempts) / len(attempts), 2),
                "wall_seconds": round(wall, 1),
                "example": records[0]["text"][:160],
            }
            if method == "unconstrained":
                base, baseline = seconds, records
            elif base:
                result.update(overhead(seconds, base))
                result["perplexity_same_length"] = same_length_perplexity(baseline, records)
                result["perplexity_free"] = free_perplexity(records, dictated)
            with open(out / f"lexical_{name}_{method}.jsonl", "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
            rows.append(result)
            print(json.dumps(result), flush=True)
    meta = {
        "model": args.model,
        "words": args.words,
        "training_steps": loaded.meta.get("training_steps"),
        "steps": loaded.default_steps,
        "records_per_set": args.records,
        "samples_per_record": args.n,
        "length": args.length,
        "max_attempts": args.max_attempts,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }
    (out / "lexical_table.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\n{json.dumps(meta)}\n")
    print(
        "| set | method | violation % | perplexity | unconstrained, same length | "
        "without dictated words | entropy | distinct-2 | s/sample mean / median | "
        "overhead mean / median | attempts |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratios = f"{r['overhead_mean']}x / {r['overhead_median']}x" if "overhead_mean" in r else ""
        print(
            f"| {r['set']} | {r['method']} | {r['violation_pct']} | {r['perplexity']} | "
            f"{r.get('perplexity_same_length', '')} | {r.get('perplexity_free', '')} | "
            f"{r['entropy']} | {r['distinct_2']} | "
            f"{r['seconds_mean']} / {r['seconds_median']} | "
            f"{ratios} | {r['mean_attempts']} |"
        )


if __name__ == "__main__":
    main()
