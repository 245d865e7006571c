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
from pathlib import Path

import torch
import torch.nn.functional as F
from rdkit import Chem
from rdkit.Contrib.SA_Score import sascorer

from cdd_cli.evaluate.reference import read_smiles
from cdd_cli.models.surrogate import SoftTokenRegressor, SurrogateConfig, save_surrogate
from cdd_cli.models.tokenizers import SmilesTokenizer, load_tokenizer
from cdd_cli.train.resume import TrainingState

INVALID_SCORE = 10.0


def sa_label(smiles: str) -> float:
    mol = Chem.MolFromSmiles(smiles) if smiles else None
    if mol is None or mol.GetNumAtoms() == 0:
        return INVALID_SCORE
    return float(sascorer.calculateScore(mol))


def corrupt_ids(
    ids: torch.Tensor, tokenizer: SmilesTokenizer, gen: torch.Generator
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
    tokenizer: SmilesTokenizer,
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
) -> dict:
    """Train (or resume, from OUT's train state) and save the surrogate in OUT."""
    tokenizer = load_tokenizer(model_dir)
    config_json = json.loads((model_dir / "config.json").read_text())
    length = int(config_json["model_length"])
    _, train_smiles = read_smiles(model_dir / "reference.smi.gz")
    _, test_smiles = read_smiles(model_dir / "heldout.smi.gz")
    train_ids, train_y, _ = labelled_set(train_smiles, tokenizer, length, seed, log)
    test_ids, test_y, test_clean = labelled_set(test_smiles, tokenizer, length, seed + 1, log)

    torch.manual_seed(seed)
    config = SurrogateConfig(len(tokenizer), length, "sa", hidden_dim=hidden_dim, n_layers=n_layers)
    model = SoftTokenRegressor(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    # Warm-up: 5% of the steps, at least 2 (OneCycleLR divides by zero on a shorter phase).
    warm_up = min(0.5, max(0.05, 2 / steps))
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, lr, steps, pct_start=warm_up)
    gen = torch.Generator().manual_seed(seed)
    settings = {
        "model": model_dir.name,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "hidden_dim": hidden_dim,
        "n_layers": n_layers,
        "seed": seed,
    }
    state = TrainingState(model, optimizer, {"batches": gen}, settings, schedule)
    if state.resume(out):
        log(f"resuming {out} at step {state.step}")
    started = time.perf_counter()
    for step in range(state.step + 1, steps + 1):
        index = torch.randint(len(train_ids), (batch_size,), generator=gen)
        inputs = relax(train_ids[index], len(tokenizer), gen)
        loss = F.smooth_l1_loss(model(inputs), train_y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        on_step(step, loss.item())
        if step % save_every == 0 or step == steps:
            state.step = step
            state.save(out)
    model.eval()
    metrics = evaluate(model, test_ids, test_y, test_clean)
    metrics["train_minutes"] = round((time.perf_counter() - started) / 60, 1)
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
    state.discard(out)
    return metrics
