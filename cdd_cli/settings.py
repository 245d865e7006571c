"""The settings a spec holds, as plain data: the spec reads them, the projection uses them.

A setting left None is the method's and model's to choose: `methods.py` holds the tables of
defaults (each with the measurement that chose it) and `run/defaults.py` fills them in before
sampling, so the resolved configuration written beside an output file names every value used.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ALMSettings:
    """The augmented-Lagrangian projection (the paper's method); spec key `projection`. None: the
    method's and model's value (`methods.py`, with the measurements behind it)."""

    eta: float | None = None  # gradient step on the logits of y
    inner_iters: int | None = None  # gradient steps per outer iteration
    max_outer_iters: int | None = None
    mu_init: float | None = None  # first quadratic penalty weight
    mu_max: float | None = None
    alpha: float | None = None  # growth of mu per outer iteration
    temperature: float | None = None  # Gumbel-softmax temperature of phi
    project_from: float | None = None  # project steps from this fraction of the way on (0: all)
    support: int | None = None  # tokens per position the mass moves among (0: all V)
    # Outer iterations at mu_max without the argmax's violation falling before a sample stops.
    patience: int | None = None
    # Candidates per decision a pattern's closed form weighs by the model's next prediction
    # (`stages.ClosedFormLookAhead`: its choices the model's own, one forward of this many
    # rows per sample and deciding step); 0: off, the layout alone.
    lookahead: int = 0


MAX_LOOKAHEAD = 1024  # candidates: a forward of this many rows per sample and step is plenty


@dataclass
class SearchSettings:
    """The best-first flip search (`projection/search.py`); spec key `search`."""

    top_k: int = 4  # alternatives considered per position
    max_nodes: int | None = None  # candidate sequences judged per sample and step
    project_from: float | None = None  # search steps from this fraction of the way on


@dataclass
class RepairSettings:
    """Certification: samples the judge rejects are redrawn with a tighter surrogate bound."""

    max_redraws: int | None = None
    margin_step: float = 0.25
    # The draw (1: the first) from which a final prediction the judges reject is moved by the
    # surrogates (the linearised ladder, the ALM); the draws before it are repaired by the
    # exact search alone, in the model's own probabilities, or drawn again.
    surrogates_from: int | None = None


MAX_STEPS = 100_000  # denoising steps: far past any use, and a cap before allocating their table
MAX_SEED = 2**63 - 1  # torch generators take seeds below 2**63


@dataclass
class SamplingSettings:
    n: int | None = None
    steps: int | None = None
    batch_size: int = 64
    seed: int = 0
    # How the last step reads a SMILES model's prediction: `well-formed`, the most probable
    # sequence SMILES syntax accepts (the default), or `plain`, the argmax position by
    # position, as published validity tables measure. Text has no syntax: always `plain`.
    decode: str | None = None
    # Which masked positions each step decides (masked-noise models): `ancestral` (MDLM, at
    # random), or the ones the model is surest of by `confidence` (LLaDA), `margin` or
    # `entropy` (Dream); null: the model family's own. See diffusion/processes.py.
    sampler: str | None = None
    # Decide the continuation in blocks of this many tokens, left to right (LLaDA's
    # semi-autoregressive sampling); 0: one block; null: the family's own (LLaDA 32).
    block_length: int | None = None
    # The weights' precision (float32, bfloat16, float16); null: the checkpoint's on a GPU,
    # float32 on a CPU. Only published families (LLaDA, Dream, A2D) take another.
    dtype: str | None = None
    # Wrap each prompt in the model's chat template (tokenizer_config.json) as one user turn.
    chat: bool = False
    # How a step draws its tokens from the (projected) prediction: logits / temperature, cut
    # to the nucleus of top_p of the mass (Holtzman et al.); 1 and 1: as it is. top_p null:
    # the model's kind decides (run/defaults.py: a nucleus for text, the full mass for SMILES).
    temperature: float = 1.0
    top_p: float | None = None


DECODINGS = ("well-formed", "plain")
DTYPE_NAMES = ("float32", "bfloat16", "float16")


@dataclass
class RejectSettings:
    max_attempts: int = 16  # draws per sample before `reject` gives up
