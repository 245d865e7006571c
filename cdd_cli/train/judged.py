"""`cdd train surrogate`: a soft-token surrogate of any constraint's judge (a plugin's too).

The judge labels rows of the model's own tokens: for molecules, SMILES (the model's training
and held-out molecules, or a file) laid out as the model makes them; for text, windows of a
corpus of random lengths (a continuation is as long as its prompt leaves it). A corrupted copy
of each row (1-3 random tokens) is labelled too, since the projection visits such sequences.
The fit, its resumption and the saved folder are the SA surrogate's (`train/surrogate.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from cdd_cli.constraints.registry import build_constraints
from cdd_cli.constraints.table import plugin_of
from cdd_cli.errors import InputError
from cdd_cli.evaluate.reference import read_smiles
from cdd_cli.models import registry
from cdd_cli.spec.entries import domain_of
from cdd_cli.spec.model import Spec
from cdd_cli.train.configs import JudgeSurrogateConfig
from cdd_cli.train.surrogate import (
    INVALID_SCORE,
    molecule_rows,
    text_rows,
    train_judge_surrogate,
)
from cdd_cli.train.text import corpus_files, tokenize_corpus

HELD_OUT_SHARE = 0.1


def read_smiles_file(path: Path) -> list[str]:
    """The first field of each non-empty line (a SMILES file may carry names after it)."""
    if path.suffix == ".gz":
        return read_smiles(path)[1]
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--data {path}: cannot read it ({exc})") from None
    return [line.split()[0] for line in lines if line.strip()]


def train_surrogate_for(
    spec: Spec,
    data: Path | None,
    cfg: JudgeSurrogateConfig,
    out: Path,
    log: Callable[[str], None],
    on_step: Callable[[int, float], None],
) -> dict:
    (entry,) = spec.constraints
    domain = domain_of(entry.type)
    loaded = registry.load(spec.model, domain, "cpu")
    (constraint,) = build_constraints(spec.constraints, loaded, "cpu")
    plugin = plugin_of(entry.type)
    worst = plugin.worst if plugin is not None else INVALID_SCORE if entry.type == "sa" else None
    worst = worst if cfg.unscorable_as is None else cfg.unscorable_as
    length = loaded.config.model_length
    gen = torch.Generator().manual_seed(cfg.seed)
    if data is not None and not data.exists():
        raise InputError(f"--data {data}: no such file or folder")
    if domain == "molecules":
        if data is None:
            for name in ("reference.smi.gz", "heldout.smi.gz"):
                if not (loaded.directory / name).is_file():
                    raise InputError(f"model {loaded.name} has no {name}: give --data FILE")
            train = read_smiles(loaded.directory / "reference.smi.gz")[1]
            test = read_smiles(loaded.directory / "heldout.smi.gz")[1]
        else:
            smiles = read_smiles_file(data)
            order = torch.randperm(len(smiles), generator=gen).tolist()
            cut = max(1, int(len(smiles) * HELD_OUT_SHARE))
            test, train = [smiles[i] for i in order[:cut]], [smiles[i] for i in order[cut:]]
        train_rows = molecule_rows(train, loaded.tokenizer, length, gen)
        test_rows = molecule_rows(test, loaded.tokenizer, length, gen)
        if len(train_rows[0]) == 0 or len(test_rows[0]) == 0:
            raise InputError(f"no molecule of the data fits model {loaded.name}'s {length} tokens")
    else:
        if data is None:
            raise InputError("--data: a .txt file or folder of them, for a text constraint")
        files = corpus_files(data) if data.is_dir() else [data]
        stream = tokenize_corpus(files, loaded.tokenizer)
        cut = int(len(stream) * (1 - HELD_OUT_SHARE))  # held out: the stream's last tenth
        if cut < 2 * length or len(stream) - cut < 2 * length:
            raise InputError(f"--data {data}: too little text ({len(stream):,} tokens)")
        vocab = loaded.tokenizer.eos_id  # text tokens: neither end-of-text nor mask
        train_rows = text_rows(stream[:cut], cfg.examples, length, vocab, gen)
        test_rows = text_rows(stream[cut:], max(1, cfg.examples // 10), length, vocab, gen)
    fit_settings = {
        **cfg.fit_settings(),
        "settings": {"model": loaded.name, "data": str(data) if data else "the model's own"},
    }
    return train_judge_surrogate(
        constraint,
        worst,
        loaded.tokenizer,
        train_rows,
        test_rows,
        out,
        fit_settings,
        log,
        on_step,
    )
