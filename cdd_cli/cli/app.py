"""The `cdd` command line: thin commands over the library, each its flags -> one API call.

JSONL records go to stdout (or -o FILE); progress, logs and summaries go to stderr through one
Rich console. Exit codes: 0 all records satisfy their constraints; 3 written but some violate;
2 bad input (one line on stderr); 130 interrupted (one line: what was kept); 1 anything else.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer

from cdd_cli.api import check_spec
from cdd_cli.cli.design import design
from cdd_cli.cli.guard import run_guarded, set_threads
from cdd_cli.cli.help import HELP, ClickStyleTyper
from cdd_cli.cli.listings import constraints_ls, models_ls
from cdd_cli.cli.options import ThreadsOpt
from cdd_cli.cli.sampling import generate, molecules
from cdd_cli.cli.terminal import StreamClosed, console, log, show_warning, standard_streams
from cdd_cli.cli.train import train_app
from cdd_cli.constraints.structured import entry_patterns
from cdd_cli.errors import InputError, handle_signals, one_line
from cdd_cli.evaluate.page.document import write_page
from cdd_cli.evaluate.report import evaluate
from cdd_cli.output.shards import merge_shards
from cdd_cli.spec.model import dump
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
app.command()(molecules)
app.command()(generate)
app.command()(design)


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
    moses: Annotated[
        bool,
        typer.Option(
            "--moses",
            help="Molecules: the MOSES benchmark's metrics too (validity, unique@1k/10k, "
            "novelty, filters, IntDiv, SNN/Frag/Scaf, FCD with the fcd extra, property "
            "distances), against the test sets of the installed molsets==0.3.1.",
        ),
    ] = False,
    moses_data: Annotated[
        Optional[Path],
        typer.Option(help="The molsets wheel or its unpacked folder, for --moses."),
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
        if moses_data is not None and not moses:
            raise InputError("--moses-data is read by --moses only")
        sys.stdout.write("")  # a closed stdout says so before minutes of evaluation
        report = evaluate(records, perplexity, judge, log, moses, moses_data)
        # One JSON line for a pipe or file; indented for a person at a terminal.
        indent = 2 if pretty or sys.stdout.isatty() else None
        sys.stdout.write(json.dumps(report, indent=indent) + "\n")
        sys.stdout.flush()

    run_guarded(body)


@app.command()
def report(
    records: Annotated[
        list[str],
        typer.Argument(help="JSONL records: the run the page is about, then runs to compare."),
    ],
    output: Annotated[
        str, typer.Option("-o", "--output", help="The HTML file to write, or - for stdout.")
    ],
    evaluations: Annotated[
        Optional[list[str]],
        typer.Option(
            "--eval",
            help="The JSON `cdd eval --moses RUN.jsonl` printed (repeatable): its MOSES metrics "
            "in a table beside the MOSES baselines.",
        ),
    ] = None,
) -> None:
    """One self-contained HTML page of a run: summary, distributions against their bounds
    (overlaid with the other files'), molecules drawn or texts with their constraints."""

    def body() -> None:
        said = write_page(records, output, evaluations or ())
        console.print(said, markup=False, soft_wrap=True)

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


constraints_app.command("ls")(constraints_ls)
models_app.command("ls")(models_ls)


def main() -> None:
    standard_streams()  # before any plugin or library can write to stdout
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
    except StreamClosed as exc:  # `--help` or `--version` with stdout closed (`>&-`)
        console.print(f"cdd: error: {exc.strerror}", markup=False)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
