"""Lexical and counting constraints on the continuation: `word_at`, `include`, `exclude`,
`word_count`, `sentence_count`, `count`.

Judges are exact string checks under a spec's word rules (`words: plain`, the default: split
on whitespace, surrounding punctuation stripped, case-sensitive, DESIGN.md §5; or `words:
collie`, the COLLIE benchmark's own; both in `cdd_cli.evaluate.lexical`); each value is 1.0
when satisfied, 0.0 when not. None of them is differentiable: each says what it needs of the
continuation (a word at a position, words somewhere, forbidden words, a number of words or
sentences), and `word_layout.py` turns all of them together into one closed-form projection of
the probability tensor, under the same word rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cdd_cli.constraints.base import ClosedFormBuilder, ExactConstraint
from cdd_cli.constraints.word_layout import WordLayout
from cdd_cli.errors import InputError
from cdd_cli.evaluate import lexical
from cdd_cli.evaluate.lexical import Judgement, Scheme


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
        return lexical.word_at(text, self.position, self.word, scheme=self.scheme)

    def pinned(self) -> dict[int, str]:
        return {self.position: self.word}

    def label(self) -> str:
        return f"word {self.position} = {self.word!r}"


@dataclass(frozen=True)
class Include(LexicalConstraint):
    words: tuple[str, ...] = ()
    name: str = "include"

    def check(self, text: str) -> Judgement:
        return lexical.include(text, self.words, scheme=self.scheme)

    def included(self) -> tuple[str, ...]:
        return self.words

    def label(self) -> str:
        return f"includes {', '.join(self.words)}"


@dataclass(frozen=True)
class Exclude(LexicalConstraint):
    words: tuple[str, ...] = ()
    name: str = "exclude"

    def check(self, text: str) -> Judgement:
        return lexical.exclude(text, self.words, scheme=self.scheme)

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
        return lexical.word_count(text, self.min, self.max, self.equals, scheme=self.scheme)

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
    capitalised word, a line break or the end (`word_layout.Grammar`)."""

    name: str = "sentence_count"

    def check(self, text: str) -> Judgement:
        return lexical.sentence_count(text, self.min, self.max, self.equals, scheme=self.scheme)

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
            parsed = lexical.parse_count_prompt(prompt) if prompt else None
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
        return lexical.count(text, *self.resolved)

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
