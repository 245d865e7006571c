"""Training a diffusion model on token sequences: a short, resumable loop.

Objectives:
- masked noise: MDLM's continuous-time loss for the log-linear schedule, i.e. cross-entropy on
  masked positions weighted by 1/t (SUBS: unmasked positions carry no loss);
- uniform noise: cross-entropy of the clean tokens at every position (an x_0-prediction loss,
  simpler than UDLM's ELBO; the sampler uses the exact UDLM posterior given that prediction).

State lives in `OUT/train_state.safetensors` (weights, EMA weights, AdamW moments) and
`OUT/train_state.json` (step, config); a run started again with the same OUT resumes. The
exported model (EMA weights) is `OUT/config.json` + `OUT/model.safetensors`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from cdd_cli.diffusion.schedule import LogLinearSchedule
from cdd_cli.errors import InputError
from cdd_cli.models.checkpoint import ModelConfig, save_model
from cdd_cli.models.dit import DiffusionModel
from cdd_cli.train.configs import TrainConfig

# A run folder holds one architecture; resuming with other values of these is refused.
ARCHITECTURE_FIELDS = (
    "noise",
    "hidden_dim",
    "cond_dim",
    "n_blocks",
    "n_heads",
    "length",
    "tie_embeddings",
)


def model_config(cfg: TrainConfig, vocab_size: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab_size,
        model_length=cfg.length,
        hidden_dim=cfg.hidden_dim,
        cond_dim=cfg.cond_dim,
        n_blocks=cfg.n_blocks,
        n_heads=cfg.n_heads,
        dropout=0.0,
        time_conditioning=cfg.noise == "uniform",
        model_type="udlm" if cfg.noise == "uniform" else "mdlm",
        noise=cfg.noise,
        tie_word_embeddings=cfg.tie_embeddings,
    )


def corrupt(
    x0: torch.Tensor,
    t: torch.Tensor,
    noise: str,
    vocab_size: int,
    mask_id: int,
    schedule: LogLinearSchedule,
    generator: torch.Generator,
) -> torch.Tensor:
    move = schedule.move(t)[:, None]
    hit = torch.rand(x0.shape, generator=generator) < move
    if noise == "masked":
        replacement = torch.full_like(x0, mask_id)
    else:
        replacement = torch.randint(vocab_size, x0.shape, generator=generator)
    return torch.where(hit, replacement, x0)


def stratified_t(
    batch: int,
    generator: torch.Generator,
    device: torch.device | str | None = None,
    floor: float = 1e-3,
) -> torch.Tensor:
    """One t per row, spread evenly over (0, 1] from one uniform offset (lower variance than
    independent draws), at least `floor`."""
    offset = torch.rand(1, generator=generator, device=device)
    return ((offset + torch.arange(batch, device=device) / batch) % 1.0).clamp_min(floor)


def diffusion_loss(
    model: DiffusionModel,
    x0: torch.Tensor,
    t: torch.Tensor,
    x_t: torch.Tensor,
    noise: str,
    mask_id: int,
    schedule: LogLinearSchedule,
) -> torch.Tensor:
    if noise == "masked":
        masked = x_t == mask_id
        logits = model(x_t, schedule.sigma(t), where=masked).float()  # [N, V]
        logits[:, mask_id] = -torch.inf
        nll = F.cross_entropy(logits, x0[masked], reduction="none")
        weight = 1.0 / t[:, None].expand_as(x0)[masked]
        return (nll * weight).sum() / x0.numel()
    logits = model(x_t, schedule.sigma(t)).float()
    return F.cross_entropy(logits.transpose(1, 2), x0)


def held_out_loss(
    test: torch.Tensor, cfg: TrainConfig, mask_id: int, vocab_size: int, rows: int = 2048
) -> Callable[[DiffusionModel], float]:
    """Loss on a fixed held-out batch with fixed noise, comparable across evaluations."""
    gen = torch.Generator().manual_seed(7)
    x0 = test[torch.randperm(len(test), generator=gen)[:rows]]
    t = (torch.arange(len(x0)) + 0.5) / len(x0)
    schedule = LogLinearSchedule()
    x_t = corrupt(x0, t, cfg.noise, vocab_size, mask_id, schedule, gen)

    def loss(model: DiffusionModel) -> float:
        device = next(model.parameters()).device
        with torch.no_grad():
            value = diffusion_loss(
                model, x0.to(device), t.to(device), x_t.to(device), cfg.noise, mask_id, schedule
            )
        return round(value.item(), 4)

    return loss


class Trainer:
    def __init__(
        self,
        cfg: TrainConfig,
        data: torch.Tensor,
        vocab_size: int,
        mask_id: int,
        out: Path,
        device: str = "cpu",
    ):
        self.cfg, self.data, self.out, self.device = cfg, data, Path(out), device
        self.vocab_size, self.mask_id = vocab_size, mask_id
        self.schedule = LogLinearSchedule()
        torch.manual_seed(cfg.seed)
        self.model = DiffusionModel(model_config(cfg, vocab_size)).to(device)
        self.ema = DiffusionModel(model_config(cfg, vocab_size)).to(device)
        self.ema.load_state_dict(self.model.state_dict())
        self.ema.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay
        )
        self.step = 0
        self.warm_restart_at = 0
        self.seconds = 0.0
        self.history: list[dict] = []

    @property
    def state_path(self) -> Path:
        return self.out / "train_state.safetensors"

    def save_state(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        tensors = {f"param.{k}": v for k, v in self.model.state_dict().items()}
        tensors.update({f"ema.{k}": v for k, v in self.ema.state_dict().items()})
        names = dict(self.model.named_parameters())
        for name, param in names.items():
            state = self.optimizer.state.get(param)
            if state:
                tensors[f"adam_m.{name}"] = state["exp_avg"]
                tensors[f"adam_v.{name}"] = state["exp_avg_sq"]
        tensors = {k: v.detach().float().cpu().contiguous() for k, v in tensors.items()}
        save_file(tensors, str(self.state_path.with_suffix(".tmp")))
        self.state_path.with_suffix(".tmp").replace(self.state_path)
        meta = {
            "step": self.step,
            "seconds": self.seconds,
            "config": asdict(self.cfg),
            "history": self.history,
        }
        (self.out / "train_state.json").write_text(json.dumps(meta, indent=1) + "\n")

    def load_state(self) -> str | None:
        """Resume from OUT: "exact" from the full train state; "weights" from the exported
        model alone (the committed float16 checkpoint of a shipped model: AdamW moments start
        afresh, EMA restarts from the exported weights); None for a new run."""
        meta_path = self.out / "train_state.json"
        if not meta_path.is_file():
            return None
        meta = json.loads(meta_path.read_text())
        saved = {k: v for k, v in meta["config"].items() if k in ARCHITECTURE_FIELDS}
        mine = {k: getattr(self.cfg, k) for k in saved}
        if saved != mine:
            raise InputError(
                f"{self.out}: holds a run with a different architecture {saved}; "
                "use another --out or the same settings"
            )
        if self.state_path.is_file():
            tensors = load_file(str(self.state_path))
            params = {k[6:]: v for k, v in tensors.items() if k.startswith("param.")}
            self.model.load_state_dict(params)
            self.ema.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("ema.")})
            for name, param in self.model.named_parameters():
                if f"adam_m.{name}" in tensors:
                    self.optimizer.state[param] = {
                        "step": torch.tensor(float(meta["step"])),
                        "exp_avg": tensors[f"adam_m.{name}"].to(self.device),
                        "exp_avg_sq": tensors[f"adam_v.{name}"].to(self.device),
                    }
            how = "exact"
        elif (self.out / "model.safetensors").is_file():
            weights = load_file(str(self.out / "model.safetensors"))
            self.model.load_state_dict({k: v.float() for k, v in weights.items()})
            self.ema.load_state_dict(self.model.state_dict())
            self.warm_restart_at = meta["step"]
            how = "weights"
        else:
            return None
        self.step, self.seconds = meta["step"], meta["seconds"]
        self.history = meta.get("history", [])
        return how

    def learning_rate(self) -> float:
        # Fresh AdamW moments after a restart from weights need a warm-up again.
        cfg = self.cfg
        since = self.step - self.warm_restart_at
        rate = cfg.lr * min(1.0, (since + 1) / cfg.warmup_steps)
        if cfg.cooldown_steps:
            # A linear cool-down ends a constant-rate run at a lower loss than the same steps
            # at full rate; --max-steps may be raised later (the rate then climbs back).
            rate *= min(1.0, (cfg.max_steps - self.step) / cfg.cooldown_steps)
        return rate

    def train_step(self) -> float:
        cfg = self.cfg
        # Each step's batch and noise derive from (seed, step): a resumed run continues exactly.
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.step)
        x0 = self.data[torch.randint(len(self.data), (cfg.batch_size,), generator=gen)]
        t = stratified_t(cfg.batch_size, gen, floor=1e-4)
        x_t = corrupt(x0, t, cfg.noise, self.vocab_size, self.mask_id, self.schedule, gen)
        self.model.train()
        loss = diffusion_loss(
            self.model,
            x0.to(self.device),
            t.to(self.device),
            x_t.to(self.device),
            cfg.noise,
            self.mask_id,
            self.schedule,
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        self.optimizer.step()
        with torch.no_grad():
            decay = min(cfg.ema_decay, (1 + self.step) / (10 + self.step))
            for e, p in zip(self.ema.parameters(), self.model.parameters(), strict=True):
                e.lerp_(p, 1 - decay)
        self.step += 1
        return loss.item()

    def run(
        self,
        on_step: Callable[[int, float], None],
        evaluate: Callable[[DiffusionModel], dict],
        export: Callable[[], None],
    ) -> None:
        cfg = self.cfg
        started = time.perf_counter() - self.seconds
        while self.step < cfg.max_steps:
            loss = self.train_step()
            self.seconds = time.perf_counter() - started
            if not math.isfinite(loss):
                raise RuntimeError(f"loss became {loss} at step {self.step}")
            on_step(self.step, loss)
            if self.step % cfg.eval_every == 0 or self.step == cfg.max_steps:
                self.ema.eval()
                self.history.append(
                    {
                        "step": self.step,
                        "loss": round(loss, 4),
                        "minutes": round(self.seconds / 60, 1),
                        **evaluate(self.ema),
                    }
                )
            if self.step % cfg.save_every == 0 or self.step == cfg.max_steps:
                self.save_state()
                export()

    def export(self, extra: dict | None = None, dtype: torch.dtype | None = None) -> None:
        save_model(self.ema, self.out, dtype=dtype, extra=extra)
