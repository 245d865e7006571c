"""The compiler: the patterns of a value under several schemas at once, the schemas first
flattened by the algebra (`algebra.py`), then written by what they are: an `anyOf`'s union,
an `enum`'s or `const`'s values, or each type the members admit (objects and arrays here,
strings in `strings.py`, numbers in `numbers.py`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from cdd_cli.constraints.json_schema.algebra import SchemaAlgebra
from cdd_cli.constraints.json_schema.byte_automata import patterns_meet
from cdd_cli.constraints.json_schema.containers import (
    array_pattern,
    containing_pattern,
    object_pattern,
    pick,
    union,
)
from cdd_cli.constraints.json_schema.grammar import (
    BOOLEAN,
    COMPACT,
    NULL,
    SCALAR,
    Writing,
    any_value,
    literal,
)
from cdd_cli.constraints.json_schema.keywords import (
    MAX_PATTERNS,
    MAX_REGEX_CHARACTERS,
    TYPES,
    EmptySchema,
    Member,
    Patterns,
    UnsupportedSchema,
    count_bounds,
    strings_in,
    type_admits,
)
from cdd_cli.constraints.json_schema.numbers import number_patterns
from cdd_cli.constraints.json_schema.strings import key_pattern, other_string, string_patterns


class SchemaCompiler:
    """Writes the patterns of a value that must satisfy several schemas at once (`Member`s):
    an `allOf`'s branches, a `$ref`'s target with the keywords beside it, an `anyOf`'s branch
    with the schema around it. Keywords of one kind merge exactly (bounds: the tightest;
    `required`: all; `properties`: each property under all its schemas; `enum`: the values
    every schema accepts, by the validator); what no merge writes as one regex (two string
    `pattern`s) stays a separate pattern, and the patterns intersect. A pattern with several
    parts is the product of its parts' patterns over the same JSON: each value's text is
    delimited by the JSON around it, so `{"a": X1} ∩ {"a": X2}` is `{"a": X1 ∩ X2}`."""

    def __init__(
        self,
        root: dict,
        pattern_safe: Callable[[str], bool] | None,
        validator: Any,
        w: Writing = COMPACT,
    ):
        self.pattern_safe, self.validator, self.w = pattern_safe, validator, w
        self.algebra = SchemaAlgebra(root, validator)

    def patterns(self, members: list[Member]) -> Patterns:
        """The patterns of a value under every member (one where no merge needs more);
        UnsupportedSchema past the most patterns or regex characters a schema may take."""
        where = members[0][1] if members else "#"
        patterns = self.written(members)
        # No pattern would be no constraint at all (the intersection of none): never.
        assert patterns, where
        if len(patterns) > MAX_PATTERNS:
            raise UnsupportedSchema(
                f"{where}: it takes {len(patterns)} patterns to intersect, more than "
                f"{MAX_PATTERNS}, the most a schema may (anyOf branches that each intersect "
                "several multiply them)"
            )
        for regex in patterns:
            if len(regex) > MAX_REGEX_CHARACTERS:
                # `$ref`s that name a definition twice, nested, double the regex at each
                # level: stopped here, before it fills the memory.
                raise UnsupportedSchema(
                    f"{where}: its regex is longer than {MAX_REGEX_CHARACTERS:,} characters, "
                    "the most a schema may make"
                )
        return patterns

    def written(self, members: list[Member]) -> Patterns:
        """The members flattened by the algebra, then written by what they are: an `anyOf`'s
        union, an enumeration, or each type they admit."""
        members = self.algebra.flattened(members)
        if not members:  # true, {}, or only annotations
            return (any_value(self.w),)
        for k, (schema, _, _) in enumerate(members):
            if "anyOf" in schema:
                return self.any_of(members, k)
        if any("enum" in m[0] or "const" in m[0] for m in members):
            return self.enumerated(members)
        return self.typed(members)

    def any_of(self, members: list[Member], k: int) -> Patterns:
        """A value under an `anyOf` and other schemas: the union, over its branches, of the
        branch under all of them (a branch nothing satisfies is left out)."""
        schema, where, refs = members[k]
        branches = schema["anyOf"]
        if not isinstance(branches, list) or not branches:
            raise UnsupportedSchema(f"{where}/anyOf: must be a non-empty list")
        rest = {key: v for key, v in schema.items() if key != "anyOf"}
        others = [*members[:k], (rest, where, refs), *members[k + 1 :]]
        options: list[Patterns] = []
        empty: EmptySchema | None = None
        for j, branch in enumerate(branches):
            try:
                options.append(self.patterns([*others, (branch, f"{where}/anyOf/{j}", refs)]))
            except EmptySchema as exc:
                empty = exc
        if not options:
            raise EmptySchema(f"{where}/anyOf: no branch can be satisfied ({empty})")
        return union(options, where)

    def enumerated(self, members: list[Member]) -> Patterns:
        """The values of the first `enum` or `const` that every member accepts: the
        validator judges each value under each member, so every keyword beside the
        enumeration holds, whatever it is."""
        schema, where, _ = next(m for m in members if "enum" in m[0] or "const" in m[0])
        if "const" in schema:
            values = [schema["const"]]
        else:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise UnsupportedSchema(f"{where}/enum: must be a non-empty list")
        accepts = self.algebra.judge([m[0] for m in members])
        kept = [v for v in values if accepts(v)]
        if not kept:
            raise EmptySchema(f"{where}: no value of its enum or const satisfies the schema")
        literals = list(dict.fromkeys(literal(v, self.w) for v in kept))
        if sum(len(x) + 1 for x in literals) > MAX_REGEX_CHARACTERS:
            raise UnsupportedSchema(
                f"{where}: its {len(literals):,} values make a regex longer than "
                f"{MAX_REGEX_CHARACTERS:,} characters, the most a schema may make"
            )
        return (literals[0] if len(literals) == 1 else "(?:" + "|".join(literals) + ")",)

    def typed(self, members: list[Member]) -> Patterns:
        where = members[0][1] if members else "#"
        stated = [m for m in members if "type" in m[0]]
        if stated:
            kinds = [t for t in TYPES if all(type_admits(m[0]["type"], t, m[1]) for m in stated)]
            if "number" in kinds:
                kinds.remove("integer")  # the numbers hold the integers
        else:  # every type, each under the keywords that apply to it
            kinds = [t for t in TYPES if t != "integer"]
        if not kinds:
            raise EmptySchema(f"{where}: its types have nothing in common")
        options: list[Patterns] = []
        empty: EmptySchema | None = None
        for kind in kinds:
            try:
                options.append(self.of_type(kind, members, where))
            except EmptySchema as exc:
                empty = exc
        if not options:
            assert empty is not None
            raise empty
        return union(options, where)

    def of_type(self, kind: str, members: list[Member], where: str) -> Patterns:
        if kind == "object":
            return self.object(members, where)
        if kind == "array":
            return self.array(members, where)
        if kind == "string":
            return string_patterns(members, where, self.pattern_safe)
        if kind in ("integer", "number"):
            fraction = any(m[0].get("not") == {"type": "integer"} for m in members)
            if fraction and kind == "integer":
                raise EmptySchema(f"{where}: an integer that is not an integer")
            return number_patterns(members, kind == "integer", where, fraction)
        return (BOOLEAN if kind == "boolean" else NULL,)

    def object(self, members: list[Member], where: str) -> Patterns:
        """The properties some member lists or requires, in that order, each under the
        schemas of every member that lists it, every `patternProperties` schema whose regex
        its name matches, and the `additionalProperties` schema of every member that does
        neither (`false`: left out, or, required, the object is empty); then other
        properties (`extra_members`). `minProperties`/`maxProperties` and
        `dependentRequired` choose which optional properties may be written together."""
        subschemas: dict[str, list[Member]] = {}
        required: dict[str, None] = {}
        dependent: dict[str, set[str]] = {}
        for schema, at, refs in members:
            for name, sub in schema.get("properties", {}).items():
                subschemas.setdefault(name, []).append((sub, f"{at}/properties/{name}", refs))
            required.update(dict.fromkeys(strings_in(schema.get("required"))))
            for name, needs in schema.get("dependentRequired", {}).items():
                dependent.setdefault(name, set()).update(strings_in(needs))
                subschemas.setdefault(name, [])
                for need in strings_in(needs):
                    subschemas.setdefault(need, [])
        for name in required:
            subschemas.setdefault(name, [])
        written: list[tuple[str, Patterns, bool, str]] = []
        for name, subs in subschemas.items():
            needed = name in required
            allowed = True
            for schema, at, refs in members:
                matched = [
                    (sub, f"{at}/patternProperties/{regex}", refs)
                    for regex, sub in schema.get("patternProperties", {}).items()
                    if re.search(regex, name)
                ]
                subs = [*subs, *matched]
                if name in schema.get("properties", {}) or matched:
                    continue
                extra = schema.get("additionalProperties", True)
                if extra is False:
                    allowed = False
                elif extra is not True:
                    subs = [*subs, (extra, f"{at}/additionalProperties", refs)]
            try:
                if not allowed:
                    raise EmptySchema(f"{where}: required {name!r} is not allowed")
                value = self.patterns(subs)
            except EmptySchema:
                if needed:
                    raise
                continue
            written.append((f"{literal(name)}{self.w.colon}", value, needed, name))
        # Other properties are written where the schema speaks of them (patternProperties,
        # additionalProperties as a schema) or lists none: each costs the automaton states.
        speaks = any(
            "patternProperties" in m[0] or m[0].get("additionalProperties", True) is not True
            for m in members
        )
        extra = self.extra_members(members, list(subschemas)) if speaks or not subschemas else None
        low, high = count_bounds(members, "minProperties", "maxProperties")
        if high is not None and high < low:
            raise EmptySchema(f"{where}: maxProperties {high} < minProperties {low}")
        count = max([len(v) for _, v, _, _ in written] or [1])
        out = []
        for i in range(count):
            entries = [(key + pick(value, i), needed, name) for key, value, needed, name in written]
            regex = object_pattern(entries, extra, low, high, dependent, where, self.w)
            if regex is None:
                raise EmptySchema(
                    f"{where}: no set of its properties meets minProperties/maxProperties/"
                    "dependentRequired"
                )
            out.append(regex)
        return tuple(dict.fromkeys(out))

    def extra_members(self, members: list[Member], names: list[str]) -> str | None:
        """One property none of `names` (the ones listed), written after them: its name
        matching a `patternProperties` regex (where no listed name does) with the value under
        that schema, each other such schema whose regex the name may also match and each
        other member's `additionalProperties`; or a name matching none (where no member
        forbids others) with the value under every such schema. None: there are none."""
        keyed = [
            (regex, sub, f"{at}/patternProperties/{regex}", refs, k)
            for k, (schema, at, refs) in enumerate(members)
            for regex, sub in schema.get("patternProperties", {}).items()
        ]
        keys = {}
        for regex, *_ in keyed:
            keys[regex] = key_pattern(regex, self.pattern_safe) if self.pattern_safe else None
        options: list[str] = []
        for regex, sub, at, refs, owner in keyed:
            key = keys[regex]
            if key is None or any(re.search(regex, n) for n in names):
                continue
            value = [(sub, at, refs)] + [
                (other[1], other[2], other[3])
                for other in keyed
                if other[0] != regex
                and (keys[other[0]] is None or patterns_meet(key, keys[other[0]]))
            ]
            closed = False
            for k, (schema, mat, mrefs) in enumerate(members):
                if k == owner:
                    continue
                extra = schema.get("additionalProperties", True)
                closed |= extra is False
                if extra not in (True, False):
                    value.append((extra, f"{mat}/additionalProperties", mrefs))
            if not closed:
                options += self.member_option(f'"{key}"', value)
        extras = [m[0].get("additionalProperties", True) for m in members]
        if False not in extras:
            value = [(other[1], other[2], other[3]) for other in keyed] + [
                (extra, f"{m[1]}/additionalProperties", m[2])
                for extra, m in zip(extras, members, strict=True)
                if extra is not True
            ]
            options += self.member_option(other_string(names), value)
        options = list(dict.fromkeys(options))
        if not options:
            return None
        return options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"

    def member_option(self, key: str, value: list[Member]) -> list[str]:
        """`key: value` as one regex, or none where the value is empty or several patterns;
        a value under no schema is a scalar (cheaper than any value, for the automaton)."""
        if not [m for m in value if m[0] is not True and m[0] != {}]:
            return [f"{key}{self.w.colon}{SCALAR}"]
        try:
            patterns = self.patterns(value)
        except EmptySchema:
            return []
        return [f"{key}{self.w.colon}{patterns[0]}"] if len(patterns) == 1 else []

    def array(self, members: list[Member], where: str) -> Patterns:
        """Items by position: each under every member's `prefixItems` schema there, or its
        `items` past its `prefixItems`; `minItems`/`maxItems` the tightest; `contains`
        (with `minContains`) a pattern of its own, intersected."""
        low, high = count_bounds(members, "minItems", "maxItems")
        if high is not None and high < low:
            raise EmptySchema(f"{where}: maxItems {high} < minItems {low}")
        for schema, at, _ in members:
            if schema.get("uniqueItems") is True and (high is None or high > 1):
                raise UnsupportedSchema(
                    f"{at}/uniqueItems: items all different is not a regular language "
                    "(cdd writes it only with maxItems 1)"
                )
        fixed = max([len(m[0].get("prefixItems", [])) for m in members], default=0)

        def position(j: int) -> list[Member]:
            out = []
            for schema, at, refs in members:
                prefix = schema.get("prefixItems", [])
                if j < len(prefix):
                    out.append((prefix[j], f"{at}/prefixItems/{j}", refs))
                elif "items" in schema:
                    out.append((schema["items"], f"{at}/items", refs))
            return out

        slots: list[Patterns] = []
        for j in range(fixed if high is None else min(fixed, high)):
            try:
                slots.append(self.patterns(position(j)))
            except EmptySchema:
                if low > j:
                    raise
                high = j
                break
        item: Patterns | None = None
        if high is None or high > len(slots):
            try:
                item = self.patterns(position(fixed))
            except EmptySchema:
                if low > len(slots):
                    raise
                high = len(slots)
        count = max([len(p) for p in slots] + ([len(item)] if item else []), default=1)
        out = [
            array_pattern(
                [pick(slot, i) for slot in slots],
                None if item is None else pick(item, i),
                low,
                high,
                self.w,
            )
            for i in range(count)
        ]
        for schema, at, refs in members:
            if "contains" not in schema:
                continue
            least, most = count_bounds([(schema, at, refs)], "minContains", "maxContains")
            least = least if "minContains" in schema else 1
            if most is not None and (high is None or most < high):
                raise UnsupportedSchema(
                    f"{at}/maxContains: at most {most} items satisfying contains (cdd "
                    "cannot write the items that do not)"
                )
            if least == 0:
                continue
            contained = self.patterns([(schema["contains"], f"{at}/contains", refs)])
            if len(contained) > 1:
                raise UnsupportedSchema(f"{at}/contains: its schema takes several patterns")
            # The other items: as the array's items where they are all one pattern (fewer
            # automaton states than any value; the array's own pattern holds them anyway).
            any_item = any_value(self.w)
            other = item[0] if item is not None and len(item) == 1 and not slots else any_item
            out.append(containing_pattern(contained[0], least, other, self.w))
        return tuple(dict.fromkeys(out))
