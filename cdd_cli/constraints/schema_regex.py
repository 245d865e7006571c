"""A JSON Schema written as a regular expression whose every match is a valid instance.

The regex is what the token automaton is built from (`automaton.py`); the judge is the
`jsonschema` package itself. The regex describes a *subset* of the valid instances, in one
writing convention:

- compact JSON: no whitespace except one optional space after each `,` and `:` (what
  `json.dumps` writes by default, and what `separators=(",", ":")` writes);
- an object's properties in the order the schema lists them, the required ones always, the
  optional ones where the path takes them; no other properties (`additionalProperties` is
  never needed); an object with no `properties` is `{}`;
- strings without `\\u` escapes; `format` date (years 1000-9999, February's days 1-28),
  time, date-time, uuid, email or ipv4; `pattern` (a regex the string's characters must
  match whole, anchors allowed) when it cannot match a quote, backslash or control character;
- integers with any `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum`; numbers
  with such bounds where the bounds are whole numbers (written without exponent then);
- arrays of `items` with `minItems` / `maxItems` (no `items`: scalar values);
- `enum`, `const`, `anyOf`, a `type` list, `$ref` to `#/$defs/...` or `#/definitions/...`
  (not recursive); a schema with no type: a scalar.

Any other keyword is refused with its name and where it is (`UnsupportedSchema`), never
dropped: a dropped keyword would let through instances the judge rejects.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
from outlines_core import Index, Vocabulary

from cdd_cli.constraints.pattern_limits import pattern_problem
from cdd_cli.errors import InputError

ANNOTATIONS = {
    "$schema", "$id", "$comment", "title", "description", "examples", "default",
    "readOnly", "writeOnly", "deprecated", "$defs", "definitions",
}  # fmt: skip
SUPPORTED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
    "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "$ref",
}  # fmt: skip

SPACE = "[ ]?"
CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])'
STRING = f'"{CHAR}*"'
INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
BOOLEAN = "(?:true|false)"
NULL = "null"
SCALAR = f"(?:{STRING}|{NUMBER}|{BOOLEAN}|{NULL})"
DAY = "(?:0[1-9]|1[0-9]|2[0-8])"
MONTH_DAY = rf"(?:0[13578]|1[02])-(?:{DAY}|29|30|31)|(?:0[469]|11)-(?:{DAY}|29|30)|02-{DAY}"
DATE = rf"[1-9][0-9]{{3}}-(?:{MONTH_DAY})"
HOUR = "(?:[01][0-9]|2[0-3])"
TIME = rf"{HOUR}:[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-]{HOUR}:[0-5][0-9])"
FORMATS = {
    "date": DATE,
    "time": TIME,
    "date-time": f"{DATE}T{TIME}",
    "uuid": "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "email": r"[a-z0-9](?:[a-z0-9._+-]{0,30}[a-z0-9])?@[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?"
    r"(?:\.[a-z]{2,6}){1,2}",
    "ipv4": r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
    r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
}
ANY_FRACTION, NONZERO_FRACTION, ZERO_FRACTION = (
    r"(?:\.[0-9]+)?",
    r"\.[0-9]*[1-9][0-9]*",
    r"(?:\.0+)?",
)


# A schema's size: its file, and its regex (the automaton's limits, pattern_limits.py, are
# checked on that regex before anything is built from it).
MAX_SCHEMA_BYTES = 1 << 20
MAX_REGEX_CHARACTERS = 100_000


class UnsupportedSchema(ValueError):
    """A schema (or part) the regex cannot describe; the message names the keyword and where."""


def schema_regex(schema: dict, pattern_safe=None) -> str:
    """The regex of `schema`. `pattern_safe(regex) -> bool` says whether a string `pattern`
    keeps to characters a JSON string holds unescaped (the caller asks the automaton)."""
    return _Compiler(schema, pattern_safe).value(schema, "#", ())


class _Compiler:
    def __init__(self, root: dict, pattern_safe):
        self.root, self.pattern_safe = root, pattern_safe

    def value(self, schema, where: str, refs: tuple[str, ...]) -> str:
        regex = self.written(schema, where, refs)
        if len(regex) > MAX_REGEX_CHARACTERS:
            # `$ref`s that name a definition twice, nested, double the regex at each level:
            # stopped here, before it fills the memory.
            raise UnsupportedSchema(
                f"{where}: its regex is longer than {MAX_REGEX_CHARACTERS:,} characters, the "
                "most a schema may make"
            )
        return regex

    def written(self, schema, where: str, refs: tuple[str, ...]) -> str:
        if schema is True or schema == {}:
            return SCALAR
        if not isinstance(schema, dict):
            raise UnsupportedSchema(f"{where}: a schema must be an object or true")
        for key in schema:
            if key not in SUPPORTED and key not in ANNOTATIONS:
                raise UnsupportedSchema(f"{where}: unsupported JSON Schema keyword '{key}'")
        if "$ref" in schema:
            return self.ref(schema, where, refs)
        if "const" in schema:
            return _literal(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise UnsupportedSchema(f"{where}/enum: must be a non-empty list")
            return "(?:" + "|".join(_literal(v) for v in values) + ")"
        if "anyOf" in schema:
            branches = schema["anyOf"]
            if not isinstance(branches, list) or not branches:
                raise UnsupportedSchema(f"{where}/anyOf: must be a non-empty list")
            return (
                "(?:"
                + "|".join(
                    self.value(b, f"{where}/anyOf/{k}", refs) for k, b in enumerate(branches)
                )
                + ")"
            )
        kind = schema.get("type")
        if kind is None:
            return SCALAR
        if isinstance(kind, list):
            return "(?:" + "|".join(self.typed(schema, t, where, refs) for t in kind) + ")"
        return self.typed(schema, kind, where, refs)

    def ref(self, schema: dict, where: str, refs: tuple[str, ...]) -> str:
        target = schema["$ref"]
        if len(schema.keys() - ANNOTATIONS) > 1:
            raise UnsupportedSchema(f"{where}: '$ref' beside other keywords")
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", str(target))
        if not match:
            raise UnsupportedSchema(f"{where}: '$ref' {target!r} (only #/$defs/NAME)")
        if target in refs:
            raise UnsupportedSchema(f"{where}: '$ref' {target!r} is recursive")
        found = self.root.get(match[1], {}).get(match[2])
        if found is None:
            raise UnsupportedSchema(f"{where}: '$ref' {target!r} is not defined")
        return self.value(found, target, (*refs, target))

    def typed(self, schema: dict, kind: str, where: str, refs: tuple[str, ...]) -> str:
        if kind == "object":
            return self.object(schema, where, refs)
        if kind == "array":
            return self.array(schema, where, refs)
        if kind == "string":
            return self.string(schema, where)
        if kind in ("integer", "number"):
            return _number(schema, kind == "integer", where)
        if kind == "boolean":
            return BOOLEAN
        if kind == "null":
            return NULL
        raise UnsupportedSchema(f"{where}: unknown type {kind!r}")

    def object(self, schema: dict, where: str, refs: tuple[str, ...]) -> str:
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        if missing := required - properties.keys():
            raise UnsupportedSchema(
                f"{where}: required {sorted(missing)[0]!r} has no schema under 'properties'"
            )
        members = [
            (
                f"{_literal(name)}:{SPACE}" + self.value(sub, f"{where}/properties/{name}", refs),
                name in required,
            )
            for name, sub in properties.items()
        ]

        # After(i): the members from i on, once something has been written (each led by a
        # comma); First(i): the same before anything is (the first written has no comma).
        def after(i: int) -> str:
            return "".join(
                f",{SPACE}{text}" if needed else f"(?:,{SPACE}{text})?"
                for text, needed in members[i:]
            )

        def first(i: int) -> str:
            if i == len(members):
                return ""
            text, needed = members[i]
            if needed:
                return text + after(i + 1)
            return f"(?:{text}{after(i + 1)}|{first(i + 1)})"

        return r"\{" + first(0) + r"\}"

    def array(self, schema: dict, where: str, refs: tuple[str, ...]) -> str:
        item = self.value(schema.get("items", True), f"{where}/items", refs)
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if high is not None and high < low:
            raise UnsupportedSchema(f"{where}: maxItems {high} < minItems {low}")
        if high == 0:
            return r"\[\]"
        more = f"(?:,{SPACE}{item})"
        rest = f"{{{max(low - 1, 0)},{'' if high is None else high - 1}}}"
        body = f"{item}{more}{rest}"
        return r"\[" + (body if low > 0 else f"(?:{body})?") + r"\]"

    def string(self, schema: dict, where: str) -> str:
        if "format" in schema:
            fmt = schema["format"]
            if fmt not in FORMATS:
                raise UnsupportedSchema(
                    f"{where}: format {fmt!r} (supported: {', '.join(FORMATS)})"
                )
            if {"pattern", "minLength", "maxLength"} & schema.keys():
                raise UnsupportedSchema(f"{where}: 'format' with a length or pattern")
            return f'"{FORMATS[fmt]}"'
        if "pattern" in schema:
            if {"minLength", "maxLength"} & schema.keys():
                raise UnsupportedSchema(f"{where}: 'pattern' with a length")
            inner = strip_anchors(schema["pattern"])
            # jsonschema judges strings by it with Python's re (which backtracks), and
            # `pattern_safe` builds its automaton: its limits first.
            problem = pattern_problem(inner)
            if problem:
                raise UnsupportedSchema(f"{where}/pattern: {problem}")
            if self.pattern_safe is not None and not self.pattern_safe(inner):
                raise UnsupportedSchema(
                    f"{where}/pattern: can match a quote, backslash or control character"
                )
            return f'"(?:{inner})"'
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if low == 0 and high is None:
            return STRING
        return f'"{CHAR}{{{low},{"" if high is None else high}}}"'


def strip_anchors(pattern: str) -> str:
    """A pattern without a leading `^` and trailing `$` (the automaton matches whole)."""
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1]
    return pattern


def _literal(value) -> str:
    return re.escape(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _number(schema: dict, integer: bool, where: str) -> str:
    bounds = {
        k: schema[k]
        for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        if k in schema
    }
    for key, value in bounds.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UnsupportedSchema(f"{where}/{key}: must be a number (draft 6 and later)")
        if not math.isfinite(value):  # Python's json reads Infinity and NaN
            raise UnsupportedSchema(f"{where}/{key}: must be a finite number, got {value}")
    if not bounds:
        return INTEGER if integer else NUMBER
    low, low_in = _bound(bounds, "minimum", "exclusiveMinimum", max)
    high, high_in = _bound(bounds, "maximum", "exclusiveMaximum", min)
    if integer:
        if low is not None:
            low = math.ceil(low) if low_in else math.floor(low) + 1
        if high is not None:
            high = math.floor(high) if high_in else math.ceil(high) - 1
        if low is not None and high is not None and low > high:
            raise UnsupportedSchema(f"{where}: no integer lies between the bounds")
        return _signed(low, True, high, True, integer=True)
    for value in (low, high):
        if value is not None and value != int(value):
            raise UnsupportedSchema(
                f"{where}: number bounds must be whole numbers (or type integer)"
            )
    low = None if low is None else int(low)
    high = None if high is None else int(high)
    if (
        low is not None
        and high is not None
        and (low > high or (low == high and not (low_in and high_in)))
    ):
        raise UnsupportedSchema(f"{where}: no number lies between the bounds")
    return _signed(low, low_in, high, high_in, integer=False)


def _bound(bounds: dict, inclusive: str, exclusive: str, tighter) -> tuple[float | None, bool]:
    options = []
    if inclusive in bounds:
        options.append((bounds[inclusive], True))
    if exclusive in bounds:
        options.append((bounds[exclusive], False))
    if not options:
        return None, True
    best = tighter(v for v, _ in options)
    # At a tie the exclusive bound is the tighter one.
    return best, all(inside for v, inside in options if v == best)


def _signed(low, low_in: bool, high, high_in: bool, integer: bool) -> str:
    """Numbers in the range (None: unbounded) as the union of a non-negative part and a
    negative part written as '-' and a magnitude."""
    parts = []
    if high is None or high > 0 or (high == 0 and high_in):
        m_low, m_low_in = (0, True) if low is None or low < 0 else (low, low_in)
        parts.append(_magnitude(m_low, m_low_in, high, high_in, integer))
    if low is None or low < 0:
        if high is None or high >= 0:
            m_low, m_low_in = 0, False  # zero itself belongs to the non-negative part
        else:
            m_low, m_low_in = -high, high_in
        parts.append(
            "-" + _magnitude(m_low, m_low_in, None if low is None else -low, low_in, integer)
        )
    parts = [p for p in parts if p not in ("", "-")]
    if not parts:
        return "(?!)"
    return "(?:" + "|".join(parts) + ")"


def _magnitude(low: int, low_in: bool, high, high_in: bool, integer: bool) -> str:
    """Non-negative numbers m with low <(=) m <(=) high (high None: unbounded), integer bounds."""
    if integer:
        first = low if low_in else low + 1
        last = None if high is None else (high if high_in else high - 1)
        if last is not None and first > last:
            return ""
        return _naturals(first, last)
    parts = []
    if high is not None and low == high:
        return f"{low}{ZERO_FRACTION}" if low_in and high_in else ""
    # The whole part k == low: any fraction, or only a non-zero one where low is excluded.
    parts.append(f"{low}{ANY_FRACTION if low_in else NONZERO_FRACTION}")
    inner_last = None if high is None else high - 1
    if inner_last is None or inner_last >= low + 1:
        parts.append(f"{_naturals(low + 1, inner_last)}{ANY_FRACTION}")
    if high is not None and high_in:
        parts.append(f"{high}{ZERO_FRACTION}")
    return "(?:" + "|".join(parts) + ")"


def _naturals(low: int, high: int | None) -> str:
    """Integers low..high (high None: unbounded) written without leading zeros."""
    parts = []
    digits = len(str(low))
    top = digits if high is None else len(str(high))
    for n in range(digits, top + 1):
        a = max(low, 0 if n == 1 else 10 ** (n - 1))
        b = 10**n - 1 if high is None else min(high, 10**n - 1)
        if a <= b:
            parts.append(_same_length(str(a), str(b)))
    if high is None:
        parts.append(f"[1-9][0-9]{{{digits},}}")
    return "(?:" + "|".join(parts) + ")"


def _same_length(low: str, high: str) -> str:
    """Digit strings of one length from low to high."""
    if low == high:
        return low
    if len(low) == 1:
        return f"[{low}-{high}]"
    if low[0] == high[0]:
        return low[0] + _same_length(low[1:], high[1:])
    k = len(low) - 1
    if low[1:] == "0" * k and high[1:] == "9" * k:
        return f"[{low[0]}-{high[0]}][0-9]{{{k}}}"
    parts = [low[0] + _same_length(low[1:], "9" * k)]
    if int(high[0]) - int(low[0]) > 1:
        parts.append(f"[{int(low[0]) + 1}-{int(high[0]) - 1}][0-9]{{{k}}}")
    parts.append(high[0] + _same_length("0" * k, high[1:]))
    return "(?:" + "|".join(parts) + ")"


@functools.lru_cache(maxsize=32)
def schema_pattern(schema_text: str) -> str:
    try:
        regex = schema_regex(json.loads(schema_text), pattern_safe=json_string_safe)
    except UnsupportedSchema as exc:
        raise InputError(f"json_schema: {exc}") from None
    except RecursionError:
        raise InputError("json_schema: the schema is nested too deeply") from None
    # The judge is jsonschema, not re: only the automaton's limits apply to the whole regex.
    problem = pattern_problem(regex, backtracked=False)
    if problem:
        raise InputError(f"json_schema: the schema's regex is too large: {problem}")
    return regex


@functools.lru_cache(maxsize=64)
def json_string_safe(pattern: str) -> bool:
    """Whether every match of `pattern` keeps to characters a JSON string holds unescaped
    (no quote, backslash or control character): the pattern's byte automaton, built by the
    same library, has no move on one of those bytes."""
    single_bytes = Vocabulary(256, {bytes([b]): [b] for b in range(256)})
    try:
        index = Index(pattern, single_bytes)
    except (ValueError, RuntimeError, TypeError):
        return False
    forbidden = {*range(0x20), ord('"'), ord("\\")}
    return not any(forbidden & moves.keys() for moves in index.get_transitions().values())


def load_schema(value: Any, where: str) -> tuple[str, str]:
    """A spec's `schema` (an inline mapping, or the path of a .json file) as canonical JSON,
    and where it came from; InputError naming what is wrong (unreadable, not a schema, or a
    keyword the projection does not support)."""
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
            value = json.loads(data.decode("utf-8"))
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
        jsonschema.validators.validator_for(value).check_schema(value)
    except jsonschema.SchemaError as exc:
        raise InputError(
            f"{where}: key 'schema' is not a valid JSON Schema ({exc.message[:120]})"
        ) from None
    text = json.dumps(value, sort_keys=False, separators=(",", ":"))
    try:
        schema_pattern(text)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return text, source
