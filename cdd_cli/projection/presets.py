"""The settings tables: what a spec leaves out, filled in per method, model kind and family.

Every value here was chosen by a measurement; the comment beside it says which (the current
tables are in bench/README.md; the runs of the values that lost are in the issue notes and in
git history, `git log -p -- bench/README.md`). A value a spec gives always wins: only None is
filled.

- `cdd` fills from `CDD_SHARED`, then `CDD_BY_MODEL[model_kind]`.
- `paper` runs the paper's algorithm as published: the ALM at every step over the whole
  vocabulary with the paper's hyperparameters for the constraint family (`PAPER_BY_FAMILY`),
  exact constraints (novelty, lexical) searched at every step, the constraint families' closed
  forms, and no look-ahead, linearised ladder or redraw.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from cdd_cli.errors import InputError
from cdd_cli.models.families import FAMILIES
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.tokenizers import SmilesTokenizer
from cdd_cli.settings import ALMSettings, SearchSettings
from cdd_cli.spec import Spec

CDD_SHARED: dict[str, Any] = {
    "eta": 1.0,  # the paper's SA step; with support-restricted logits it converged in all runs
    "mu_max": 1000.0,  # the paper's
    "alpha": 2.0,  # growth of mu per outer iteration
    "temperature": 0.5,  # Gumbel-softmax temperature of the relaxation
    # A sample at mu_max whose violation has not fallen for 5 outer iterations stops (the later
    # stages take over): QM9, SA tau 3.5, 512 samples: the same valid, unique and novel counts
    # as without it, in less time.
    "patience": 5,
}

CDD_BY_MODEL: dict[str, dict[str, Any]] = {
    # QM9 SMILES (V = 35), uniform noise.
    "smiles": {
        # 3 / 4: a larger first penalty reaches feasibility in fewer outer iterations (QM9,
        # 128 samples, 0 violating and 128 valid with each: SA tau 3.5, 0.11 s a sample
        # against 0.23 s with inner 5, mu 1; tau 3.0, 0.19 against 0.29 s).
        "inner_iters": 3,
        "mu_init": 4.0,
        # SA tau 3.0, 128 samples: 128 valid, 0 violating with 20 or 50; 0.31 against 0.48 s.
        "max_outer_iters": 20,
        # With all 35 tokens the penalties buy surrogate feasibility with tokens the model
        # never puts there and the molecule no longer parses (SA tau 3.5, 64 samples: 93 of
        # 97 final searches began unparsable; with 4: 64 valid and unique after 1.05 draws).
        "support": 4,
        # The final prediction alone (on 32 steps; 0.9 adds steps 29-30): 256 samples, tau
        # 3.5, 1.51x / 1.06x the unconstrained time (mean / median) against 2.12x / 1.49x.
        "project_from": 0.95,
    },
    # GPT-2 vocabulary (V = 50,258), masked noise.
    "masked text": {
        # The paper's toxicity 10 / 1 spent most outer iterations raising mu before any token
        # moved (tweets model, tau 0.5: 4.1x / 1.35x against 1.8x / 1.09x with 5 / 64).
        "inner_iters": 5,
        "mu_init": 64.0,
        "max_outer_iters": 50,
        # Every V-wide operation of an inner step costs ~100 ms a sample on a CPU, and tokens
        # outside the top 256 carry almost no mass.
        "support": 256,
        # Every step, each looked ahead at first (most leave the ALM idle): 16 toxic prompts x
        # 4, tau 0.5, 0 violating against 4.7% when projecting from 0.9 without the look-ahead.
        "project_from": 0.0,
    },
    # GPT-2 vocabulary, uniform noise: every step would be a full projection.
    "uniform text": {
        "inner_iters": 5,
        "mu_init": 64.0,
        "max_outer_iters": 50,
        "support": 256,
        "project_from": 0.9,
    },
}

# The search and the redraws by model kind. QM9 (64 samples, one run, bench/README.md
# "Molecular properties"): the search at the final prediction alone with 300 nodes, then up to
# 15 redraws, against from 0.9 with 2,000 nodes and 3 redraws: a carbonyl + novelty 64/64
# satisfied in 12.6 s (344,430 nodes before: 63/64 in 47.7 s); QED >= 0.5, logP in [0, 2], a
# carbonyl and no PAINS 63/64 in 40.3 s (55/64 in 77.6 s); novelty alone 3.0 s (3.6 s); QED
# and SA alone unchanged. Drawing a QM9 sample costs ~35 ms at batch 64: a redraw is cheaper
# than a long search. (Novelty against the training set alone, 1,024 samples, had measured
# 1.68x / 1.43x / 1.37x the unconstrained mean from 0.75 / 0.9 / 1.0.)
CDD_SEARCH_BY_MODEL: dict[str, dict[str, Any]] = {
    "smiles": {"project_from": 1.0, "max_nodes": 300},
    "masked text": {"project_from": 0.9, "max_nodes": 2000},
    "uniform text": {"project_from": 0.9, "max_nodes": 2000},
}
REPAIR_BY_MODEL: dict[str, dict[str, Any]] = {
    "smiles": {"max_redraws": 15},
    # A text sample costs 0.2-20 s: a few redraws with the surrogate aiming further inside.
    "masked text": {"max_redraws": 3},
    "uniform text": {"max_redraws": 3},
}

# The paper's settings (its experiments section), by the constraint the ALM serves. A constraint the
# paper did not run takes its SA settings, the paper's defaults.
_PAPER_COMMON: dict[str, Any] = {
    "max_outer_iters": 1000,
    "mu_max": 1000.0,
    "alpha": 2.0,
    "temperature": 0.5,
    "project_from": 0.0,  # every step
    "support": 0,  # the whole vocabulary
    "patience": 1000,  # no early stop before the outer cap
}
PAPER_BY_FAMILY: dict[str, dict[str, Any]] = {
    "toxicity": {**_PAPER_COMMON, "inner_iters": 10, "eta": 0.2, "mu_init": 1.0},
    "sa": {**_PAPER_COMMON, "inner_iters": 100, "eta": 1.0, "mu_init": 1.0},
}
PAPER_SEARCH: dict[str, Any] = {"project_from": 0.0, "max_nodes": 2000}


def model_kind(loaded: LoadedModel) -> str:
    """The row of `CDD_BY_MODEL` a model takes."""
    if isinstance(loaded.tokenizer, SmilesTokenizer):
        return "smiles"
    return "masked text" if loaded.config.noise == "masked" else "uniform text"


def paper_family(constraint_types: list[str]) -> str:
    """The `PAPER_BY_FAMILY` row for a job's constraints (toxicity where it is one of them)."""
    return "toxicity" if "toxicity" in constraint_types else "sa"


def fill(settings: Any, values: dict[str, Any]) -> None:
    """Set each of `values` on `settings` where it is None."""
    for f in fields(settings):
        if getattr(settings, f.name) is None and f.name in values:
            setattr(settings, f.name, values[f.name])


def fill_model_defaults(spec: Spec, loaded: LoadedModel) -> None:
    """Settings the spec leaves to the method and model, filled in place so that the
    resolved configuration names them."""
    spec.sampling.steps = spec.sampling.steps or loaded.default_steps
    syntax = isinstance(loaded.tokenizer, SmilesTokenizer)  # text has none
    if spec.sampling.decode == "well-formed" and not syntax:
        raise InputError(
            f"{spec.source}: decode well-formed: model {loaded.name} has no syntax to decode "
            "by (text is read plain)"
        )
    spec.sampling.decode = spec.sampling.decode or ("well-formed" if syntax else "plain")
    fill_sampler(spec, loaded)
    projection: ALMSettings = spec.projection
    search: SearchSettings = spec.search
    given = {name for name in ("mu_init", "mu_max") if getattr(projection, name) is not None}
    if spec.method == "paper":
        fill(projection, PAPER_BY_FAMILY[paper_family([c.type for c in spec.constraints])])
        fill(search, PAPER_SEARCH)
    else:
        fill(projection, {**CDD_SHARED, **CDD_BY_MODEL[model_kind(loaded)]})
        fill(search, CDD_SEARCH_BY_MODEL[model_kind(loaded)])
    fill(spec.repair, REPAIR_BY_MODEL[model_kind(loaded)])
    if spec.method in ("cdd", "paper") and projection.mu_init > projection.mu_max:
        filled = "mu_init" if "mu_init" not in given else "mu_max"
        raise InputError(
            f"{spec.source}: projection needs 0 < mu_init <= mu_max, got mu_init "
            f"{projection.mu_init:g} and mu_max {projection.mu_max:g} ({filled}: the "
            f"{spec.method} default for this model; give both)"
        )


def fill_sampler(spec: Spec, loaded: LoadedModel) -> None:
    """The sampler, block length and weight precision: the model family's own unless given."""
    sampling = spec.sampling
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
