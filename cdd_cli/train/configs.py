"""The settings of every `cdd train` command, one dataclass per trainer.

`cdd_cli/cli/train.py` turns each into its command's options: every field with a "help" in
its metadata becomes `--field-name`, with the field's type and default. Other metadata keys:

- "min": the least value (None, for an optional setting, is always allowed); "why" says why,
  in the refusal's message;
- "positive": a finite number above 0;
- "choices": the allowed values;
- "flag": a switch's names, e.g. "--tie-embeddings/--untied";
- "option": False hides a field a subclass fixes (e.g. text models are always masked);
- "typer": keyword arguments for `typer.Option`, for a check Typer makes itself.

A subclass that redefines a field (another default) keeps its base's metadata for it; keys it
gives replace the base's. A dataclass's `check()`, where it has one, checks what spans fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from cdd_cli.errors import InputError
from cdd_cli.models.checkpoint import splits_into_heads
from cdd_cli.models.surrogate import SurrogateConfig


def setting(default: Any, help: str, **limits: Any) -> Any:
    """A field offered as an option: its default, help text and limits."""
    return field(default=default, metadata={"help": help, **limits})


def fixed(default: Any) -> Any:
    """A field a subclass fixes: not offered as an option there."""
    return field(default=default, metadata={"option": False})


@dataclass
class TrainConfig:
    """A diffusion model's training (`cdd train molecules`, `cdd train text`); the fields with
    help are in the order `--help` lists them."""

    noise: str = setting(
        "uniform",
        "The corruption the model learns to undo: uniform (tokens replaced at random, as UDLM) "
        "or masked (tokens hidden, as MDLM).",
        choices=("uniform", "masked"),
    )
    hidden_dim: int = setting(256, "Width of the transformer (split into --n-heads).", min=1)
    n_blocks: int = setting(6, "Transformer blocks.", min=1)
    n_heads: int = setting(8, "Attention heads per block.", min=1)
    cond_dim: int = setting(128, "Width of the noise-level conditioning.", min=1)
    length: int = setting(32, "Tokens per sequence: the model's fixed length.", min=1)
    batch_size: int = setting(512, "Sequences per step.", min=1)
    lr: float = setting(1e-3, "Peak AdamW learning rate (after a linear warm-up).", positive=True)
    max_steps: int = setting(
        20000, "Steps in all; a rerun with more continues the run from its state.", min=1
    )
    cooldown_steps: int = setting(
        0,
        "The learning rate falls linearly to 0 over the last N steps.",
        # Typer's own range check, as before: its message and the help's "[x>=0]".
        typer={"min": 0},
    )
    eval_every: int = setting(1000, "Held-out loss and sample checks every N steps.", min=1)
    save_every: int = setting(
        250, "Save the train state and export the model every N steps.", min=1
    )
    sample_steps: int = setting(
        32, "Denoising steps of the evaluation samples and the exported model's default.", min=1
    )
    tie_embeddings: bool = setting(
        False,
        "Output layer reuses the embedding table (halves the size).",
        flag="--tie-embeddings/--untied",
    )
    warmup_steps: int = 200
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    eval_samples: int = 256
    seed: int = 0

    def check(self) -> None:
        if not splits_into_heads(self.hidden_dim, self.n_heads):
            raise InputError(
                f"--hidden-dim {self.hidden_dim} must split into {self.n_heads} heads of even size"
            )


@dataclass
class MoleculesConfig(TrainConfig):
    """`cdd train molecules`: a small model by default, since QM9's molecules are short
    strings; its length comes from the data."""

    hidden_dim: int = 128
    n_blocks: int = 4
    n_heads: int = 4
    length: int | None = field(
        default=None,
        metadata={
            "help": "Tokens per sequence: the model's fixed length (longer molecules are left "
            "out). \\[default: the data's longest tokenised molecule + 2]",
            "min": 4,
            "why": "<bos>, an atom, <eos>",
        },
    )
    lr: float = 2e-3
    eval_every: int = 500
    save_every: int = 100
    tie_embeddings: bool = fixed(False)
    representation: str = setting(
        "smiles",
        "How molecules are written as tokens: smiles (regex tokens, read with the well-formed "
        "decoding) or selfies (every string of tokens with an atom is a valid molecule).",
        choices=("smiles", "selfies"),
    )


@dataclass
class TextConfig(TrainConfig):
    """`cdd train text`: a masked diffusion LM over GPT-2's tokens, whose large vocabulary
    the tied embeddings keep from doubling the model's size."""

    noise: str = fixed("masked")
    hidden_dim: int = 128
    n_blocks: int = 4
    n_heads: int = 4
    length: int = 128
    batch_size: int = 32
    lr: float = 2e-3
    eval_every: int = 500
    save_every: int = 100
    sample_steps: int = 64
    tie_embeddings: bool = True
    warmup_steps: int = 100


@dataclass
class AdaptConfig:
    """`cdd train adapt`: low-rank adapters that make an AR LM a masked diffusion LM."""

    length: int = setting(128, "Tokens per training block.", min=1)
    batch_size: int = setting(16, "Blocks per step.", min=1)
    lr: float = setting(
        1e-3, "Peak AdamW learning rate (warm-up, then cosine to a tenth).", positive=True
    )
    warmup_steps: int = 100
    max_steps: int = setting(
        4000, "Steps in all; a rerun with more continues the run from its state.", min=1
    )
    lora_rank: int = setting(32, "Rank of the low-rank adapters.", min=1)
    logit_shift: bool = setting(True, "Predict token j from position j-1, as the AR model did.")
    grad_clip: float = 1.0
    eval_every: int = setting(500, "Held-out loss every N steps.", min=1)
    save_every: int = setting(
        200, "Save the train state and export OUT/model every N steps.", min=1
    )
    seed: int = 0


@dataclass
class ToxicityConfig:
    """`cdd train toxicity-surrogate`: the soft-token toxicity classifier."""

    # Checked only where --corpus is given: without one no span is drawn.
    corpus_spans: int = setting(20000, "How many corpus spans.")
    epochs: int = setting(4, "Passes over the training tweets (and corpus spans).", min=1)
    batch_size: int = setting(128, "Examples per step.", min=1)
    lr: float = setting(2e-3, "Initial AdamW learning rate (cosine decay to 0).", positive=True)
    seed: int = setting(0, "Random seed: corpus spans, batch order, soft-token mixing.")
    save_every: int = 200


@dataclass
class SurrogateFit:
    """A soft-token surrogate's fit (`cdd train sa-surrogate`, `property-surrogate`,
    `surrogate`): the settings `train.surrogate.Fit` takes and a resumed run must share."""

    steps: int = setting(3000, "Steps in all (a rerun with the same settings resumes).", min=4)
    batch_size: int = setting(256, "Rows per step.", min=1)
    lr: float = setting(2e-3, "Peak AdamW learning rate (one-cycle schedule).", positive=True)
    hidden_dim: int = setting(64, "Width of the surrogate (split into its attention heads).", min=1)
    n_layers: int = setting(2, "Transformer layers.", min=1)
    seed: int = setting(0, "Random seed: weights, corrupted copies, batches.")

    def check(self) -> None:
        heads = SurrogateConfig.n_heads
        if self.hidden_dim % heads:
            raise InputError(
                f"--hidden-dim must split into the surrogate's {heads} heads: {self.hidden_dim}"
            )

    def fit_settings(self) -> dict[str, Any]:
        """The fit's settings alone, as `train.surrogate.Fit` takes them."""
        return {f.name: getattr(self, f.name) for f in fields(SurrogateFit)}


@dataclass
class MoleculeSurrogateConfig(SurrogateFit):
    """`cdd train sa-surrogate`, `property-surrogate`: the fit and how many molecules it
    reads (a drug-sized training set takes RDKit most of an hour to label in full)."""

    molecules: int | None = setting(
        None, "Train on the first N molecules only. \\[default: all]", min=1
    )


@dataclass
class JudgeSurrogateConfig(SurrogateFit):
    """`cdd train surrogate`: the fit, and the rows a constraint's judge labels."""

    examples: int = setting(20000, "Text windows to label (and as many corrupted).", min=1)
    unscorable_as: float | None = setting(
        None, "Score of an output the judge cannot score. \\[default: the plugin's worst=]"
    )


@dataclass
class TwistTrainConfig:
    """`cdd train twist`: the model's rollouts judged exactly, and the twist's fit."""

    rollouts: int = setting(
        49152, "The model's own rollouts to judge (a rerun reuses those recorded).", min=64
    )
    kept_steps: int = setting(8, "Steps of each rollout kept as examples.", min=1)
    steps: int = setting(6000, "Fit steps.", min=1)
    batch_size: int = setting(256, "Examples per fit step.", min=1)
    lr: float = setting(1e-3, "Peak AdamW learning rate (cosine decay).", positive=True)
    hidden_dim: int = setting(64, "Width of the twist (split into 4 attention heads).", min=4)
    n_layers: int = setting(2, "Transformer layers.", min=1)
    seed: int = setting(1000, "Random seed of the rollouts (the sampling seed) and the fit.")

    def check(self) -> None:
        if self.hidden_dim % 4:
            raise InputError(f"--hidden-dim must split into 4 heads: {self.hidden_dim}")
