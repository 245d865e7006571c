"""`cdd design`: molecules from parts (scaffold decoration, linker design, motif extension,
editing) under `cdd molecules`' constraints: its flags -> the parts' designs -> one run
(`cdd_cli.run.designs`)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml
from rdkit import Chem
from rich.console import Console

from cdd_cli.api import check_output
from cdd_cli.cli.flags import build_spec, parse_shard, resume_command
from cdd_cli.cli.guard import processes_sharing, run_guarded, set_threads
from cdd_cli.cli.help import choice_metavar
from cdd_cli.cli.options import (
    BatchOpt,
    ConstraintOpt,
    DesignMethodOpt,
    DeviceOpt,
    OutputOpt,
    QuietOpt,
    ReportOpt,
    ResumeOpt,
    ShardOpt,
    SpecOpt,
    StepsOpt,
    TauOpt,
    ThreadsOpt,
    ToOpt,
    VerboseOpt,
    model_option,
)
from cdd_cli.cli.progress import RichReporter
from cdd_cli.cli.sampling import write_reported
from cdd_cli.cli.terminal import console
from cdd_cli.constraints import kept
from cdd_cli.errors import InputError
from cdd_cli.models import registry
from cdd_cli.models.tokenizers import SmilesTokenizer
from cdd_cli.run.designs import write_edits, write_parts
from cdd_cli.run.domains import DOMAINS
from cdd_cli.run.runner import Output, compile_spec
from cdd_cli.settings import DECODINGS
from cdd_cli.spec.reader import compose

MAX_LEADS = 10_000  # leads read from a file at most
DEFAULT_REMASK = 0.3  # the fraction of a lead's tokens an edit draws again


def read_leads(given: str) -> list[str]:
    """`--edit`'s leads: one SMILES, or a file of them (`.smi`, `.txt`, `.gz`; a SMILES a
    line, `#` lines and what follows a line's first space skipped)."""
    path = Path(given).expanduser()
    if not path.is_file():
        if given.strip() and Chem.MolFromSmiles(given.strip()) is None:  # a file mistyped?
            raise InputError(f"--edit {given}: no such file, and RDKit cannot parse it as SMILES")
        return [given]
    opener = gzip.open if path.suffix == ".gz" else open
    leads = []
    try:
        with opener(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                words = line.split()
                if words and not words[0].startswith("#"):
                    leads.append(words[0])
                if len(leads) > MAX_LEADS:
                    raise InputError(f"--edit {given}: more than {MAX_LEADS:,} leads")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--edit {given}: cannot read it ({exc})") from None
    if not leads:
        raise InputError(f"--edit {given}: no SMILES in the file")
    return leads


def names_method(method: Optional[str], spec_file: Optional[Path]) -> bool:
    """Whether the run names its method: `--method`, or a `method` key in its spec file (a
    file `build_spec` has read and checked)."""
    if method is not None:
        return True
    if spec_file is None:
        return False
    root = compose(spec_file)
    return isinstance(root, yaml.MappingNode) and any(k.value == "method" for k, _ in root.value)


def design(
    scaffold: Annotated[
        Optional[str],
        typer.Option(help="Decorate this scaffold: each attachment point [*] becomes a blank."),
    ] = None,
    link: Annotated[
        Optional[tuple[str, str]],
        typer.Option(
            help="Link two fragments, each with one attachment point: 'FRAG1[*]' '[*]FRAG2'.",
            metavar="TEXT",
        ),
    ] = None,
    motif: Annotated[
        Optional[str],
        typer.Option(help="Extend this motif: kept, with a blank on each side."),
    ] = None,
    edit: Annotated[
        Optional[str],
        typer.Option(help="Edit a lead: a SMILES, or a file of them (one a line)."),
    ] = None,
    remask: Annotated[
        Optional[float],
        typer.Option(
            help="With --edit: the fraction of each lead's tokens drawn again. \\[default: 0.3]"
        ),
    ] = None,
    fragment: Annotated[
        Optional[str],
        typer.Option(
            help="With --edit: re-mask the atoms every match of this SMARTS covers instead "
            "of a fraction."
        ),
    ] = None,
    rounds: Annotated[
        Optional[int],
        typer.Option(
            help="With --edit: rounds of editing, each round's best edit of a lead (highest "
            "QED among its satisfied records) the next round's lead; the last round is written. "
            "\\[default: 1]"
        ),
    ] = None,
    blank: Annotated[
        Optional[str],
        typer.Option(
            help="MIN-MAX tokens each blank takes, drawn per sample. \\[default: 1 up to 8, "
            "as far as the model's length leaves room]"
        ),
    ] = None,
    n: Annotated[
        Optional[int],
        typer.Option(
            "--num-samples", "-n", help="Molecules (per lead with --edit). \\[default: 16]"
        ),
    ] = None,
    seed: Annotated[
        Optional[int],
        typer.Option(help="Random seed (blank lengths and draws). \\[default: 0]"),
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
    method: DesignMethodOpt = None,
    decode: Annotated[
        Optional[str],
        typer.Option(
            help="well-formed (keeping the kept tokens) or plain. \\[default: well-formed]",
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
    """Molecules from parts: decorate a scaffold, link two fragments, extend a motif or edit
    leads; every record says what was kept and certifies it (RDKit substructure match)."""

    def body() -> None:
        set_threads(threads, processes_sharing(shard))
        modes = [m for m, v in (("--scaffold", scaffold), ("--link", link), ("--motif", motif),
                                ("--edit", edit)) if v is not None]  # fmt: skip
        if len(modes) != 1:
            given = " and ".join(modes) if modes else "none"
            raise InputError(f"give one of --scaffold, --link, --motif, --edit (got {given})")
        asked = kept.parse_blank(blank) if blank is not None else None
        if edit is not None and blank is not None:
            raise InputError("--blank: an edit's blanks are the tokens it re-masks")
        if edit is None:  # an edit's options, given to another design, would be ignored
            for flag, value, what in (
                ("--fragment", fragment, "re-masks a lead's atoms"),
                ("--remask", remask, "re-masks a fraction of a lead's tokens"),
                ("--rounds", rounds, "edits a lead round after round"),
            ):
                if value is not None:
                    raise InputError(f"{flag} {what}: give --edit (not {modes[0]})")
        if fragment is not None and remask is not None:
            raise InputError("give --remask (a fraction of a lead) or --fragment, not both")
        leads = read_leads(edit) if edit is not None else []
        resolved = build_spec(
            spec, model, constraint, tau, method, steps, batch_size, seed, n, novel, decode, to=to
        )
        output_to = Output(output, resume, parse_shard(shard), resume_hint=resume_command())
        check_output(output_to)

        def job(out: Output, device: str, lead: bool) -> int:
            told = console if lead else Console(stderr=True, quiet=True)
            display = RichReporter(quiet or not lead, verbose)
            say = lambda line: told.print(line, markup=False, soft_wrap=True)  # noqa: E731
            try:
                compiled = compile_spec(resolved, DOMAINS["molecules"], device)
                tokenizer = compiled.loaded.tokenizer
                if not isinstance(tokenizer, SmilesTokenizer):
                    # Parts are laid out as SMILES tokens; a SELFIES string of a part is no
                    # substring of the SELFIES of the molecules that hold it.
                    raise InputError(
                        f"cdd design: model {compiled.loaded.name} writes "
                        f"{tokenizer.kind}, and parts are kept as SMILES tokens: use a SMILES "
                        "model (e.g. default-molecules or moses-mdlm)"
                    )
                if edit is not None:
                    code, summary = write_edits(
                        compiled, leads, DEFAULT_REMASK if remask is None else remask, out,
                        1 if rounds is None else rounds, n, seed, display, say, fragment,
                    )
                else:
                    if scaffold is not None:
                        parts = kept.scaffold(scaffold, tokenizer)
                    elif link is not None:
                        parts = kept.link(link[0], link[1], tokenizer)
                    else:
                        parts = kept.motif(motif, tokenizer)
                    named = names_method(method, spec)
                    code, summary = write_parts(
                        compiled, parts, out, asked, n, seed, display, say, named
                    )
                say(summary)
                return code
            finally:
                display.loaded()

        device_name = registry.resolve_device(device)
        raise typer.Exit(write_reported(output_to, device_name, job, report))

    run_guarded(body)
