"""`cdd train sa-surrogate`: a soft-token regressor of RDKit's SA score over a model's tokens.

Data: the diffusion model's own training molecules (reference.smi.gz) for fitting and its
held-out molecules (heldout.smi.gz) for the reported error, tokenised with its tokenizer.
To make the surrogate useful away from valid molecules (the projection visits such sequences),
a corrupted copy of each molecule (1-3 random token substitutions) is added, labelled by RDKit:
its SA score when the result still parses, else INVALID_SCORE (the worst SA, 10). Inputs are
shown both as one-hot rows and as Gumbel-softmax relaxations of them, as the projection will.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from rdkit import Chem
from rdkit.Contrib.SA_Score import sascorer

from cdd_cli.constraints.base import Constraint
from cdd_cli.errors import InputError
from cdd_cli.evaluate.reference import read_smiles
from cdd_cli.models.surrogate import SoftTokenRegressor, SurrogateConfig, save_surrogate
from cdd_cli.models.tokenizers import Gpt2Tokenizer, MoleculeTokenizer, load_tokenizer
from cdd_cli.train.resume import TrainingState

INVALID_SCORE = 10.0


def sa_label(smiles: str) -> float:
    mol = Chem.MolFromSmiles(smiles) if smiles else None
    if mol is None or mol.GetNumAtoms() == 0:
        return INVALID_SCORE
    return float(sascorer.calculateScore(mol))


def corrupt_ids(
    ids: torch.Tensor, tokenizer: MoleculeTokenizer, gen: torch.Generator
) -> torch.Tensor:
    """1-3 substitutions by random SMILES tokens inside `<bos> ... <eos>` (inclusive of eos)."""
    out = ids.clone()
    n_smiles = len(tokenizer) - 5
    for row in out:
        end = int((row == tokenizer.eos_id).nonzero()[0])
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            position = int(torch.randint(1, end + 1, (1,), generator=gen))
            row[position] = 5 + int(torch.randint(n_smiles, (1,), generator=gen))
    return out


def labelled_set(
    smiles: list[str],
    tokenizer: MoleculeTokenizer,
    length: int,
    seed: int,
    log: Callable[[str], None],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, labels, is_clean) for the molecules and one corrupted copy of each."""
    rows = [ids for s in smiles if (ids := tokenizer.encode(s, length)) is not None]
    clean = torch.tensor(rows)
    # Minutes for a QM9-sized set: say so before the silence.
    log(f"labelling {len(clean) * 2:,} sequences (molecules and corrupted copies) with RDKit ...")
    started = time.perf_counter()
    clean_labels = [sa_label(s) for s in smiles if tokenizer.encode(s, length) is not None]
    noisy = corrupt_ids(clean, tokenizer, torch.Generator().manual_seed(seed))
    noisy_labels = [sa_label(s) for s in tokenizer.decode_batch(noisy)]
    log(
        f"labelled {len(clean) * 2:,} sequences with RDKit in {time.perf_counter() - started:.0f}s"
        f" ({sum(v == INVALID_SCORE for v in noisy_labels):,} corrupted copies invalid)"
    )
    ids = torch.cat([clean, noisy])
    labels = torch.tensor(clean_labels + noisy_labels, dtype=torch.float32)
    is_clean = torch.cat([torch.ones(len(clean)), torch.zeros(len(noisy))]).bool()
    return ids, labels, is_clean


def relax(ids: torch.Tensor, vocab_size: int, gen: torch.Generator) -> torch.Tensor:
    """Soft versions of one-hot rows: Gumbel-softmax of smoothed one-hots, random sharpness."""
    one_hot = F.one_hot(ids, vocab_size).float()
    batch = ids.shape[0]
    confidence = torch.empty(batch, 1, 1).uniform_(0.3, 0.99, generator=gen)
    probs = one_hot * confidence + (1 - confidence) / vocab_size
    gumbel = -torch.log(-torch.log(torch.rand(probs.shape, generator=gen).clamp(1e-9, 1 - 1e-9)))
    temperature = torch.empty(batch, 1, 1).uniform_(0.3, 1.0, generator=gen)
    soft = ((probs.log() + gumbel) / temperature).softmax(-1)
    use_soft = torch.rand(batch, 1, 1, generator=gen) < 0.5
    return torch.where(use_soft, soft, one_hot)


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    def ranks(x: torch.Tensor) -> torch.Tensor:
        return x.argsort().argsort().float()

    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


def evaluate(
    model: SoftTokenRegressor, ids: torch.Tensor, labels: torch.Tensor, is_clean: torch.Tensor
) -> dict:
    with torch.no_grad():
        pred = torch.cat([model(chunk) for chunk in ids.split(4096)])
    clean = is_clean
    invalid = labels == INVALID_SCORE
    return {
        "mae_clean": round(float((pred[clean] - labels[clean]).abs().mean()), 4),
        "spearman_clean": round(spearman(pred[clean], labels[clean]), 4),
        "mae_all": round(float((pred - labels).abs().mean()), 4),
        # How well it separates unreadable sequences (label 10) from molecules at a cut of 7.
        "invalid_detected": round(float((pred[invalid] > 7).float().mean()), 4),
        "valid_passed": round(float((pred[~invalid] <= 7).float().mean()), 4),
    }


@dataclass
class Fit:
    """One surrogate's training run: data, sizes and the loop's settings (resumed by them)."""

    ids: torch.Tensor  # [N, L] token rows
    labels: torch.Tensor  # [N] judge scores, or [N, K] for `targets` (NaN: no label)
    vocab_size: int
    target: str
    steps: int
    batch_size: int
    lr: float
    hidden_dim: int
    n_layers: int
    seed: int
    settings: dict  # what a resumed run must share, beyond the sizes above
    lengths: torch.Tensor | None = None  # [N] real tokens a row (None: every row is whole)
    save_every: int = 250
    targets: list[str] | None = None  # a multi-property surrogate's outputs, by name


def label_spread(labels: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per column of [N, K] labels (NaN: none), mean and standard deviation."""
    shift, scale = [], []
    for column in labels.T:
        known = column[~column.isnan()]
        shift.append(round(float(known.mean()), 6))
        scale.append(round(max(float(known.std()), 1e-3), 6))
    return shift, scale


def regression_loss(model: SoftTokenRegressor, inputs, mask, labels: torch.Tensor):
    """Smooth L1 to the labels; a multi-property surrogate's in units of each label's spread,
    over the labels that exist."""
    if model.config.targets is None:
        return F.smooth_l1_loss(model(inputs, mask), labels)
    config = model.config
    target = (labels - torch.tensor(config.shift)) / torch.tensor(config.scale)
    known = ~target.isnan()
    pred = model.normalised(inputs, mask)
    return F.smooth_l1_loss(pred[known], target[known])


def fit(run: Fit, out: Path, log: Callable[[str], None], on_step: Callable[[int, float], None]):
    """Train (or resume, from OUT's train state) a regressor of `run.labels` on soft versions
    of `run.ids`; returns it in eval mode with the minutes it took."""
    torch.manual_seed(run.seed)
    length = run.ids.shape[1]
    config = SurrogateConfig(
        run.vocab_size, length, run.target, hidden_dim=run.hidden_dim, n_layers=run.n_layers
    )
    if run.targets is not None:
        config.targets = list(run.targets)
        config.shift, config.scale = label_spread(run.labels)
    model = SoftTokenRegressor(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=run.lr, weight_decay=0.01)
    # Warm-up: 5% of the steps, at least 2 (OneCycleLR divides by zero on a shorter phase).
    warm_up = min(0.5, max(0.05, 2 / run.steps))
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, run.lr, run.steps, pct_start=warm_up)
    gen = torch.Generator().manual_seed(run.seed)
    settings = {
        **run.settings,
        "steps": run.steps,
        "batch_size": run.batch_size,
        "lr": run.lr,
        "hidden_dim": run.hidden_dim,
        "n_layers": run.n_layers,
        "seed": run.seed,
    }
    state = TrainingState(model, optimizer, {"batches": gen}, settings, schedule)
    if state.resume(out):
        log(f"resuming {out} at step {state.step}")
    started = time.perf_counter()
    for step in range(state.step + 1, run.steps + 1):
        index = torch.randint(len(run.ids), (run.batch_size,), generator=gen)
        inputs = relax(run.ids[index], run.vocab_size, gen)
        mask = None if run.lengths is None else torch.arange(length) < run.lengths[index, None]
        loss = regression_loss(model, inputs, mask, run.labels[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        on_step(step, loss.item())
        if step % run.save_every == 0 or step == run.steps:
            state.step = step
            state.save(out)
    model.eval()
    return model, round((time.perf_counter() - started) / 60, 1)


def predict(
    model: SoftTokenRegressor, ids: torch.Tensor, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    out = []
    with torch.no_grad():
        for start in range(0, len(ids), 4096):
            chunk = ids[start : start + 4096]
            mask = None
            if lengths is not None:
                mask = torch.arange(ids.shape[1]) < lengths[start : start + 4096, None]
            out.append(model(chunk, mask))
    return torch.cat(out)


def train_sa_surrogate(
    model_dir: Path,
    out: Path,
    steps: int,
    batch_size: int,
    lr: float,
    hidden_dim: int,
    n_layers: int,
    seed: int,
    log: Callable[[str], None],
    on_step: Callable[[int, float], None],
    save_every: int = 250,
    limit: int | None = None,
) -> dict:
    """Train (or resume, from OUT's train state) and save the surrogate in OUT.
    `limit`: the first N training molecules only."""
    tokenizer = load_tokenizer(model_dir)
    config_json = json.loads((model_dir / "config.json").read_text())
    length = int(config_json["model_length"])
    _, train_smiles = read_smiles(model_dir / "reference.smi.gz")
    _, test_smiles = read_smiles(model_dir / "heldout.smi.gz")
    train_smiles = train_smiles[:limit] if limit else train_smiles
    train_ids, train_y, _ = labelled_set(train_smiles, tokenizer, length, seed, log)
    test_ids, test_y, test_clean = labelled_set(test_smiles, tokenizer, length, seed + 1, log)
    settings = {"model": model_dir.name, "molecules": len(train_smiles)}
    run = Fit(
        train_ids, train_y, len(tokenizer), "sa", steps, batch_size, lr, hidden_dim, n_layers,
        seed, settings, save_every=save_every,
    )  # fmt: skip
    model, minutes = fit(run, out, log, on_step)
    metrics = evaluate(model, test_ids, test_y, test_clean)
    metrics["train_minutes"] = minutes
    log(f"held-out: {json.dumps(metrics)}")
    save_surrogate(
        model,
        out,
        extra={
            "judge": "rdkit-sa",
            "invalid_score": INVALID_SCORE,
            "trained_for": str(model_dir.name),
            "steps": steps,
            "held_out": metrics,
        },
    )
    tokenizer.save(out)
    TrainingState.discard(out)
    return metrics


@dataclass
class JudgeData:
    """Rows a judge labelled: token ids [N, L], real tokens a row (None: whole rows), scores
    (None where the judge could not score) and which rows are uncorrupted."""

    ids: torch.Tensor
    lengths: torch.Tensor | None
    scores: list[float | None]
    is_clean: torch.Tensor


def corrupt_text(
    ids: torch.Tensor, lengths: torch.Tensor, vocab: int, gen: torch.Generator
) -> torch.Tensor:
    """1-3 substitutions a row by random text tokens (not end-of-text or mask), inside each
    row's length."""
    out = ids.clone()
    for row, end in zip(out, lengths.tolist(), strict=True):
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            position = int(torch.randint(end, (1,), generator=gen))
            row[position] = int(torch.randint(vocab, (1,), generator=gen))
    return out


def molecule_rows(
    smiles: list[str], tokenizer: MoleculeTokenizer, length: int, gen: torch.Generator
) -> tuple[torch.Tensor, None, torch.Tensor]:
    """Molecules as the model lays them out, and a corrupted copy of each (inside <eos>)."""
    rows = [ids for s in smiles if (ids := tokenizer.encode(s, length)) is not None]
    clean = torch.tensor(rows)
    noisy = corrupt_ids(clean, tokenizer, gen)
    return torch.cat([clean, noisy]), None, torch.arange(2 * len(clean)) < len(clean)


def text_rows(
    stream: torch.Tensor, count: int, length: int, vocab: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`count` windows of the token stream, of random lengths in [8, length] (a continuation
    is as long as a prompt leaves it), padded to `length`; and a corrupted copy of each."""
    shortest = min(8, length)
    lengths = torch.randint(shortest, length + 1, (count,), generator=gen)
    starts = torch.randint(max(1, len(stream) - length), (count,), generator=gen)
    clean = torch.stack([stream[s : s + length].long() for s in starts.tolist()])
    noisy = corrupt_text(clean, lengths, vocab, gen)
    both = torch.cat([lengths, lengths])
    return torch.cat([clean, noisy]), both, torch.arange(2 * count) < count


def label_rows(
    rows: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor],
    decode: Callable[[list[int]], str],
    judge: Callable[[list[str]], list[float | None]],
    log: Callable[[str], None],
    what: str,
) -> JudgeData:
    ids, lengths, is_clean = rows
    token_rows = ids.tolist()
    if lengths is not None:
        token_rows = [r[:n] for r, n in zip(token_rows, lengths.tolist(), strict=True)]
    texts = [decode(r) for r in token_rows]
    log(f"labelling {len(texts):,} {what} with the judge ...")
    started = time.perf_counter()
    scores = judge(texts)
    unscored = sum(v is None for v in scores)
    log(f"labelled in {time.perf_counter() - started:.0f}s ({unscored:,} could not be scored)")
    return JudgeData(ids, lengths, scores, is_clean)


def judge_metrics(
    pred: torch.Tensor,
    labels: torch.Tensor,
    is_clean: torch.Tensor,
    satisfied: Callable[[float], bool],
) -> dict:
    """Held-out agreement with the judge: error and rank correlation (on uncorrupted rows
    and on all), and how often the surrogate and the judge agree on the constraint at tau."""
    pairs = zip(pred.tolist(), labels.tolist(), strict=True)
    agree = [satisfied(p) == satisfied(y) for p, y in pairs]
    return {
        "mae_clean": round(float((pred[is_clean] - labels[is_clean]).abs().mean()), 4),
        "spearman_clean": round(spearman(pred[is_clean], labels[is_clean]), 4),
        "mae_all": round(float((pred - labels).abs().mean()), 4),
        "spearman_all": round(spearman(pred, labels), 4),
        "agreement_at_tau": round(sum(agree) / len(agree), 4),
        "held_out_rows": len(labels),
    }


def train_judge_surrogate(
    constraint: Constraint,
    worst: float | None,
    tokenizer: MoleculeTokenizer | Gpt2Tokenizer,
    train_rows: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor],
    test_rows: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor],
    out: Path,
    fit_settings: dict,
    log: Callable[[str], None],
    on_step: Callable[[int, float], None],
) -> dict:
    """A surrogate of any constraint's judge over a model's tokens: rows labelled by the judge
    (unscorable rows take `worst`, or the worst score seen), fitted, measured on held-out rows
    and saved in OUT with the tokenizer (`surrogate: OUT` in a spec entry uses it)."""
    train = label_rows(train_rows, tokenizer.decode, constraint.judge, log, "training rows")
    test = label_rows(test_rows, tokenizer.decode, constraint.judge, log, "held-out rows")
    seen = [v for v in train.scores + test.scores if v is not None]
    if not seen:
        raise InputError(f"the judge of '{constraint.name}' could not score any row of the data")
    if worst is None:
        worst = max(seen) if constraint.upper_bound else min(seen)

    def scores(data: JudgeData) -> torch.Tensor:
        return torch.tensor([worst if v is None else v for v in data.scores], dtype=torch.float32)

    settings = {**fit_settings.pop("settings"), "constraint": constraint.name, "worst": worst}
    run = Fit(
        train.ids, scores(train), len(tokenizer), constraint.name, settings=settings,
        lengths=train.lengths, **fit_settings,
    )  # fmt: skip
    model, minutes = fit(run, out, log, on_step)
    metrics = judge_metrics(
        predict(model, test.ids, test.lengths), scores(test), test.is_clean, constraint.satisfied
    )
    metrics["train_minutes"] = minutes
    log(f"held-out: {json.dumps(metrics)}")
    save_surrogate(
        model,
        out,
        extra={
            "judge": constraint.judge_name,
            "constraint": constraint.name,
            "tau": constraint.tau,
            "unscorable_as": worst,
            "held_out": metrics,
            **{k: run.settings[k] for k in ("model", "data") if k in run.settings},
        },
    )
    tokenizer.save(out)
    TrainingState.discard(out)
    return metrics
