"""The one table of constraint types: the built-in families' descriptors, then the plugins'.

Spec validation (`cdd_cli.spec`), `cdd constraints ls`, the API's constraint values and the
builder (`registry.build_constraints`) all look types up here. A built-in family is a module
of this package that exports `DESCRIPTOR` (or a tuple, `DESCRIPTORS`); `FAMILIES` holds them
in the order `cdd constraints ls` lists them (a test checks that none is left out). Plugins
(the `cdd.constraints` entry points, `cdd_cli.plugins`) come after, adapted into the same
shape (`constraints/plugin.py`); a plugin's module is imported only when its type is named
or listed.
"""

from __future__ import annotations

from types import ModuleType

import cdd_cli.plugins as plugins
from cdd_cli.constraints import (
    alerts,
    lexical,
    novelty,
    properties,
    sa,
    similarity,
    structured,
    toxicity,
)
from cdd_cli.constraints import plugin as plugin_types
from cdd_cli.constraints.descriptor import Descriptor
from cdd_cli.errors import InputError
from cdd_cli.plugins import ConstraintPlugin
from cdd_cli.suggest import did_you_mean

# The built-in families, in listing order (molecules, then text).
FAMILIES: tuple[ModuleType, ...] = (
    sa, novelty, properties, alerts, similarity, toxicity, lexical, structured,
)  # fmt: skip


def descriptors_of(module: ModuleType) -> tuple[Descriptor, ...]:
    """What a family module exports: its DESCRIPTORS, or its one DESCRIPTOR."""
    if hasattr(module, "DESCRIPTORS"):
        return tuple(module.DESCRIPTORS)
    return (module.DESCRIPTOR,)


def _builtins() -> dict[str, Descriptor]:
    table: dict[str, Descriptor] = {}
    for family in FAMILIES:
        for d in descriptors_of(family):
            if d.name in table:  # a programming error: two families claim one name
                raise RuntimeError(f"constraint type '{d.name}' is described twice")
            table[d.name] = d
    return table


BUILTINS: dict[str, Descriptor] = _builtins()
BUILTIN = frozenset(BUILTINS)  # the names no plugin may take


def plugin_of(name: str) -> ConstraintPlugin | None:
    """The installed plugin of constraint type `name` (PluginError if it is broken), or None
    for a built-in or unknown type."""
    if name in BUILTIN:
        return None
    entry = plugins.find(name, BUILTIN)
    return None if entry is None else entry.usable()


def descriptor_of(name: str) -> Descriptor | None:
    """The type `name`, built in or a plugin's (PluginError if that plugin is broken); None
    when no one has that name."""
    if name in BUILTINS:
        return BUILTINS[name]
    found = plugin_of(name)
    if found is None:
        return None
    return plugin_types.descriptor(found, plugins.find(name, BUILTIN).package)


def lookup(name: str, where: str) -> Descriptor:
    """The type `name`; InputError naming the available types when no one has that name."""
    found = descriptor_of(name)
    if found is None:
        usable = [p.name for p in plugins.installed(BUILTIN) if p.plugin is not None]
        known = [*BUILTINS, *usable]
        hint = did_you_mean(name, known)
        # A close name is the likely fix; the whole list (two dozen) only when none is close.
        listed = "`cdd constraints ls` lists them all" if hint else f"available: {', '.join(known)}"
        raise InputError(f"{where}: unknown constraint type '{name}'{hint} ({listed})")
    return found


def listing() -> list[Descriptor | plugins.Installed]:
    """Every type in listing order: the built-ins' descriptors, then each installed plugin's
    (a broken plugin as its `Installed`, which says why)."""
    rows: list[Descriptor | plugins.Installed] = list(BUILTINS.values())
    for found in plugins.installed(BUILTIN):
        usable = found.plugin is not None
        rows.append(plugin_types.descriptor(found.plugin, found.package) if usable else found)
    return rows
