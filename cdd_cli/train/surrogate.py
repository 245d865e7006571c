"""`cdd train sa-surrogate`: a soft-token regressor of RDKit's SA score over a model's tokens.

Data: the diffusion model's own training molecules (reference.smi.gz) for fitting and its
held-out molecules (heldout.smi.gz) for the reported error, tokenised with its tokenizer.
To make the surrogate useful away from valid molecules (the projection visits such sequences),
a corrupted copy of each molecule (1-3 random token substitutions) is added, labelled by RDKit:
its SA score when the result still parses, else INVALID_SCORE (the worst SA, 10). Inputs are
shown both as one-hot rows and as Gumbel-softmax relaxations of them, as the projection will.

Random corruptions are not what the projection finds, though: it searches for sequences the
surrogate scores low, and finds its blind spots (QM9, tau 3.5: of 230 projected final
predictions the surrogate accepted, 168 did not parse and 30 more had RDKit SA above tau).
So training *mines* them: at evenly spaced points of the second half, the diffusion model
samples, its final predictions are projected with the surrogate as it stands, and what the
projection returns (its argmax and the sampler's well-formed reading of it) is labelled by
RDKit and joins the training set, a quarter of every later batch. The card reports how often
the final surrogate is still fooled on fresh samples (`fooled`).
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

from cdd_cli.constraints.sa import SAConstraint
from cdd_cli.diffusion.processes import make_process
from cdd_cli.diffusion.sampler import Sampler, StepHook, StepInfo, sample_generator
from cdd_cli.models import registry
from cdd_cli.models.surrogate import SoftTokenRegressor, SurrogateConfig, save_surrogate
from cdd_cli.models.tokenizers import SmilesTokenizer, load_tokenizer
from cdd_cli.projection.alm import ALMSettings, project
from cdd_cli.train.qm9 import read_smiles

INVALID_SCORE = 10.0
MINING_TAUS = (3.0, 3.5, 4.0, 4.5)  # one per batch, in turn: the range users ask for


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


def projection_outputs(
    model_dir: Path, surrogate: SoftTokenRegressor, samples: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [N, L], tau [N]): what the SA projection makes of the diffusion model's final
    predictions with `surrogate`, as `cdd molecules --constraint sa` runs it (the model's ALM
    settings, only the final prediction projected): for every projected row, its argmax and
    the sampler's well-formed reading of it, with the tau it was projected to."""
    loaded = registry.load(str(model_dir), "molecules")
    config = loaded.config
    process = make_process(config.noise, config.vocab_size, loaded.tokenizer.mask_id)
    steps = loaded.default_steps
    sampler = Sampler(
        loaded.model, process, steps, config.time_conditioning, loaded.tokenizer.syntax()
    )
    settings = ALMSettings(**loaded.projection_defaults)
    found: list[torch.Tensor] = []
    taus: list[float] = []

    def projecting(tau: float, generators: list[torch.Generator]) -> StepHook:
        def hook(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
            if info.index < info.steps:
                return probs
            constraint = SAConstraint(tau, net=surrogate)
            fixed = process.fixed_positions(x)
            with torch.enable_grad():
                result = project(probs, [constraint], settings, fixed, generators)
            projected = result.probs[result.projected]
            for ids in (projected.argmax(-1), sampler.well_formed(projected).argmax(-1)):
                found.append(ids)
                taus.extend([tau] * len(ids))
            return probs

        return hook

    was_training = surrogate.training
    surrogate.eval()
    batch = 256
    for start in range(0, samples, batch):
        tau = MINING_TAUS[(start // batch) % len(MINING_TAUS)]
        indices = range(start, min(start + batch, samples))
        generators = [sample_generator(seed, 0, i) for i in indices]
        sampler.sample(generators, config.model_length, projecting(tau, generators))
    surrogate.train(was_training)
    return torch.cat(found), torch.tensor(taus)


def fooled(
    surrogate: SoftTokenRegressor, ids: torch.Tensor, taus: torch.Tensor, labels: torch.Tensor
) -> dict:
    """Of the sequences the surrogate accepts (score <= their tau), how many RDKit rejects."""
    with torch.no_grad():
        scores = surrogate(ids)
    accepted = scores <= taus
    rejected = labels > taus  # unparsable sequences carry INVALID_SCORE
    return {
        "projected_sequences": len(ids),
        "surrogate_accepted": int(accepted.sum()),
        "fooled": round(float((accepted & rejected).sum() / accepted.sum().clamp_min(1)), 4),
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
    mining_rounds: int = 2,
    mining_samples: int = 1024,
) -> dict:
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
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, lr, total_steps=steps, pct_start=0.05)
    gen = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    mine_at = {steps // 2 + k * steps // (2 * mining_rounds) for k in range(mining_rounds)}
    mined_ids = torch.empty(0, length, dtype=torch.long)
    mined_y = torch.empty(0)

    def mine(round_seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids, taus = projection_outputs(model_dir, model, mining_samples, round_seed)
        labels = torch.tensor([sa_label(s) for s in tokenizer.decode_batch(ids)])
        return ids, taus, labels

    for step in range(1, steps + 1):
        if step in mine_at:
            ids, taus, labels = mine(seed + 1000 + step)
            found = fooled(model, ids, taus, labels)
            log(f"step {step}: mined {len(ids):,} projected sequences: {json.dumps(found)}")
            mined_ids, mined_y = torch.cat([mined_ids, ids]), torch.cat([mined_y, labels])
        index = torch.randint(len(train_ids), (batch_size,), generator=gen)
        batch_ids, batch_y = train_ids[index], train_y[index]
        if len(mined_ids):
            quarter = batch_size // 4
            pick = torch.randint(len(mined_ids), (quarter,), generator=gen)
            batch_ids = torch.cat([batch_ids[quarter:], mined_ids[pick]])
            batch_y = torch.cat([batch_y[quarter:], mined_y[pick]])
        inputs = relax(batch_ids, len(tokenizer), gen)
        loss = F.smooth_l1_loss(model(inputs), batch_y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        on_step(step, loss.item())
    model.eval()
    metrics = evaluate(model, test_ids, test_y, test_clean)
    metrics["train_minutes"] = round((time.perf_counter() - started) / 60, 1)
    if mining_rounds:  # fresh samples: seeds no round used
        metrics.update(fooled(model, *mine(seed + 999)))
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
    return metrics
