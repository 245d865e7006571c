"""Structured output: the continuation matches a regular expression (`regex`) or is JSON that
a JSON Schema accepts (`json_schema`).

Judges are exact: Python's `re.fullmatch` on the continuation, and the `jsonschema` package
(with exact checks of the formats cdd writes) on the parsed continuation. The projection is
the patterns' closed form (`pattern_layout.py`): a path through the token automaton that
every token of the continuation follows, so the decoded text matches by construction. A JSON
Schema reaches the automaton as one or more regexes (the `json_schema` package, whose
docstring states the supported subset and the whitespace convention); several patterns in a
job (two regexes, a regex and a schema, a schema's intersected parts) make one automaton,
their product (`automaton.intersect`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import torch

from cdd_cli.constraints.automaton import compile_patterns
from cdd_cli.constraints.base import ClosedFormBuilder, ExactConstraint
from cdd_cli.constraints.descriptor import ConstraintSpec, Descriptor, Key
from cdd_cli.constraints.json_schema import (
    format_checker,
    load_schema,
    schema_pattern,
    schema_text_patterns,
    strip_anchors,
)
from cdd_cli.constraints.lexical import Exclude, split_words
from cdd_cli.constraints.pattern_layout import PatternLayout
from cdd_cli.constraints.pattern_limits import pattern_problem
from cdd_cli.errors import InputError
from cdd_cli.models.registry import LoadedModel


@dataclass(frozen=True)
class PatternConstraint(ExactConstraint):
    tau: float = 1.0
    upper_bound: bool = False  # value 1.0 (matches) >= tau

    def automaton_pattern(self) -> str:
        """The pattern in the automaton library's syntax."""
        raise NotImplementedError

    def automaton_patterns(self) -> tuple[str, ...]:
        """Patterns whose common matches are the constraint's texts (the automaton is their
        product): most constraints are one."""
        return (self.automaton_pattern(),)

    def matches(self, text: str) -> bool:
        raise NotImplementedError

    def judge(self, texts: list[str]) -> list[float | None]:
        return [1.0 if self.matches(t) else 0.0 for t in texts]

    def closed_form(self) -> ClosedFormBuilder:
        return pattern_layout


@dataclass(frozen=True)
class RegexConstraint(PatternConstraint):
    pattern: str = ""
    ignore_case: bool = False
    name: str = "regex"
    judge_name: str = "re.fullmatch"

    @functools.cached_property
    def compiled(self) -> re.Pattern:
        return re.compile(self.pattern, re.IGNORECASE if self.ignore_case else 0)

    def matches(self, text: str) -> bool:
        return self.compiled.fullmatch(text) is not None

    def automaton_pattern(self) -> str:
        inner = strip_anchors(self.pattern)
        return f"(?i:{inner})" if self.ignore_case else inner

    def explain(self, text: str) -> str | None:
        if self.matches(text):
            return None
        return f"{text[:60]!r} does not match {self.pattern!r} whole"

    def label(self) -> str:
        return f"matches /{self.pattern}/" + ("i" if self.ignore_case else "")


@dataclass(frozen=True)
class JsonSchemaConstraint(PatternConstraint):
    schema_text: str = "{}"  # the schema as canonical JSON (a frozen dataclass's field)
    source: str = "inline"
    whitespace: str = "compact"  # or "flexible" (`json_schema.grammar.WRITINGS`)
    name: str = "json_schema"
    judge_name: str = "jsonschema"
    # The schema's patterns, compiled when the entry was checked (empty: compiled when asked).
    patterns: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @functools.cached_property
    def validator(self) -> Any:
        """jsonschema's validator of the schema's draft, with exact checks of the formats
        cdd writes (`format_checker`: jsonschema's own skip time and date-time)."""
        schema = json.loads(self.schema_text)
        cls = jsonschema.validators.validator_for(schema)
        return cls(schema, format_checker=format_checker(cls.FORMAT_CHECKER))

    def error(self, text: str) -> str | None:
        """Why the text is no valid instance (None: it is)."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            return f"not JSON ({exc})"
        error = next(iter(self.validator.iter_errors(value)), None)
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "the document"
        return f"{where}: {error.message[:120]}"

    def matches(self, text: str) -> bool:
        return self.error(text) is None

    def explain(self, text: str) -> str | None:
        return self.error(text)

    def automaton_pattern(self) -> str:
        """The schema's one regex (InputError where it is the intersection of several)."""
        return schema_pattern(self.schema_text, self.whitespace)

    def automaton_patterns(self) -> tuple[str, ...]:
        return self.patterns or schema_text_patterns(self.schema_text, self.whitespace)

    def label(self) -> str:
        return f"JSON valid under {self.source}"


def pattern_layout(
    constraints: Sequence[ExactConstraint], tokenizer: Any, start: int, length: int
) -> PatternLayout:
    """The closed form of a job's pattern constraints (`regex`, `json_schema`, any number):
    the product of their automata, so the path keeps to texts that match every one, with the
    tokens that spell an excluded word (`exclude`, which it serves) taken out of every
    edge."""
    patterns = [c for c in constraints if isinstance(c, PatternConstraint)]
    names = " and ".join(dict.fromkeys(c.name for c in patterns))
    words = frozenset(w for c in constraints if isinstance(c, Exclude) for w in c.forbidden())
    try:
        every = tuple(dict.fromkeys(p for c in patterns for p in c.automaton_patterns()))
        return automaton_layout(every, tokenizer, words).placed(start, length)
    except InputError as exc:
        raise InputError(f"{names}: {exc}") from None


@functools.lru_cache(maxsize=8)
def automaton_layout(
    patterns: tuple[str, ...], tokenizer: Any, words: frozenset[str]
) -> PatternLayout:
    """The layout of the texts matching all `patterns`, without `words`, built once a process
    (its edges and token sets cost 0.1-2 s for a large schema; every batch of a run places
    the same one)."""
    automaton = compile_patterns(patterns, tokenizer)
    if len(patterns) > 1 and automaton.shortest() is None:
        raise InputError(f"no text matches all {len(patterns)} patterns together")
    return PatternLayout(
        automaton,
        len(tokenizer),
        tokenizer.eos_id,
        banned=word_tokens(tokenizer, words),
    )


pattern_layout.serves = lambda c: isinstance(c, Exclude)  # type: ignore[attr-defined]
pattern_layout.lays_out_every_position = True  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=16)
def word_tokens(tokenizer: Any, words: frozenset[str]) -> torch.Tensor:
    """Ids of the tokens that read as one of `words` under the word rules (' damn', '"damn',
    'damn,'): taking them out keeps most spellings of an excluded word out of a pattern's
    text; one split over several tokens is left to the judge and the search."""
    if not words:
        return torch.zeros(0, dtype=torch.int64)
    ids = [
        i
        for i, text in enumerate(tokenizer.token_texts())
        if len(found := split_words(text)) == 1 and found[0] in words
    ]
    return torch.tensor(ids, dtype=torch.int64)


# ------------------------------------------------------------------------------------------
# The types


def check_regex(c: ConstraintSpec) -> None:
    """A pattern Python's `re` reads."""
    try:
        re.compile(c.options["pattern"])
    except re.error as exc:
        raise InputError(f"{c.where}: key 'pattern': not a regular expression ({exc})") from None
    if not c.options["pattern"]:
        raise InputError(f"{c.where}: key 'pattern' is empty")
    # Before any automaton is built from it, or any text judged by it (pattern_limits.py).
    problem = pattern_problem(c.options["pattern"])
    if problem:
        raise InputError(f"{c.where}: key 'pattern': {problem}")


def build_regex(
    entry: ConstraintSpec, model: LoadedModel, device: str, words: str
) -> list[RegexConstraint]:
    options = entry.options
    return [RegexConstraint(pattern=options["pattern"], ignore_case=options["ignore_case"])]


def prepared_schema(c: ConstraintSpec) -> tuple[str, str, tuple[str, ...]]:
    """The entry's schema as canonical JSON, where it came from, and its patterns: read,
    checked and compiled once for the entry (an unreadable, invalid or unsupported one:
    InputError)."""
    if "schema" not in c.prepared:
        whitespace = c.options.get("whitespace") or "compact"
        text, source = load_schema(c.options["schema"], c.where, whitespace)
        c.prepared["schema"] = (text, source, schema_text_patterns(text, whitespace))
    return c.prepared["schema"]


def entry_patterns(c: ConstraintSpec) -> tuple[str, ...]:
    """The patterns a `regex` or `json_schema` entry enforces, as the automaton reads them
    (empty for any other type): `cdd validate --show-pattern` prints them."""
    if c.type == "regex":
        folded = bool(c.options.get("ignore_case"))
        return RegexConstraint(
            pattern=c.options["pattern"], ignore_case=folded
        ).automaton_patterns()
    if c.type == "json_schema":
        return prepared_schema(c)[2]
    return ()


def check_json_schema(c: ConstraintSpec) -> None:
    prepared_schema(c)


def build_json_schema(
    entry: ConstraintSpec, model: LoadedModel, device: str, words: str
) -> list[JsonSchemaConstraint]:
    text, source, patterns = prepared_schema(entry)
    whitespace = entry.options.get("whitespace") or "compact"
    return [
        JsonSchemaConstraint(
            schema_text=text, source=source, whitespace=whitespace, patterns=patterns
        )
    ]


DESCRIPTORS = (
    Descriptor(
        name="regex",
        domain="text",
        description="the whole continuation matches the pattern (Python re; ignore_case: true)",
        keys={"pattern": Key((str,), required=True), "ignore_case": Key((bool,))},
        defaults={"ignore_case": False},
        spec_only=True,
        pattern=True,
        check=check_regex,
        build=build_regex,
    ),
    Descriptor(
        name="json_schema",
        domain="text",
        description="the continuation is JSON valid under the schema (a mapping or .json "
        "file); whitespace: compact (default) or flexible (spaces, line breaks, indentation)",
        keys={
            "schema": Key((dict, str), required=True),
            "whitespace": Key((str,), choices=("compact", "flexible")),
        },
        defaults={"whitespace": "compact"},
        spec_only=True,
        pattern=True,
        check=check_json_schema,
        build=build_json_schema,
    ),
)
