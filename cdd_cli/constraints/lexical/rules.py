"""The word rules of the lexical constraints: how a text splits into words and sentences, and
what a word is compared by. The judges (`judges.py`) and the word layout (`grammar.py`,
`layout.py`) read text through these same rules, so what the layout places is what the judge
finds.

Two word conventions ("schemes") exist, because COLLIE's own checker does not follow the
convention the CLI promises, and COLLIE's records are only self-consistent under COLLIE's:

``"plain"`` (the default; the CLI contract): the text is split on whitespace, surrounding
punctuation is stripped from every piece, and words compare case-sensitively. In detail:

- Punctuation is every Unicode punctuation or symbol character (categories P* and S*): quotes
  of any style, dashes, brackets, ``$``, ``%``, ``*``. It is stripped from both ends of a piece;
  what is inside stays, so ``to-do``, ``don't``, ``Lionel's``, ``8-2``, ``U.S`` are one word
  each, and ``don't`` does not contain the word ``do``.
- A piece that is only punctuation (``-``, ``--``, a dash, ``...``) is no word at all.
- Marks that only ever stand *between* words separate them even without a space: a run of two
  or more hyphens and an em dash (typewriter and typeset forms of a spaced dash: ``signs--all``
  is ``signs``, ``all``), and a comma or semicolon unless digits stand on both sides
  (``yuk,yuk`` is two words, ``51,000`` one). A single hyphen and an en dash join.
- No case folding and no apostrophe normalisation: a straight and a curly apostrophe (U+2019)
  make different words, so the judge agrees with the exact tokens the projection placed.

``"collie"``: COLLIE's own convention, reproduced so that COLLIE's records can be scored as the
benchmark scores them. COLLIE splits words with NLTK's Treebank-style ``word_tokenize``, drops a
token only when it is a single ASCII punctuation character, strips periods from both ends of
every word, and compares words lower-cased with ASCII punctuation stripped. Hence, unlike plain:
clitics are words (``didn't`` is ``did`` + ``n't``; with a curly apostrophe, ``Disney``, the
apostrophe and ``s`` are three words), quote marks are words (a straight double quote becomes
two backticks or two apostrophes; curly quotes stay), ``--`` and non-ASCII dashes standing alone
are words, ``...`` is the empty word, and case does not matter. The tokenizer below is written
from those rules as COLLIE's data shows them and is tested on COLLIE's records; it is not NLTK.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Callable
from typing import Literal

Scheme = Literal["plain", "collie"]
SCHEMES: tuple[str, ...] = ("plain", "collie")


# --------------------------------------------------------------------------------------------
# Words: plain scheme


def _is_punct(ch: str) -> bool:
    # P*: punctuation (quotes, dashes, brackets); S*: symbols ($, %, +). Either is noise around
    # a word, never part of what a reader means by "the word".
    return unicodedata.category(ch)[0] in "PS"


def _strip_punct(piece: str) -> str:
    start, end = 0, len(piece)
    while start < end and _is_punct(piece[start]):
        start += 1
    while end > start and _is_punct(piece[end - 1]):
        end -= 1
    return piece[start:end]


# Whitespace, a run of 2+ hyphens, an em dash, or a comma/semicolon not between two digits.
_PLAIN_SEPARATOR = re.compile(r"\s+|-{2,}|\u2014|(?<!\d)[,;]|[,;](?!\d)")


def _plain_words(text: str) -> list[str]:
    pieces = (_strip_punct(piece) for piece in _PLAIN_SEPARATOR.split(text))
    return [piece for piece in pieces if piece]


# --------------------------------------------------------------------------------------------
# Words: COLLIE scheme
#
# Rewrite rules in the order Treebank-style tokenisation applies them; each pads a token with
# spaces, and the result is split on whitespace. Kept: what changes COLLIE's words or counts.
_COLLIE_REWRITES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        # Opening quotes: a straight double quote at the start or after a space or bracket.
        (r'^(\s*)"', r"\1 `` "),
        (r"(``)", r" \1 "),
        (r'([ (\[{<])("|\'\')', r"\1 `` "),
        ("([\u00ab\u201c\u2018\u201e]|(?<!`)`(?!`))", r" \1 "),
        # Commas and colons split off unless a digit follows (51,000 and 8:15 stay whole).
        (r"([:,])([^\d])", r" \1 \2"),
        (r"([:,])$", r" \1 "),
        (r"\.\.\.", r" ... "),
        (r"[;@#$%&*]", r" \g<0> "),
        # A period ending a word is split off. NLTK does it once per sentence, but COLLIE strips
        # periods from every word anyway, so doing it at every word end gives the same words and
        # lets the clitic rules below see the "n't" in "didn't.".
        ("([^.])(\\.)([\\])}>\"'\u201d\u2019\u00bb]*)(?=\\s)", r"\1 \2\3 "),
        (r"[?!]", r" \g<0> "),
        (r"([^'])' ", r"\1 ' "),
        (r"[\]\[(){}<>]", r" \g<0> "),
        (r"--", r" -- "),
        # Closing quotes; curly ones (and the curly apostrophe) always stand alone.
        (r'"', " '' "),
        (r"(\S)('')", r"\1 \2 "),
        ("([\u00bb\u201d\u2019])", r" \1 "),
        # Clitics after a straight apostrophe.
        (r"([^' ])('[sSmMdD]|') ", r"\1 \2 "),
        (r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 "),
        # Fused words count as two.
        (r"(?i)\b(can)(not)\b", r" \1 \2 "),
        (r"(?i)\b(d)('ye)\b", r" \1 \2 "),
        (r"(?i)\b(gim)(me)\b", r" \1 \2 "),
        (r"(?i)\b(gon)(na)\b", r" \1 \2 "),
        (r"(?i)\b(got)(ta)\b", r" \1 \2 "),
        (r"(?i)\b(lem)(me)\b", r" \1 \2 "),
        (r"(?i)\b(more)('n)\b", r" \1 \2 "),
        (r"(?i)\b(wan)(na)(?=\s)", r" \1 \2 "),
        (r"(?i) ('t)(is)\b", r" \1 \2 "),
        (r"(?i) ('t)(was)\b", r" \1 \2 "),
    )
)


def _collie_words(text: str) -> list[str]:
    padded = f" {text} "
    for pattern, replacement in _COLLIE_REWRITES:
        padded = pattern.sub(replacement, padded)
    # COLLIE drops a token only if it occurs in string.punctuation (one ASCII mark, in effect).
    return [token.strip(".") for token in padded.split() if token not in string.punctuation]


def _collie_key(word: str) -> str:
    # COLLIE compares words lower-cased and stripped of ASCII punctuation, unless none is left.
    stripped = word.lower().strip(string.punctuation + " ")
    return stripped if stripped else word


def _plain_key(word: str) -> str:
    return word


_WORDS: dict[str, Callable[[str], list[str]]] = {"plain": _plain_words, "collie": _collie_words}
_KEYS: dict[str, Callable[[str], str]] = {"plain": _plain_key, "collie": _collie_key}


def check_scheme(scheme: str) -> None:
    """Refuse a scheme that is neither plain nor collie (ValueError)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown word scheme {scheme!r}; expected one of: {', '.join(SCHEMES)}")


def split_words(text: str, scheme: Scheme = "plain") -> list[str]:
    """The words of `text` under `scheme` (the module docstring defines both)."""
    check_scheme(scheme)
    return _WORDS[scheme](text)


def word_key(word: str, scheme: Scheme = "plain") -> str:
    """What `word` is compared by under `scheme`: itself (plain); lower-cased with surrounding
    ASCII punctuation stripped (COLLIE)."""
    check_scheme(scheme)
    return _KEYS[scheme](word)


# --------------------------------------------------------------------------------------------
# Sentences
#
# No sentence splitter ships offline (NLTK's punkt model is a separate download), so both
# schemes use small rule sets; they need to count sentences (COLLIE c09), not to parse.

_MONTHS = frozenset(
    {"jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"}
)
# Plain: a period after one of these, or after a single letter (an initial), ends nothing.
_PLAIN_ABBREVIATIONS = _MONTHS | {
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "e.g", "i.e", "u.s", "a.m", "p.m",
}  # fmt: skip
# Plain candidate: ., ? or ! (repeats allowed) with any closing quotes or brackets, then
# whitespace or the end of the text.
_PLAIN_END = re.compile("[.?!]+[\"')\\]\u201d\u2019\u00bb]*(?=\\s|$)")
_OPENERS = "\"'([{\u201c\u2018\u00ab"

# COLLIE: a model of what punkt did to COLLIE's records, fitted on the c09 records (all of them
# agree); on c10-c12, which the fit did not use, it agrees with 563 of 570 sentence counts.
# Abbreviations punkt knew, by the data:
_COLLIE_ABBREVIATIONS = _MONTHS | {
    "mr", "mrs", "ms", "dr", "st", "col", "lt", "ok", "u.s", "u.n", "l.a", "p.m",
}  # fmt: skip
# After an abbreviation or an initial, punkt still breaks when the next word is one it has
# mostly seen in lower case (its "orthographic" evidence); these words stand in for that.
_COLLIE_STARTERS = frozenset(
    {
        "The", "A", "An", "And", "But", "In", "It", "He", "She", "They", "We", "This", "That",
        "These", "Those", "There", "His", "Her", "Its", "Their", "Our", "My", "On", "At", "As",
        "For", "If", "When", "After", "Then", "So", "Senator",
    }
)  # fmt: skip
# punkt's candidates: ., ? or ! followed by whitespace, the end, or one of its "non-word"
# marks. Curly quotes are not among those marks, so a period before one ends no sentence.
_COLLIE_CANDIDATE = re.compile(r"""[.?!](?=[?!)";}\]*:@'({\[]|\s|$)""")
# Closing marks right after a break belong to the sentence they close (punkt moves them).
_COLLIE_CLOSERS = re.compile(r"""["')\]}]+(?=\s|--|$)""")


def _word_before(text: str, index: int) -> str:
    """The whitespace-delimited piece that ends at `index` (inclusive)."""
    start = index
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start : index + 1]


def _plain_sentences(text: str) -> list[str]:
    sentences: list[str] = []
    start = 0
    for match in _PLAIN_END.finditer(text):
        rest = text[match.end() :].lstrip().lstrip(_OPENERS)
        if rest[:1].islower():
            continue  # '"Stop!" she said.' is one sentence
        if match.group().rstrip("\"')]\u201d\u2019\u00bb") == ".":
            core = _word_before(text, match.start()).rstrip(".").lstrip(_OPENERS)
            if core.lower() in _PLAIN_ABBREVIATIONS or (len(core) == 1 and core.isalpha()):
                continue
        if text[start : match.end()].strip():
            sentences.append(text[start : match.end()].strip())
        start = match.end()
    if text[start:].strip():
        sentences.append(text[start:].strip())
    return sentences


def _collie_breaks_at(text: str, index: int) -> bool:
    """Whether COLLIE's punkt ended a sentence at the ., ? or ! at `index`."""
    if text[index] in "?!":
        return True
    word = _word_before(text, index)
    if word.endswith(".."):
        return False  # an ellipsis; a lone "." is a sentence of its own, as in punkt
    core = word.rstrip(".").lstrip(_OPENERS)
    following = text[index + 1 :].lstrip("\"')]}").lstrip()
    next_word = re.split(r"[\s.,;:!?]", following, maxsplit=1)[0]
    abbreviation = core.lower() in _COLLIE_ABBREVIATIONS or (len(core) == 1 and core.isalpha())
    return not abbreviation or next_word in _COLLIE_STARTERS


def _collie_sentences(text: str) -> list[str]:
    sentences: list[str] = []
    start = 0
    for match in _COLLIE_CANDIDATE.finditer(text):
        if match.start() < start or not _collie_breaks_at(text, match.start()):
            continue
        if text[match.end() : match.end() + 1] in ("?", "!"):
            continue  # "What?!", "Really??": punkt ends the sentence after the last mark
        closers = _COLLIE_CLOSERS.match(text, match.end())
        end = closers.end() if closers else match.end()
        if text[start:end].strip():
            sentences.append(text[start:end].strip())
        start = end
    if text[start:].strip():
        sentences.append(text[start:].strip())
    return sentences


# Abbreviations punkt-style splitters commonly know beyond those the schemes' rules name
# (titles, companies, places, references). Not judged by: a layout ends no sentence after
# them either, so that its sentences are sentences for any such splitter.
_OTHER_ABBREVIATIONS = frozenset(
    {
        "inc", "corp", "co", "ltd", "bros", "gen", "sen", "rep", "reps", "gov", "capt", "cmdr",
        "sgt", "maj", "adm", "rev", "hon", "pres", "messrs", "esq", "ft", "mt", "ave", "dept",
        "vol", "fig", "etc", "calif", "fla", "mich", "minn", "tenn", "tex", "conn", "ariz",
        "colo", "okla", "ore", "kan", "ky", "nev",
    }
)  # fmt: skip


_NO_STOP_AFTER = _PLAIN_ABBREVIATIONS | _COLLIE_ABBREVIATIONS | _OTHER_ABBREVIATIONS


def ends_no_sentence(word: str) -> bool:
    """Whether a period after `word` (letters only) may end no sentence for some splitter: an
    abbreviation either scheme knows or punkt-style splitters commonly know, or a single letter
    (an initial). A layout that ends sentences exactly ends none after such a word."""
    return len(word) == 1 or word.lower() in _NO_STOP_AFTER


_SENTENCES: dict[str, Callable[[str], list[str]]] = {
    "plain": _plain_sentences,
    "collie": _collie_sentences,
}


def split_sentences(text: str, scheme: Scheme = "plain") -> list[str]:
    """The sentences of `text`.

    Plain: a sentence ends at ``.``, ``?`` or ``!`` (with any closing quotes or brackets) when
    the text ends or whitespace follows and the next word does not start with a lower-case
    letter; a period after a common abbreviation (Mr, Dr, St, U.S, e.g, a.m, month names) or
    after a single letter ends none.

    COLLIE: punkt's behaviour on COLLIE's records, quirks included: ``?`` and ``!`` always end a
    sentence (``"Oh!" he said.`` is two), a period before a curly closing quote never does, and a
    lone ``.`` is a sentence of its own.
    """
    check_scheme(scheme)
    return _SENTENCES[scheme](text)
