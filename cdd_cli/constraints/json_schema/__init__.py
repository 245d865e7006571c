"""A JSON Schema written as regular expressions whose every common match is a valid instance.

The patterns are what the token automaton is built from (`automaton.py`: one automaton each,
their product where there are several); the judge is the `jsonschema` package itself, with
exact checks of the formats cdd writes (`formats.format_checker`). The patterns describe a
*subset* of the valid instances, in one writing convention:

- compact JSON: no whitespace except one optional space after each `,` and `:` (what
  `json.dumps` writes by default, and what `separators=(",", ":")` writes); or, with
  `whitespace="flexible"`, JSON's whitespace, bounded: before and after each `{ } [ ] , :`
  and the whole value, one space, or a line break and any spaces and tabs
  (`grammar.WRITINGS`);
- an object's properties in the order the schema lists them, the required ones always, the
  optional ones where the path takes them (`minProperties`, `maxProperties` and
  `dependentRequired` choose among at most 12 optional ones); other properties after them
  only where the schema speaks of them (`patternProperties`, `additionalProperties` as a
  schema) or names no property at all (then any names, scalar values);
- strings with any escape but `\\u`; `format` date (years 1000-9999, February's days 1-28),
  time, date-time, uuid, email (1-3 dot-separated atoms), ipv4, hostname (1-4 labels of at
  most 32 characters, no `??--` label), ipv6 (the full 8-group form), uri (`http(s)://`, a
  host name, a path) or duration; `pattern` (found anywhere in the string unless anchored)
  when it cannot match a quote, backslash or control character; `minLength`/`maxLength`;
- integers with any `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum`; numbers
  with such bounds where the bounds are whole numbers (written without exponent then);
  `multipleOf` an integer;
- arrays of `prefixItems` and `items` with `minItems` / `maxItems` (no `items`: any
  scalars, and arrays and objects of scalars), `contains` with `minContains` (`maxContains`
  only where `maxItems` allows no more), `uniqueItems` only with `maxItems` at most 1;
- `enum`, `const`, `anyOf`, `allOf`, `oneOf` (where its branches are provably exclusive),
  `not` and `if`/`then`/`else` (where the complement can be written), a `type` list; `$ref`
  to a JSON pointer inside the schema (`#`, `#/$defs/x`, ...) or an anchor (`#name`), none
  to another document nor in a schema whose subschemas set their own `$id`. A recursive
  `$ref` is unrolled: followed at most 3 times along one path (`algebra.MAX_RECURSION`), the
  part past it is left out where it may be (an optional property, an array's further
  items, an `anyOf` branch), the schema refused where it may not;
- a schema with no `type`: every type, each under the keywords that apply to it; the schema
  `true` (or `{}`): any scalar, or an array or object of scalars.

Every keyword beside another is enforced, none is dropped: keywords of one kind merge
exactly (the tightest bounds, every `required`, each property under all its schemas);
`enum` and `const` keep the values the whole schema accepts (the validator judges each);
an `anyOf` beside other keywords is the union of its branches each under them; what no
merge writes as one regex (two string `pattern`s, a `format` with a length) stays a pattern
of its own, and the patterns intersect. Any other keyword is refused, every one at once
with where it is (`keywords.unsupported`): a dropped keyword would let through instances
the judge rejects.

The modules, bottom to top: `grammar` (JSON's text, the writings, the formats' regexes),
`keywords` (the vocabulary and the refusals), `byte_automata`, `algebra` (flattening,
`$ref`, negation, disjointness), `numbers`, `strings`, `containers` (objects and arrays from
their parts), `compiler`, `formats` (the judge's checks), `loading` (the entry points).
"""

from cdd_cli.constraints.json_schema.formats import format_checker
from cdd_cli.constraints.json_schema.grammar import strip_anchors
from cdd_cli.constraints.json_schema.keywords import EmptySchema, UnsupportedSchema
from cdd_cli.constraints.json_schema.loading import (
    load_schema,
    schema_pattern,
    schema_patterns,
    schema_regex,
    schema_text_patterns,
)

__all__ = [
    "EmptySchema",
    "UnsupportedSchema",
    "format_checker",
    "load_schema",
    "schema_pattern",
    "schema_patterns",
    "schema_regex",
    "schema_text_patterns",
    "strip_anchors",
]
