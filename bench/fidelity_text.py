"""How far constrained text drifts from the model's own satisfying text, and an exact case.

    OMP_NUM_THREADS=1 python bench/fidelity_text.py [--samples 64] [--pool 512] [--length 32]
        [--settings toxicity0.5,exclude-a-in,no-digits,words22-28,structured]
        [--model default-text] [--batch-size 128] [--variants JSON] [--judge-site DIR]
        [--structured-samples 1024] [--out DIR]

The text half of `bench/fidelity.py` (same conventions). For each text setting the reference
is drawn by rejection: a pool of `--pool` unconstrained samples of `--length` tokens (one seed,
shared by every setting) judged in order by the setting's exact judges, the accepted ones split
into two reference sets A and B of `--samples` each (fewer where too few are accepted: the row
says). The arms draw `--samples` each with another seed, batch by batch in turn
(interleaved): `unconstrained` (one arm shared by every setting: its draws do not depend on
them), `cdd`, and each variant of `--variants` (label -> settings, e.g. '{"cdd, surrogates
from draw 8": {"repair.surrogates_from": 8}}'; "method" names another method than cdd, e.g.
'{"reject": {"method": "reject", "reject.max_attempts": 64}}'). A variant that keeps cdd
runs only on settings with a surrogate (toxicity): on the others its setting changes
nothing. Every arm samples as `cdd generate` does by default (the text nucleus, top_p 0.73),
the pool too.

Measures against A, and B against A as the noise floor at the same size:
- ks_words: two-sample Kolmogorov-Smirnov distance on the number of words (the plain word
  rules, as `word_count` counts them);
- jsd_unigram: Jensen-Shannon divergence (bits) of the pooled unigram distributions of
  lowercased whitespace words (biased upwards at small n: many words are seen once; the floor
  has the same bias);
- ks_value: KS on the judge's value where it is a number (toxicity);
- ppl_gap, entropy_gap: the absolute difference of the judged perplexity (pooled, Gemma-3-270M,
  `bench/fluency_table.py`'s judge) and of the word entropy (nats, same definition), where the
  judge is found (`--judge-site`, as fluency_table.py; without it those columns are empty).
A measure passes when the arm's distance is at most twice the floor's. cdd's samples are also
split by what settled them (`projection.settled_by`; "redrawn" for samples drawn again whole).

`structured`: a pattern with a handful of matches at a short length, where the model's
distribution over matches is computed exactly instead of by rejection (unconstrained draws
match about never). The prompt `--structured-prompt` is followed by `--structured-length`
continuation tokens that must spell one of the words of `--structured-words` (the regex is
their alternation). The reference is the unconstrained sampler's own law conditioned on
matching: for each token sequence that decodes to a match (every way to spell a word in the
continuation's tokens, followed by end-of-text where it is shorter), its probability under the
ancestral masked sampler is summed over the order in which positions are revealed, by a
dynamic programme over the set of revealed positions (each step reveals each masked position
with the schedule's probability and draws it from the model's prediction given the revealed
ones; a position still masked at the last step takes the prediction's argmax), exact up to
float rounding; then normalised over the matches. It is checked against the sampler itself:
the most frequent texts of `--structured-samples` unconstrained draws, their frequencies
beside the programme's probabilities. Both arms draw from the full prediction (top_p 1): under
the nucleus most matches have probability 0, and the conditional is not defined. cdd's word
frequencies are compared by total variation with the exact distribution, and with a reference
set A drawn from it (seeded) of the same size; the floors: a sample B of that size against the
exact distribution (mean over 200 draws) and against A.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import random
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity import ks
from fluency_table import Judge, locate_judge, pooled_ppl, word_entropy

from cdd_cli.constraints.base import Constraint, DifferentiableConstraint
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.lexical import split_words
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.diffusion.processes import MaskedProcess
from cdd_cli.models import registry
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.tokenizers import TextTokenizer
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer, Draw, Prompt
from cdd_cli.spec.entries import check_constraint
from cdd_cli.spec.model import Spec

SETTINGS: dict[str, list[tuple[str, dict]]] = {
    "toxicity0.5": [("toxicity", {"tau": 0.5})],
    # "the" and "and" accept 13% of 32-token texts (a pool of ~1,000 for 64 + 64): "a" and
    # "in", 39%, by default; both are there.
    "exclude-a-in": [("exclude", {"words": ["a", "in"]})],
    "exclude-the-and": [("exclude", {"words": ["the", "and"]})],
    "no-digits": [("regex", {"pattern": "[^0-9]*"})],
    "words22-28": [("word_count", {"min": 22, "max": 28})],
}
DEFAULT_SETTINGS = "toxicity0.5,exclude-a-in,no-digits,words22-28,structured"
STRUCTURED_WORDS = " whale, ship, sea, boat, captain"
STRUCTURED_PROMPT = "Call me Ishmael. I went down to the harbour and saw the"
POOL_SEED, ARM_SEED = 1, 2
DISTANCES = ("ks_words", "jsd_unigram", "ks_value", "ppl_gap", "entropy_gap")


# --- text measures --------------------------------------------------------------------------


def word_counts(texts: Sequence[str]) -> list[float]:
    return [float(len(split_words(t, "plain"))) for t in texts]


def unigrams(texts: Sequence[str]) -> Counter[str]:
    return Counter(w for t in texts for w in t.lower().split())


def jensen_shannon(a: Counter[str], b: Counter[str]) -> float:
    """JS divergence (bits) of two count distributions: the mean KL of each to their mixture."""
    ta, tb = sum(a.values()), sum(b.values())
    if not ta or not tb:
        return math.nan
    total = 0.0
    for word in a.keys() | b.keys():
        p, q = a[word] / ta, b[word] / tb
        m = (p + q) / 2
        total += (p * math.log2(p / m) if p else 0.0) + (q * math.log2(q / m) if q else 0.0)
    return total / 2


class Texts:
    """One set of texts with what the measures need, judged once."""

    def __init__(self, texts: list[str], values: list[float | None], judge: Judge | None):
        self.texts, self.values = texts, values
        self.words = word_counts(texts)
        self.unigrams = unigrams(texts)
        scored = judge.score(texts) if judge is not None and texts else None
        self.ppl = pooled_ppl(scored) if scored is not None else None
        self.entropy = word_entropy(texts) if texts else math.nan


def distances(arm: Texts, ref: Texts) -> dict[str, float | None]:
    numbers = [v for v in arm.values if v is not None], [v for v in ref.values if v is not None]
    continuous = any(v not in (0.0, 1.0) for v in numbers[1])  # a score, not a yes/no
    return {
        "ks_words": ks(arm.words, ref.words),
        "jsd_unigram": jensen_shannon(arm.unigrams, ref.unigrams),
        "ks_value": ks(*numbers) if continuous else None,
        "ppl_gap": abs(arm.ppl - ref.ppl) if arm.ppl is not None and ref.ppl is not None else None,
        "entropy_gap": abs(arm.entropy - ref.entropy),
    }


def accept_in_order(constraints: list[Constraint], texts: list[str]) -> list[int]:
    """Indices of the texts a rejection sampler keeps: every judge satisfied (text judges
    remember nothing, so order only fixes which are kept first)."""
    ok = [True] * len(texts)
    for c in constraints:
        ok = [good and c.satisfied(v) for good, v in zip(ok, c.judge(texts), strict=True)]
    return [i for i, good in enumerate(ok) if good]


def first_values(constraints: list[Constraint], texts: list[str]) -> list[float | None]:
    return constraints[0].judge(texts) if texts else []


class Arm:
    """One method drawing one setting's samples batch by batch."""

    def __init__(self, generation: BatchDrawer, prompt: Prompt | None = None):
        self.generation, self.prompt = generation, prompt
        self.draws: list[Draw] = []
        self.wall = 0.0

    def run(self, indices: range) -> None:
        started = time.perf_counter()
        self.draws += self.generation.run(indices, self.prompt)
        self.wall += time.perf_counter() - started


def stage(d: Draw) -> str:
    return "redrawn" if d.attempts > 1 else (d.projection.get("settled_by") or "none")


def stage_split(draws: list[Draw], ref: Texts) -> dict[str, dict]:
    groups: dict[str, list[str]] = {}
    for d in draws:
        groups.setdefault(stage(d), []).append(d.text)
    return {
        by: {
            "count": len(texts),
            "mean_words": round(statistics.fmean(word_counts(texts)), 2),
            "ks_words": round(ks(word_counts(texts), ref.words), 3),
            "jsd_unigram": round(jensen_shannon(unigrams(texts), ref.unigrams), 3),
        }
        for by, texts in sorted(groups.items())
    }


# --- the exact case -------------------------------------------------------------------------


def token_ids(tokenizer: TextTokenizer) -> dict[str, int]:
    """Each token's text -> its id (specials left out)."""
    ids_of: dict[str, int] = {}
    for i, text in enumerate(tokenizer.token_texts()):
        if i not in (tokenizer.eos_id, tokenizer.mask_id):
            ids_of.setdefault(text, i)
    return ids_of


def spellings(word: str, length: int, ids_of: dict[str, int], eos_id: int) -> list[tuple[int, ...]]:
    """Every sequence of `length` token ids whose decoded text is `word`: the word cut into
    pieces that are each one token, then end-of-text where fewer than `length` (the
    positions after it would be free: refused)."""
    found: list[tuple[int, ...]] = []
    n = len(word)
    for pieces in range(1, length + 1):
        for cuts in itertools.combinations(range(1, n), pieces - 1):
            bounds = (0, *cuts, n)
            parts = [word[a:b] for a, b in itertools.pairwise(bounds)]
            if all(p in ids_of for p in parts):
                ids = tuple(ids_of[p] for p in parts)
                if pieces < length - 1:
                    raise SystemExit(
                        f"{word!r} fits {pieces} token(s): free positions after the end of "
                        f"{length}; choose a shorter --structured-length"
                    )
                found.append(ids + ((eos_id,) if pieces < length else ()))
    return found


def sampler_probabilities(
    generation: BatchDrawer, prompt: Prompt, sequences: list[tuple[int, ...]]
) -> list[float]:
    """The probability that the ancestral masked sampler of `generation` writes each of
    `sequences` (continuation ids after `prompt`): a sum over which positions are revealed at
    which step, by a programme over the set of revealed positions."""
    process = generation.process
    if not isinstance(process, MaskedProcess) or type(process) is not MaskedProcess:
        raise SystemExit("the exact case needs the ancestral masked sampler")
    if generation.loaded.config.time_conditioning:
        raise SystemExit("the exact case needs a model that ignores the time (one prediction)")
    length = len(sequences[0])
    keep = len(prompt.ids)
    subsets = range(1 << length)
    mask = process.mask_id
    # Every sequence with every subset of its positions revealed: one prediction each.
    rows = []
    for seq in sequences:
        for s in subsets:
            row = [mask if not s >> j & 1 else t for j, t in enumerate(seq)]
            rows.append([*prompt.ids.tolist(), *row])
    x = torch.tensor(rows)
    with torch.no_grad():
        probs = torch.cat(
            [generation.sampler.predict(x[k : k + 256], 1.0) for k in range(0, len(x), 256)]
        )[:, keep:]
    shaped = process.temperature_top_p(probs)
    shaped = shaped / shaped.sum(-1, keepdim=True)
    times = process.timesteps(generation.spec.sampling.steps).tolist()
    reveal = [
        process.unmask_probability(times[i], times[i + 1])
        for i in range(generation.spec.sampling.steps - 1)
    ]
    out = []
    for k, seq in enumerate(sequences):
        draw = shaped[k * len(subsets) : (k + 1) * len(subsets)].double()  # [2^L, L, V]
        top = probs[k * len(subsets) : (k + 1) * len(subsets)].argmax(-1)  # [2^L, L]
        f = [0.0] * len(subsets)
        f[0] = 1.0
        for p in reveal:
            nxt = [0.0] * len(subsets)
            for s in subsets:
                if not f[s]:
                    continue
                masked = [j for j in range(length) if not s >> j & 1]
                for n in range(len(masked) + 1):
                    for new in itertools.combinations(masked, n):
                        w = p**n * (1 - p) ** (len(masked) - n)
                        for j in new:
                            w *= float(draw[s, j, seq[j]])
                        nxt[s | sum(1 << j for j in new)] += f[s] * w
            f = nxt
        total = 0.0
        for s in subsets:  # what is still masked takes the prediction's argmax
            masked = [j for j in range(length) if not s >> j & 1]
            if all(int(top[s, j]) == seq[j] for j in masked):
                total += f[s]
        out.append(total)
    return out


def total_variation(a: dict[str, float], b: dict[str, float]) -> float:
    return sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in a.keys() | b.keys()) / 2


def frequencies(texts: Sequence[str]) -> dict[str, float]:
    return {k: v / len(texts) for k, v in Counter(texts).items()}


def structured(
    args: argparse.Namespace, loaded: LoadedModel, make: Callable[..., BatchDrawer]
) -> list[dict]:
    words = [w for w in args.structured_words.split(",") if w]
    pattern = "(?:" + "|".join(re.escape(w) for w in words) + ")"
    tokenizer = loaded.tokenizer
    if not isinstance(tokenizer, TextTokenizer):
        raise SystemExit(f"{args.model}: the exact case needs a text model")
    ids_of = token_ids(tokenizer)
    ids = torch.tensor(tokenizer.encode(args.structured_prompt), dtype=torch.long)
    prompt = Prompt(0, args.structured_prompt, ids)
    top_p = {"sampling.top_p": 1.0}
    if args.structured_steps:
        top_p["sampling.steps"] = args.structured_steps
    # The programme is checked against the sampler where its law is concentrated enough for
    # frequencies to tell: the same sampler, drawing at a low temperature.
    cold = {**top_p, "sampling.temperature": args.check_temperature}
    check_gen = make("unconstrained", [], cold, args.structured_length)
    plain = make("unconstrained", [], top_p, args.structured_length)
    regex = [("regex", {"pattern": pattern})]
    arms = {"sampler check": Arm(check_gen, prompt)}
    for count in [int(c) for c in args.lookahead.split(",")]:
        label = f"cdd, look-ahead {count}" if count else "cdd"
        overrides = {**top_p, "projection.lookahead": count}
        arms[label] = Arm(make("cdd", regex, overrides, args.structured_length), prompt)
    labels = [label for label in arms if label != "sampler check"]
    n = args.structured_samples
    for start in range(0, n, args.batch_size):
        for arm in arms.values():
            arm.run(range(start, min(start + args.batch_size, n)))

    def exact_of(texts: list[str], generation: BatchDrawer) -> dict[str, float]:
        seqs = {t: spellings(t, args.structured_length, ids_of, tokenizer.eos_id) for t in texts}
        flat = [s for t in texts for s in seqs[t]]
        probs = iter(sampler_probabilities(generation, prompt, flat) if flat else ())
        return {t: sum(next(probs) for _ in seqs[t]) for t in texts}

    # The programme against the sampler: the most frequent texts of the cold draws.
    seen = Counter(d.text for d in arms["sampler check"].draws)
    common = [t for t, _ in seen.most_common(9) if t][:8]  # "": an end first, then free
    predicted = exact_of(common, check_gen)
    check = [
        {
            "text": t,
            "count": seen[t],
            "expected": round(n * predicted[t], 1),
            "z": round((seen[t] - n * predicted[t]) / math.sqrt(max(n * predicted[t], 1e-9)), 2),
        }
        for t in common
    ]
    mass = exact_of(words, plain)
    accept = sum(mass.values())
    exact = {w: m / accept for w, m in mass.items()}
    rng = random.Random(0)

    def sample(k: int) -> dict[str, float]:
        return frequencies(rng.choices(list(exact), weights=list(exact.values()), k=k))

    a, b = sample(n), sample(n)
    floor_exact = statistics.fmean(total_variation(sample(n), exact) for _ in range(200))
    row = {
        "setting": "structured",
        "pattern": pattern,
        "prompt": args.structured_prompt,
        "length": args.structured_length,
        "steps": plain.spec.sampling.steps,
        "n": n,
        "acceptance_unconstrained": accept,
        "exact": {w: round(p, 4) for w, p in exact.items()},
        "tv_floor_exact": round(floor_exact, 4),
        "tv_b_a": round(total_variation(b, a), 4),
        "sampler_check": check,
        "check_temperature": args.check_temperature,
        "seconds_per_sample": {k: round(v.wall / n, 4) for k, v in arms.items()},
        "arms": {},
    }
    for label in labels:
        texts = [d.text for d in arms[label].draws]
        found = frequencies(texts)
        tv = total_variation(found, exact)
        row["arms"][label] = {
            "frequencies": {w: round(found.get(w, 0.0), 4) for w in exact},
            "outside_matches": sum(t not in exact for t in texts),
            "tv_exact": round(tv, 4),
            "tv_a": round(total_variation(found, a), 4),
            "by_stage": dict(Counter(stage(d) for d in arms[label].draws)),
            "passes": tv <= 2 * floor_exact,
        }
    print(json.dumps(row), flush=True)
    return [row]


# --- the run --------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--pool", type=int, default=512, help="unconstrained draws judged")
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--settings", default=DEFAULT_SETTINGS)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--model", default="default-text")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--variants",
        default='{"cdd, surrogates from draw 8": {"repair.surrogates_from": 8}}',
        help="JSON: label -> settings",
    )
    parser.add_argument("--judge", type=Path, default=None, help="the judge's GGUF file")
    parser.add_argument("--judge-site", type=Path, default=None)
    parser.add_argument("--structured-words", default=STRUCTURED_WORDS)
    parser.add_argument("--structured-prompt", default=STRUCTURED_PROMPT)
    parser.add_argument("--structured-length", type=int, default=2)
    parser.add_argument("--structured-samples", type=int, default=1024)
    parser.add_argument(
        "--structured-steps", type=int, default=0, help="structured: steps (0: the model's)"
    )
    parser.add_argument(
        "--lookahead",
        default="0,16",
        help="structured: cdd's arms by projection.lookahead (0: the layout alone)",
    )
    parser.add_argument("--check-temperature", type=float, default=0.25)
    parser.add_argument("--out", default="bench/results/fidelity_text")
    args = parser.parse_args()
    started = time.perf_counter()

    loaded = registry.load(args.model, "text", args.device)
    settings = [s for s in args.settings.split(",") if s != "structured"]
    judge: Judge | None = None
    if args.judge or args.judge_site:
        judge = Judge(locate_judge(args.judge, args.judge_site))

    def specs(entries: list[tuple[str, dict]], name: str) -> list[ConstraintSpec]:
        out = [ConstraintSpec(t, dict(o), f"fidelity {name}") for t, o in entries]
        for s in out:
            check_constraint(s)
        return out

    def make(
        method: str,
        entries: list[tuple[str, dict]],
        overrides: dict | None = None,
        length: int | None = None,
        seed: int = ARM_SEED,
    ) -> BatchDrawer:
        spec = Spec()
        spec.model, spec.method = args.model, method
        spec.constraints = specs(entries, method)
        spec.sampling.batch_size = args.batch_size
        fill_defaults(spec, loaded)
        spec.sampling.seed = seed
        for key, value in (overrides or {}).items():
            section, field = key.split(".")
            setattr(getattr(spec, section), field, value)
        constraints = build_constraints(spec.constraints, loaded, args.device)
        return BatchDrawer(spec, loaded, constraints, length or args.length)

    rows: list[dict] = []
    if settings:
        variants = {"cdd": ("cdd", {})}
        for label, o in json.loads(args.variants).items():
            variants[label] = (o.pop("method", "cdd"), o)
        pool_gen = make("unconstrained", [], seed=POOL_SEED)
        pool: list[str] = []
        for start in range(0, args.pool, args.batch_size):
            batch = range(start, min(start + args.batch_size, args.pool))
            pool += [d.text for d in pool_gen.run(batch)]
        print(f"pool: {len(pool)} draws in {time.perf_counter() - started:.0f} s", flush=True)

        arms: dict[tuple[str, str], Arm] = {("*", "unconstrained"): Arm(make("unconstrained", []))}
        for name in settings:
            judges = build_constraints(specs(SETTINGS[name], name), loaded, args.device)
            surrogate = any(isinstance(c, DifferentiableConstraint) for c in judges)
            for label, (method, overrides) in variants.items():
                if label == "cdd" or method != "cdd" or surrogate:
                    arms[name, label] = Arm(make(method, SETTINGS[name], overrides))
        for start in range(0, args.samples, args.batch_size):
            for arm in arms.values():
                arm.run(range(start, min(start + args.batch_size, args.samples)))
        print(f"arms drawn at {time.perf_counter() - started:.0f} s", flush=True)

        for name in settings:
            judges = build_constraints(specs(SETTINGS[name], name), loaded, args.device)
            kept = [pool[i] for i in accept_in_order(judges, pool)]
            size = min(args.samples, len(kept) // 2)
            ref_a, ref_b = kept[:size], kept[size : 2 * size]
            a = Texts(ref_a, first_values(judges, ref_a), judge)
            b = Texts(ref_b, first_values(judges, ref_b), judge)
            floor = distances(b, a)
            base = {
                "setting": name,
                "acceptance": round(len(kept) / len(pool), 4),
                "reference_size": size,
                "ks_expected_floor": round(0.87 * math.sqrt(2 / size), 3) if size else None,
            }
            rows.append(
                {
                    **base,
                    "arm": "floor (B vs A)",
                    "n": size,
                    **rnd(floor),
                    "mean_words": round(statistics.fmean(b.words), 2) if b.words else None,
                    "ppl": rnd1(b.ppl),
                    "ppl_a": rnd1(a.ppl),
                    "word_entropy": round(b.entropy, 3),
                    "word_entropy_a": round(a.entropy, 3),
                    "texts_a": ref_a,
                    "texts_b": ref_b,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            for (setting, label), arm in arms.items():
                if setting not in ("*", name):
                    continue
                texts = [d.text for d in arm.draws]
                values = first_values(judges, texts)
                t = Texts(texts, values, judge)
                d = distances(t, a)
                ok = [
                    all(c.satisfied(v) for c, v in zip(judges, vs, strict=True))
                    for vs in zip(*(c.judge(texts) for c in judges), strict=True)
                ]
                row = {
                    **base,
                    "arm": label,
                    "n": len(texts),
                    **rnd(d),
                    "mean_words": round(statistics.fmean(t.words), 2),
                    "ppl": rnd1(t.ppl),
                    "word_entropy": round(t.entropy, 3),
                    "satisfied": sum(ok),
                    "seconds_per_sample": round(arm.wall / max(len(arm.draws), 1), 4),
                    "over_2x_floor": [
                        k
                        for k in DISTANCES
                        if d[k] is not None and floor[k] is not None and d[k] > 2 * floor[k]
                    ],
                }
                if label != "unconstrained":
                    row["by_stage"] = stage_split(arm.draws, a)
                row["texts"] = texts
                rows.append(row)
                print(json.dumps(row), flush=True)

    structured_rows = []
    if "structured" in args.settings.split(","):
        structured_rows = structured(args, loaded, make)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": " ".join(["python", *sys.argv]),
        "model": args.model,
        "samples": args.samples,
        "pool": args.pool,
        "length": args.length,
        "batch_size": args.batch_size,
        "judge": str(judge.path) if judge else None,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "seconds": round(time.perf_counter() - started),
    }
    (out / "fidelity_text.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "structured": structured_rows}, indent=1)
    )
    report = table(rows) + "\n\n" + structured_table(structured_rows)
    (out / "fidelity_text.md").write_text(report + "\n")
    print(report)


def rnd(d: dict[str, float | None]) -> dict[str, float | None]:
    return {k: None if v is None else round(v, 4) for k, v in d.items()}


def rnd1(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def table(rows: list[dict]) -> str:
    head = (
        "| setting | acceptance | arm | n | "
        + " | ".join(DISTANCES)
        + " | words | ppl | s/sample | over 2x floor |"
    )
    lines = [head, "|" + "---|" * (len(DISTANCES) + 8)]
    fmt: Callable[[object], str] = lambda v: "" if v is None else str(v)  # noqa: E731
    for r in rows:
        over = r.get("over_2x_floor")
        lines.append(
            f"| {r['setting']} | {r['acceptance']} | {r['arm']} | {r['n']} | "
            + " | ".join(fmt(r.get(k)) for k in DISTANCES)
            + f" | {fmt(r.get('mean_words'))} | {fmt(r.get('ppl'))}"
            + f" | {fmt(r.get('seconds_per_sample'))} | {', '.join(over) if over else ''} |"
        )
    return "\n".join(lines)


def structured_table(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        lines += [
            f"Pattern `{r['pattern']}` after {r['prompt']!r}, {r['length']} tokens, "
            f"{r.get('steps')} steps, n = {r['n']}; "
            f"unconstrained acceptance (exact) {r['acceptance_unconstrained']:.2e}",
            "",
            "| match | exact | " + " | ".join(r["arms"]) + " |",
            "|---|---|" + "---|" * len(r["arms"]),
            *(
                f"| {w!r} | {p} | "
                + " | ".join(str(arm["frequencies"][w]) for arm in r["arms"].values())
                + " |"
                for w, p in r["exact"].items()
            ),
            "| TV to exact | "
            + f"{r['tv_floor_exact']} (floor) | "
            + " | ".join(str(arm["tv_exact"]) for arm in r["arms"].values())
            + " |",
            "| s/sample | | "
            + " | ".join(str(r["seconds_per_sample"][k]) for k in r["arms"])
            + " |",
            "",
            "Floor: a sample of n from the exact law against it, mean of 200; "
            + "; ".join(
                f"{k}: TV to set A {arm['tv_a']} (B vs A {r['tv_b_a']}), outside the matches "
                f"{arm['outside_matches']}, settled by {arm['by_stage']}"
                for k, arm in r["arms"].items()
            ),
            "",
            f"The programme against the sampler (unconstrained, temperature "
            f"{r['check_temperature']}, n = {r['n']}): "
            + "; ".join(
                f"{c['text']!r} {c['count']} vs {c['expected']}" for c in r["sampler_check"]
            ),
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
