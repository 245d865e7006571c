"""The compiler's entry points: a schema (a mapping) to its patterns (`schema_patterns`, or
`schema_regex` where it is one); a spec's `schema` (a mapping or a .json file) read, checked
and compiled (`load_schema`), and a schema's canonical JSON to its patterns, cached
(`schema_text_patterns`, `schema_pattern`), with what is wrong as an InputError."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema

from cdd_cli.constraints.json_schema.byte_automata import json_string_safe
from cdd_cli.constraints.json_schema.compiler import SchemaCompiler
from cdd_cli.constraints.json_schema.formats import format_checker
from cdd_cli.constraints.json_schema.grammar import WRITINGS
from cdd_cli.constraints.json_schema.keywords import Patterns, UnsupportedSchema, unsupported
from cdd_cli.constraints.pattern_limits import pattern_problem
from cdd_cli.errors import InputError

# The largest schema file read.
MAX_SCHEMA_BYTES = 1 << 20


def schema_patterns(
    schema: dict,
    pattern_safe: Callable[[str], bool] | None = None,
    validator: Any = None,
    whitespace: str = "compact",
) -> Patterns:
    """The patterns of `schema`: every text all of them match whole is a valid instance.
    Most schemas are one pattern; sibling keywords or `allOf` branches that no single
    regex can join (two string `pattern`s, a `format` with a length) make several, which the
    automaton intersects. `pattern_safe(regex) -> bool` says whether a string `pattern` keeps
    to characters a JSON string holds unescaped (the caller asks the automaton);
    `validator`: a jsonschema validator of `schema` (its `enum` values are filtered by it);
    `whitespace`: "compact" or "flexible" (`WRITINGS`)."""
    problems = unsupported(schema)
    if problems:
        named = "; ".join(problems[:12]) + ("; ..." if len(problems) > 12 else "")
        raise UnsupportedSchema(f"unsupported: {named}")
    if validator is None:
        cls = jsonschema.validators.validator_for(schema)
        validator = cls(schema, format_checker=format_checker(cls.FORMAT_CHECKER))
    if whitespace not in WRITINGS:
        raise UnsupportedSchema(f"whitespace {whitespace!r} (one of: {', '.join(WRITINGS)})")
    w = WRITINGS[whitespace]
    patterns = SchemaCompiler(schema, pattern_safe, validator, w).patterns([(schema, "#", ())])
    return tuple(f"{w.around}{p}{w.around}" if w.around else p for p in patterns)


def schema_regex(
    schema: dict, pattern_safe: Callable[[str], bool] | None = None, whitespace: str = "compact"
) -> str:
    """The one regex of `schema`; UnsupportedSchema where it takes several (`schema_patterns`)."""
    patterns = schema_patterns(schema, pattern_safe, whitespace=whitespace)
    if len(patterns) > 1:
        raise UnsupportedSchema(
            f"#: the schema is the intersection of {len(patterns)} patterns, not one regex"
        )
    return patterns[0]


@functools.lru_cache(maxsize=32)
def schema_text_patterns(schema_text: str, whitespace: str = "compact") -> Patterns:
    """The patterns of a schema given as canonical JSON (`schema_patterns`), in the
    `whitespace` writing; InputError naming what cannot be compiled."""
    try:
        patterns = schema_patterns(
            json.loads(schema_text), pattern_safe=json_string_safe, whitespace=whitespace
        )
    except UnsupportedSchema as exc:
        raise InputError(f"json_schema: {exc}") from None
    except RecursionError:
        raise InputError("json_schema: the schema is nested too deeply") from None
    # The judge is jsonschema, not re: only the automaton's limits apply to the whole regex.
    for regex in patterns:
        problem = pattern_problem(regex, backtracked=False)
        if problem:
            raise InputError(f"json_schema: the schema's regex is too large: {problem}")
    return patterns


def schema_pattern(
    schema_text: str, whitespace: str = "compact", where: str = "json_schema"
) -> str:
    """The one regex of a schema given as canonical JSON; InputError where it is the
    intersection of several (`schema_text_patterns`)."""
    patterns = schema_text_patterns(schema_text, whitespace)
    if len(patterns) > 1:
        raise InputError(
            f"{where}: it is the intersection of {len(patterns)} regexes, not one; "
            "schema_to_patterns gives them"
        )
    return patterns[0]


class DuplicateKey(ValueError):
    """A JSON object that names one key twice."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _object(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object read (`json.loads`'s `object_pairs_hook`); DuplicateKey where a key is
    named twice (Python's reader keeps the last silently)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def load_schema(value: Any, where: str, whitespace: str = "compact") -> tuple[str, str]:
    """A spec's `schema` (an inline mapping, or the path of a .json file) as canonical JSON,
    and where it came from; InputError naming what is wrong (unreadable, not a schema, or a
    keyword the projection does not support in the `whitespace` writing)."""
    source = "inline"
    if isinstance(value, str):
        path = Path(value).expanduser()
        if path.exists() and not path.is_file():  # a folder, or a pipe or device without end
            raise InputError(f"{where}: key 'schema': {value} is not a regular file")
        try:
            with path.open("rb") as f:
                data = f.read(MAX_SCHEMA_BYTES + 1)
            if len(data) > MAX_SCHEMA_BYTES:
                raise InputError(
                    f"{where}: key 'schema': {value} is larger than {MAX_SCHEMA_BYTES >> 20} MiB, "
                    "the most a schema file may be"
                )
            value = json.loads(data.decode("utf-8"), object_pairs_hook=_object)
        except DuplicateKey as exc:
            raise InputError(
                f"{where}: key 'schema': {value} holds the key {exc.key!r} twice in one object "
                "(JSON readers differ on which one counts)"
            ) from None
        except OSError as exc:
            raise InputError(
                f"{where}: key 'schema': cannot read {value} ({exc.strerror})"
            ) from None
        except ValueError as exc:  # not UTF-8 or not JSON
            problem = " ".join(str(exc).split())[:120]
            raise InputError(f"{where}: key 'schema': {value} is not JSON ({problem})") from None
        except RecursionError:
            raise InputError(f"{where}: key 'schema': {value} is nested too deeply") from None
        source = path.name
    if not isinstance(value, dict):
        raise InputError(f"{where}: key 'schema' must be a mapping or a .json file")
    try:
        text = json.dumps(value, sort_keys=False, separators=(",", ":"))
        jsonschema.validators.validator_for(value).check_schema(value)
    except (TypeError, ValueError) as exc:  # a value JSON has no word for, or a cycle
        raise InputError(f"{where}: key 'schema' is not JSON ({str(exc)[:120]})") from None
    except RecursionError:
        raise InputError(f"{where}: key 'schema' is nested too deeply") from None
    except jsonschema.SchemaError as exc:
        raise InputError(
            f"{where}: key 'schema' is not a valid JSON Schema ({exc.message[:120]})"
        ) from None
    try:
        schema_text_patterns(text, whitespace)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return text, source
