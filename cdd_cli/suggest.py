"""The "did you mean ...?" of every refusal of a name: constraint types, spec keys, flag
choices, model names. One place, so that every message suggests alike."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: object, choices: Iterable[str]) -> str | None:
    """The choice `word` most likely misspells (case aside), or None when none is close."""
    by_lower = {str(c).lower(): str(c) for c in choices}
    found = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[found[0]] if found else None


def did_you_mean(word: object, choices: Iterable[str], prefix: str = "") -> str:
    """What follows the refusal of `word`: "; did you mean 'x'?", or "" when none is close.
    `prefix` is shown, not compared (`sampling.` before a key of that section): a prefix
    both share would make any two names look alike."""
    found = closest(word, choices)
    return f"; did you mean '{prefix}{found}'?" if found is not None and found != word else ""
