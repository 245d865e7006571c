"""`cdd train molecules`: a molecule diffusion model (QM9, MOSES or the user's file) with its
tokenizer and reference set.

Molecules are written as SMILES (the regex tokenizer's tokens) or SELFIES (`--representation`).
The vocabulary is the tokens that occur in the data (plus the specials) and, unless `--length`
is given, the model's length is the longest tokenised molecule plus <bos> and <eos> (a resumed
run keeps its own). Samples are read as `cdd molecules` reads them: SMILES with the
well-formed decoding, SELFIES as drawn."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from pathlib import Path

import torch

from cdd_cli.diffusion.processes import make_process
from cdd_cli.diffusion.sampler import Sampler, sample_generator
from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import describe, summarise
from cdd_cli.evaluate.reference import map_chunks, read_smiles, write_smiles
from cdd_cli.models.dit import DiffusionModel
from cdd_cli.models.tokenizers import (
    MOLECULE_TOKENIZERS,
    MoleculeTokenizer,
    SelfiesTokenizer,
    SmilesTokenizer,
    load_tokenizer,
)
from cdd_cli.train.diffusion import TrainConfig, Trainer, held_out_loss
from cdd_cli.train.qm9 import split
from cdd_cli.train.smiles_data import MoleculeData

HELD_OUT_PERCENT = 5
REPRESENTATIONS = {"smiles": SmilesTokenizer, "selfies": SelfiesTokenizer}


def prepare(
    data: MoleculeData, out: Path, log: Callable[[str], None]
) -> tuple[list[str], list[str]]:
    """Canonical train/held-out SMILES, cached in OUT so a resumed run skips RDKit."""
    train_path, test_path = out / "reference.smi.gz", out / "heldout.smi.gz"
    if train_path.is_file() and test_path.is_file():
        return read_smiles(train_path)[1], read_smiles(test_path)[1]
    log(f"reading and canonicalising {data.name} ...")
    read = data.read()
    if read.bad:
        log(f"skipped {read.bad_summary(data.name)}")
    if len(read.smiles) < 2:
        raise InputError(f"{data.name}: {len(read.smiles)} readable molecule(s); need 2 or more")
    train, test = split(read.smiles, HELD_OUT_PERCENT)
    if not test or not train:  # a tiny set the hash puts all on one side
        train, test = (train or test)[1:], (train or test)[:1]
    out.mkdir(parents=True, exist_ok=True)
    write_smiles(train_path, train, f"{data.source} train split")
    write_smiles(test_path, test, f"{data.source} held-out split ({HELD_OUT_PERCENT}%)")
    return train, test


def model_length(cfg: TrainConfig, tokens: list[list[str] | None], out: Path) -> int:
    """--length, else a resumed run's own, else the longest tokenised molecule + 2."""
    if cfg.length is not None:
        return cfg.length
    state = out / "train_state.json"
    if state.is_file():
        return json.loads(state.read_text())["config"]["length"]
    return max(len(t) for t in tokens if t is not None) + 2


def split_chunk(kind: str, smiles: list[str]) -> list[list[str] | None]:
    tokenizer = MOLECULE_TOKENIZERS[kind]([])
    return [tokenizer.split(s) for s in smiles]


def split_all(kind: str, smiles: list[str]) -> list[list[str] | None]:
    """Each molecule's tokens (None: the language cannot write it), over every core: SELFIES
    encoding is pure Python, about 4,000 molecules a second (MOSES: 1.6M)."""
    parts = map_chunks(functools.partial(split_chunk, kind), smiles, 50_000)
    return [tokens for part in parts for tokens in part]


def encode_all(
    tokenizer: MoleculeTokenizer, tokens: list[list[str] | None], length: int
) -> torch.Tensor:
    rows = [ids for t in tokens if (ids := tokenizer.row_of(t, length)) is not None]
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), length)


def validity_check(
    tokenizer: MoleculeTokenizer,
    reference: set[str],
    noise: str,
    steps: int,
    samples: int,
    time_conditioning: bool,
    length: int,
) -> Callable[[DiffusionModel], dict]:
    process = make_process(noise, len(tokenizer), tokenizer.mask_id)
    syntax = tokenizer.syntax()  # sampled as `cdd molecules` samples (SELFIES: none)

    def evaluate(model: DiffusionModel) -> dict:
        sampler = Sampler(model, process, steps, time_conditioning, syntax, tokenizer.layout())
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
    source: MoleculeData,
    out: Path,
    device: str,
    log: Callable[[str], None],
    on_step: Callable[[int, float], None],
) -> dict:
    train, test = prepare(source, out, log)
    kind = REPRESENTATIONS[cfg.representation].kind
    if (out / "tokenizer.json").is_file() and (out / "train_state.json").is_file():
        theirs = load_tokenizer(out)
        if theirs.kind != kind:
            raise InputError(
                f"{out} holds a {theirs.kind} model; resume it with its own --representation"
            )
    tokens = split_all(kind, train + test)
    tokenizer = MOLECULE_TOKENIZERS[kind].from_token_lists(tokens)
    cfg = dataclasses.replace(cfg, length=model_length(cfg, tokens, out))
    data = encode_all(tokenizer, tokens[: len(train)], cfg.length)
    held_out = encode_all(tokenizer, tokens[len(train) :], cfg.length)
    unwritable = sum(t is None for t in tokens)
    longer = len(train) + len(test) - len(data) - len(held_out) - unwritable
    log(
        f"{source.name}: {len(data):,} training and {len(held_out):,} held-out molecules, "
        f"{cfg.representation}, vocabulary {len(tokenizer)}, length {cfg.length}"
        + (f" ({longer:,} longer molecules left out)" if longer else "")
        + (f" ({unwritable:,} molecules {cfg.representation} cannot write)" if unwritable else "")
    )
    if not len(data) or not len(held_out):
        raise InputError(f"--length {cfg.length}: no molecule of {source.name} fits")
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
        "tokenizer": kind,
        "training_data": source.source,
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
