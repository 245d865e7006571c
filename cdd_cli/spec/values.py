"""The type check every value a spec, a flag or an API call gives goes through: one place
for what a number, a name or a list is, wherever the value came from."""

from __future__ import annotations

import math
from typing import Any

from cdd_cli.errors import InputError

FLOAT32_MAX = 3.4028234663852886e38  # settings and thresholds become float32 tensors


def check_value(where: str, key: str, value: Any, types: tuple[type, ...], hint: str = "") -> Any:
    """`value` when it is of one of `types` (a bool is no number), finite and within
    float32's range; else InputError "WHERE: KEY: ..." (`key` names it: "key 'tau'",
    "option 'tau'"); `hint`: said after a type mismatch (how to write the value)."""
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        names = "number" if float in types else " or ".join(t.__name__ for t in types)
        raise InputError(f"{where}: {key}: expected {names}, got {value!r}{hint}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{where}: {key}: must be a finite number, got {value}")
    if isinstance(value, (int, float)) and abs(value) > FLOAT32_MAX:
        # An integer this large has no float (`:g` of it raises), and 4,300 digits and more
        # have no text either: named by its size.
        shown = f"{value:g}" if isinstance(value, float) else f"a {value.bit_length()}-bit integer"
        raise InputError(f"{where}: {key}: {shown} is beyond float32's range")
    return value
