"""`cdd molecules` and `cdd generate`: their flags -> a spec -> one API call, a Generator
writing one run (`cdd_cli.torchrun.write_run`: in this process, or as this torchrun rank's
share)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from cdd_cli.api import Generator
from cdd_cli.cli.flags import build_spec, parse_shard, resume_command
from cdd_cli.cli.guard import fail, processes_sharing, run_guarded, set_threads
from cdd_cli.cli.help import choice_metavar
from cdd_cli.cli.options import (
    BatchOpt,
    ConstraintOpt,
    DeviceOpt,
    MethodOpt,
    OutputOpt,
    QuietOpt,
    ReportOpt,
    ResumeOpt,
    ShardOpt,
    SpecOpt,
    StepsOpt,
    TauOpt,
    TemplateOpt,
    ThreadsOpt,
    ToOpt,
    VerboseOpt,
    model_option,
)
from cdd_cli.cli.progress import RichReporter
from cdd_cli.cli.terminal import console, log
from cdd_cli.diffusion.processes import SAMPLERS
from cdd_cli.errors import InputError
from cdd_cli.evaluate.page.document import write_page
from cdd_cli.output.config import holds_records
from cdd_cli.output.distributed import launch_from_env
from cdd_cli.prompts import PromptInput, check_prompt, check_unicode, read_prompts
from cdd_cli.run.runner import Output
from cdd_cli.settings import DECODINGS, DTYPE_NAMES
from cdd_cli.spec.model import Spec
from cdd_cli.torchrun import Job, write_run


def sample(
    spec: Spec,
    domain: str,
    output: Output,
    device: str,
    quiet: bool,
    verbose: bool,
    report: str | None = None,
    **run: Any,
) -> int:
    """One API call: a Generator of `spec` writes one run (`run`: prompts, length) to
    `output` (`write_reported`). Under torchrun only rank 0 speaks."""

    def write(out: Output, device: str, lead: bool) -> int:
        told = console if lead else Console(stderr=True, quiet=True)
        display = RichReporter(quiet or not lead, verbose)
        try:
            generator = Generator(spec=spec, domain=domain, device=device)
            say = lambda line: told.print(line, markup=False, soft_wrap=True)  # noqa: E731
            code, summary = generator.write(out, display=display, say=say, **run)
            say(summary)
            return code
        finally:
            display.loaded()

    return write_reported(output, device, write, report)


def write_reported(output: Output, device: str, job: Job, report: str | None) -> int:
    """`job` writes one run to `output` (`write_run`: here, or as this torchrun rank's
    share); its page goes to `report` where given (at the end, or of what was written when
    the run is stopped)."""
    if report is not None and output.path == "-":
        raise InputError("--report reads the run's records back: give them a file with -o FILE")
    if report is not None and Path(report).is_dir():
        raise InputError(f"--report {report}: is a directory (give an HTML file)")
    if report is not None:  # said now, not after the whole run
        if not Path(report).parent.is_dir():
            raise InputError(f"--report {report}: its folder {Path(report).parent} does not exist")
        if Path(report).resolve() == Path(output.path).resolve():
            raise InputError(f"--report {report}: is the records file; the page goes to another")
    if output.resume and output.path == "-":
        # Nothing earlier can be read back from stdout: resuming would silently rewrite all.
        raise InputError(
            "--resume finishes the file an interrupted run wrote: give it with -o FILE "
            "(stdout holds nothing to resume)"
        )
    if report is None:
        return write_run(output, device, job, say=log, error=fail)
    try:
        code = write_run(output, device, job, say=log, error=fail)
    except BaseException:
        # Stopped or failed: the page of what was written, without hiding why it stopped.
        with contextlib.suppress(Exception):
            write_report(report, output.path)
        raise
    write_report(report, output.path)
    return code


def write_report(page: str, records: str) -> None:
    """The page of `records` written to `page` (by torchrun's rank 0 alone), where the file
    holds any record."""
    launch = launch_from_env()
    if (launch is None or launch.rank == 0) and holds_records(records):
        log(write_page([records], page))


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
    to: ToOpt = None,
    novel: Annotated[
        bool,
        typer.Option(
            "--novel",
            help="Only molecules neither known (the model's training and held-out molecules, "
            "where it ships them) nor earlier in the run.",
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
    report: ReportOpt = None,
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
            spec, model, constraint, tau, method, steps, batch_size, seed, n, novel, decode, to=to
        )
        output_to = Output(output, resume, parse_shard(shard), resume_hint=resume_command())
        raise typer.Exit(sample(resolved, "molecules", output_to, device, quiet, verbose, report))

    run_guarded(body)


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
    template: TemplateOpt = None,
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
    report: ReportOpt = None,
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
        if template is not None and (prompt is not None or prompts is not None):
            raise InputError("a --template is the whole text: give no --prompt or --prompts")
        if prompt is not None:
            given: list | None = [PromptInput(check_prompt(prompt, "--prompt"))]
        elif template is not None:
            given = [PromptInput(check_unicode(template, "--template"), template=True)]
        else:
            given = read_prompts(prompts) if prompts is not None else None
        resolved = build_spec(
            spec, model, constraint, tau, method, steps, batch_size, seed, n,
            sampler=sampler, block_length=block_length, dtype=dtype,
            temperature=temperature, top_p=top_p,
        )  # fmt: skip
        resolved.sampling.chat = chat or resolved.sampling.chat
        output_to = Output(output, resume, parse_shard(shard), resume_hint=resume_command())
        code = sample(resolved, "text", output_to, device, quiet, verbose, report,
                      prompts=given, length=length)  # fmt: skip
        raise typer.Exit(code)

    run_guarded(body)
