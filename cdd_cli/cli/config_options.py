"""A config dataclass as a command's options: its fields (their help texts and limits, in
their metadata: `cdd_cli/train/configs.py`) become the command's options, and the values
given are checked against the limits before the command runs, so that a setting is declared
once, for the trainer and the command line alike."""

from __future__ import annotations

import dataclasses
import inspect
import math
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import typer

from cdd_cli.cli.guard import run_guarded
from cdd_cli.cli.help import choice_metavar
from cdd_cli.errors import InputError
from cdd_cli.suggest import did_you_mean


def field_metadata(config: type, name: str) -> dict[str, Any]:
    """A field's metadata, its base classes' first: a subclass that gives a field another
    default keeps the base's help and limits for it."""
    merged: dict[str, Any] = {}
    for klass in reversed(config.__mro__):
        found = getattr(klass, "__dataclass_fields__", {}).get(name)
        if found is not None:
            merged.update(found.metadata)
    return merged


def config_options(config: type) -> list[inspect.Parameter]:
    """The options of a config dataclass (`cdd_cli/train/configs.py` says which fields and
    how), as keyword parameters that Typer reads: `--field-name`, the field's type, default
    and help."""
    hints = typing.get_type_hints(config)  # the module's annotations are strings
    options = []
    for field in dataclasses.fields(config):
        meta = field_metadata(config, field.name)
        if "help" not in meta or not meta.get("option", True):
            continue
        names = [meta["flag"]] if "flag" in meta else []
        # A setting with a few allowed values shows them, as a choice does: [uniform|masked].
        shown = {"metavar": choice_metavar(meta["choices"])} if "choices" in meta else {}
        option = typer.Option(*names, help=meta["help"], **shown, **meta.get("typer", {}))
        options.append(
            inspect.Parameter(
                field.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=field.default,
                annotation=Annotated[hints[field.name], option],
            )
        )
    return options


def check_setting(name: str, value: Any, meta: Mapping[str, Any]) -> None:
    """One value against its limits ("min", "why", "positive", "choices"); the message names
    the option. None (an optional setting left out) passes."""
    option = "--" + name.replace("_", "-")
    if value is None:
        return
    if "choices" in meta and value not in meta["choices"]:
        hint = did_you_mean(value, meta["choices"])
        raise InputError(f"{option} must be {' or '.join(meta['choices'])}, got {value!r}{hint}")
    if "min" in meta and value < meta["min"]:
        why = f" ({meta['why']})" if "why" in meta else ""
        raise InputError(f"{option} must be at least {meta['min']}{why}, got {value}")
    if meta.get("positive") and not (math.isfinite(value) and value > 0):
        raise InputError(f"{option} must be a positive number, got {value}")


def check_config(cfg: Any) -> None:
    """Every field of a config against its limits, then its `check()` of what spans fields."""
    for field in dataclasses.fields(cfg):
        check_setting(field.name, getattr(cfg, field.name), field_metadata(type(cfg), field.name))
    if hasattr(cfg, "check"):
        cfg.check()


def config_command(
    app: typer.Typer, name: str
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a function as the command NAME of `app`. Its `cfg` parameter, annotated with
    a config dataclass, stands for that dataclass's options, listed in its place; the config
    built from them is checked before the function runs. The whole runs under `run_guarded`:
    a bad value is one line on stderr and exit 2."""

    def register(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command, eval_str=True)
        config = signature.parameters["cfg"].annotation
        generated = config_options(config)
        settings = [p.name for p in generated]
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():
            # All keyword-only: the generated options (with defaults) may precede a required one.
            kept = [param.replace(kind=inspect.Parameter.KEYWORD_ONLY)]
            params += generated if param.name == "cfg" else kept

        def run(**values: Any) -> None:
            given = {setting: values.pop(setting) for setting in settings}

            def body() -> None:
                cfg = config(**given)
                check_config(cfg)
                command(cfg=cfg, **values)

            run_guarded(body)

        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.__doc__, run.__name__ = command.__doc__, command.__name__
        app.command(name)(run)
        return command

    return register
