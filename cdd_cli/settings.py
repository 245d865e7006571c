"""The settings a spec holds, as plain data, each with the values it may take: the spec reads
them, the projection uses them.

A setting left None is the method's and model's to choose: `methods.py` holds the tables of
defaults (each with the measurement that chose it) and `run/defaults.py` fills them in before
sampling, so the resolved configuration written beside an output file names every value used.

Each field's allowed values are its `check` (in its metadata): a function of its value that
says what the value breaks, in words that follow the setting's dotted name, or None. The spec
reads every check through `problems`, whatever the section.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from cdd_cli.suggest import did_you_mean

# A setting's value -> what it breaks ("must be > 0", to follow "projection.eta "), or None.
Check = Callable[[Any], str | None]


def rule(ok: Callable[[Any], bool], says: str) -> Check:
    return lambda value: None if ok(value) else says


def checked(*checks: Check) -> dict[str, Check]:
    """A field's metadata: its checks, the first a value breaks named."""

    def first(value: Any) -> str | None:
        return next((says for c in checks if (says := c(value)) is not None), None)

    return {"check": first}


def at_least(low: float) -> dict[str, Check]:
    return checked(rule(lambda v: v >= low, f"must be >= {low:g}"))


def positive() -> dict[str, Check]:
    return checked(rule(lambda v: v > 0, "must be > 0"))


def fraction() -> dict[str, Check]:
    return checked(rule(lambda v: 0 <= v <= 1, "must be in [0, 1]"))


def one_of(names: tuple[str, ...]) -> dict[str, Check]:
    return checked(
        lambda v: (
            None
            if v in names
            else f"must be one of {', '.join(names)}, got {v!r}{did_you_mean(v, names)}"
        )
    )


def finite(value: float) -> bool:
    """A finite number, an integer too large for a float counting as not."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def problems(section: str, settings: Any) -> list[str]:
    """What `settings` (a section's dataclass) holds that its fields' checks refuse, each as
    "SECTION.NAME must be ..."; a value left None is the method's and model's, and passes.
    Then the section's own rules across fields (`together()`)."""
    found = []
    for f in fields(settings):
        value = getattr(settings, f.name)
        says = f.metadata["check"](value) if "check" in f.metadata and value is not None else None
        if says is not None:
            found.append(f"{section}.{f.name} {says}")
    together = getattr(settings, "together", None)
    return found + ([] if together is None else together())


MAX_LOOKAHEAD = 1024  # candidates: a forward of this many rows per sample and step is plenty
MU_RULE = "projection needs 0 < mu_init <= mu_max"


@dataclass
class ALMSettings:
    """The augmented-Lagrangian projection (the paper's method); spec key `projection`. None: the
    method's and model's value (`methods.py`, with the measurements behind it)."""

    eta: float | None = field(default=None, metadata=positive())  # step on the logits of y
    # Gradient steps per outer iteration.
    inner_iters: int | None = field(default=None, metadata=at_least(1))
    max_outer_iters: int | None = field(default=None, metadata=at_least(1))
    mu_init: float | None = None  # the first quadratic penalty weight (checked: `together`)
    mu_max: float | None = field(default=None, metadata=positive())
    alpha: float | None = field(default=None, metadata=at_least(1))  # growth of mu per outer
    # The Gumbel-softmax temperature of phi.
    temperature: float | None = field(default=None, metadata=positive())
    # Project steps from this fraction of the way on (0: all).
    project_from: float | None = field(default=None, metadata=fraction())
    # Tokens per position the mass moves among (0: all V). One token a position could move no
    # mass: the ALM would iterate for nothing.
    support: int | None = field(
        default=None,
        metadata=checked(
            rule(lambda v: v == 0 or v >= 2, "must be 0 (the whole vocabulary) or >= 2")
        ),
    )
    # Outer iterations at mu_max without the argmax's violation falling before a sample stops.
    patience: int | None = field(default=None, metadata=at_least(1))
    # Candidates per decision a pattern's closed form weighs by the model's next prediction
    # (`stages.ClosedFormLookAhead`: its choices the model's own, one forward of this many
    # rows per sample and deciding step); 0: off, the layout alone.
    lookahead: int = field(
        default=0,
        metadata=checked(
            rule(lambda v: 0 <= v <= MAX_LOOKAHEAD, f"must be in [0, {MAX_LOOKAHEAD}]")
        ),
    )

    def together(self) -> list[str]:
        """mu_init, a given one, positive and within mu_max (a given one)."""
        low = self.mu_init is not None and self.mu_init <= 0
        high = None not in (self.mu_init, self.mu_max) and self.mu_init > self.mu_max
        return [MU_RULE] if low or high else []


@dataclass
class SearchSettings:
    """The best-first flip search (`projection/search.py`); spec key `search`."""

    top_k: int = field(default=4, metadata=at_least(1))  # alternatives considered per position
    # Candidate sequences judged per sample and step.
    max_nodes: int | None = field(default=None, metadata=at_least(1))
    # Search steps from this fraction of the way on.
    project_from: float | None = field(default=None, metadata=fraction())


@dataclass
class RepairSettings:
    """Certification: samples the judge rejects are redrawn with a tighter surrogate bound."""

    max_redraws: int | None = field(default=None, metadata=at_least(0))
    margin_step: float = field(default=0.25, metadata=at_least(0))
    # The draw (1: the first) from which a final prediction the judges reject is moved by the
    # surrogates (the linearised ladder, the ALM); the draws before it are repaired by the
    # exact search alone, in the model's own probabilities, or drawn again.
    surrogates_from: int | None = field(default=None, metadata=at_least(1))
    # A sample's first draws that are the model's own, unsteered and judged (rejection: a
    # draw kept here is an exact sample of the constrained law); the projection steers from
    # the next draw on, with `max_redraws` redraws after it. None: a template's run under
    # cdd takes `run.templated.TEMPLATE_OWN_DRAWS`, any other run 0 (filled by the run, so
    # `cdd validate`, which knows no template, shows null).
    own_draws: int | None = field(default=None, metadata=at_least(0))


MAX_STEPS = 100_000  # denoising steps: far past any use, and a cap before allocating their table
MAX_SEED = 2**63 - 1  # torch generators take seeds below 2**63
# Samples a run (or a batch) may ask for: counts past it have no use, and overflow what
# indexes samples (a C integer).
MAX_SAMPLES = 10**12
DECODINGS = ("well-formed", "plain")
DTYPE_NAMES = ("float32", "bfloat16", "float16")
COUNT = checked(
    rule(lambda v: v >= 1, "must be >= 1"),
    rule(lambda v: v <= MAX_SAMPLES, f"must be at most {MAX_SAMPLES:,}"),
)


@dataclass
class SamplingSettings:
    n: int | None = field(default=None, metadata=COUNT)
    steps: int | None = field(
        default=None,
        metadata=checked(rule(lambda v: 1 <= v <= MAX_STEPS, f"must be in [1, {MAX_STEPS:,}]")),
    )
    batch_size: int = field(default=64, metadata=COUNT)
    seed: int = field(
        default=0,
        metadata=checked(rule(lambda v: 0 <= v <= MAX_SEED, f"must be in [0, {MAX_SEED}]")),
    )
    # How the last step reads a SMILES model's prediction: `well-formed`, the most probable
    # sequence SMILES syntax accepts (the default), or `plain`, the argmax position by
    # position, as published validity tables measure. Text has no syntax: always `plain`.
    decode: str | None = field(default=None, metadata=one_of(DECODINGS))
    # Which masked positions each step decides (masked-noise models): `ancestral` (MDLM, at
    # random), or the ones the model is surest of by `confidence` (LLaDA), `margin` or
    # `entropy` (Dream); null: the model family's own. See diffusion/processes.py, which
    # names them (the spec checks the name).
    sampler: str | None = None
    # Decide the continuation in blocks of this many tokens, left to right (LLaDA's
    # semi-autoregressive sampling); 0: one block; null: the family's own (LLaDA 32).
    block_length: int | None = field(
        default=None, metadata=checked(rule(lambda v: v >= 0, "must be >= 0 (0: one block)"))
    )
    # The weights' precision (float32, bfloat16, float16); null: the checkpoint's on a GPU,
    # float32 on a CPU. Only published families (LLaDA, Dream, A2D) take another.
    dtype: str | None = field(default=None, metadata=one_of(DTYPE_NAMES))
    # Wrap each prompt in the model's chat template (tokenizer_config.json) as one user turn.
    chat: bool = False
    # How a step draws its tokens from the (projected) prediction: logits / temperature, cut
    # to the nucleus of top_p of the mass (Holtzman et al.); 1 and 1: as it is. top_p null:
    # the model's kind decides (run/defaults.py: a nucleus for text, the full mass for SMILES).
    temperature: float = field(
        default=1.0,
        metadata=checked(
            lambda v: None if finite(v) and 0 < v <= 100 else f"must be in (0, 100], got {v}"
        ),
    )
    top_p: float | None = field(
        default=None,
        metadata=checked(lambda v: None if 0 < v <= 1 else f"must be in (0, 1], got {v}"),
    )


@dataclass
class RejectSettings:
    max_attempts: int = field(default=16, metadata=at_least(1))  # draws before `reject` gives up
