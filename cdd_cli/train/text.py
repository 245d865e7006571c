"""`cdd train text`: a masked diffusion language model over GPT-2 tokens.

The corpus is every `*.txt` file in a folder. Paragraphs (split on blank lines) are tokenized
and joined by GPT-2's "\\n\\n" token, files are separated by `<|endoftext|>`, and the stream is
cut into blocks of `length` tokens (MDLM's "wrap" packing). Every 20th block is held out.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from cdd_cli.diffusion.processes import MaskedProcess
from cdd_cli.diffusion.sampler import Sampler, sample_generator
from cdd_cli.errors import InputError
from cdd_cli.models.dit import DiffusionModel
from cdd_cli.models.tokenizers import Gpt2Tokenizer, TextTokenizer
from cdd_cli.train.diffusion import TrainConfig, Trainer, held_out_loss

HELD_OUT_EVERY = 20


def corpus_files(folder: Path, flag: str = "--data") -> list[Path]:
    files = sorted(Path(folder).glob("*.txt"))
    if not files:
        raise InputError(f"{flag} {folder}: no .txt files")
    return files


def tokenize_corpus(files: list[Path], tokenizer: TextTokenizer) -> torch.Tensor:
    paragraph = tokenizer.encode("\n\n")  # GPT-2: [628]
    stream: list[int] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text ({exc.reason})") from None
        paragraphs = [p.strip() for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]
        for ids in tokenizer.encode_batch(paragraphs):
            stream.extend(ids)
            stream.extend(paragraph)
        del stream[-len(paragraph) :]  # a file's last paragraph ends with end-of-text
        stream.append(tokenizer.eos_id)
    return torch.tensor(stream, dtype=torch.int32)


def prepare(
    data: Path, length: int, out: Path, tokenizer: TextTokenizer, log: Callable[[str], None]
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Train and held-out blocks [N, length], cached in OUT so a resumed run skips tokenizing."""
    files = corpus_files(data)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    meta = {
        "files": [p.name for p in files],
        "sha256": digest.hexdigest(),
        "length": length,
        "held_out_every": HELD_OUT_EVERY,
    }
    cache = out / "corpus.safetensors"
    if cache.is_file() and json.loads((out / "corpus.json").read_text()) == meta:
        tensors = load_file(str(cache))
        return tensors["train"].long(), tensors["held_out"].long(), meta
    log(f"tokenizing {len(files)} files from {data} ...")
    stream = tokenize_corpus(files, tokenizer)
    blocks = stream[: len(stream) // length * length].view(-1, length)
    held = torch.arange(len(blocks)) % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
    train, held_out = blocks[~held].contiguous(), blocks[held].contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file({"train": train, "held_out": held_out}, str(cache))
    (out / "corpus.json").write_text(json.dumps(meta, indent=1) + "\n")
    return train.long(), held_out.long(), meta


def sample_texts(
    tokenizer: Gpt2Tokenizer, steps: int, samples: int, length: int
) -> Callable[[DiffusionModel], list[str]]:
    process = MaskedProcess(len(tokenizer), tokenizer.mask_id)

    def sample(model: DiffusionModel) -> list[str]:
        sampler = Sampler(model, process, steps, time_conditioning=False)
        generators = [sample_generator(12345, 0, i) for i in range(samples)]
        with torch.no_grad():
            ids = sampler.sample(generators, length)
        return [tokenizer.bpe.decode(row) for row in ids.tolist()]

    return sample


def train_text(
    cfg: TrainConfig,
    data: Path,
    out: Path,
    device: str,
    log: Callable[[str], None],
    on_step: Callable[[int, float], None],
) -> dict:
    if cfg.noise != "masked":
        raise InputError("text models use masked noise (--noise masked)")
    tokenizer = Gpt2Tokenizer()
    train, held_out, meta = prepare(data, cfg.length, out, tokenizer, log)
    if not len(train) or not len(held_out):
        raise InputError(f"--data {data}: too little text for blocks of --length {cfg.length}")
    log(
        f"corpus: {train.numel():,} training and {held_out.numel():,} held-out tokens "
        f"in blocks of {cfg.length}"
    )
    trainer = Trainer(cfg, train, len(tokenizer), tokenizer.mask_id, out, device)
    if resumed := trainer.load_state():
        log(f"resuming {out} at step {trainer.step} (from {resumed} state)")
    tokenizer.save(out)
    # 256 blocks (32k tokens at length 128): V-wide logits make 2,048 cost minutes on a CPU.
    loss = held_out_loss(held_out, cfg, tokenizer.mask_id, len(tokenizer), rows=256)
    samples = sample_texts(tokenizer, cfg.sample_steps, 2, cfg.length)

    def evaluate(model: DiffusionModel) -> dict:
        value = loss(model)
        # The MDLM loss bounds the negative log-likelihood per token (nats): exp gives a
        # perplexity upper bound, comparable across checkpoints of this run.
        result = {"held_out_loss": value, "perplexity_bound": round(math.exp(value), 1)}
        log(f"step {trainer.step}: {json.dumps(result)}")
        for text in samples(model):
            log("  sample: " + json.dumps(text[:300]))
        return result

    extra = {
        "tokenizer": Gpt2Tokenizer.kind,
        "training_data": meta["files"],
        "training_steps": None,
        "default_sampling_steps": cfg.sample_steps,
    }

    def export() -> None:
        trainer.export({**extra, "training_steps": trainer.step}, dtype=torch.float16)

    trainer.run(on_step, evaluate, export)
    return trainer.history[-1] if trainer.history else {}
