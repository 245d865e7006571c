"""`cdd train property-surrogate`: one soft-token network, one output per molecular property.

Data: the diffusion model's training molecules (reference.smi.gz) to fit and its held-out
molecules (heldout.smi.gz) to measure, each also once corrupted (1-3 random token
substitutions), as for the SA surrogate: the projection visits such sequences. Labels: every
property of evaluate/properties.py (QUANTITIES) computed by RDKit; a corrupted copy that does
not parse has no labels (it counts in no output's loss). Each output is trained in units of its
label's spread, so that molecular weight (daltons) and QED (0..1) weigh alike.

The labels' range over the training molecules is saved in config.json (`label_range`): a spec
whose bound no training molecule reaches is then refused as infeasible before sampling.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from cdd_cli.evaluate.molecules import parse
from cdd_cli.evaluate.properties import QUANTITIES, computer
from cdd_cli.evaluate.reference import read_smiles
from cdd_cli.models.surrogate import SoftTokenRegressor
from cdd_cli.models.tokenizers import MoleculeTokenizer, load_tokenizer
from cdd_cli.train.resume import TrainingState
from cdd_cli.train.surrogate import Fit, fit, molecule_rows, predict, save_surrogate, spearman

TARGETS = list(QUANTITIES)


def property_labels(texts: list[str]) -> torch.Tensor:
    """[N, K] RDKit values of TARGETS for each SMILES; NaN rows for what does not parse."""
    functions = [computer(q) for q in TARGETS]
    rows = []
    for text in texts:
        parsed = parse(text)
        if parsed is None:
            rows.append([float("nan")] * len(TARGETS))
        else:
            rows.append([float(f(parsed[1])) for f in functions])
    return torch.tensor(rows, dtype=torch.float32)


def labelled_rows(
    smiles: list[str],
    tokenizer: MoleculeTokenizer,
    length: int,
    seed: int,
    log: Callable[[str], None],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, [N, K] labels, is_clean) for the molecules and a corrupted copy of each."""
    ids, _, is_clean = molecule_rows(smiles, tokenizer, length, torch.Generator().manual_seed(seed))
    log(f"labelling {len(ids):,} sequences with {len(TARGETS)} RDKit properties ...")
    started = time.perf_counter()
    labels = property_labels(tokenizer.decode_batch(ids))
    unparsed = int(labels[:, 0].isnan().sum())
    log(
        f"labelled in {time.perf_counter() - started:.0f}s ({unparsed:,} corrupted copies do not "
        "parse: no labels)"
    )
    return ids, labels, is_clean


def property_metrics(
    model: SoftTokenRegressor, ids: torch.Tensor, labels: torch.Tensor, is_clean: torch.Tensor
) -> dict:
    """Per property on the held-out molecules (uncorrupted rows): MAE and Spearman's rho;
    and the MAE over every row that parses (corrupted copies too)."""
    pred = predict(model, ids)
    metrics = {}
    for k, name in enumerate(TARGETS):
        known = ~labels[:, k].isnan()
        clean = known & is_clean
        metrics[name] = {
            "mae_clean": round(float((pred[clean, k] - labels[clean, k]).abs().mean()), 4),
            "spearman_clean": round(spearman(pred[clean, k], labels[clean, k]), 4),
            "mae_parsed": round(float((pred[known, k] - labels[known, k]).abs().mean()), 4),
        }
    return metrics


def train_property_surrogate(
    model_dir: Path,
    out: Path,
    fit_settings: dict,
    log: Callable[[str], None],
    on_step: Callable[[int, float], None],
    limit: int | None = None,
) -> dict:
    """Train (or resume, from OUT's train state) and save the surrogate in OUT.
    `fit_settings`: steps, batch_size, lr, hidden_dim, n_layers, seed (and save_every).
    `limit`: the first N training molecules only (a quick trial)."""
    tokenizer = load_tokenizer(model_dir)
    length = int(json.loads((model_dir / "config.json").read_text())["model_length"])
    _, train_smiles = read_smiles(model_dir / "reference.smi.gz")
    _, test_smiles = read_smiles(model_dir / "heldout.smi.gz")
    train_smiles = train_smiles[:limit] if limit else train_smiles
    seed = fit_settings["seed"]
    train_ids, train_y, train_clean = labelled_rows(train_smiles, tokenizer, length, seed, log)
    test_ids, test_y, test_clean = labelled_rows(test_smiles, tokenizer, length, seed + 1, log)
    settings = {"model": model_dir.name, "molecules": len(train_smiles)}
    run = Fit(
        train_ids, train_y, len(tokenizer), "properties", settings=settings, targets=TARGETS,
        **fit_settings,
    )  # fmt: skip
    model, minutes = fit(run, out, log, on_step)
    metrics = property_metrics(model, test_ids, test_y, test_clean)
    log(f"held-out: {json.dumps(metrics)}")
    clean = train_y[train_clean]
    label_range = {
        name: [round(float(clean[:, k].min()), 4), round(float(clean[:, k].max()), 4)]
        for k, name in enumerate(TARGETS)
    }
    save_surrogate(
        model,
        out,
        extra={
            "judge": "rdkit-descriptors",
            "trained_for": str(model_dir.name),
            "steps": run.steps,
            "train_minutes": minutes,
            "label_range": label_range,
            "held_out": metrics,
        },
    )
    tokenizer.save(out)
    TrainingState.discard(out)
    return metrics
