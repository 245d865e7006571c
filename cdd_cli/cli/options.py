"""The options several commands share, declared once: each command lists them by name.

A flag's help shows no value beside it: `cdd_cli/cli/help.py` labels every option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from cdd_cli.cli.help import choice_metavar
from cdd_cli.methods import METHODS

DeviceOpt = Annotated[
    str,
    typer.Option(
        "--device", help="Where to run: auto (a GPU where CUDA has one), cpu, cuda or cuda:K."
    ),
]
ThreadsOpt = Annotated[
    Optional[int],
    typer.Option(help="CPU threads for torch. \\[default: torch's choice]"),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Show the projection's multipliers (λ, μ) in its progress row."
    ),
]
ConstraintOpt = Annotated[
    list[str],
    typer.Option(
        "--constraint",
        "-c",
        help="A constraint type (`cdd constraints ls` lists them); repeatable, each with its "
        "--tau.",
    ),
]
TauOpt = Annotated[
    list[float], typer.Option("--tau", help="The threshold of each --constraint, in order.")
]
ToOpt = Annotated[
    Optional[str],
    typer.Option("--to", help="The lead of --constraint similarity: a SMILES or a SMILES file."),
]


def model_option(default: str) -> Any:
    """The --model option of a command whose domain's shipped model is `default`."""
    return Annotated[
        Optional[str],
        typer.Option(
            help="A shipped model's name (`cdd models ls`), a model folder, or hf://org/name "
            f"for one on the Hugging Face hub. \\[default: the spec's, else {default}]"
        ),
    ]


StepsOpt = Annotated[Optional[int], typer.Option(help="Denoising steps. \\[default: the model's]")]
BatchOpt = Annotated[
    Optional[int],
    typer.Option(
        "--batch-size",
        help="Samples drawn together in one pass (rejected ones first, then new ones). "
        "\\[default: 64]",
    ),
]
OutputOpt = Annotated[
    str, typer.Option("-o", "--output", help="JSONL file to append to, or - for stdout.")
]
ReportOpt = Annotated[
    Optional[str],
    typer.Option(
        "--report",
        help="Also write this HTML page of the run's records (`cdd report`) at its end, or "
        "of what was written when it is stopped; needs -o FILE.",
    ),
]
ShardOpt = Annotated[
    Optional[str],
    typer.Option(
        "--shard",
        help="I/N: write only sample k with k % N == I (merge the N files with `cdd merge`); "
        "without --threads, each of the N takes its share of the cores.",
    ),
]
ResumeOpt = Annotated[
    bool,
    typer.Option(
        "--resume", help="Finish an interrupted run: write only the records -o FILE lacks."
    ),
]
SpecOpt = Annotated[
    Optional[Path],
    typer.Option("--spec", help="A YAML spec: constraints, model and settings (`cdd validate`)."),
]
# Each method in its table's words (`cdd_cli/methods.py`).
METHODS_HELP = "; ".join(f"{method.name}: {method.description}" for method in METHODS.values())
# Without a constraint there is nothing to project or reject against: the run is unconstrained.
METHOD_DEFAULT = "the spec's, else cdd; unconstrained where no constraint is given"
MethodOpt = Annotated[
    Optional[str],
    typer.Option(
        help=f"{METHODS_HELP}. \\[default: {METHOD_DEFAULT}]",
        metavar=choice_metavar(METHODS),
    ),
]
# A design's kept part is a constraint: a scaffold, motif or link alone is drawn by rejection
# against it (cdd_cli/run/designs.py), an edit (which keeps no part) alone unconstrained.
DesignMethodOpt = Annotated[
    Optional[str],
    typer.Option(
        "--method",
        help=f"{METHODS_HELP}. \\[default: the spec's, else cdd with a constraint given; "
        "without one, reject (against the kept part) for a scaffold, motif or link, "
        "unconstrained for an edit]",
        metavar=choice_metavar(METHODS),
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON array, for scripts.")]
TemplateOpt = Annotated[
    Optional[str],
    typer.Option(
        help="Fixed text with blanks to fill, e.g. \"Dear {name:1-3}, thank you for {10-20}.\": "
        "a blank is {LOW-HIGH} or {N} tokens, optionally named ({NAME:LOW-HIGH}); its text is "
        "kept exactly (docs/constraints.md).",
    ),
]
