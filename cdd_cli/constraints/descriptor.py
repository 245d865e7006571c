"""What a constraint type is, as data: the one shape every type has, built in or a plugin's.

A spec entry (`ConstraintSpec`) names a type and gives its options. The type's `Descriptor`
says which options it takes (`Key`: types, required, allowed values), what they default to,
tau's range, what the type means in one line, how its values are checked beyond their types,
and how an entry becomes constraints for a model (`build`). Spec validation, `cdd constraints
ls`, the API's constraint values and the builder all read descriptors from one table
(`constraints/table.py`): a built-in type is its family module's descriptor, a plugin's is
adapted from its `ConstraintPlugin` (`constraints/plugin.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdd_cli.constraints.base import Constraint
    from cdd_cli.models.registry import LoadedModel

DOMAINS = ("molecules", "text", "any")
NUMBER = (int, float)


@dataclass
class ConstraintSpec:
    """One constraint entry as a spec file, a flag or the API gives it: plain data."""

    type: str
    options: dict[str, Any]
    where: str  # "FILE:LINE" or "--constraint"
    # What checking the entry worked out that building it would work out again (a JSON
    # schema read, checked and compiled): carried, so a run does it once.
    prepared: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def tau(self) -> float | None:
        return self.options.get("tau")


@dataclass(frozen=True)
class Key:
    """One option of a constraint type, as an entry gives it (`type: ...` beside it)."""

    types: tuple[type, ...]
    required: bool = False
    # Numbers: the values allowed, ends included (a property's domain); (low, inf): >= low.
    range: tuple[float, float] | None = None
    # Names: the values allowed.
    choices: tuple[str, ...] | None = None


# build(entry, model, device, words) -> the entry's constraints (a property entry with min
# and max is two). `entry` has the type's defaults filled in; `words` are the spec's word rules.
Builder = Callable[["ConstraintSpec", "LoadedModel", str, str], "list[Constraint]"]
# check(entry) raises InputError naming what its values get wrong beyond their types.
Check = Callable[[ConstraintSpec], None]
# check_together(entries, words): contradictions between entries (of any types) of one spec.
CheckTogether = Callable[[Sequence[ConstraintSpec], str], None]


@dataclass(frozen=True)
class Descriptor:
    """A constraint type: everything cdd needs to know about it apart from the `Constraint`
    objects `build` makes (whose judge, surrogate and closed form do the work)."""

    name: str
    domain: str  # what it judges: "molecules" (SMILES), "text" (continuations) or "any"
    description: str  # one line, for `cdd constraints ls`
    keys: Mapping[str, Key]  # in the order `cdd constraints ls` lists them
    build: Builder
    # Options an entry takes when it leaves them out, in the order the resolved
    # configuration writes them (tau here is the type's default tau).
    defaults: Mapping[str, Any] = field(default_factory=dict)
    tau_range: tuple[float, float] | None = None
    # The option a command line's --tau gives (a property's natural bound: qed's min).
    tau_flag: str = "tau"
    # Whether a --constraint of this type is incomplete without a --tau.
    needs_tau: bool = False
    # Whether its options are given in a spec file only (no flag can give them).
    spec_only: bool = False
    # Whether its closed form is a pattern whose paths the look-ahead weighs
    # (`projection.lookahead`, which serves nothing else).
    pattern: bool = False
    check: Check | None = None
    check_together: CheckTogether | None = None
    source: str = "built-in"  # or the plugin's "distribution version"

    def applies_to(self, text_model: bool) -> bool:
        """Whether it judges what a text model (else a molecule model) writes."""
        return self.domain == "any" or text_model == (self.domain == "text")

    @property
    def tau_default(self) -> float | None:
        return self.defaults.get("tau")


# What most scored types share: a surrogate folder and how far inside tau it aims.
SURROGATE_KEYS: dict[str, Key] = {"surrogate": Key((str,)), "margin": Key(NUMBER)}
