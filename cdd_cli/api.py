"""The Python API: what `cdd molecules` and `cdd generate` do, as functions that return the
records the CLI writes (plain dicts, one per sample, each as soon as it is final).

    import cdd_cli as cdd
    for record in cdd.molecules(n=16, constraints=[cdd.SA(tau=3.5), cdd.Novelty()], seed=0):
        print(record["text"], record["satisfied"])

Constraints are values: each function below validates its options exactly as a spec file's
entry is validated and returns that entry; pass any number of them. Bad input raises
`cdd_cli.InputError` with the CLI's one-line message. The work is prepared (model loaded,
constraints built, every check made) when the function is called; sampling happens as the
returned iterator is read.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from cdd_cli.constraint_values import (  # noqa: F401 (the API's constraint values)
    SA,
    Count,
    Exclude,
    Include,
    JsonSchema,
    Novelty,
    Regex,
    SentenceCount,
    Toxicity,
    WordAt,
    WordCount,
    constraint,
)
from cdd_cli.errors import InputError
from cdd_cli.prompts import PromptInput, check_prompt
from cdd_cli.reporting import Reporter
from cdd_cli.spec import ConstraintSpec, Spec, overlay
from cdd_cli.spec import load_spec as _load_spec


def load_spec(path: str | Path) -> Spec:
    """A YAML spec, validated (`cdd validate` reads it the same way)."""
    return _load_spec(Path(path))


def _spec(
    spec: Spec | str | Path | None,
    constraints: ConstraintSpec | Iterable[ConstraintSpec] | None,
    model: str | None,
    method: str | None,
    sampling: dict[str, int | None],
    words: str | None = None,
    **choices: str | None,
) -> Spec:
    if isinstance(spec, Spec):
        base = copy.deepcopy(spec)  # the caller's spec is left as it was
    else:
        base = load_spec(spec) if spec is not None else Spec(source="api")
    if isinstance(constraints, ConstraintSpec):  # one constraint, not in a list
        constraints = [constraints]
    given = list(constraints or [])
    for c in given:
        if not isinstance(c, ConstraintSpec):
            raise InputError(
                f"constraints: expected values such as cdd.SA(tau=3.5), got {type(c).__name__}"
            )
    return overlay(base, given, model, method, sampling, words=words, **choices)


def molecules(
    n: int | None = None,
    constraints: ConstraintSpec | Iterable[ConstraintSpec] | None = None,
    *,
    spec: Spec | str | Path | None = None,
    model: str | None = None,
    method: str | None = None,
    seed: int | None = None,
    steps: int | None = None,
    batch_size: int | None = None,
    decode: str | None = None,
    device: str = "auto",
    reporter: Reporter | None = None,
) -> Iterator[dict]:
    """Records of `n` molecules (default: the spec's n, else 16), as `cdd molecules` writes
    them. Arguments given replace the spec's values; constraints replace its entries of the
    same type. `decode`: "well-formed" (default) or "plain", how the last step reads the
    prediction. `reporter`: told of records, steps and ALM iterations as they go."""
    from cdd_cli.pipeline import prepare_molecules

    sampling = {"n": n, "seed": seed, "steps": steps, "batch_size": batch_size}
    resolved = _spec(spec, constraints, model, method, sampling, decode=decode)
    run = prepare_molecules(resolved, device)
    return run.records(resolved.sampling.n or 16, reporter)


def generate(
    prompts: str | Iterable[str | dict] | None = None,
    n: int | None = None,
    constraints: ConstraintSpec | Iterable[ConstraintSpec] | None = None,
    *,
    length: int | None = None,
    spec: Spec | str | Path | None = None,
    model: str | None = None,
    method: str | None = None,
    seed: int | None = None,
    steps: int | None = None,
    batch_size: int | None = None,
    sampler: str | None = None,
    block_length: int | None = None,
    dtype: str | None = None,
    chat: bool = False,
    temperature: float | None = None,
    top_p: float | None = None,
    words: str | None = None,
    device: str = "auto",
    reporter: Reporter | None = None,
) -> Iterator[dict]:
    """Records of `n` continuations (default: the spec's n, else 4) of each prompt, as `cdd
    generate` writes them. `prompts`: a text, texts, or {"prompt": ..., "id": ...} objects;
    None generates unconditionally. `length`: tokens after the prompt (default 64, or what
    the model's length leaves). `sampler`, `block_length`, `dtype`, `chat`, `temperature`,
    `top_p`: as `cdd generate`'s flags (default: the model family's; `chat` wraps each prompt
    in the model's chat template). `words`: the word rules lexical constraints are judged and
    laid out by, "plain" (default) or "collie" (the COLLIE benchmark's)."""
    from cdd_cli.pipeline import prepare_text

    if length is not None and length <= 0:
        raise InputError(f"length must be positive, got {length}")
    sampling = {"n": n, "seed": seed, "steps": steps, "batch_size": batch_size}
    sampling["block_length"] = block_length
    resolved = _spec(
        spec, constraints, model, method, sampling, words=words,
        sampler=sampler, dtype=dtype, temperature=temperature, top_p=top_p,
    )  # fmt: skip
    resolved.sampling.chat = chat or resolved.sampling.chat
    run = prepare_text(resolved, device, _prompts(prompts), length)
    return run.records(resolved.sampling.n or 4, reporter)


def _prompts(prompts: str | Iterable[str | dict] | None) -> list[PromptInput | None]:
    if prompts is None:
        return [None]
    if isinstance(prompts, str):
        prompts = [prompts]
    out: list[PromptInput | None] = []
    for k, item in enumerate(prompts):
        where = f"prompts[{k}]"
        if isinstance(item, str):
            out.append(PromptInput(check_prompt(item, where)))
        elif isinstance(item, dict) and isinstance(item.get("prompt"), str):
            out.append(PromptInput(check_prompt(item["prompt"], where), item.get("id")))
        else:
            raise InputError(f"{where}: expected a text or an object with a string 'prompt'")
    if not out:
        raise InputError("prompts: none given (None generates unconditionally)")
    return out


class Model:
    """A loaded diffusion LM of any family, one entry point for all: `logits(ids)`.

    `name`, `tokenizer`, `mask_id`, `family` ("mdlm", "udlm", "a2d", "llada", "Dream",
    "a2d-qwen3", ...) and `module` (the torch module) say what it is."""

    def __init__(self, loaded: Any):
        self.name: str = loaded.name
        self.tokenizer = loaded.tokenizer
        self.mask_id: int = loaded.tokenizer.mask_id
        self.module = loaded.model
        config = loaded.config
        self.family: str = loaded.meta.get("family") or getattr(config, "model_type", "a2d")
        self._noise: str = config.noise

    def logits(self, ids: Any) -> Any:
        """LongTensor [B, L] -> float32 logits [B, L, V]: each position's distribution over
        clean tokens as the samplers read it: after Dream's shift, at the clean end of an
        MDLM/UDLM schedule, and with the mask token at -inf for masked models (no sampler
        ever draws it). V is the tokenizer's size (padded embedding rows are not output)."""
        import torch

        from cdd_cli.diffusion.schedule import LogLinearSchedule

        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2:
            raise InputError("logits: ids must be a LongTensor [batch, length]")
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < len(self.tokenizer):
            raise InputError(f"logits: ids outside the {len(self.tokenizer):,}-token vocabulary")
        device = next(self.module.parameters()).device
        ids = ids.to(device)
        sigma = LogLinearSchedule().sigma(torch.zeros(ids.shape[0], device=device))
        with torch.no_grad():
            out = self.module(ids, sigma).float()
        if self._noise == "masked":
            out[..., self.mask_id] = -torch.inf
        return out


def load_model(name_or_dir: str, device: str = "auto", dtype: str | None = None) -> Model:
    """A shipped name, a model directory (MDLM, UDLM, LLaDA, Dream, A2D) or `hf://owner/name`,
    loaded on `device` ("auto": a GPU where there is one) in `dtype` (float32, bfloat16,
    float16; default: the checkpoint's on a GPU, float32 on a CPU)."""
    from cdd_cli.models import registry

    if not isinstance(name_or_dir, str) or not name_or_dir.strip():
        raise InputError("load_model: give a shipped model name or a model directory")
    loaded = registry.load(name_or_dir, "text", registry.resolve_device(device), dtype)
    return Model(loaded)
