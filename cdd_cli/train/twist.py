"""`cdd train twist`: fit a twist (`models/twist.py`) on the model's own rollouts.

Every kept step of a rollout (`train/twist_rollouts.py`) is an example: the prediction at x_t
and its time in, and for each bound of the grid whether the rollout ended inside it out. The
binary cross-entropy's minimiser is P(C_k | x_t) itself, so noisy 0/1 verdicts are the right
labels. A tenth of the rollouts (every draw whose index ends in 9) is held out, whole, for the
reported quality: log-loss against the base rate's, ROC-AUC by stage of the run, and the
calibration (mean estimate against the share that ended inside) at each bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from cdd_cli.constraints.base import Constraint
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.errors import InputError
from cdd_cli.models import registry
from cdd_cli.models.twist import Twist, TwistConfig, save_twist
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer
from cdd_cli.spec.entries import domain_of
from cdd_cli.spec.model import Spec
from cdd_cli.train.configs import TwistTrainConfig
from cdd_cli.train.toxicity import roc_auc
from cdd_cli.train.twist_rollouts import Rollouts, record_rollouts

HELD_OUT_DIGIT = 9  # draws whose index ends in 9 are held out
CHUNK = 4096  # rollouts recorded per file: what a killed run loses at most


def labels(rollouts: Rollouts, config: TwistConfig) -> torch.Tensor:
    """[N * K, B] 1.0 where the example's rollout ended inside bound b, else 0 (a score the
    judge could not give is inside no bound); `draw` gives positions in `score` (`indexed`)."""
    score = rollouts.score[rollouts.draw]
    taus = torch.tensor(config.taus, dtype=torch.float64)
    inside = score[:, None] <= taus if config.upper_bound else score[:, None] >= taus
    return (inside & ~score.isnan()[:, None]).float()


def indexed(rollouts: Rollouts) -> Rollouts:
    """The same rollouts with `draw` turned into positions of `score` (rollouts of any
    indices, recorded in shards and joined)."""
    order = {int(d): i for i, d in enumerate(rollouts.draw.unique(sorted=True).tolist())}
    return Rollouts(
        rollouts.probs,
        rollouts.times,
        torch.tensor([order[int(d)] for d in rollouts.draw]),
        rollouts.score,
        rollouts.texts,
    )


def held_out_quality(
    model: Twist, probs: torch.Tensor, times: torch.Tensor, target: torch.Tensor
) -> dict:
    """Log-loss (against the base rate's), AUC by stage and calibration at each bound."""
    with torch.no_grad():
        logits = torch.cat(
            [
                model(probs[i : i + 1024].float(), times[i : i + 1024])
                for i in range(0, len(probs), 1024)
            ]
        )
    estimate = logits.sigmoid()
    base = target.mean(0).clamp(1e-6, 1 - 1e-6)
    loss = F.binary_cross_entropy_with_logits(logits, target, reduction="none").mean(0)
    base_loss = -(base * base.log() + (1 - base) * (1 - base).log())
    report: dict = {"examples": len(target), "bounds": {}}
    stages = [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.01)]
    for k, tau in enumerate(model.config.taus):
        aucs = {}
        for low, high in stages:  # t runs from 1 (all noise) down to 0 (clean)
            rows = (times >= low) & (times < high)
            y = target[rows, k]
            if 0 < y.sum() < len(y):
                aucs[f"t {low:g}-{min(high, 1):g}"] = round(roc_auc(estimate[rows, k], y), 3)
        report["bounds"][f"{tau:g}"] = {
            "share_inside": round(float(target[:, k].mean()), 4),
            "mean_estimate": round(float(estimate[:, k].mean()), 4),
            "log_loss": round(float(loss[k]), 4),
            "base_rate_log_loss": round(float(base_loss[k]), 4),
            "auc_by_t": aucs,
        }
    return report


def fit_twist(
    rollouts: Rollouts,
    config: TwistConfig,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    log: Callable[[str], None],
) -> tuple[Twist, dict]:
    """The twist fitted on `rollouts` (their held-out tenth kept apart) and its quality."""
    held = rollouts.draw % 10 == HELD_OUT_DIGIT
    rollouts = indexed(rollouts)
    target = labels(rollouts, config)
    train_rows = (~held).nonzero().squeeze(-1)
    torch.manual_seed(seed)
    model = Twist(config)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    model.train()
    for step in range(steps):
        for group in optimiser.param_groups:  # warm-up, then cosine decay to a tenth
            warm = min(1.0, (step + 1) / 200)
            group["lr"] = lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        rows = train_rows[torch.randint(len(train_rows), (batch_size,), generator=g)]
        logits = model(rollouts.probs[rows].float(), rollouts.times[rows])
        loss = F.binary_cross_entropy_with_logits(logits, target[rows])
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        if (step + 1) % 500 == 0 or step + 1 == steps:
            seconds = time.perf_counter() - started
            log(f"step {step + 1}/{steps}: loss {loss.item():.4f} ({seconds:.0f}s)")
    model.eval()
    quality = held_out_quality(model, rollouts.probs[held], rollouts.times[held], target[held])
    quality["train_examples"] = len(train_rows)
    quality["train_minutes"] = round((time.perf_counter() - started) / 60, 1)
    return model, quality


def parse_bounds(text: str) -> list[float]:
    """`--taus 2.5,3,3.5`: at least two distinct finite numbers."""
    try:
        values = sorted({float(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise InputError(f"--taus {text!r}: give numbers separated by commas") from None
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        raise InputError(f"--taus {text!r}: give at least two distinct finite numbers")
    return values


def rollout_chunks(
    drawer: BatchDrawer,
    constraint: Constraint,
    cfg: TwistTrainConfig,
    folder: Path,
    log: Callable[[str], None],
) -> Rollouts:
    """The run's rollouts, recorded CHUNK at a time into `folder` (a rerun reuses each chunk
    recorded with the same model, seed and kept steps) and joined."""
    folder.mkdir(parents=True, exist_ok=True)
    identity = {
        "revision": drawer.loaded.revision,
        "seed": str(cfg.seed),
        "kept_steps": str(cfg.kept_steps),
        "steps": str(drawer.spec.sampling.steps),
        "constraint": constraint.name,
    }
    parts: list[Rollouts] = []
    started = time.perf_counter()
    for start in range(0, cfg.rollouts, CHUNK):
        path = folder / f"rollouts-{start:07d}.safetensors"
        stop = min(start + CHUNK, cfg.rollouts)
        if path.is_file() and read_metadata(path) == {**identity, "stop": str(stop)}:
            tensors = load_file(str(path))
            texts = (path.with_suffix(".txt")).read_text(encoding="utf-8").splitlines()
            parts.append(Rollouts(**tensors, texts=texts))
            continue
        part = record_rollouts(drawer, constraint, range(start, stop), cfg.kept_steps)
        tensors = {"probs": part.probs, "times": part.times, "draw": part.draw, "score": part.score}
        path.with_suffix(".txt").write_text("\n".join(part.texts) + "\n", encoding="utf-8")
        save_file(tensors, str(path), metadata={**identity, "stop": str(stop)})
        parts.append(part)
        seconds = time.perf_counter() - started
        log(f"rollouts {stop:,}/{cfg.rollouts:,} judged ({seconds:.0f}s)")
    return Rollouts(
        torch.cat([p.probs for p in parts]),
        torch.cat([p.times for p in parts]),
        torch.cat([p.draw for p in parts]),
        torch.cat([p.score for p in parts]),
        [t for p in parts for t in p.texts],
    )


def read_metadata(path: Path) -> dict:
    with safe_open(str(path), "pt") as f:
        return dict(f.metadata() or {})


def train_twist(
    spec: Spec,
    bounds: list[float],
    cfg: TwistTrainConfig,
    out: Path,
    log: Callable[[str], None],
) -> dict:
    """`cdd train twist`: rollouts of the spec's model judged by its one constraint, the twist
    fitted on them and saved in `out` with its held-out quality."""
    (entry,) = spec.constraints
    if domain_of(entry.type) != "molecules":
        raise InputError(
            f"--constraint {entry.type}: twists are trained for molecule models only (a text "
            "model's predictions are 50,258 tokens wide: too large to keep per step)"
        )
    loaded = registry.load(spec.model or "default-molecules", "molecules", "cpu")
    spec.model, spec.method = loaded.name, "unconstrained"
    spec.sampling.seed = cfg.seed
    fill_defaults(spec, loaded)
    (constraint,) = build_constraints(spec.constraints, loaded, "cpu")
    drawer = BatchDrawer(spec, loaded, [constraint])
    rollouts = rollout_chunks(drawer, constraint, cfg, out / "rollouts", log)
    taus = bounds if constraint.upper_bound else bounds[::-1]
    config = TwistConfig(
        vocab_size=loaded.config.vocab_size,
        max_length=loaded.config.model_length,
        constraint=constraint.name,
        upper_bound=constraint.upper_bound,
        taus=taus,
        hidden_dim=cfg.hidden_dim,
        n_layers=cfg.n_layers,
        trained_for=loaded.name,
        revision=loaded.revision,
    )
    model, quality = fit_twist(rollouts, config, cfg.steps, cfg.batch_size, cfg.lr, cfg.seed, log)
    model.config.held_out = quality
    save_twist(model, out)
    for tau, row in quality["bounds"].items():
        log(
            f"held-out {constraint.name} {'<=' if constraint.upper_bound else '>='} {tau}: "
            f"inside {row['share_inside']:.3f}, estimated {row['mean_estimate']:.3f}, log-loss "
            f"{row['log_loss']:.4f} (base rate {row['base_rate_log_loss']:.4f}), AUC by t "
            + ", ".join(f"{k} {v}" for k, v in row["auc_by_t"].items())
        )
    return quality
