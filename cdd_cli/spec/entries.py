"""Constraint entries (`type:` and its options), validated generically over the constraint
table (`constraints/table.py`): a built-in type and a plugin's are read alike."""

from __future__ import annotations

import math
from typing import Any

from cdd_cli.constraints import table
from cdd_cli.constraints.descriptor import ConstraintSpec, Descriptor  # an entry, and its type
from cdd_cli.errors import InputError
from cdd_cli.suggest import did_you_mean

Keys = dict[str, tuple[tuple[type, ...], bool]]

# Any entry's key naming the template blank it judges (`cdd generate --template`): its name,
# or its number among the blanks.
BLANK_KEY = "blank"


def keys_of(name: str, where: str) -> Keys:
    """The keys a constraint of type `name` takes -> (types, required); InputError naming the
    available types when no built-in or plugin has that name."""
    return {k: (key.types, key.required) for k, key in table.lookup(name, where).keys.items()}


def domain_of(name: str) -> str:
    """ "text", "molecules" (or "any"): what a constraint of type `name` judges; an unknown
    type: "molecules" (its validation names it unknown)."""
    found = table.descriptor_of(name)
    return "molecules" if found is None else found.domain


def takes_tau(name: str) -> bool:
    """Whether a --constraint of type `name` needs a --tau (an unknown type asks for one like
    most do: its validation then names it unknown)."""
    found = table.descriptor_of(name)
    return True if found is None else found.needs_tau


def tau_is_optional(name: str) -> bool:
    """Whether a --constraint of type `name` may be given a --tau it does not need (its tau
    has a default: a plugin's `tau_default`)."""
    found = table.descriptor_of(name)
    return found is not None and not found.needs_tau and found.tau_flag in found.keys


def tau_range(name: str) -> tuple[float, float] | None:
    found = table.descriptor_of(name)
    return None if found is None else found.tau_range


def option_defaults(name: str) -> dict[str, Any]:
    """The options an entry of type `name` takes when it leaves them out."""
    found = table.descriptor_of(name)
    return {} if found is None else dict(found.defaults)


def check_constraint(c: ConstraintSpec) -> None:
    """Validation shared by spec files, --constraint flags and the API's values (the values'
    types are checked where they are read): required keys, tau's range, each key's allowed
    values, then the type's own check."""
    described = table.lookup(c.type, c.where)
    for name, key in described.keys.items():
        if key.required and name not in c.options:
            # A flag's or an API call's place names the type already: named once.
            named = c.where.startswith(("--constraint", "constraint "))
            what = "" if named else f"constraint '{c.type}' "
            raise InputError(f"{c.where}: {what}needs '{name}'")
    bounds = described.tau_range
    if bounds is not None and c.tau is not None:
        low, high = bounds
        if not low <= c.tau <= high:
            raise InputError(
                f"{c.where}: key 'tau': {c.tau} is outside [{low:g}, {high:g}] for '{c.type}'"
            )
    check_allowed_values(c, described)
    if described.check is not None:
        described.check(c)
    if c.options.get("margin", 0) < 0:
        raise InputError(f"{c.where}: key 'margin' must be >= 0")


def check_allowed_values(c: ConstraintSpec, described: Descriptor) -> None:
    """Each given value inside its key's range and among its choices."""
    for name, key in described.keys.items():
        if name not in c.options:
            continue
        value = c.options[name]
        if key.range is not None and not key.range[0] <= value <= key.range[1]:
            low, high = key.range
            within = f"[{low:g}, {high:g}]" if high < math.inf else f">= {low:g}"
            raise InputError(
                f"{c.where}: key '{name}': {value:g} is outside {within} for '{c.type}'"
            )
        if key.choices is not None and value not in key.choices:
            raise InputError(
                f"{c.where}: key '{name}' must be one of {', '.join(key.choices)}"
                f"{did_you_mean(value, key.choices)}"
            )


def check_together(constraints: list[ConstraintSpec], words: str) -> None:
    """Contradictions between a spec's entries (each type's `check_together`, once)."""
    hooks = []
    for c in constraints:
        hook = table.lookup(c.type, c.where).check_together
        if hook is not None and hook not in hooks:
            hooks.append(hook)
    for hook in hooks:
        hook(constraints, words)


def check_lookahead(
    lookahead: int, method: str, constraints: list[ConstraintSpec], where: str
) -> None:
    """`projection.lookahead` set only where it acts: under the cdd method, with a regex or
    json_schema constraint. Its stage weighs a pattern's paths, which nothing else has (a
    word layout's weights are not exposed to it), and no other method runs it; a setting
    accepted and silently ignored misleads."""
    if not lookahead:
        return
    if method != "cdd":
        raise InputError(
            f"{where}: projection.lookahead serves the cdd method's regex and json_schema "
            f"constraints; method {method} does not use it (set it to 0)"
        )
    if not any(table.lookup(c.type, c.where).pattern for c in constraints):
        raise InputError(
            f"{where}: projection.lookahead serves a regex or json_schema constraint; "
            "this spec has none (set it to 0)"
        )


MAX_CONSTRAINTS = 1_000  # far past any spec written by hand (each is judged at every step)


def check_count(count: int, where: str) -> None:
    """A spec's (or an API call's) number of constraint entries, within MAX_CONSTRAINTS."""
    if count > MAX_CONSTRAINTS:
        raise InputError(
            f"{where}: {count:,} constraints; at most {MAX_CONSTRAINTS:,} (each is judged "
            "at every step of every sample)"
        )


def constraint_from_flags(
    name: str, tau: float | None, flagged: dict[str, Any] | None = None
) -> ConstraintSpec:
    """The entry `--constraint NAME [--tau TAU]` gives: TAU is the type's `tau_flag` option
    (a property's natural bound: qed's min, mw's max); `flagged`: options other flags give
    it (--to), those given."""
    described = table.lookup(name, f"--constraint {name}")
    if described.spec_only:
        keys = ", ".join(described.keys)
        raise InputError(
            f"--constraint {name}: its options ({keys}) are given in a spec file: use --spec "
            "FILE (`cdd constraints ls` lists the keys)"
        )
    options = {} if tau is None else {described.tau_flag: tau}
    options |= {k: v for k, v in (flagged or {}).items() if v is not None}
    spec = ConstraintSpec(name, options, f"--constraint {name}")
    check_constraint(spec)
    return spec


def constraint_rows() -> list[dict]:
    """One row per constraint type, built in or a plugin's (a broken plugin: why): what
    `cdd constraints ls` prints."""
    rows = []
    for found in table.listing():
        if not isinstance(found, Descriptor):
            rows.append({"type": found.name, "source": found.package, "broken": found.problem})
            continue
        bounds = found.tau_range
        bounded = bounds is not None and bounds != (-math.inf, math.inf)
        rows.append(
            {
                "type": found.name,
                "domain": found.domain,
                "keys": {k: {"required": key.required} for k, key in found.keys.items()},
                "tau_range": list(bounds) if bounded else None,
                "source": found.source,
                "description": found.description,
            }
        )
    return rows
