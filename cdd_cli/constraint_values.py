"""Constraints as values: each function validates its options exactly as a spec file's entry
is validated and returns that entry (`cdd.SA(tau=3.5)`); the API's runs build them.

Every type's keys come from the constraint table (`constraints/table.py`); the functions
below give the built-in types typed signatures and docstrings for Python users (a test checks
that each one's parameters are its type's keys)."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cdd_cli.constraints import table
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.json_schema.loading import MAX_SCHEMA_BYTES
from cdd_cli.errors import InputError
from cdd_cli.spec.entries import check_constraint
from cdd_cli.spec.values import check_value


def constraint(type: str, **options: Any) -> ConstraintSpec:
    """A constraint of any type, built in or from an installed plugin, with its options,
    validated like a spec entry: `cdd.constraint("max_heavy_atoms", tau=9)`."""
    if not isinstance(type, str):
        raise InputError(f"constraint: the type must be a name, got {type!r}")
    given = {k: v for k, v in options.items() if v is not None}
    entry = ConstraintSpec(type, given, f"constraint {type!r}")
    keys = table.lookup(type, entry.where).keys
    for key, value in given.items():
        if key not in keys:
            known = ", ".join(keys) or "none"
            raise InputError(f"{entry.where}: unknown option '{key}' (known: {known})")
        check_value(entry.where, f"option '{key}'", value, keys[key].types)
    check_constraint(entry)
    return entry


def words_list(words: list[str] | str, where: str) -> list[str]:
    if isinstance(words, str):  # list("the") would be its letters
        raise InputError(f"{where}: words: give a list of words, e.g. [{words!r}]")
    if not isinstance(words, Iterable) or isinstance(words, (bytes, dict)):
        raise InputError(f"{where}: words: give a list of words, got {words!r}")
    return list(words)


def file_or_name(value: object, where: str, key: str) -> str | None:
    """A path-like option (a file, or one of the type's names) as the spec's text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise InputError(f"{where}: option '{key}': expected a name or a file's path, got {value!r}")


def SA(tau: float, margin: float | None = None, surrogate: str | None = None) -> ConstraintSpec:
    """Synthetic accessibility (RDKit's sascorer) at most `tau`, in [1, 10]."""
    return constraint("sa", tau=tau, margin=margin, surrogate=surrogate)


def Toxicity(
    tau: float,
    margin: float | None = None,
    surrogate: str | None = None,
    scope: str | None = None,
) -> ConstraintSpec:
    """The shipped classifier's toxicity probability at most `tau`, in [0, 1]; `scope`:
    "continuation" (default) or "full" (prompt and continuation)."""
    return constraint("toxicity", tau=tau, margin=margin, surrogate=surrogate, scope=scope)


def Novelty(reference: str | Path | None = None) -> ConstraintSpec:
    """Not known (canonical SMILES) nor earlier in the run. `reference`: "training" (the
    model's training molecules), "all" (those and its held-out ones; the default where the
    model ships them) or a SMILES file of your own library."""
    given = file_or_name(reference, "constraint 'novelty'", "reference")
    return constraint("novelty", reference=given)


def WordAt(position: int, word: str) -> ConstraintSpec:
    """`word` at the 1-based word `position` of the continuation (negative: from the end)."""
    return constraint("word_at", position=position, word=word)


def Include(words: list[str]) -> ConstraintSpec:
    """Each of `words` somewhere in the continuation."""
    return constraint("include", words=words_list(words, "constraint 'include'"))


def Exclude(words: list[str]) -> ConstraintSpec:
    """None of `words` in the continuation."""
    return constraint("exclude", words=words_list(words, "constraint 'exclude'"))


def WordCount(
    min: int | None = None, max: int | None = None, equals: int | None = None
) -> ConstraintSpec:
    """The continuation's number of words: at least `min`, at most `max`, or `equals`."""
    return constraint("word_count", min=min, max=max, equals=equals)


def SentenceCount(
    min: int | None = None, max: int | None = None, equals: int | None = None
) -> ConstraintSpec:
    """The continuation's number of sentences: at least `min`, at most `max`, or `equals`
    (sentences as the `words` rules of `generate` split them)."""
    return constraint("sentence_count", min=min, max=max, equals=equals)


def Count(letter: str | None = None, word: str | None = None) -> ConstraintSpec:
    """The first number written is how often `letter` occurs in `word` (both None: read from
    a prompt such as "How many r's are in strawberry?")."""
    return constraint("count", letter=letter, word=word)


def Regex(pattern: str, ignore_case: bool | None = None) -> ConstraintSpec:
    """The whole continuation matches `pattern` (Python `re`; no look-around or
    back-references, which no automaton has)."""
    return constraint("regex", pattern=pattern, ignore_case=ignore_case)


def JsonSchema(schema: dict | str | Path, whitespace: str | None = None) -> ConstraintSpec:
    """The continuation is JSON valid under `schema` (a mapping, or a .json file's path), in
    the supported subset of JSON Schema (`cdd_cli.constraints.json_schema`); `whitespace`:
    "compact" (the default: one optional space after `,` and `:`) or "flexible" (a space or
    a line break and indentation around every `{ } [ ] , :`)."""
    where = "constraint 'json_schema'"
    if isinstance(schema, dict):
        check_json(schema, f"{where}: key 'schema'")
    else:
        schema = file_or_name(schema, where, "schema")
    try:
        return constraint("json_schema", schema=schema, whitespace=whitespace)
    except RecursionError:  # deeper than the validator's recursion reaches
        raise InputError(f"{where}: key 'schema' is nested too deeply") from None


# Keywords whose numbers the schema compiler reads as floats.
FLOAT_KEYWORDS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)


def check_json(value: dict, where: str) -> None:
    """An inline schema is JSON as a schema file holds it, checked before the compiler reads
    it: dicts with string keys, lists, strings, finite numbers, booleans and None; no
    container inside itself; no larger than a schema file may be (counted as written out,
    so that a part shared many times over is refused before it is written out); the numbers
    of `FLOAT_KEYWORDS` within a float's range."""
    inside: set[int] = set()  # the containers on the path to the value looked at
    stack: list[tuple[object, str, bool]] = [(value, "#", False)]
    size = 0  # bytes written out, at least
    while stack:
        item, at, leaving = stack.pop()
        if leaving:
            inside.discard(id(item))
            continue
        size += 1 + (len(item) if isinstance(item, str) else 0)
        if size > MAX_SCHEMA_BYTES:
            raise InputError(f"{where}: larger than {MAX_SCHEMA_BYTES >> 20} MiB as JSON")
        if isinstance(item, (dict, list)):
            if id(item) in inside:
                raise InputError(f"{where}: {at} contains itself (JSON has no cycles)")
            inside.add(id(item))
            stack.append((item, at, True))
            if isinstance(item, list):
                stack.extend((inner, f"{at}/{k}", False) for k, inner in enumerate(item))
                continue
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise InputError(f"{where}: {at} has the key {key!r}; JSON's keys are text")
                size += len(key)
                stack.append((inner, f"{at}/{key}", False))
        elif isinstance(item, float) and not math.isfinite(item):
            raise InputError(f"{where}: {at} is {item}, which JSON does not write")
        elif isinstance(item, int) and at.rsplit("/", 1)[-1] in FLOAT_KEYWORDS:
            if not isinstance(item, bool) and abs(item) > sys.float_info.max:
                raise InputError(
                    f"{where}: {at} is a {item.bit_length()}-bit integer, past the range of a "
                    "float (about 1.8e308)"
                )
        elif not (item is None or isinstance(item, (str, int, float))):
            raise InputError(f"{where}: {at} is a {type(item).__name__}, not a JSON value")
