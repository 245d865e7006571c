"""The `cdd` command line: thin commands over the library.

JSONL records go to stdout (or -o FILE); progress, logs and summaries go to stderr through one
Rich console. Exit codes: 0 all records satisfy their constraints; 3 written but some violate;
2 bad input (one line on stderr); 130 interrupted (one line: what was kept); 1 anything else.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from cdd_cli.api import Generator, check_spec
from cdd_cli.console import (
    HELP,
    BatchOpt,
    ConstraintOpt,
    DeviceOpt,
    MethodOpt,
    OutputOpt,
    QuietOpt,
    ResumeOpt,
    RichReporter,
    ShardOpt,
    SpecOpt,
    StepsOpt,
    TauOpt,
    ThreadsOpt,
    VerboseOpt,
    build_spec,
    console,
    fail,
    log,
    model_option,
    parse_shard,
    run_guarded,
    set_threads,
)
from cdd_cli.constraints.structured import entry_patterns
from cdd_cli.diffusion.processes import SAMPLERS
from cdd_cli.errors import InputError, Interrupted, Terminated, handle_signals, one_line
from cdd_cli.evaluate.report import evaluate
from cdd_cli.helpstyle import ClickStyleTyper, choice_metavar
from cdd_cli.models.registry import ASSETS, shipped_models
from cdd_cli.output.distributed import Ranks, gather, launch_from_env
from cdd_cli.output.lock import output_lock
from cdd_cli.output.shards import merge_shards
from cdd_cli.prompts import PromptInput, check_prompt, read_prompts
from cdd_cli.run.runner import Output
from cdd_cli.settings import DECODINGS, DTYPE_NAMES
from cdd_cli.spec.entries import constraint_rows
from cdd_cli.spec.model import Spec, dump
from cdd_cli.train_cli import train_app
from cdd_cli.version import __version__

app = ClickStyleTyper(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP,
    help="Constrained discrete diffusion: text and molecules under hard constraints.",
)
models_app = ClickStyleTyper(
    no_args_is_help=True, context_settings=HELP, help="The shipped models and surrogates."
)
app.add_typer(train_app, name="train")
constraints_app = ClickStyleTyper(
    no_args_is_help=True, context_settings=HELP, help="The constraint types, built in and plugins'."
)


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"cdd {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=show_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Constrained discrete diffusion: text and molecules under hard constraints."""


app.add_typer(models_app, name="models")
app.add_typer(constraints_app, name="constraints")


Write = Callable[[Output, str, Console, RichReporter], int]


def run_job(output: Output, device: str, write: Write, quiet: bool, verbose: bool) -> int:
    """`write(output, device, console, display)` in this process, or as this torchrun rank's
    share of the run (see distributed.py): every rank meets the others after its share,
    whatever happened, so that none waits for a rank that failed."""
    launch = launch_from_env()
    if launch is None:
        with output_lock(output.path):
            if output.resume and output.path != "-" and output.shard == (0, 1):
                gather(output.path)  # the parts an interrupted torchrun run left
            display = RichReporter(quiet, verbose)
            try:
                return write(output, device, console, display)
            finally:
                display.loaded()
    if output.shard != (0, 1):
        raise InputError("--shard under torchrun: the ranks are the shards")
    ranks = Ranks(launch, output.path)
    lead = launch.rank == 0
    part = Output(launch.part(output.path), output.resume, (launch.rank, launch.world), output.path)
    told = console if lead else Console(stderr=True, quiet=True)
    ranks.start()
    code = 1  # a defect, unless the run says otherwise
    try:
        with output_lock(part.path):
            display = RichReporter(quiet or not lead, verbose)
            try:
                code = write(part, launch.device(device), told, display)
            finally:
                display.loaded()
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
        try:
            if lead and written >= 0:
                message = f"{written} records from {launch.world} processes in {output.path}"
                console.print(message, markup=False, soft_wrap=True)
            # Another rank's violations (3) are in the gathered file, not a failure.
            if lead and worst != code and written < 0:
                failed = f"another process of the run failed (exit {worst}): rerun with --resume"
                fail(failed, worst)  # said before the ranks part; raised below
        finally:
            ranks.close()
    if lead and worst != code and written < 0:
        raise typer.Exit(worst)
    return worst


def sample(
    spec: Spec, domain: str, output: Output, device: str, quiet: bool, verbose: bool, **run: Any
) -> int:
    """One API call: a Generator of `spec` writes one run (`run`: prompts, length) to
    `output`; its summary goes to stderr."""
    if output.resume and output.path == "-":
        # Nothing earlier can be read back from stdout: resuming would silently rewrite all.
        raise InputError(
            "--resume finishes the file an interrupted run wrote: give it with -o FILE "
            "(stdout holds nothing to resume)"
        )

    def write(out: Output, device: str, told: Console, display: RichReporter) -> int:
        generator = Generator(spec=spec, domain=domain, device=device)
        say = lambda line: told.print(line, markup=False, soft_wrap=True)  # noqa: E731
        code, summary = generator.write(out, display=display, say=say, **run)
        say(summary)
        return code

    return run_job(output, device, write, quiet, verbose)


def processes_sharing(shard: str | None) -> int:
    """How many processes of one run share this machine (--shard N, or torchrun's)."""
    launch = launch_from_env()
    return launch.local_world if launch else parse_shard(shard)[1]


@app.command()
def molecules(
    n: Annotated[
        Optional[int],
        typer.Option("--num-samples", "-n", help="Number of molecules. \\[default: 16]"),
    ] = None,
    seed: Annotated[
        Optional[int],
        typer.Option(
            help="Random seed: a rerun with the same seed, model and settings writes the same "
            "molecules, whatever --batch-size or --shard. \\[default: 0]"
        ),
    ] = None,
    model: model_option("default-molecules") = None,
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
        ),
    ] = False,
    spec: SpecOpt = None,
    method: MethodOpt = None,
    decode: Annotated[
        Optional[str],
        typer.Option(
            help="well-formed: the last step reads the most probable SMILES syntax accepts; "
            "plain: the argmax per position (published validity). \\[default: well-formed]",
            metavar=choice_metavar(DECODINGS),
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
        set_threads(threads, processes_sharing(shard))
        resolved = build_spec(
            spec, model, constraint, tau, method, steps, batch_size, seed, n, novel, decode
        )
        output_to = Output(output, resume, parse_shard(shard))
        raise typer.Exit(sample(resolved, "molecules", output_to, device, quiet, verbose))

    run_guarded(body)


@app.command()
def generate(
    prompt: Annotated[
        Optional[str], typer.Option(help="Prompt text; its tokens stay fixed.")
    ] = None,
    prompts: Annotated[
        Optional[str],
        typer.Option(
            help='JSONL file (or - for stdin), a line each: {"prompt": "...", "id": ...}.'
        ),
    ] = None,
    n: Annotated[
        Optional[int],
        typer.Option("--num-samples", "-n", help="Samples per prompt. \\[default: 4]"),
    ] = None,
    length: Annotated[
        Optional[int], typer.Option(help="Tokens to generate after the prompt. \\[default: 64]")
    ] = None,
    seed: Annotated[
        Optional[int],
        typer.Option(
            help="Random seed: a rerun with the same seed, model, prompts and settings writes "
            "the same text, whatever --batch-size or --shard. \\[default: 0]"
        ),
    ] = None,
    model: model_option("default-text") = None,
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
            metavar=choice_metavar(SAMPLERS),
        ),
    ] = None,
    block_length: Annotated[
        Optional[int],
        typer.Option(
            help="Decide the text in blocks of this many tokens, left to right; 0: one block. "
            "\\[default: LLaDA 32, else 0]",
        ),
    ] = None,
    dtype: Annotated[
        Optional[str],
        typer.Option(
            help="Weights' precision for LLaDA/Dream/A2D. "
            "\\[default: the checkpoint's on a GPU, float32 on a CPU]",
            metavar=choice_metavar(DTYPE_NAMES),
        ),
    ] = None,
    temperature: Annotated[
        Optional[float],
        typer.Option(
            help="Draw each token from the (projected) logits divided by this. \\[default: 1]",
        ),
    ] = None,
    top_p: Annotated[
        Optional[float],
        typer.Option(
            help="Draw each token from its nucleus: the most probable tokens holding this "
            "much of the (projected) mass. \\[default: 0.73 for text, chosen on the fluency "
            "bench; 1 for SMILES]",
        ),
    ] = None,
    chat: Annotated[
        bool,
        typer.Option(
            "--chat",
            help="Wrap each prompt in the model's chat template as a user turn (instruct models).",
        ),
    ] = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Generate text continuations as JSONL records, e.g. under a toxicity constraint."""

    def body() -> None:
        set_threads(threads, processes_sharing(shard))
        if prompt is not None and prompts is not None:
            raise InputError("give --prompt or --prompts, not both")
        if prompt is not None:
            given: list | None = [PromptInput(check_prompt(prompt, "--prompt"))]
        else:
            given = read_prompts(prompts) if prompts is not None else None
        resolved = build_spec(
            spec, model, constraint, tau, method, steps, batch_size, seed, n,
            sampler=sampler, block_length=block_length, dtype=dtype,
            temperature=temperature, top_p=top_p,
        )  # fmt: skip
        resolved.sampling.chat = chat or resolved.sampling.chat
        output_to = Output(output, resume, parse_shard(shard))
        code = sample(resolved, "text", output_to, device, quiet, verbose, prompts=given,
                      length=length)  # fmt: skip
        raise typer.Exit(code)

    run_guarded(body)


@app.command()
def merge(
    out: Annotated[str, typer.Argument(help="The merged JSONL file (new or empty), or -.")],
    shards: Annotated[list[Path], typer.Argument(help="The shards' JSONL files.")],
) -> None:
    """Merge the shards of one run (`--shard I/N`) into one file sorted by seed, prompt and
    sample; refuses mixed configurations, duplicate records and missing ones."""

    def body() -> None:
        written = merge_shards(out, shards)
        console.print(f"{written} records from {len(shards)} shard(s) in {out}", markup=False)

    run_guarded(body)


@app.command("eval")
def eval_command(
    records: Annotated[str, typer.Argument(help="JSONL records (a file, or - for stdin).")],
    perplexity: Annotated[
        Optional[bool],
        typer.Option(
            help="Fluency: perplexity under SmolLM2-135M. \\[default: on where the fluency "
            "extra is installed]"
        ),
    ] = None,
    judge: Annotated[
        Optional[bool],
        typer.Option(
            help="Toxicity by an independent judge, alt-profanity-check. \\[default: on where "
            "the judge extra is installed]"
        ),
    ] = None,
    threads: ThreadsOpt = None,
    pretty: Annotated[
        bool,
        typer.Option("--pretty", help="Indented JSON (the default at a terminal)."),
    ] = False,
) -> None:
    """Summarise records: constraints, toxicity, fluency or molecule metrics; JSON on stdout."""

    def body() -> None:
        set_threads(threads)
        report = evaluate(records, perplexity, judge, log)
        # One JSON line for a pipe or file; indented for a person at a terminal.
        indent = 2 if pretty or sys.stdout.isatty() else None
        sys.stdout.write(json.dumps(report, indent=indent) + "\n")
        sys.stdout.flush()

    run_guarded(body)


@app.command()
def validate(
    spec: Annotated[Path, typer.Argument(help="YAML spec to check.")],
    length: Annotated[
        Optional[int],
        typer.Option(
            help="Continuation tokens to check lexical constraints against. \\[default: 64]"
        ),
    ] = None,
    show_pattern: Annotated[
        bool,
        typer.Option(
            "--show-pattern",
            help="Print, instead of the resolved spec, each regex and json_schema constraint's "
            "patterns as the automaton enforces them (TYPE<tab>REGEX a line; a schema's "
            "several lines are intersected).",
        ),
    ] = False,
) -> None:
    """Check a spec (keys, types, ranges, model, surrogates, layouts and patterns fit) without
    sampling."""

    def body() -> None:
        resolved, checked = check_spec(spec, length)
        if show_pattern:
            for entry in resolved.constraints:
                for pattern in entry_patterns(entry):
                    typer.echo(f"{entry.type}\t{pattern}")
        else:
            typer.echo(dump(resolved.resolved()), nl=False)
        console.print(f"{spec}: ok ({checked})", markup=False, soft_wrap=True)

    run_guarded(body)


JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON array, for scripts.")]


@constraints_app.command("ls")
def constraints_ls(as_json: JsonOpt = False) -> None:
    """List the constraint types, built in and from installed plugins: domain, keys
    (? = optional), tau's range, source and what each means; a broken plugin is one line
    saying why."""
    run_guarded(lambda: list_constraints(as_json))


def list_constraints(as_json: bool) -> None:
    rows = constraint_rows()
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
    warnings.showwarning = show_warning
    # Installed by `cdd_cli.__main__` before the imports already; again for callers of main()
    # that came another way. Within a command's work (`run_guarded`) a signal stops the run
    # between whole records; elsewhere it is one line and out.
    handle_signals()
    try:  # newer typer vendors click; older ones use it directly
        from typer._click.exceptions import UsageError
    except ImportError:
        from click.exceptions import UsageError  # older typer depends on click itself

    try:
        code = app(standalone_mode=False)
    except UsageError as exc:  # a bad flag or value: one line, like every input error
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.exit(0)  # `cdd` alone: the help was shown
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        message = one_line(f"{exc.format_message()}{hint}")  # an option may hold a newline
        console.print(f"cdd: error: {message}", markup=False, soft_wrap=True)
        sys.exit(2)
    except typer.Abort:
        console.print("cdd: error: interrupted", markup=False)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
