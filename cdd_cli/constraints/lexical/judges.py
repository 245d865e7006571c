"""Exact judges of the lexical constraints: a word at a position, required and forbidden
words, word and sentence counts, and letter counting.

The judges *certify* outputs, so they are exact string checks: pure Python, deterministic and
cheap enough for a projection's search to call on every candidate. Words and sentences are read
under a scheme's rules (`rules.py`: plain, the CLI's, or COLLIE's).

Positions are 1-based; negative positions count from the end (-1 is the last word), which is
COLLIE's 0-based position plus one for p >= 0 and the same number for p < 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from cdd_cli.constraints.lexical.rules import (
    Scheme,
    check_scheme,
    split_sentences,
    split_words,
    word_key,
)


@dataclass(frozen=True)
class Judgement:
    """One judge's verdict on one text.

    `found` is what the judge observed (the word at the position, the count, the missing or
    forbidden words), so a violation report can say *why* without re-running the judge; `detail`
    says it in words. Truthy when satisfied.
    """

    satisfied: bool
    detail: str
    found: Any = None

    def __bool__(self) -> bool:
        return self.satisfied


# --------------------------------------------------------------------------------------------
# Word judges


def _target_words(words: Iterable[str], what: str) -> list[str]:
    # A bare string would be iterated letter by letter: a silent, always-wrong check.
    if isinstance(words, str):
        raise TypeError(f"{what} takes a list of words, not the string {words!r}")
    targets = list(words)
    if not targets:
        raise ValueError(f"{what} needs at least one word")
    for word in targets:
        if not isinstance(word, str):
            raise TypeError(f"{what}: words must be strings, got {word!r}")
    return targets


def word_at(text: str, position: int, word: str, *, scheme: Scheme = "plain") -> Judgement:
    """Whether the word at `position` (1-based; negative from the end) is `word`.

    `found` is the word there, or None when the text is too short.
    """
    check_scheme(scheme)
    if isinstance(position, bool) or not isinstance(position, int) or position == 0:
        raise ValueError(f"word_at: position must be a non-zero integer, got {position!r}")
    words = split_words(text, scheme)
    index = position - 1 if position > 0 else len(words) + position
    if not 0 <= index < len(words):
        return Judgement(
            False, f"word {position} should be {word!r}, but the text has {len(words)} words"
        )
    found = words[index]
    key = partial(word_key, scheme=scheme)
    if key(found) == key(word):
        return Judgement(True, f"word {position} is {word!r}", found)
    return Judgement(False, f"word {position} is {found!r}, not {word!r}", found)


def include(text: str, words: Iterable[str], *, scheme: Scheme = "plain") -> Judgement:
    """Whether every one of `words` occurs in `text` as a word. `found`: the missing ones."""
    check_scheme(scheme)
    targets = _target_words(words, "include")
    key = partial(word_key, scheme=scheme)
    present = {key(word) for word in split_words(text, scheme)}
    missing = [word for word in targets if key(word) not in present]
    if missing:
        return Judgement(False, f"missing {len(missing)} word(s): {missing!r}", missing)
    return Judgement(True, f"all {len(targets)} word(s) present", [])


def exclude(text: str, words: Iterable[str], *, scheme: Scheme = "plain") -> Judgement:
    """Whether none of `words` occurs in `text` as a word. `found`: those that do."""
    check_scheme(scheme)
    targets = _target_words(words, "exclude")
    key = partial(word_key, scheme=scheme)
    present = {key(word) for word in split_words(text, scheme)}
    forbidden = [word for word in targets if key(word) in present]
    if forbidden:
        return Judgement(False, f"contains forbidden word(s): {forbidden!r}", forbidden)
    return Judgement(True, f"none of {len(targets)} forbidden word(s) present", [])


def _bounds_judgement(
    what: str, n: int, min: int | None, max: int | None, equals: int | None
) -> Judgement:
    if min is None and max is None and equals is None:
        raise ValueError(f"{what}_count needs at least one of min, max, equals")
    wanted = ", ".join(
        f"{op} {bound}"
        for op, bound in (("==", equals), (">=", min), ("<=", max))
        if bound is not None
    )
    satisfied = (
        (equals is None or n == equals) and (min is None or n >= min) and (max is None or n <= max)
    )
    return Judgement(satisfied, f"{n} {what}{'' if n == 1 else 's'} (wanted {wanted})", n)


def word_count(
    text: str,
    min: int | None = None,
    max: int | None = None,
    equals: int | None = None,
    *,
    scheme: Scheme = "plain",
) -> Judgement:
    """Whether the number of words is within the given bounds. `found`: the count."""
    check_scheme(scheme)
    return _bounds_judgement("word", len(split_words(text, scheme)), min, max, equals)


def sentence_count(
    text: str,
    min: int | None = None,
    max: int | None = None,
    equals: int | None = None,
    *,
    scheme: Scheme = "plain",
) -> Judgement:
    """Whether the number of sentences is within the given bounds. `found`: the count."""
    check_scheme(scheme)
    return _bounds_judgement("sentence", len(split_sentences(text, scheme)), min, max, equals)


# --------------------------------------------------------------------------------------------
# Letter counting

# A number is a run of digits (with an optional decimal part) that touches no letter, so "mp3"
# and "3rd" hold none; "1,000" reads as 1 (letter counts are small). Number words ("three") are
# not read: the contract is digits, the projection writes the answer as a number token, and "one
# of the three r's: 3" must not be judged by its first number word.
_NUMBER = re.compile(r"(?<![^\W_])(\d+(?:\.\d+)?)(?![^\W_])")


def first_number(text: str) -> int | float | None:
    """The first number written in digits in `text` (int, or float with a fraction), or None."""
    match = _NUMBER.search(text)
    if match is None:
        return None
    value = float(match.group(1))
    return int(value) if value.is_integer() else value


def count(text: str, letter: str, word: str) -> Judgement:
    """Whether the first number in `text` equals how often `letter` occurs in `word`.

    Letters are counted case-insensitively ("R" in "Strawberry" counts as "r"). `found` is the
    number read from the text (None when there is none).
    """
    if not isinstance(letter, str) or len(letter) != 1:
        raise ValueError(f"count: letter must be a single character, got {letter!r}")
    if not isinstance(word, str) or not word:
        raise ValueError(f"count: word must be a non-empty string, got {word!r}")
    expected = word.casefold().count(letter.casefold())
    number = first_number(text)
    wanted = f"{letter!r} occurs {expected} time(s) in {word!r}"
    if number is None:
        return Judgement(False, f"no number in the text; {wanted}", None)
    if number == expected:
        return Judgement(True, f"first number is {number}; {wanted}", number)
    return Judgement(False, f"first number is {number}, but {wanted}", number)


# Accepted prompt forms (case-insensitive; quotes of any style around the letter or the word):
#   "How many r's are in strawberry?"            "How many 'r's are there in the word 'berry'?"
#   "How many times does the letter e appear in 'excellence'?"
#   "How many times does 'e' occur in excellence"  "How many letters r in strawberry?"
#   "Count the number of r's in strawberry."       "Count the r's in strawberry"
# The letter is found by a "letter(s) X" phrase, else a quoted single letter, else a single
# letter standing alone or written X's, else one written Xs; the word is the first word after
# the first " in " or " of " that follows the letter, skipping "the word" / "the string".
_QUOTES = "'\"\u2018\u2019\u201c\u201d`"
_PROMPT_START = re.compile(r"\b(?:how\s+many|how\s+often|count|number\s+of)\b", re.IGNORECASE)
_LETTER_FORMS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        rf"\bletters?\s+[{_QUOTES}]?([^\W\d_])[{_QUOTES}]?(?![^\W\d_])",  # letter r
        rf"[{_QUOTES}]([^\W\d_])[{_QUOTES}]",  # 'r'
        r"(?<![\w'\u2019])([^\W\d_])(?:['\u2019]s)?(?![\w'\u2019])",  # r's, r
        r"(?<![\w'\u2019])([^\W\d_])s(?![\w'\u2019])",  # rs
    )
)
_WORD_AFTER = re.compile(
    rf"\b(?:in|of)\s+(?:the\s+)?(?:(?:word|string|name)\s+)?[{_QUOTES}]?"
    r"([^\W\d_]+(?:[-'][^\W\d_]+)*)",
    re.IGNORECASE,
)


def parse_count_prompt(prompt: str) -> tuple[str, str] | None:
    """(letter, word) from a letter-counting question, or None if it is not one.

    The letter comes back lower-cased (counting ignores case); the word as written. See the
    accepted forms above.
    """
    start = _PROMPT_START.search(prompt)
    if start is None:
        return None
    rest = prompt[start.end() :]
    for form in _LETTER_FORMS:
        letter = form.search(rest)
        if letter is None:
            continue
        word = _WORD_AFTER.search(rest, letter.end())
        if word is not None:
            return letter.group(1).lower(), word.group(1)
    return None
