"""`cdd train molecules`: a QM9 diffusion model with its tokenizer and reference set."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from cdd_cli.diffusion.processes import make_process
from cdd_cli.diffusion.sampler import Sampler, sample_generator
from cdd_cli.evaluate.molecules import describe, summarise
from cdd_cli.evaluate.reference import read_smiles, write_smiles
from cdd_cli.models.dit import DiffusionModel
from cdd_cli.models.tokenizers import SmilesTokenizer
from cdd_cli.train.diffusion import TrainConfig, Trainer, held_out_loss
from cdd_cli.train.qm9 import read_qm9_smiles, split

HELD_OUT_PERCENT = 5


def prepare(qm9: Path, out: Path, log: Callable[[str], None]) -> tuple[list[str], list[str]]:
    """Canonical train/held-out SMILES, cached in OUT so a resumed run skips RDKit."""
    train_path, test_path = out / "reference.smi.gz", out / "heldout.smi.gz"
    if train_path.is_file() and test_path.is_file():
        return read_smiles(train_path)[1], read_smiles(test_path)[1]
    log(f"reading and canonicalising QM9 from {qm9} ...")
    train, test = split(read_qm9_smiles(qm9), HELD_OUT_PERCENT)
    out.mkdir(parents=True, exist_ok=True)
    write_smiles(train_path, train, "qm9pack-1.0.3 train split")
    write_smiles(test_path, test, f"qm9pack-1.0.3 held-out split ({HELD_OUT_PERCENT}%)")
    return train, test


def encode_all(tokenizer: SmilesTokenizer, smiles: list[str], length: int) -> torch.Tensor:
    rows = [ids for s in smiles if (ids := tokenizer.encode(s, length)) is not None]
    return torch.tensor(rows, dtype=torch.long)


def validity_check(
    tokenizer: SmilesTokenizer,
    reference: set[str],
    noise: str,
    steps: int,
    samples: int,
    time_conditioning: bool,
    length: int,
) -> Callable[[DiffusionModel], dict]:
    process = make_process(noise, len(tokenizer), tokenizer.mask_id)
    syntax = tokenizer.syntax()  # sampled as `cdd molecules` samples

    def evaluate(model: DiffusionModel) -> dict:
        sampler = Sampler(model, process, steps, time_conditioning, syntax)
        generators = [sample_generator(12345, 0, i) for i in range(samples)]
        with torch.no_grad():
            ids = sampler.sample(generators, length)
        summary = summarise(describe(s, reference) for s in tokenizer.decode_batch(ids))
        return {
            "valid": round(summary.validity, 4),
            "unique": round(summary.uniqueness, 4),
            "novel": summary.novelty,
        }

    return evaluate


def train_molecules(
    cfg: TrainConfig,
    qm9: Path,
    out: Path,
    device: str,
    log: Callable[[str], None],
    on_step: Callable[[int, float], None],
) -> dict:
    train, test = prepare(qm9, out, log)
    tokenizer = SmilesTokenizer.from_corpus(train + test)
    data = encode_all(tokenizer, train, cfg.length)
    held_out = encode_all(tokenizer, test, cfg.length)
    log(
        f"QM9: {len(data):,} training and {len(held_out):,} held-out molecules, "
        f"vocabulary {len(tokenizer)}"
    )
    trainer = Trainer(cfg, data, len(tokenizer), tokenizer.mask_id, out, device)
    if resumed := trainer.load_state():
        log(f"resuming {out} at step {trainer.step} (from {resumed} state)")
    tokenizer.save(out)
    sample_validity = validity_check(
        tokenizer,
        set(train),
        cfg.noise,
        cfg.sample_steps,
        cfg.eval_samples,
        cfg.noise == "uniform",
        cfg.length,
    )
    loss = held_out_loss(held_out, cfg, tokenizer.mask_id, len(tokenizer))

    def evaluate(model: DiffusionModel) -> dict:
        result = {"held_out_loss": loss(model), **sample_validity(model)}
        log(f"step {trainer.step}: {json.dumps(result)}")
        return result

    extra = {
        "tokenizer": SmilesTokenizer.kind,
        "training_data": "qm9pack-1.0.3",
        "training_steps": None,
        "default_sampling_steps": cfg.sample_steps,
    }

    def export() -> None:
        trainer.export({**extra, "training_steps": trainer.step})

    trainer.run(on_step, evaluate, export)
    final = validity_check(
        tokenizer, set(train), cfg.noise, cfg.sample_steps, 1000, cfg.noise == "uniform", cfg.length
    )(trainer.ema.eval())
    log(f"final validity over 1,000 samples at {cfg.sample_steps} steps: {json.dumps(final)}")
    return final
