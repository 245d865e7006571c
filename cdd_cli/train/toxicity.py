"""`cdd train toxicity-surrogate`: a soft-token toxicity classifier over a text vocabulary.

GPT-2's by default; `--model NAME` trains one for that text model's tokenizer (SmolLM2's for
`smollm2-a2d`), since the classifier reads the model's soft tokens through its own embedding.

Data: Davidson et al.'s labelled tweets (`labeled_data.csv`); classes 0 (hate speech) and 1
(offensive) are toxic, 2 (neither) is not. A fixed hash of the tweet text puts 10% in a test
split, which is also where the toxicity bench takes its held-out prompts from (`split_of`).

The GPT-2 classifier reads any GPT-2-tokenized diffusion model's soft tokens through its own
embedding table, so one surrogate serves our model and mdlm-owt alike. During training half of
the batches see soft tokens: each position's embedding is mixed with that of a random token
(the ALM projection feeds such mixtures), without materialising [B, L, V] tensors.

Tweets alone teach a poor prior for other text: trained on them only, the classifier gave
"The state of the Union is strong, and our economy continues to grow." 0.96 (83% of the
tweets are toxic, and none is formal prose). With `--corpus DIR`, random spans (8-64 tokens)
of that text corpus are added with soft labels from an independent offline judge
(alt-profanity-check: a distillation, as the toxicity issue suggests); 10% of the spans are
held out to report the agreement. Where that judge is also used for evaluation, it is then no
longer fully independent of the constraint: the model card says so.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from cdd_cli.errors import InputError
from cdd_cli.evaluate.text import ProfanityJudge
from cdd_cli.models.surrogate import SoftTokenRegressor, SurrogateConfig, save_surrogate
from cdd_cli.models.tokenizers import Gpt2Tokenizer, TextTokenizer
from cdd_cli.train.resume import TrainingState
from cdd_cli.train.text import corpus_files, tokenize_corpus

TEST_PERCENT = 10
MAX_TOKENS = 64  # tweets are short; longer ones are truncated for training only
MAX_LENGTH = 1024  # positions the classifier can read (mdlm-owt's length)


@dataclass
class Tweet:
    text: str
    toxic: bool


def split_of(text: str) -> str:
    """'test' for a fixed 10% of texts (by hash), else 'train'."""
    bucket = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") % 100
    return "test" if bucket < TEST_PERCENT else "train"


def read_davidson(path: Path) -> list[Tweet]:
    path = Path(path)
    if path.is_dir():
        path = path / "labeled_data.csv"
    if not path.is_file():
        raise InputError(f"--data {path}: no Davidson labeled_data.csv")
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"class", "tweet"} <= set(rows[0]):
        raise InputError(f"{path}: expected columns 'class' and 'tweet'")
    return [Tweet(html.unescape(r["tweet"]).strip(), r["class"] in ("0", "1")) for r in rows]


def pad(x: torch.Tensor, width: int, value: int | bool) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)


def corpus_spans(folder: Path, tokenizer: TextTokenizer, count: int, seed: int) -> list[str]:
    """`count` random spans of 8-64 tokens from the .txt files of `folder`, as text."""
    stream = tokenize_corpus(corpus_files(folder, "--corpus"), tokenizer)
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 65, (count,), generator=gen)
    starts = torch.randint(len(stream) - 64, (count,), generator=gen)
    return [
        tokenizer.bpe.decode(stream[s : s + n].tolist())
        for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
    ]


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Probability that a random positive outscores a random negative (ties count half)."""
    order = torch.argsort(scores)
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=scores.dtype)
    for value in scores.unique():  # average ranks over ties
        tied = scores == value
        ranks[tied] = ranks[tied].mean()
    positives = labels.bool()
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@torch.no_grad()
def predict(
    model: SoftTokenRegressor, ids: torch.Tensor, mask: torch.Tensor, batch: int = 512
) -> torch.Tensor:
    return torch.cat(
        [
            torch.sigmoid(model(ids[i : i + batch], mask[i : i + batch]))
            for i in range(0, len(ids), batch)
        ]
    )


def train_toxicity_surrogate(
    data: Path,
    out: Path,
    corpus: Path | None,
    corpus_spans_count: int,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    log: Callable[[str], None],
    on_step: Callable[[int, float], None],
    save_every: int = 200,
    tokenizer: TextTokenizer | None = None,
) -> dict:
    """Train (or resume, from OUT's train state) and save the classifier in OUT."""
    tokenizer = tokenizer or Gpt2Tokenizer()
    tweets = read_davidson(data)
    train = [t for t in tweets if split_of(t.text) == "train"]
    test = [t for t in tweets if split_of(t.text) == "test"]
    train_ids, train_mask = tokenizer.encode_padded([t.text for t in train], MAX_TOKENS)
    test_ids, test_mask = tokenizer.encode_padded([t.text for t in test], MAX_TOKENS)
    train_y = torch.tensor([t.toxic for t in train], dtype=torch.float32)
    test_y = torch.tensor([t.toxic for t in test], dtype=torch.float32)
    log(
        f"Davidson: {len(train):,} training tweets ({train_y.mean():.1%} toxic), "
        f"{len(test):,} test tweets"
    )
    span_test = None
    if corpus is not None:
        spans = corpus_spans(corpus, tokenizer, corpus_spans_count, seed)
        teacher = ProfanityJudge()
        labels = torch.tensor(teacher.score(spans), dtype=torch.float32)
        held = len(spans) // 10
        span_ids, span_mask = tokenizer.encode_padded(spans, MAX_TOKENS)
        span_test = (span_ids[:held], span_mask[:held], labels[:held])
        width = max(train_ids.shape[1], span_ids.shape[1])
        train_ids = torch.cat(
            [pad(train_ids, width, tokenizer.eos_id), pad(span_ids[held:], width, tokenizer.eos_id)]
        )
        train_mask = torch.cat([pad(train_mask, width, False), pad(span_mask[held:], width, False)])
        train_y = torch.cat([train_y, labels[held:]])
        log(
            f"corpus {corpus}: {len(spans):,} spans labelled by {teacher.name} "
            f"(mean {labels.mean():.3f}, {(labels >= 0.5).float().mean():.1%} >= 0.5), "
            f"{held:,} held out"
        )
    torch.manual_seed(seed)
    config = SurrogateConfig(vocab_size=len(tokenizer), max_length=MAX_LENGTH, target="toxicity")
    model = SoftTokenRegressor(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    steps_per_epoch = math.ceil(len(train_ids) / batch_size)
    total = epochs * steps_per_epoch
    settings = {
        "data": data.name,
        "corpus": None if corpus is None else corpus.name,
        "corpus_spans": corpus_spans_count if corpus is not None else 0,
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "tokenizer": tokenizer.kind,
        "vocab_size": len(tokenizer),
    }
    state = TrainingState(model, optimizer, {"batches": gen}, settings)
    if state.resume(out):
        log(f"resuming {out} at step {state.step}")
    started = time.perf_counter()
    step = state.step
    for _ in range(step // steps_per_epoch, epochs):
        # Resumed inside an epoch: its order as saved, from the first batch not yet taken.
        done = step % steps_per_epoch
        order = state.extra["order"] if done else torch.randperm(len(train_ids), generator=gen)
        for i in range(done * batch_size, len(train_ids), batch_size):
            index = order[i : i + batch_size]
            width = int(train_mask[index].sum(1).max())
            ids, mask, y = train_ids[index, :width], train_mask[index, :width], train_y[index]
            model.train()
            x = model.embed(ids)
            if step % 2:  # soft tokens: mass c on the true token, 1 - c on a random one
                c = torch.empty(len(ids), 1, 1).uniform_(0.4, 1.0, generator=gen)
                other = torch.randint(len(tokenizer) - 1, ids.shape, generator=gen)
                x = c * x + (1 - c) * model.embed(other)
            loss = F.binary_cross_entropy_with_logits(model.score(x, mask), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            lr_now = lr * 0.5 * (1 + math.cos(math.pi * step / total))
            for group in optimizer.param_groups:
                group["lr"] = lr_now
            optimizer.step()
            step += 1
            on_step(step, loss.item())
            if step % save_every == 0 or step == total:
                state.step, state.extra = step, {"order": order}
                state.save(out)
    model.eval()
    scores = predict(model, test_ids, test_mask)
    metrics = {
        "test_tweets": len(test),
        "test_toxic_share": round(test_y.mean().item(), 4),
        "roc_auc": round(roc_auc(scores, test_y), 4),
        "accuracy": round(((scores >= 0.5).float() == test_y).float().mean().item(), 4),
        "majority_baseline_accuracy": round(max(test_y.mean().item(), 1 - test_y.mean().item()), 4),
        "train_minutes": round((time.perf_counter() - started) / 60, 1),
    }
    if span_test is not None:
        ids, mask, teacher_scores = span_test
        mine = predict(model, ids, mask)
        metrics["corpus_spans_held_out"] = len(ids)
        metrics["corpus_mae_vs_teacher"] = round((mine - teacher_scores).abs().mean().item(), 4)
        metrics["corpus_mean_score"] = round(mine.mean().item(), 4)
    log(f"held-out: {json.dumps(metrics)}")
    model.requires_grad_(False)
    out.mkdir(parents=True, exist_ok=True)
    save_surrogate(
        model,
        out,
        {
            "output": "logit",  # the constraint's score is sigmoid(output), in [0, 1]
            "tokenizer": tokenizer.kind,
            "prefix_id": tokenizer.eos_id,  # read with a tokenizers file (FileTokenizer)
            "mask_id": tokenizer.mask_id,
            "training_data": "davidson labeled_data.csv (t-davidson @ cb50f7e)"
            + ("" if corpus is None else f" + {corpus_spans_count} spans of {corpus.name}/"),
            "epochs": epochs,
            "metrics": metrics,
        },
    )
    tokenizer.save(out)
    state.discard(out)
    return metrics
