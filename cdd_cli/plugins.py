"""Constraint plugins: constraint types that installed distributions register.

A distribution registers a constraint type under the entry-point group `cdd.constraints`; the
entry point's name is the type's name (what a spec's `type:` says) and its object is a
`ConstraintPlugin`:

    # pyproject.toml of the plugin's distribution
    [project.entry-points."cdd.constraints"]
    max_heavy_atoms = "my_package.constraints:max_heavy_atoms"

A plugin is plain data: a name, a domain, its options, an exact judge over decoded outputs
(required) and, optionally, a differentiable surrogate over soft tokens. cdd turns it into a
constraint like its own (`constraints/plugin.py`): a judge-only plugin is satisfied through
the search stages, one with a surrogate through the ALM as well. Every problem a plugin causes
(it does not import, a judge raises or returns NaN) is a `PluginError`: one line that names
the plugin and its package, never a traceback; so is a plugin's `sys.exit` or its own
`KeyboardInterrupt` (`plugins_fault`), which must not end the command. Entry points are read
once per process, and a plugin's module is imported only when it is listed or used, so a
broken plugin cannot break a run that does not name it.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from cdd_cli.errors import STOPPING, InputError, Terminated, on_signal, one_line

if TYPE_CHECKING:
    import torch

GROUP = "cdd.constraints"
DOMAINS = ("molecules", "text")
BOUNDS = ("upper", "lower")
# Options every constraint entry takes from cdd itself (`blank`: the template's blank it
# judges), so a plugin may not declare them.
RESERVED_OPTIONS = ("type", "tau", "margin", "surrogate", "blank")


class PluginError(InputError):
    """A plugin cannot be used: one line naming it (reported like bad input, exit 2)."""


class PluginWarning(UserWarning):
    """Something a plugin does that a run survives but its author should know (a slow judge)."""


@dataclass(frozen=True)
class Option:
    """One option of a plugin's constraint, as a spec entry gives it (`type: ...` beside it)."""

    type: type | tuple[type, ...]  # int, float, str, list or bool; (int, float) for numbers
    required: bool = False
    help: str = ""

    @property
    def types(self) -> tuple[type, ...]:
        return self.type if isinstance(self.type, tuple) else (self.type,)


# judge(texts, options) -> one score per text (None: it cannot be scored, never satisfied).
Judge = Callable[[list[str], Mapping[str, Any]], Sequence[float | None]]
# surrogate(options, vocabulary) -> a function of soft tokens (`SoftTokens`: distributions
# over `vocabulary`, the model's token texts in id order) to one score per sample [B].
SurrogateBuilder = Callable[[Mapping[str, Any], list[str]], Callable[[Any], "torch.Tensor"]]


@dataclass(frozen=True)
class ConstraintPlugin:
    """A constraint type: satisfied when the judge's score is <= tau ("upper") or >= tau."""

    name: str
    domain: str  # "molecules" (texts are SMILES) or "text" (texts are continuations)
    judge: Judge
    description: str = ""
    bound: str = "upper"
    tau_range: tuple[float, float] = (-math.inf, math.inf)
    tau_default: float | None = None  # None: every entry gives its tau
    options: Mapping[str, Option] = field(default_factory=dict)
    # check(options) raises ValueError("...") for values the types alone do not rule out.
    check: Callable[[Mapping[str, Any]], None] | None = None
    surrogate: SurrogateBuilder | None = None
    # The score an output the judge cannot score stands for when a surrogate is trained on the
    # judge (`cdd train surrogate`); None: the worst score in the training data.
    worst: float | None = None


@dataclass(frozen=True)
class Installed:
    """One entry point of the group: its plugin, or why it cannot be used."""

    name: str
    package: str  # "distribution version"
    plugin: ConstraintPlugin | None
    problem: str | None = None

    def usable(self) -> ConstraintPlugin:
        if self.plugin is None:
            raise PluginError(f"plugin '{self.name}' ({self.package}): {self.problem}")
        return self.plugin


def plugins_fault(exc: BaseException) -> bool:
    """Whether `exc`, raised out of a plugin's code, is the plugin's doing (to report as a
    `PluginError`) rather than the user's Ctrl-C or SIGTERM (to let through). Any exception
    and `SystemExit` are the plugin's. A `KeyboardInterrupt` is the plugin's only where the
    `cdd` command's handler (`on_signal`) is installed and raised none: it marks each one it
    raises; elsewhere (an API user's process) a Ctrl-C cannot be told from a plugin's."""
    if isinstance(exc, (Exception, SystemExit)):
        return True
    return (
        isinstance(exc, KeyboardInterrupt)
        and not isinstance(exc, Terminated)
        and not STOPPING.raised
        and signal.getsignal(signal.SIGINT) is on_signal
    )


def raised(exc: BaseException) -> str:
    """What a plugin raised, in a few words: `SystemExit: 3`, `KeyboardInterrupt`."""
    said = one_line(str(exc))
    return f"{type(exc).__name__}: {said}" if said.strip() else type(exc).__name__


def _package(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "unknown package"


def _problem_of(ep: EntryPoint, builtin: Collection[str]) -> tuple[ConstraintPlugin | None, str]:
    if ep.name in builtin:
        return None, f"'{ep.name}' is a built-in constraint type; the plugin is not used"
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the records
            plugin = ep.load()
    except BaseException as exc:  # anything its import raises: the plugin's defect, not ours
        if not plugins_fault(exc):
            raise
        return None, f"cannot be loaded ({raised(exc)})"
    if not isinstance(plugin, ConstraintPlugin):
        return None, f"{ep.value} is not a cdd ConstraintPlugin (it is {type(plugin).__name__})"
    problems = [
        (plugin.name != ep.name, f"names itself '{plugin.name}' under the entry point '{ep.name}'"),
        (plugin.domain not in DOMAINS, f"domain {plugin.domain!r} is not one of molecules, text"),
        (plugin.bound not in BOUNDS, f"bound {plugin.bound!r} is not upper or lower"),
        (not callable(plugin.judge), "its judge is not callable"),
        (
            any(k in RESERVED_OPTIONS for k in plugin.options),
            f"declares a reserved option ({', '.join(RESERVED_OPTIONS)})",
        ),
        (
            not plugin.tau_range[0] <= plugin.tau_range[1],
            f"tau_range {plugin.tau_range} is empty",
        ),
        (
            plugin.tau_default is not None
            and not plugin.tau_range[0] <= plugin.tau_default <= plugin.tau_range[1],
            f"tau_default {plugin.tau_default} is outside its tau_range",
        ),
        (
            not all(isinstance(o, Option) for o in plugin.options.values()),
            "its options must be cdd_cli.plugins.Option values",
        ),
    ]
    for broken, problem in problems:
        if broken:
            return None, problem
    return plugin, ""


@cache
def _entry_points() -> dict[str, tuple[EntryPoint, ...]]:
    """The group's entry points by name, read once (no plugin is imported here)."""
    found: dict[str, tuple[EntryPoint, ...]] = {}
    for ep in entry_points(group=GROUP):
        found[ep.name] = (*found.get(ep.name, ()), ep)
    return found


@cache
def _load(name: str, builtin: frozenset[str]) -> Installed:
    eps = _entry_points()[name]
    packages = [_package(ep) for ep in eps]
    if len(set(packages)) > 1:  # one distribution seen twice on the path is one plugin
        problem = f"registered by {' and '.join(packages)}; uninstall one"
        return Installed(name, ", ".join(packages), None, problem)
    plugin, problem = _problem_of(eps[0], builtin)
    return Installed(name, packages[0], plugin, problem or None)


def installed(builtin: frozenset[str]) -> list[Installed]:
    """Every plugin of the group, loaded, in name order (a broken one with its problem)."""
    return [_load(name, builtin) for name in sorted(_entry_points())]


def find(name: str, builtin: frozenset[str]) -> Installed | None:
    """The plugin registered as `name` (only its own module is imported), or None."""
    return _load(name, builtin) if name in _entry_points() else None
