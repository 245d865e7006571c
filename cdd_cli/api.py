"""The Python API, the one way in: `cdd molecules` and `cdd generate` are this module's calls
with flags for arguments.

    import cdd_cli as cdd
    generator = cdd.Generator("default-molecules", [cdd.SA(tau=3.5), cdd.Novelty()])
    for record in generator.molecules(n=16, seed=0):
        print(record["text"], record["satisfied"])

A `Generator` loads its model once (or takes a `cdd.load_model(...)` result) and builds its
constraints once; each call is one run (its own seed, prompts and novelty memory) whose
records are plain dicts, one per sample, each as soon as it is final: the CLI's records.
`cdd.molecules(...)` and `cdd.generate(...)` are one-line conveniences over it.
Constraints are values (`cdd.SA(tau=3.5)`, `cdd_cli.constraint_values`), validated when made.
Bad input raises `cdd_cli.InputError`, one line in the API's words (the CLI reports the same
problem with its flags: `InputError.cli`), when the generator is made or the call is made;
sampling happens as the returned iterator is read.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from cdd_cli.constraint_values import (  # the API's constraint values
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
    check_json,
    constraint,
)
from cdd_cli.constraints.base import closed_forms
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.json_schema import (
    load_schema,
    schema_pattern,
    schema_text_patterns,
)
from cdd_cli.constraints.lexical import Count as CountConstraint
from cdd_cli.diffusion.schedule import LogLinearSchedule
from cdd_cli.errors import InputError
from cdd_cli.models import registry
from cdd_cli.models.tokenizers import TextTokenizer
from cdd_cli.output.files import output_error
from cdd_cli.prompts import PromptInput, check_prompt, check_prompt_id, check_unicode
from cdd_cli.reporting import Display, Reporter
from cdd_cli.run.defaults import check_blocks, check_lookahead_fits
from cdd_cli.run.domains import DEFAULT_LENGTH, DOMAINS
from cdd_cli.run.runner import Output, check_length, compile_spec, plan, write
from cdd_cli.spec.entries import check_lookahead, domain_of
from cdd_cli.spec.model import Spec
from cdd_cli.spec.overlay import overlay
from cdd_cli.spec.reader import load_spec as _load_spec

__all__ = [
    "SA", "Count", "Exclude", "Generator", "Include", "InputError", "JsonSchema", "Model",
    "Novelty", "Regex", "Reporter", "SentenceCount", "Toxicity", "WordAt", "WordCount",
    "check_spec", "constraint", "generate", "load_model", "load_spec", "molecules",
    "schema_to_patterns", "schema_to_regex",
]  # fmt: skip

Constraints = ConstraintSpec | Iterable[ConstraintSpec] | None
Prompts = str | PromptInput | Iterable[str | dict | PromptInput] | None


def load_spec(path: str | Path) -> Spec:
    """A YAML spec, validated (`cdd validate` reads it the same way)."""
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"spec: expected a YAML file's path, got {path!r}")
    return _load_spec(Path(path))


def device_name(device: str) -> str:
    """`device` is a device's name ("auto", "cpu", "cuda", "cuda:K"; `registry.resolve_device`
    checks it against this machine's)."""
    if not isinstance(device, str):
        raise InputError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:K', got {device!r}")
    return device


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
    elif spec is not None and not isinstance(spec, (str, Path)):
        raise InputError(f"spec: expected a Spec or a YAML file's path, got {spec!r}")
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


class Generator:
    """A model and its constraints, ready to sample: made once, called for as many runs as
    needed (each with its own seed, prompts and n).

    `model`: a shipped name, a model directory, `hf://owner/name`, or a `cdd.load_model(...)`
    result (default: the spec's, else the domain's shipped model). `constraints` replace the
    spec's entries of the same type; the keyword settings replace the spec's values (`decode`:
    "well-formed" or "plain", how the last step reads a SMILES prediction; `sampler`,
    `block_length`, `dtype`, `chat`, `temperature`, `top_p`: as `cdd generate`'s flags;
    `words`: the word rules of lexical constraints, "plain" or "collie"). `domain`: "molecules"
    or "text", which a given model's tokenizer otherwise decides."""

    def __init__(
        self,
        model: str | Model | None = None,
        constraints: Constraints = None,
        *,
        spec: Spec | str | Path | None = None,
        domain: str | None = None,
        method: str | None = None,
        seed: int | None = None,
        steps: int | None = None,
        batch_size: int | None = None,
        decode: str | None = None,
        sampler: str | None = None,
        block_length: int | None = None,
        dtype: str | None = None,
        chat: bool = False,
        temperature: float | None = None,
        top_p: float | None = None,
        words: str | None = None,
        device: str = "auto",
    ):
        loaded = model.loaded if isinstance(model, Model) else None
        name = loaded.name if loaded is not None else model
        sampling = {"seed": seed, "steps": steps, "batch_size": batch_size}
        sampling["block_length"] = block_length
        resolved = _spec(
            spec, constraints, name, method, sampling, words=words, decode=decode,
            sampler=sampler, dtype=dtype, temperature=temperature, top_p=top_p,
        )  # fmt: skip
        if not isinstance(chat, bool):
            raise InputError(f"chat must be True or False, got {chat!r}")
        resolved.sampling.chat = chat or resolved.sampling.chat
        if domain is not None and (not isinstance(domain, str) or domain not in DOMAINS):
            raise InputError(f"domain must be molecules or text, got {domain!r}")
        device_name(device)
        if loaded is not None:  # where the model is loaded, whatever `device` says
            device = str(next(loaded.model.parameters()).device)
        else:
            device = registry.resolve_device(device)
            if domain is None and resolved.model is None:
                raise InputError("Generator: give a model, or domain='molecules' or 'text'")
            if domain is None:  # a named model: its tokenizer says which domain it serves
                # (the kind only picks a default model, and a model is named here)
                loaded = registry.load(resolved.model, "molecules", device, resolved.sampling.dtype)
        if domain is None:
            domain = "text" if isinstance(loaded.tokenizer, TextTokenizer) else "molecules"
        self.compiled = compile_spec(resolved, DOMAINS[domain], device, loaded)

    @property
    def spec(self) -> Spec:
        """The resolved spec: every setting filled in for this model and method."""
        return self.compiled.spec

    def generate(
        self,
        prompts: Prompts = None,
        n: int | None = None,
        *,
        length: int | None = None,
        seed: int | None = None,
        reporter: Reporter | None = None,
        template: str | None = None,
    ) -> Iterator[dict]:
        """Records of `n` continuations (default: the spec's n, else 4) of each prompt.
        `prompts`: a text, texts, or {"prompt": ..., "id": ...} objects; None generates
        unconditionally. `length`: tokens after the prompt (default 64, or what the model's
        length leaves). `reporter`: told of records, steps and ALM iterations as they go.
        `template`: the whole text, fixed parts and blanks (`cdd generate --template`), in
        place of prompts and length."""
        self._serves("text", "generate")
        run = plan(self.compiled, n, as_given(prompts, template), length, seed)
        return run.records(checked(reporter))

    def molecules(
        self, n: int | None = None, *, seed: int | None = None, reporter: Reporter | None = None
    ) -> Iterator[dict]:
        """Records of `n` molecules (default: the spec's n, else 16)."""
        self._serves("molecules", "molecules")
        return plan(self.compiled, n, None, None, seed).records(checked(reporter))

    def write(
        self,
        output: str | Output,
        n: int | None = None,
        prompts: Prompts = None,
        length: int | None = None,
        *,
        seed: int | None = None,
        display: Display | None = None,
        say: Callable[[str], None] = print,
        template: str | None = None,
    ) -> tuple[int, str]:
        """One run's records appended to `output` (a JSONL file's path, "-" for stdout, or an
        `Output` saying which shard to write and whether to resume), with its resolved
        configuration beside it, as `cdd molecules -o` writes them: the exit code (3 where
        some record violates its constraints, else 0) and the summary line. `say`: where
        lines about resuming go; `template`: as `generate`'s."""
        if isinstance(output, (str, os.PathLike)):
            output = Output(os.fspath(output))
        check_output(output)
        if not callable(say):
            raise InputError(f"say: expected a function of one line, got {say!r}")
        given = as_given(prompts, template) if self.compiled.domain.name == "text" else None
        if (prompts is not None or template is not None) and given is None:
            raise InputError("a molecule model takes no prompts")
        run = plan(self.compiled, n, given, length, seed)
        started = time.perf_counter()
        code = write(run, output, checked(display), say)
        return code, run.summary(time.perf_counter() - started)

    def _serves(self, domain: str, call: str) -> None:
        if self.compiled.domain.name != domain:
            model = self.compiled.loaded.name
            other = "generate" if domain == "molecules" else "molecules"
            raise InputError(
                f"{call}(): model {model} is a {self.compiled.domain.name} model; use {other}()"
            )


def check_output(output: Output) -> None:
    """An `Output` whose fields hold what the CLI's flags would give (`--shard I/N`), and
    whose file's folder exists (checked before the model samples)."""
    if not isinstance(output, Output) or not isinstance(output.path, str):
        raise InputError(f"output: expected a file's path or an Output, got {output!r}")
    shard = output.shard
    pair = isinstance(shard, tuple) and len(shard) == 2
    if not pair or not all(type(k) is int for k in shard) or not 0 <= shard[0] < shard[1]:
        raise InputError(f"Output.shard must be (I, N) with 0 <= I < N, got {shard!r}")
    if not isinstance(output.resume, bool):
        raise InputError(f"Output.resume must be True or False, got {output.resume!r}")
    for name in ("written", "resume_hint"):
        if not isinstance(getattr(output, name), (str, type(None))):
            raise InputError(f"Output.{name} must be a text or None, got {getattr(output, name)!r}")
    folder = Path(output.path).expanduser().parent
    if output.path != "-" and not folder.is_dir():
        problem = f"{folder} is not a folder" if folder.exists() else f"no folder {folder}"
        raise output_error(output.path, problem)


def checked(reporter: Reporter | None) -> Reporter | None:
    if reporter is not None and not isinstance(reporter, Reporter):
        raise InputError(f"reporter: expected a cdd.Reporter, got {reporter!r}")
    return reporter


def check_spec(path: str | Path, length: int | None = None) -> tuple[Spec, str]:
    """A spec checked as a run checks it before sampling (keys, types, ranges, model,
    surrogates, layouts and patterns fit), without loading weights: the spec with every
    setting filled in, and what was checked ("2 constraint(s), model default-text, layout
    fits 64 tokens (--length 64)"). Lexical layouts are checked for an unprompted continuation
    of `length` tokens (default: what `generate` would use); `generate` checks again with each
    prompt (and counts read from prompts)."""
    check_length(length)
    resolved = load_spec(path)
    projection = resolved.projection
    check_lookahead(projection.lookahead, resolved.method, resolved.constraints, resolved.source)
    text = any(domain_of(c.type) == "text" for c in resolved.constraints)
    kind = "text" if text else "molecules"
    loaded = registry.load(resolved.model, kind, "cpu", resolved.sampling.dtype, weights=False)
    domain = "text" if isinstance(loaded.tokenizer, TextTokenizer) else "molecules"
    # As a Generator compiles it (the method a run would record included), weights aside.
    constraints = compile_spec(resolved, DOMAINS[domain], "cpu", loaded).constraints
    placed = [c for c in constraints if not (isinstance(c, CountConstraint) and c.resolved is None)]
    tokens = length or min(DEFAULT_LENGTH, loaded.config.model_length)
    if length and length > loaded.config.model_length:
        problem = f"{length} exceeds model {loaded.name}'s length of "
        problem += f"{loaded.config.model_length} tokens"
        raise InputError(f"length {problem}", cli=f"--length {problem}")
    check_blocks(resolved, tokens)  # (a text run checks again with each prompt's length)
    check_lookahead_fits(resolved, loaded, tokens)  # (and again with each prompt's)
    note = ""
    try:
        if closed_forms(placed, loaded.tokenizer, 0, tokens):
            note = f", layout fits {tokens} tokens" + ("" if length else f" (--length {tokens})")
    except InputError as exc:
        raise InputError(
            f"{path}: {exc} (length {tokens})", cli=f"{path}: {exc.cli} (--length {tokens})"
        ) from None
    return resolved, f"{len(resolved.constraints)} constraint(s), model {loaded.name}{note}"


def schema_to_patterns(schema: dict | str | Path, whitespace: str = "compact") -> list[str]:
    """The regular expressions a `json_schema` constraint enforces for `schema` (a mapping,
    or a .json file's path): every text that matches all of them whole is a valid instance,
    written with the properties in the schema's order as compact JSON (`whitespace`
    "compact": one optional space after `,` and `:`) or with JSON's whitespace ("flexible":
    a space, or a line break and indentation, around every `{ } [ ] , :`; the supported
    subset: `cdd_cli.constraints.json_schema`). Most schemas are one; keywords no single
    regex joins (two string patterns, a format with a length) add more, which a run
    intersects. InputError naming every unsupported keyword, with where it is."""
    return list(schema_text_patterns(schema_text(schema, whitespace), whitespace))


def schema_to_regex(schema: dict | str | Path, whitespace: str = "compact") -> str:
    """The one regular expression a `json_schema` constraint enforces for `schema`
    (`schema_to_patterns`); InputError where the schema takes several."""
    return schema_pattern(schema_text(schema, whitespace), whitespace, "schema")


def schema_text(schema: dict | str | Path, whitespace: str) -> str:
    """`schema` (a mapping or a .json file's path) as the canonical JSON the compiler reads."""
    if whitespace not in ("compact", "flexible"):
        raise InputError(f"schema: whitespace must be 'compact' or 'flexible', got {whitespace!r}")
    if isinstance(schema, dict):
        check_json(schema, "schema")
    elif isinstance(schema, (str, os.PathLike)):
        schema = os.fspath(schema)
    else:
        raise InputError(f"schema: expected a mapping or a .json file's path, got {schema!r}")
    try:
        return load_schema(schema, "schema", whitespace)[0]
    except RecursionError:  # deeper than the validator's recursion reaches
        raise InputError("schema: nested too deeply") from None


def molecules(
    n: int | None = None,
    constraints: Constraints = None,
    *,
    spec: Spec | str | Path | None = None,
    model: str | Model | None = None,
    reporter: Reporter | None = None,
    device: str = "auto",
    **settings: Any,
) -> Iterator[dict]:
    """Records of `n` molecules (default: the spec's n, else 16), as `cdd molecules` writes
    them: `Generator(model, constraints, spec=spec, **settings).molecules(n)`."""
    made = Generator(model, constraints, spec=spec, domain="molecules", device=device, **settings)
    return made.molecules(n, reporter=reporter)


def generate(
    prompts: Prompts = None,
    n: int | None = None,
    constraints: Constraints = None,
    *,
    length: int | None = None,
    spec: Spec | str | Path | None = None,
    model: str | Model | None = None,
    reporter: Reporter | None = None,
    device: str = "auto",
    template: str | None = None,
    **settings: Any,
) -> Iterator[dict]:
    """Records of `n` continuations (default: the spec's n, else 4) of each prompt, or of a
    `template`'s blanks, as `cdd generate` writes them: `Generator(model, constraints,
    spec=spec, **settings).generate(prompts, n, length=length, template=template)`."""
    made = Generator(model, constraints, spec=spec, domain="text", device=device, **settings)
    return made.generate(prompts, n, length=length, reporter=reporter, template=template)


def as_given(prompts: Prompts, template: str | None) -> list[PromptInput | None]:
    """The run's prompts, or its one template (the whole text: no prompts beside it)."""
    if template is None:
        return as_prompts(prompts)
    if not isinstance(template, str):
        raise InputError(f"template: expected a text, got {template!r}")
    if prompts is not None:
        raise InputError("a template is the whole text: give no prompts beside it")
    return [PromptInput(check_unicode(template, "template"), template=True)]


def as_prompts(prompts: Prompts) -> list[PromptInput | None]:
    if prompts is None:
        return [None]
    if isinstance(prompts, (str, PromptInput, dict)):  # one prompt, not in a list
        prompts = [prompts]
    if not isinstance(prompts, Iterable):
        raise InputError(f"prompts: expected a text or a list of them, got {prompts!r}")
    out: list[PromptInput | None] = []
    for k, item in enumerate(prompts):
        where = f"prompts[{k}]"
        if isinstance(item, PromptInput):  # read and checked already (`--prompts FILE`)
            out.append(item)
        elif isinstance(item, str):
            out.append(PromptInput(check_prompt(item, where)))
        elif isinstance(item, dict) and isinstance(item.get("prompt"), str):
            prompt_id = check_prompt_id(item.get("id"), where)
            out.append(PromptInput(check_prompt(item["prompt"], where), prompt_id))
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
        self.loaded = loaded  # what a `Generator` samples from
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
    if not isinstance(name_or_dir, str) or not name_or_dir.strip():
        raise InputError("load_model: give a shipped model name or a model directory")
    loaded = registry.load(name_or_dir, "text", registry.resolve_device(device_name(device)), dtype)
    return Model(loaded)
