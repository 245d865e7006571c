"""Numbers as regexes: the range every member's bounds leave (`minimum`, `maximum`, their
exclusive forms; whole-number bounds for numbers, any bounds for integers), written digit by
digit without exponent; `multipleOf` an integer, written from the automaton of the
remainder; `not: {type: integer}` a non-zero fraction."""

from __future__ import annotations

import math
from typing import Any

from cdd_cli.constraints.json_schema.grammar import INTEGER, NUMBER
from cdd_cli.constraints.json_schema.keywords import (
    EmptySchema,
    Member,
    Patterns,
    UnsupportedSchema,
)

# A fraction after the whole part: any (or none), a non-zero one (just above an excluded
# bound), only zeros (at an included bound).
ANY_FRACTION, NONZERO_FRACTION, ZERO_FRACTION = (
    r"(?:\.[0-9]+)?",
    r"\.[0-9]*[1-9][0-9]*",
    r"(?:\.0+)?",
)


# The longest regex one `multipleOf` may take (divisibility by 7 is already long).
MAX_MULTIPLE_REGEX = 20_000
# The largest step (without its trailing zeros) whose remainders are tabled: the table has a
# row per remainder (10,000 take 0.2 s; 1e30 would take terabytes).
MAX_MULTIPLE_STEP = 10_000
# The most digits a bound may have (each is a character of the regex; Python will not even
# write an integer of 4,300 digits as text).
MAX_BOUND_DIGITS = 1_000


def number_patterns(members: list[Member], integer: bool, where: str, fraction: bool) -> Patterns:
    """Numbers (or integers) within every member's bounds, multiples of every member's
    `multipleOf` (an integer: the number is then an integer), with a non-zero fraction where
    a member says `not: {type: integer}`; several patterns of the same number, intersected."""
    step = 0
    for schema, at, _ in members:
        if "multipleOf" not in schema:
            continue
        value = schema["multipleOf"]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not value > 0  # NaN is no positive number either
        ):
            raise UnsupportedSchema(f"{at}/multipleOf: must be a positive number")
        if isinstance(value, float) and not value.is_integer():  # a fraction, or infinite
            raise UnsupportedSchema(
                f"{at}/multipleOf: {value} is not an integer (cdd writes multiples of integers)"
            )
        if value >= 10**MAX_BOUND_DIGITS:
            raise UnsupportedSchema(
                f"{at}/multipleOf: more than {MAX_BOUND_DIGITS:,} digits, the most it may have"
            )
        step = math.lcm(step or 1, int(value))
    parts = [_number(members, integer, where)]
    if step and fraction:
        raise EmptySchema(f"{where}: a multiple of {step} with a fraction")
    if step:
        parts.append(INTEGER if step == 1 else _multiples(step, where))
    if fraction:
        parts.append(r"-?(?:0|[1-9][0-9]*)\.[0-9]*[1-9][0-9]*")
    return tuple(dict.fromkeys(parts))


def _multiples(step: int, where: str) -> str:
    """Integers divisible by `step` (more than 1). A step past the table's limit is written
    as the multiples of the step without its trailing zeros, followed by them."""
    if step <= MAX_MULTIPLE_STEP:
        return f"-?(?:0|{_positive_multiples(step, where)})"
    zeros = len(str(step)) - len(str(step).rstrip("0"))
    base = step // 10**zeros
    if base > MAX_MULTIPLE_STEP:
        digits = str(step)
        if len(digits) > 24:
            digits = f"{digits[:4]}...{digits[-4:]} ({len(digits)} digits)"
        raise UnsupportedSchema(
            f"{where}: multipleOf {digits} is, without its trailing zeros, more than "
            f"{MAX_MULTIPLE_STEP:,}, the largest step cdd writes multiples of"
        )
    leading = "[1-9][0-9]*" if base == 1 else _positive_multiples(base, where)
    return f"-?(?:0|(?:{leading})0{{{zeros}}})"


def _positive_multiples(step: int, where: str) -> str:
    """Positive integers divisible by `step` (more than 1): the automaton of the remainder
    as the digits are read (r -> 10r + d mod step), its equivalent states merged, written as
    a regex by eliminating its states."""
    # Equivalent remainders (the same future: 10 and 0 for step 20 differ, 1 and 3 for
    # step 2 do not), by refining the split into accepting and not.
    block = {r: int(r == 0) for r in range(step)}
    while True:
        signature = {r: (block[r], *(block[(10 * r + d) % step] for d in range(10))) for r in block}
        names = {sig: k for k, sig in enumerate(dict.fromkeys(signature.values()))}
        refined = {r: names[signature[r]] for r in block}
        if len(set(refined.values())) == len(set(block.values())):
            break
        block = refined
    classes = sorted(set(block.values()))
    digits: dict[Any, dict[Any, str]] = {"i": {}, **{c: {} for c in classes}}
    smallest: dict[int, int] = {}  # each class's least remainder (one pass, not one a class)
    for r, c in block.items():
        smallest.setdefault(c, r)
    for c in classes:
        r = smallest[c]
        for d in range(10):
            q = block[(10 * r + d) % step]
            digits[c][q] = digits[c].get(q, "") + str(d)
    for d in range(1, 10):
        q = block[d % step]
        digits["i"][q] = digits["i"].get(q, "") + str(d)
    labels: dict[Any, dict[Any, str]] = {
        p: {q: f"[{ds}]" if len(ds) > 1 else ds for q, ds in out.items()}
        for p, out in digits.items()
    }
    labels[block[0]]["f"] = ""
    for k in classes:
        loop = labels[k].pop(k, None)
        star = f"(?:{loop})*" if loop else ""
        for p in list(labels):
            if p == k or k not in labels[p]:
                continue
            into = labels[p].pop(k)
            for q, out in labels[k].items():
                path = f"{into}{star}{out}"
                labels[p][q] = f"(?:{labels[p][q]}|{path})" if q in labels[p] else path
        del labels[k]
        if sum(len(v) for out in labels.values() for v in out.values()) > MAX_MULTIPLE_REGEX:
            raise UnsupportedSchema(
                f"{where}: multiples of {step} take a regex longer than "
                f"{MAX_MULTIPLE_REGEX:,} characters"
            )
    return labels["i"]["f"]


def _number(members: list[Member], integer: bool, where: str) -> str:
    """Numbers (or integers) within the tightest of every member's bounds."""
    bounds: dict[str, list] = {}
    for schema, at, _ in members:
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if key not in schema:
                continue
            value = schema[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UnsupportedSchema(f"{at}/{key}: must be a number (draft 6 and later)")
            if isinstance(value, float) and not math.isfinite(value):
                # Python's json reads Infinity and NaN (and 1e400 as infinity)
                raise UnsupportedSchema(f"{at}/{key}: must be a finite number, got {value}")
            if abs(value) >= 10**MAX_BOUND_DIGITS:
                raise UnsupportedSchema(
                    f"{at}/{key}: more than {MAX_BOUND_DIGITS:,} digits, the most a bound may have"
                )
            bounds.setdefault(key, []).append(value)
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
            raise EmptySchema(f"{where}: no integer lies between the bounds")
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
        raise EmptySchema(f"{where}: no number lies between the bounds")
    return _signed(low, low_in, high, high_in, integer=False)


def _bound(bounds: dict, inclusive: str, exclusive: str, tighter) -> tuple[float | None, bool]:
    options = [(v, True) for v in bounds.get(inclusive, [])]
    options += [(v, False) for v in bounds.get(exclusive, [])]
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
