"""The lexical and counting constraint types on the continuation: `word_at`, `include`,
`exclude`, `word_count`, `sentence_count`, `count`; their spec checks and descriptors.

Judges are exact string checks (`judges.py`) under a spec's word rules (`rules.py`: `words:
plain`, the default: split on whitespace, surrounding punctuation stripped, case-sensitive,
DESIGN.md §5; or `words: collie`, the COLLIE benchmark's own); each value is 1.0 when
satisfied, 0.0 when not. None of them is differentiable: each says what it needs of the
continuation (a word at a position, words somewhere, forbidden words, a number of words or
sentences), and `layout.py` turns all of them together into one closed-form projection of
the probability tensor, under the same word rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import cdd_cli.constraints.lexical.judges as judges
from cdd_cli.constraints.base import ClosedFormBuilder, ExactConstraint
from cdd_cli.constraints.descriptor import ConstraintSpec, Descriptor, Key
from cdd_cli.constraints.lexical.judges import Judgement
from cdd_cli.constraints.lexical.layout import WordLayout
from cdd_cli.constraints.lexical.rules import Scheme, split_words, word_key
from cdd_cli.errors import InputError
from cdd_cli.models.registry import LoadedModel


@dataclass(frozen=True)
class LexicalConstraint(ExactConstraint):
    tau: float = 1.0
    upper_bound: bool = False  # value 1.0 (satisfied) >= tau
    judge_name: str = "plain-words"
    scheme: Scheme = "plain"  # the word rules: "plain" or "collie"

    def check(self, text: str) -> Judgement:
        raise NotImplementedError

    def judge(self, texts: list[str]) -> list[float | None]:
        return [1.0 if self.check(t) else 0.0 for t in texts]

    def explain(self, text: str) -> str | None:
        return self.check(text).detail

    # What the layout must arrange; positions are 1-based, negative from the end.
    def pinned(self) -> dict[int, str]:
        return {}

    def included(self) -> tuple[str, ...]:
        return ()

    def forbidden(self) -> tuple[str, ...]:
        return ()

    def word_bounds(self) -> tuple[int | None, int | None]:
        return None, None

    def sentence_bounds(self) -> tuple[int | None, int | None]:
        return None, None

    def closed_form(self) -> ClosedFormBuilder:
        return WordLayout


@dataclass(frozen=True)
class WordAt(LexicalConstraint):
    position: int = 1
    word: str = ""
    name: str = "word_at"

    def check(self, text: str) -> Judgement:
        return judges.word_at(text, self.position, self.word, scheme=self.scheme)

    def pinned(self) -> dict[int, str]:
        return {self.position: self.word}

    def label(self) -> str:
        return f"word {self.position} = {self.word!r}"


@dataclass(frozen=True)
class Include(LexicalConstraint):
    words: tuple[str, ...] = ()
    name: str = "include"

    def check(self, text: str) -> Judgement:
        return judges.include(text, self.words, scheme=self.scheme)

    def included(self) -> tuple[str, ...]:
        return self.words

    def label(self) -> str:
        return f"includes {', '.join(self.words)}"


@dataclass(frozen=True)
class Exclude(LexicalConstraint):
    words: tuple[str, ...] = ()
    name: str = "exclude"

    def check(self, text: str) -> Judgement:
        return judges.exclude(text, self.words, scheme=self.scheme)

    def forbidden(self) -> tuple[str, ...]:
        return self.words

    def label(self) -> str:
        return f"excludes {', '.join(self.words)}"


@dataclass(frozen=True)
class WordCount(LexicalConstraint):
    min: int | None = None
    max: int | None = None
    equals: int | None = None
    name: str = "word_count"

    def check(self, text: str) -> Judgement:
        return judges.word_count(text, self.min, self.max, self.equals, scheme=self.scheme)

    def bounds(self) -> tuple[int | None, int | None]:
        if self.equals is not None:
            return self.equals, self.equals
        return self.min, self.max

    def word_bounds(self) -> tuple[int | None, int | None]:
        return self.bounds()

    def label(self) -> str:
        low, high = self.bounds()
        return f"{low if low is not None else 0}..{high if high is not None else 'any'} words"


@dataclass(frozen=True)
class SentenceCount(WordCount):
    """The number of sentences, as the scheme's sentence splitter counts them; the layout
    ends sentences with a lone ., ? or ! after a word that is no abbreviation, before a
    capitalised word, a line break or the end (`grammar.Grammar`)."""

    name: str = "sentence_count"

    def check(self, text: str) -> Judgement:
        return judges.sentence_count(text, self.min, self.max, self.equals, scheme=self.scheme)

    def word_bounds(self) -> tuple[int | None, int | None]:
        return None, None

    def sentence_bounds(self) -> tuple[int | None, int | None]:
        return self.bounds()

    def label(self) -> str:
        return super().label().replace("words", "sentences")


@dataclass(frozen=True)
class Count(LexicalConstraint):
    """The first number in the continuation is how often `letter` occurs in `word`; both come
    from the spec or, when left out there, from the prompt ("How many r's are in strawberry?")."""

    letter: str | None = None
    word: str | None = None
    name: str = "count"
    resolved: tuple[str, str] | None = field(default=None, compare=False)

    def with_prompt(self, prompt: str, prompt_length: int) -> Count:
        letter, word = self.letter, self.word
        if letter is None or word is None:
            parsed = judges.parse_count_prompt(prompt) if prompt else None
            if parsed is None:
                asked = "there is no prompt"
                if prompt:
                    asked = f"the prompt {prompt!r} does not ask one"
                raise InputError(
                    f"count: no 'letter' and 'word' in the spec, and {asked} "
                    '(e.g. "How many r\'s are in strawberry?")'
                )
            letter, word = letter or parsed[0], word or parsed[1]
        return replace(self, prompt=prompt, prompt_length=prompt_length, resolved=(letter, word))

    def answer(self) -> int:
        if self.resolved is None:
            raise InputError("count: letter and word are unknown (no prompt given)")
        letter, word = self.resolved
        return word.casefold().count(letter.casefold())

    def check(self, text: str) -> Judgement:
        if self.resolved is None:
            raise InputError("count: letter and word are unknown (no prompt given)")
        return judges.count(text, *self.resolved)

    def pinned(self) -> dict[int, str]:
        return {1: str(self.answer())}

    def label(self) -> str:
        if self.resolved is None:
            return "count"
        return f"count of {self.resolved[0]!r} in {self.resolved[1]!r}"


def lexical_from_spec(kind: str, options: dict, words: Scheme = "plain") -> LexicalConstraint:
    """The constraint of a spec entry, judged and laid out under the word rules `words`."""
    rules = {"scheme": words, "judge_name": f"{words}-words"}
    if kind == "word_at":
        return WordAt(position=options["position"], word=options["word"], **rules)
    if kind == "include":
        return Include(words=tuple(options["words"]), **rules)
    if kind == "exclude":
        return Exclude(words=tuple(options["words"]), **rules)
    if kind in ("word_count", "sentence_count"):
        counted = WordCount if kind == "word_count" else SentenceCount
        bounds = {k: options.get(k) for k in ("min", "max", "equals")}
        return counted(**bounds, **rules)
    if kind == "count":  # digits and letters, not words: the same under either rules
        count = Count(letter=options.get("letter"), word=options.get("word"), scheme=words)
        if count.letter is not None and count.word is not None:
            count = replace(count, resolved=(count.letter, count.word))
        return count
    raise InputError(f"constraint type '{kind}' is not lexical")


# ------------------------------------------------------------------------------------------
# The types


def check_word_at(c: ConstraintSpec) -> None:
    if c.options["position"] == 0:
        raise InputError(f"{c.where}: key 'position': 1-based (negative from the end), not 0")
    if not c.options["word"].strip():
        raise InputError(f"{c.where}: key 'word' is empty")


def check_words(c: ConstraintSpec) -> None:
    words = c.options["words"]
    if not words or not all(isinstance(w, str) and w.strip() for w in words):
        raise InputError(f"{c.where}: key 'words' must be a list of non-empty words")


def check_counts(c: ConstraintSpec) -> None:
    """Bounds on a count: some, none negative, `equals` alone, min <= max."""
    bounds = {k: c.options[k] for k in ("min", "max", "equals") if k in c.options}
    if not bounds:
        raise InputError(f"{c.where}: {c.type} needs min, max or equals")
    if any(v < 0 for v in bounds.values()):
        raise InputError(f"{c.where}: {c.type.replace('_', ' ')}s must be >= 0")
    if "equals" in bounds and len(bounds) > 1:
        raise InputError(f"{c.where}: give 'equals' alone, or 'min'/'max'")
    if bounds.get("min", 0) > bounds.get("max", bounds.get("min", 0)):
        raise InputError(f"{c.where}: min {bounds['min']} > max {bounds['max']}")


def check_count(c: ConstraintSpec) -> None:
    """The question whole (a letter and a word) or left to the prompt."""
    o = c.options
    if "letter" in o and len(o["letter"]) != 1:
        raise InputError(f"{c.where}: key 'letter' must be one character")
    if ("letter" in o) != ("word" in o):
        raise InputError(f"{c.where}: give both 'letter' and 'word', or neither (prompt)")
    if "word" in o and not o["word"].strip():
        raise InputError(f"{c.where}: key 'word' is empty")


def check_lexical_together(constraints: Sequence[ConstraintSpec], words: str = "plain") -> None:
    """Contradictions between lexical constraints, under the word rules `words`, that no model
    or length can resolve: a required or excluded word those rules read as several words
    (COLLIE reads "don't" as "do" and "n't": excluded, it would never be found), one word slot
    given two words, a word required and excluded."""
    required: dict[str, str] = {}
    forbidden: dict[str, str] = {}
    forbidden_as_given: dict[str, str] = {}
    positions: dict[int, tuple[str, str]] = {}
    for c in constraints:
        if c.type == "word_at":
            required[c.options["word"]] = c.where
            p, w = c.options["position"], c.options["word"]
            if p in positions and word_key(positions[p][0], words) != word_key(w, words):
                raise InputError(
                    f"{c.where}: word {p} cannot be {w!r}: {positions[p][1]} makes it "
                    f"{positions[p][0]!r}"
                )
            positions[p] = (w, c.where)
        if c.type == "include":
            required.update({w: c.where for w in c.options["words"]})
        if c.type == "exclude":
            forbidden.update({word_key(w, words): c.where for w in c.options["words"]})
            forbidden_as_given.update({w: c.where for w in c.options["words"]})
    # A word the rules read as several can be neither placed nor found as one word.
    for word, where in {**forbidden_as_given, **required}.items():
        read = split_words(word, words)
        if [word_key(w, words) for w in read] != [word_key(word, words)]:
            raise InputError(
                f"{where}: {word!r} is not one word under the {words} word rules (it reads "
                f"as {read!r})"
            )
        if word in required and word_key(word, words) in forbidden:
            raise InputError(
                f"{where}: {word!r} is required here but excluded at "
                f"{forbidden[word_key(word, words)]}"
            )


def build(
    entry: ConstraintSpec, model: LoadedModel, device: str, words: str
) -> list[LexicalConstraint]:
    return [lexical_from_spec(entry.type, entry.options, words)]


def _lexical(
    name: str,
    description: str,
    keys: dict[str, Key],
    check: Callable[[ConstraintSpec], None],
    spec_only: bool = True,
) -> Descriptor:
    return Descriptor(
        name=name,
        domain="text",
        description=description,
        keys=keys,
        spec_only=spec_only,
        check=check,
        check_together=check_lexical_together,
        build=build,
    )


_BOUNDS = {"min": Key((int,)), "max": Key((int,)), "equals": Key((int,))}
DESCRIPTORS = (
    _lexical(
        "word_at",
        "this word at this 1-based word position of the continuation",
        {"position": Key((int,), required=True), "word": Key((str,), required=True)},
        check_word_at,
    ),
    _lexical(
        "include",
        "each of these words somewhere in the continuation",
        {"words": Key((list,), required=True)},
        check_words,
    ),
    _lexical(
        "exclude",
        "none of these words in the continuation",
        {"words": Key((list,), required=True)},
        check_words,
    ),
    _lexical(
        "word_count",
        "the continuation's number of words: min, max or equals",
        _BOUNDS,
        check_counts,
    ),
    _lexical(
        "sentence_count",
        "the continuation's number of sentences: min, max or equals",
        _BOUNDS,
        check_counts,
    ),
    # Not spec-only: with neither option, count reads its question from the prompt.
    _lexical(
        "count",
        "the first number written is how often a letter occurs in a word",
        {"letter": Key((str,)), "word": Key((str,))},
        check_count,
        spec_only=False,
    ),
)
