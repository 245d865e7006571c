"""What a run settles before it samples: the settings a spec leaves to the method and the
model, filled in once (so the resolved configuration written beside the output names every
value used), and the checks that refuse what cannot run (blocks without steps, a batch that
cannot fit in memory)."""

from __future__ import annotations

import os
from dataclasses import fields
from typing import Any

from cdd_cli.diffusion.processes import block_count
from cdd_cli.errors import InputError
from cdd_cli.methods import METHODS, REPAIR_BY_MODEL
from cdd_cli.models.families import FAMILIES
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.tokenizers import MoleculeTokenizer
from cdd_cli.settings import ALMSettings, SearchSettings
from cdd_cli.spec.model import Spec

try:
    import resource
except ImportError:  # not a POSIX system
    resource = None


def fill(settings: Any, values: dict[str, Any]) -> None:
    """Set each of `values` on `settings` where it is None."""
    for f in fields(settings):
        if getattr(settings, f.name) is None and f.name in values:
            setattr(settings, f.name, values[f.name])


def fill_defaults(spec: Spec, loaded: LoadedModel) -> None:
    """Settings the spec leaves to the method and model, filled in place (once per compiled
    spec, which all its runs share) so that the resolved configuration names them."""
    spec.sampling.steps = spec.sampling.steps or loaded.default_steps
    tokenizer = loaded.tokenizer
    # SMILES have a syntax; text has none, and SELFIES need none (every string reads).
    syntax = isinstance(tokenizer, MoleculeTokenizer) and tokenizer.syntax() is not None
    if spec.sampling.decode == "well-formed" and not syntax:
        what = "SELFIES" if isinstance(tokenizer, MoleculeTokenizer) else "text"
        raise InputError(
            f"{spec.source}: decode well-formed: model {loaded.name} has no syntax to decode "
            f"by ({what} is read plain)"
        )
    spec.sampling.decode = spec.sampling.decode or ("well-formed" if syntax else "plain")
    fill_sampler(spec, loaded)
    projection: ALMSettings = spec.projection
    search: SearchSettings = spec.search
    given = {name for name in ("mu_init", "mu_max") if getattr(projection, name) is not None}
    method = METHODS[spec.method]
    fill(projection, method.projection_defaults(loaded.kind, [c.type for c in spec.constraints]))
    fill(search, method.search_defaults(loaded.kind))
    fill(spec.repair, REPAIR_BY_MODEL[loaded.kind])
    if method.projects and projection.mu_init > projection.mu_max:
        filled = "mu_init" if "mu_init" not in given else "mu_max"
        raise InputError(
            f"{spec.source}: projection needs 0 < mu_init <= mu_max, got mu_init "
            f"{projection.mu_init:g} and mu_max {projection.mu_max:g} ({filled}: the "
            f"{spec.method} default for this model; give both)"
        )


# Text is drawn from the nucleus of this much of each step's mass unless a run says otherwise:
# the full distribution of the shipped text model reads as word salad (judged perplexity
# 1,522 under Gemma-3-270M, real text 119); TEXT_TOP_P is the nucleus of least judged
# perplexity whose word entropy stays within 10% of real text's (bench/README.md, "Drawing
# from the nucleus"). SMILES keep the full mass: the nucleus is not what makes them valid.
TEXT_TOP_P = 0.73


def fill_sampler(spec: Spec, loaded: LoadedModel) -> None:
    """The sampler, block length, nucleus and weight precision: the model's own unless given."""
    sampling = spec.sampling
    if sampling.top_p is None:
        smiles = isinstance(loaded.tokenizer, MoleculeTokenizer)
        sampling.top_p = 1.0 if smiles else TEXT_TOP_P
    family = FAMILIES.get(loaded.meta.get("family", ""))
    sampling.sampler = sampling.sampler or (family.sampler if family else "ancestral")
    if sampling.sampler != "ancestral" and loaded.config.noise != "masked":
        raise InputError(
            f"{spec.source}: sampler {sampling.sampler}: model {loaded.name} is a uniform-noise "
            "model, whose steps may change every token (only masked models order positions)"
        )
    if sampling.block_length is None:  # blocks are an ordering's (ancestral has none)
        ordered = family is not None and sampling.sampler != "ancestral"
        sampling.block_length = family.block_length if ordered else 0
    if sampling.block_length and sampling.sampler == "ancestral":
        raise InputError(
            f"{spec.source}: block_length {sampling.block_length}: the ancestral sampler "
            "decides positions at random, not in blocks (use sampler confidence, margin or "
            "entropy, or block_length 0)"
        )
    if loaded.model is not None:  # (not loaded: `cdd validate`, which says what a CPU run uses)
        sampling.dtype = str(next(loaded.model.parameters()).dtype).removeprefix("torch.")
    sampling.dtype = sampling.dtype or "float32"


def check_blocks(spec: Spec, length: int) -> None:
    """Every block of a semi-autoregressive sampler gets at least one step."""
    block = spec.sampling.block_length or 0
    blocks = block_count(length, block)
    if spec.sampling.steps is not None and spec.sampling.steps < blocks:
        problem = f"{spec.sampling.steps} steps cannot decide {blocks} blocks of {block} tokens "
        problem += f"({length} tokens): give "
        raise InputError(
            f"{problem}steps >= {blocks} or a longer block_length",
            cli=f"{problem}--steps >= {blocks} or a longer --block-length",
        )


def usable_memory() -> tuple[int, str] | None:
    """The bytes a run may allocate, and whose they are: this machine's memory, or the
    process's address-space limit (`ulimit -v`) where that is less; None where there is no
    cheap answer (not a POSIX system)."""
    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    limit = resource.getrlimit(resource.RLIMIT_AS)[0] if resource else -1  # -1: unlimited
    if 0 < limit < have:
        return limit, "this process's memory limit of"
    return have, "this machine's"


def check_batch_fits(batch_size: int, loaded: LoadedModel) -> None:
    """Refuse a batch whose probability tensors alone ([B, L, V] floats, two copies: logits
    and probabilities) exceed this machine's memory, before allocating any."""
    length = loaded.config.model_length
    need = 2 * batch_size * length * loaded.config.vocab_size * 4
    usable = usable_memory()
    if usable is not None and need > usable[0]:
        have, whose = usable
        problem = (
            f"{batch_size}: its [batch, {length}, {loaded.config.vocab_size}] probabilities "
            f"need about {need / 2**30:,.1f} GiB, more than {whose} "
            f"{have / 2**30:,.1f} GiB; use a smaller batch"
        )
        raise InputError(f"batch_size {problem}", cli=f"--batch-size {problem}")


def check_lookahead_fits(spec: Spec, loaded: LoadedModel, tokens: int) -> None:
    """Refuse a look-ahead whose forward over its candidates ([lookahead, tokens, V] floats,
    two copies: logits and probabilities) exceeds this machine's memory, before allocating
    any; `tokens`: the longest sequence of the run (prompt and continuation). (The spec's
    checks already refuse a look-ahead under any method but cdd.)"""
    count = spec.projection.lookahead
    if not count:
        return
    vocabulary = loaded.config.vocab_size
    row = 2 * tokens * vocabulary * 4
    usable = usable_memory()
    if usable is not None and count * row > usable[0]:
        have, whose = usable
        raise InputError(
            f"{spec.source}: projection.lookahead {count}: its [{count}, {tokens}, "
            f"{vocabulary}] forward needs about {count * row / 2**30:,.1f} GiB, more than "
            f"{whose} {have / 2**30:,.1f} GiB; use a lookahead of at most {have // row:,}"
        )
