"""Every command's `--help`, walked from the app itself: Click's labels (INTEGER, FLOAT, TEXT,
PATH, [a|b]), none beside a flag, a help line for every option, one style of argument."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cdd_cli.cli.app import app

runner = CliRunner()

# What Click shows for a value: a type's name, or the choices. A flag shows nothing.
CONVENTIONAL = re.compile(r"(INTEGER|FLOAT|TEXT|PATH)|\[[a-z0-9_.-]+(\|[a-z0-9_.-]+)+\]")
# What a Python annotation looks like in help: `<int>`, `<list[str]>`, `Optional[...]`.
PYTHON_TYPE = re.compile(r"<(bool|int|float|str|text|path|list|tuple|dict)\b|\w\[\w+\]", re.I)
# An argument in a usage line: OUT, SHARDS..., [NAME] (Click's style); never {out}.
ARGUMENT = re.compile(r"\[?[A-Z][A-Z0-9_]*\]?(\.\.\.)?")


def walk() -> list[tuple[list[str], Any, Any]]:
    """(path, command, context) of the app and every group and command under it."""
    found = []

    def visit(command: Any, path: list[str], parent: Any) -> None:
        ctx = command.make_context(path[-1], [], parent=parent, resilient_parsing=True)
        found.append((path, command, ctx))
        for name, sub in getattr(command, "commands", {}).items():
            visit(sub, [*path, name], ctx)

    visit(typer.main.get_command(app), ["cdd"], None)
    return found


COMMANDS = walk()
IDS = [" ".join(path) for path, _, _ in COMMANDS]


def shown_label(param: Any, ctx: Any) -> str:
    """The label the help draws beside a parameter (its type column)."""
    if hasattr(param, "display_type_rich"):  # newer Typers draw this column
        return param.display_type_rich(ctx=ctx) or ""
    return "" if getattr(param, "is_flag", False) else param.make_metavar()


def test_the_walk_reaches_every_command():
    assert {
        "cdd molecules", "cdd generate", "cdd merge", "cdd eval", "cdd validate", "cdd report"
    } <= set(IDS)  # fmt: skip
    trainers = {i for i in IDS if i.startswith("cdd train ")}
    assert len(trainers) >= 7, trainers
    assert {"cdd models ls", "cdd constraints ls"} <= set(IDS)


@pytest.mark.parametrize(("path", "command", "ctx"), COMMANDS, ids=IDS)
def test_every_option_has_help_and_a_conventional_label(path, command, ctx):
    params = command.get_params(ctx)  # the -h/--help option included
    assert any("--help" in p.opts for p in params)
    for param in params:
        label = shown_label(param, ctx)
        name = "/".join(param.opts)
        if param.param_type_name == "option":
            assert (param.help or "").strip(), f"{' '.join(path)} {name}: no help"
        if getattr(param, "is_flag", False):
            assert label == "", f"{' '.join(path)} {name}: a flag labelled {label!r}"
        else:
            assert CONVENTIONAL.fullmatch(label), f"{' '.join(path)} {name}: label {label!r}"


@pytest.mark.parametrize(("path", "command", "ctx"), COMMANDS, ids=IDS)
def test_arguments_are_written_one_way(path, command, ctx):
    usage = command.get_usage(ctx)
    words = usage.split(" ".join(path), 1)[1].split()
    for word in words:
        if word in ("[OPTIONS]", "COMMAND", "[ARGS]..."):
            continue
        assert ARGUMENT.fullmatch(word), f"{usage!r}: {word!r}"
    for param in command.get_params(ctx):
        if param.param_type_name == "argument":
            shown = getattr(param, "display_name_raw", None) or param.human_readable_name
            assert shown == shown.upper(), f"{' '.join(path)}: argument {shown!r}"


@pytest.mark.parametrize("path", [p for p, _, _ in COMMANDS], ids=IDS)
def test_help_as_printed_shows_no_python_types(path: list[str]):
    result = runner.invoke(app, [*path[1:], "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert not PYTHON_TYPE.search(result.output), PYTHON_TYPE.search(result.output)
    usage = next(line for line in result.output.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage


def help_of(*command: str) -> str:
    """A command's help as printed, its whitespace runs as single spaces."""
    wide = {"env": {"COLUMNS": "200"}, "terminal_width": 200, "prog_name": "cdd"}
    result = runner.invoke(app, [*command, "--help"], **wide)
    assert result.exit_code == 0
    return " ".join(result.output.split())


def test_each_command_names_its_own_default_model_and_says_what_the_seed_does():
    molecules, generate = help_of("molecules"), help_of("generate")
    assert "default-molecules" in molecules and "default-text" not in molecules
    assert "default-text" in generate and "default-molecules" not in generate
    for text in (molecules, generate):
        assert "(seed, " not in text  # the seed is described, not its tuple
        assert "a rerun with the same seed" in text


def test_the_models_group_says_it_lists_surrogates_too():
    assert "surrogates" in help_of("models")
    assert "surrogates" in help_of()  # the group's line in `cdd --help`


def test_novel_says_known_is_the_training_and_held_out_molecules():
    # The novelty judge's default reference is `all` (training + held-out, where the model
    # ships them), and molecules earlier in the run; the help said "the training set".
    for command in ("molecules", "design"):
        text = help_of(command)
        assert "held-out" in text and "earlier in the run" in text, command
        assert "absent from the training set" not in text, command


def test_a_training_run_folder_is_said_to_be_the_model_not_logs():
    # The run folder holds the model itself (`--model OUT`), no `model/` folder and no log.
    for command in ("molecules", "text"):
        text = help_of("train", command)
        assert "--model OUT" in text and "logs" not in text, command


def test_the_method_default_says_a_run_without_constraints_is_unconstrained():
    # `cdd molecules -n 4` writes method "unconstrained"; the help said "else cdd".
    for command in ("molecules", "generate"):
        assert "unconstrained where no constraint is given" in help_of(command), command
    design = " ".join(help_of("design").replace("│", " ").split())  # (across the box's lines)
    assert "reject (against the kept part) for a scaffold, motif or link" in design
    assert "unconstrained for an edit" in design


def test_a_choice_shows_its_values_and_a_flag_nothing():
    molecules = help_of("molecules")
    assert "--method [cdd|paper|unconstrained|reject|exact]" in molecules
    assert "--decode [well-formed|plain]" in molecules
    assert re.search(r"--novel Only molecules", molecules)
    generate = help_of("generate")
    assert "--sampler [ancestral|confidence|margin|entropy]" in generate
    assert "--dtype [float32|bfloat16|float16]" in generate
    assert "--noise [uniform|masked]" in help_of("train", "molecules")
    assert "Usage: cdd merge [OPTIONS] OUT SHARDS..." in help_of("merge")
    assert "Usage: cdd eval [OPTIONS] RECORDS" in help_of("eval")
    assert "Usage: cdd report [OPTIONS] RECORDS..." in help_of("report")
    assert "--report TEXT" in molecules and "--report TEXT" in generate
