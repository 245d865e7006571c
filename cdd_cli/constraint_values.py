"""Constraints as values: each function validates its options exactly as a spec file's entry
is validated and returns that entry (`cdd.SA(tau=3.5)`); the API's runs build them.

Every type's keys come from the constraint table (`constraints/table.py`); the functions
below give the built-in types typed signatures and docstrings for Python users (a test checks
that each one's parameters are its type's keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cdd_cli.constraints import table
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.errors import InputError
from cdd_cli.spec.entries import check_constraint
from cdd_cli.spec.values import check_value


def constraint(type: str, **options: Any) -> ConstraintSpec:
    """A constraint of any type, built in or from an installed plugin, with its options,
    validated like a spec entry: `cdd.constraint("max_heavy_atoms", tau=9)`."""
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
    return list(words)


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
    return constraint("novelty", reference=None if reference is None else str(reference))


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
    return constraint(
        "json_schema",
        schema=schema if isinstance(schema, dict) else str(schema),
        whitespace=whitespace,
    )
