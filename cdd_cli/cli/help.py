"""`--help` in Click's conventions, whichever Typer draws it.

Newer Typers label a value by its Python annotation (`<int>`, `<list[str]>`, `<bool>` beside a
flag, `--help` itself included) and write a required argument as `{out}`; older ones used
Click's names. The app, group and command classes here give every parameter Click's label
(INTEGER, FLOAT, TEXT, PATH, `[a|b]` for a choice, nothing for a flag) and every argument
Click's usage (`OUT SHARDS...`, `[NAME]` when optional), so that the help reads one way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

# Every command and group answers -h as well as --help.
HELP = {"help_option_names": ["-h", "--help"]}

CLICK_NAMES = {int: "INTEGER", float: "FLOAT", str: "TEXT", Path: "PATH", bool: "BOOLEAN"}


def choice_metavar(choices: Any) -> str:
    """Click's label of a choice: `[a|b|c]`."""
    return "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"


def value_metavar(param: Any) -> str:
    """Click's label for the value `param` takes: "" for a flag (it takes none)."""
    if getattr(param, "is_flag", False):
        return ""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:  # an older Typer: a Click parameter type, named as Click names it
        choices = getattr(param.type, "choices", None)
        return choice_metavar(choices) if choices else param.type.name.upper()
    if descriptor.choices:
        return choice_metavar(descriptor.choices)
    annotation = descriptor.annotation
    if get_origin(annotation) is list:  # a repeatable option or a variadic argument: per value
        annotation = get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "PATH"
    return CLICK_NAMES.get(annotation, getattr(annotation, "__name__", "VALUE").upper())


class ClickStyleArgument(TyperArgument):
    """An argument named as Click names it: OUT in the help and usage, SHARDS... for many,
    [NAME] when optional, its value's type beside it."""

    @property
    def display_name_raw(self) -> str:  # newer Typers: the help's name column, error hints
        return self.metavar or (self.name or "").upper()

    def display_type_rich(self, ctx: Any) -> str | None:  # newer Typers: the type column
        return value_metavar(self)

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.display_name_raw
        name = name if self.required else f"[{name}]"
        return [name + ("..." if self.nargs != 1 else "")]


def conform(param: Any) -> None:
    """`param` labelled as Click would label it (a label given by hand is kept)."""
    if isinstance(param, TyperArgument):
        # Typer builds its parameters itself, with no say in their class; only the class can
        # change how an argument is drawn (a newer Typer ignores its metavar there).
        param.__class__ = ClickStyleArgument
    elif getattr(param, "is_flag", False):
        param.metavar = ""  # a flag takes no value: nothing beside it (not even `<bool>`)
    elif param.metavar is None:
        param.metavar = value_metavar(param)


def one_line_summary(help_text: str | None) -> str | None:
    """A command's first paragraph on one line: the parent's command list would otherwise
    break it where the docstring's lines break."""
    if not help_text:
        return None
    return " ".join(help_text.strip().split("\n\n")[0].split())


class ClickStyle:
    """What a command and a group share: help that follows Click's conventions (see the
    module's docstring). Mixed in before Typer's own class."""

    params: list
    help: str | None
    short_help: str | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            conform(param)
        if self.short_help is None:
            self.short_help = one_line_summary(self.help)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            conform(option)  # -h/--help is a flag like any other
        return option


class ClickStyleCommand(ClickStyle, TyperCommand):
    """A command (`cdd molecules`, ...) whose help follows Click's conventions."""


class ClickStyleGroup(ClickStyle, TyperGroup):
    """A group (`cdd`, `cdd train`, ...) whose help follows Click's conventions."""


class ClickStyleTyper(typer.Typer):
    """A Typer app whose group and commands are the classes above unless told otherwise."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", ClickStyleGroup)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", ClickStyleCommand)
        return super().command(*args, **kwargs)
