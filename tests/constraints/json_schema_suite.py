"""The official JSON-Schema-Test-Suite (draft 2020-12) against cdd's schema compiler: which
schemas it compiles, which instances its patterns match. Shared by the test
(`test_schema_suite.py`) and the bench (`bench/schema_suite.py`).

An instance is matched when its text, as cdd writes JSON, matches every pattern of the schema
whole (`re.fullmatch`: the language cdd compiled); how many of those the byte automaton the
token automaton is built from loses is counted apart (`automaton_matches`). cdd writes
objects with their properties in the order the schema lists them, so an instance is written
with its keys in that order (`schema_text`); other keys after them, in the instance's order.
Soundness is judged on more writings than that one: an instance the suite marks invalid is
unsound if any of its compact or spaced writings, keys in the schema's, the instance's or
sorted order, matches, by either matcher.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdd_cli.constraints.automaton import Moves, pattern_moves
from cdd_cli.constraints.json_schema import load_schema, schema_text_patterns
from cdd_cli.constraints.json_schema.byte_automata import SINGLE_BYTES
from cdd_cli.errors import InputError

SUITE = Path(__file__).parent / "data" / "json_schema_test_suite" / "draft2020-12"


@dataclass
class Case:
    """One schema of the suite with its instances."""

    file: str
    description: str
    schema: Any
    tests: list[tuple[Any, bool]]


@dataclass
class Outcome:
    """What one compiler did with one schema: refused (the reason) or compiled; the valid
    instances matched and the invalid ones matched (unsound)."""

    case: Case
    refused: str | None = None
    broken: str | None = None  # compiled, but a pattern the automaton library cannot build
    valid_matched: int = 0
    valid_lost: int = 0  # matched, but not by the byte automaton (`automaton_matches`)
    # Flexible whitespace: matched compactly and also as `json.dumps` writes it with
    # `indent=2` and with its default separators (", " and ": ").
    valid_matched_spaced: int = 0
    unsound: list[str] = field(default_factory=list)

    @property
    def valid(self) -> int:
        return sum(valid for _, valid in self.case.tests)


def cases() -> Iterator[Case]:
    for path in sorted(SUITE.glob("*.json")):
        for group in json.loads(path.read_text()):
            tests = [(t["data"], t["valid"]) for t in group["tests"]]
            yield Case(path.stem, group["description"], group["schema"], tests)


def key_order(schema: Any) -> list[str]:
    """Property names as the schema lists them (every `properties` mapping and `required`
    list, anywhere in it, in document order)."""
    names: dict[str, None] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "properties" and isinstance(value, dict):
                    names.update(dict.fromkeys(value))
                elif key == "required" and isinstance(value, list):
                    names.update(dict.fromkeys(v for v in value if isinstance(v, str)))
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return list(names)


def reordered(value: Any, rank: Callable[[str, int], Any]) -> Any:
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: rank(k, list(value).index(k)))
        return {k: reordered(value[k], rank) for k in keys}
    if isinstance(value, list):
        return [reordered(v, rank) for v in value]
    return value


def schema_text(instance: Any, schema: Any, compact: bool = True, indent: int | None = None) -> str:
    """The instance as cdd writes it: keys in the schema's order, compact (or spaced, or
    indented)."""
    order = {name: k for k, name in enumerate(key_order(schema))}
    value = reordered(instance, lambda key, at: (order.get(key, len(order)), at))
    return _dumps(value, compact, indent)


def writings(instance: Any, schema: Any, indented: bool = False) -> set[str]:
    """Every writing soundness is judged on (`indented`: those with `indent=2` too)."""
    out = set()
    for compact, indent in [(True, None), (False, None), *([(True, 2)] if indented else [])]:
        out.add(schema_text(instance, schema, compact, indent))
        out.add(_dumps(instance, compact, indent))
        out.add(_dumps(reordered(instance, lambda key, at: key), compact, indent))
    return out


def _dumps(value: Any, compact: bool, indent: int | None = None) -> str:
    # With an indent, json.dumps writes "," and ": ".
    spaced = (",", ": ") if indent is not None else (", ", ": ")
    separators = (",", ":") if compact and indent is None else spaced
    return json.dumps(value, ensure_ascii=False, separators=separators, indent=indent)


@functools.lru_cache(maxsize=4096)
def byte_automaton(pattern: str) -> Moves:
    """The pattern's automaton over single bytes, built as the token automaton is."""
    return pattern_moves(pattern, SINGLE_BYTES, 256)


def matches(patterns: tuple[str, ...], text: str) -> bool:
    """Whether the text matches every pattern whole (the language cdd compiled)."""
    return all(re.fullmatch(pattern, text) for pattern in patterns)


def automaton_matches(patterns: tuple[str, ...], text: str) -> bool:
    """Whether the text matches every pattern whole by their byte automata (built as the
    token automaton is: `automaton.pattern_moves`, outlines-core's `Index` of the pattern
    with an end)."""
    data = text.encode()
    for pattern in patterns:
        index = byte_automaton(pattern)
        state: int | None = index.start
        for byte in data:
            state = index.moves.get(state, {}).get(byte)
            if state is None:
                return False
        if state not in index.final:
            return False
    return True


def cdd_patterns(schema: Any, whitespace: str = "compact") -> tuple[str, ...] | str:
    """The schema's patterns as cdd compiles a spec's `schema`, or the one-line refusal."""
    try:
        text, _ = load_schema(schema, "suite", whitespace)
        return schema_text_patterns(text, whitespace)
    except InputError as exc:
        return str(exc)


def cdd_outcome(case: Case, whitespace: str = "compact") -> Outcome:
    compiled = cdd_patterns(case.schema, whitespace)
    flexible = whitespace == "flexible"
    if isinstance(compiled, str):
        return Outcome(case, refused=compiled)
    outcome = Outcome(case)
    try:
        for pattern in compiled:
            byte_automaton(pattern)
    except (ValueError, RuntimeError, TypeError) as exc:
        outcome.broken = f"{str(exc).splitlines()[0]}: {max(compiled, key=len)[:200]}"
        return outcome
    for instance, valid in case.tests:
        if valid:
            text = schema_text(instance, case.schema)
            if matches(compiled, text):
                outcome.valid_matched += 1
                outcome.valid_lost += not automaton_matches(compiled, text)
                spaced = (
                    schema_text(instance, case.schema, compact=False),
                    schema_text(instance, case.schema, indent=2),
                )
                outcome.valid_matched_spaced += flexible and all(
                    matches(compiled, t) and automaton_matches(compiled, t) for t in spaced
                )
        elif any(
            matches(compiled, text) or automaton_matches(compiled, text)
            for text in writings(instance, case.schema, indented=flexible)
        ):
            outcome.unsound.append(schema_text(instance, case.schema))
    return outcome


@dataclass
class Table:
    """A compiler's totals over the suite."""

    schemas: int
    accepted: int
    broken: int
    unsound: int
    valid_matched: int
    valid_lost: int
    valid: int
    valid_matched_spaced: int

    @classmethod
    def of(cls, outcomes: list[Outcome]) -> Table:
        return cls(
            schemas=len(outcomes),
            accepted=sum(o.refused is None and o.broken is None for o in outcomes),
            broken=sum(o.broken is not None for o in outcomes),
            unsound=sum(len(o.unsound) for o in outcomes),
            valid_matched=sum(o.valid_matched for o in outcomes),
            valid_lost=sum(o.valid_lost for o in outcomes),
            valid=sum(o.valid for o in outcomes),
            valid_matched_spaced=sum(o.valid_matched_spaced for o in outcomes),
        )
