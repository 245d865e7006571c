"""The word layout's grammar: the roles a continuation's tokens take, and the states that say
which role may follow which, under a job's word rules (`layout.py` draws the layouts).

The roles (the plain word rules'):


- a word (WORD): a GPT-2 token that is a space and letters (" the", " whale"), exactly one word
  under the plain word rules;
- a bare word (BARE): letters without the space ("The", "And") that GPT-2 also knows after a
  space (not a piece such as "ers"), a word only where whitespace came last, with at most
  punctuation since (a line's first word, '"The'); elsewhere it would join the word before it;
- punctuation: a token of only punctuation and symbols (PUNCT: ",", '."'), one that opens
  after whitespace (OPENER: ' "', ' ('), or one that ends in whitespace (BREAK: "\\n", ".\\n\\n").
  The word rules strip punctuation and split on whitespace: no word;
- a placed word (`word_at`, the answer of `count`, an `include` word): the tokens of " word"
  (several when BPE splits it: only the first starts with a space, so they read as one word);
- end: a paragraph break or end-of-text, then one end-of-text. A model trained on documents
  ends a paragraph far more often than a document, and either ends what the judges read. Its
  weight is the model's probability of ending there; the positions after it weigh what free
  text would weigh in their place.
- hidden: the positions after that end-of-text, which no judge or reader sees (decoding stops
  at the first end-of-text), are left to the model. It was trained on documents packed one
  after another: it has seen text after an end-of-text, never a run of end-of-text tokens, and
  a tail of them (the first design) made it write worse text before them (COLLIE c05, whose
  word count ends texts early: perplexity +25.5% against the same length of unconstrained
  text, -1.6% with the tail hidden; bench/README.md). The end may move back over tokens
  decided while hidden, never over tokens decided as text: a version that let it ended free
  texts at their first decided paragraph break (c09: 28 words a text against 37).


The roles above are the plain word rules'. A job's `Grammar` adapts them to what its judges
read. Under COLLIE's rules (`words: collie`) a word is a token COLLIE reads as that one word
(not " cannot": two words there), punctuation one ASCII mark that COLLIE drops (not a quote,
which is a word there), never beside another (two hyphens are the word "--"), and line
breaks carry no mark. Where sentences are counted (`sentence_count`), a STOP role (a lone
".", "?" or "!") ends a sentence, and no other token holds those marks; a STOP follows only a
word that ends a sentence under both splitters (no abbreviation or initial: words carry the
traits "capital" and "short" then) and is followed by a capitalised word, a line break or the
end; the programme counts stops on an axis beside the words', and the sentence a text is
"""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass
from functools import cache, cached_property

import torch

from cdd_cli.constraints.lexical.rules import ends_no_sentence, split_words, word_key
from cdd_cli.models.tokenizers import TextTokenizer

WORD, BARE, PUNCT, OPENER, BREAK, STOP = "word", "bare", "punct", "opener", "break", "stop"
PLACED, END, AFTER_END, HIDDEN = "placed", "end", "after end", "hidden"
WORD_ROLES = (WORD, BARE)
PUNCTUATION_ROLES = (PUNCT, OPENER, BREAK)

# Role bigram lifts P(role | previous role) / P(role) over the public-domain corpus (State of
# the Union addresses, Moby-Dick, Shakespeare; 400,000 characters of each), from
# `python bench/role_lifts.py`. A placed word's first token is a WORD; a bare word ends its
# chunk in letters, as a word does; a sentence's stop is punctuation.
ROLE_LIFTS: dict[tuple[str, str], float] = {
    (WORD, WORD): 1.108,
    (WORD, BARE): 0.642,
    (WORD, PUNCT): 1.13,
    (WORD, OPENER): 0.594,
    (WORD, BREAK): 0.206,
    (PUNCT, WORD): 0.9,
    (PUNCT, BARE): 0.754,
    (PUNCT, PUNCT): 0.114,
    (PUNCT, OPENER): 3.884,
    (PUNCT, BREAK): 4.349,
    (OPENER, WORD): 0.003,
    (OPENER, BARE): 8.607,
    (OPENER, PUNCT): 0.014,
    (OPENER, OPENER): 0.691,
    (OPENER, BREAK): 0.087,
    (BREAK, WORD): 0.001,
    (BREAK, BARE): 5.925,
    (BREAK, PUNCT): 0.4,
    (BREAK, OPENER): 0.023,
    (BREAK, BREAK): 4.286,
}

# COLLIE's word rules read a mark as no word when it stands alone as one ASCII character
# (string.punctuation); a straight double quote becomes a word (`` or ''), and so do two
# hyphens, three periods and every non-ASCII mark. Under `collie` a punctuation token is one
# of these marks, never two side by side.
COLLIE_MARKS = frozenset(string.punctuation) - set('"`')
SENTENCE_STOPS = (".", "?", "!")


@dataclass(frozen=True)
class State:
    """What the layout remembers after a token: the role whose lifts follow it (`lift`),
    whether the text since the last whitespace has letters ("A") or only punctuation ("C": a
    bare word may start a word here), and, where sentences are counted, whether a sentence
    may stop here (after a word that is no abbreviation), whether nothing but whitespace came
    since the last stop or the start (`fresh`: the text so far ends a sentence) and whether
    the next word must be capitalised (a sentence just stopped)."""

    lift: str
    chunk: str
    can_stop: bool = False
    fresh: bool = False
    capital: bool = False


# The states sentences add after the plain grammar's five, and their indices.
SENTENCE_STATES = (
    State(WORD, "A"),  # after a short word: no stop here
    State(PUNCT, "A", fresh=True, capital=True),  # a sentence just stopped
    State(BREAK, "C", fresh=True, capital=True),  # ... and a line break since
    State(BREAK, "C", fresh=True),  # the start, after whitespace
    State(WORD, "A", fresh=True),  # the start, after a prompt's word or mark
)
AFTER_SHORT, STOPPED, STOPPED_THEN_BREAK, START_AFTER_SPACE, START_AFTER_TEXT = range(5, 10)


@dataclass(frozen=True)
class Grammar:
    """The roles and states of one job's layout: the word scheme the judges read, and whether
    sentences are counted (then words carry two traits, capitalised and `short`, a single
    letter or an abbreviation that a period does not end a sentence after, and a sentence
    stops at a lone ., ? or ! token, the only tokens with those marks)."""

    scheme: str = "plain"
    sentences: bool = False

    @cached_property
    def word_roles(self) -> tuple[str, ...]:
        if not self.sentences:
            return WORD_ROLES
        return tuple(
            base + " capital" * capital + " short" * short
            for base in WORD_ROLES
            for capital in (False, True)
            for short in (False, True)
        )

    @cached_property
    def punctuation_roles(self) -> tuple[str, ...]:
        return (*PUNCTUATION_ROLES, STOP) if self.sentences else PUNCTUATION_ROLES

    @cached_property
    def states(self) -> tuple[State, ...]:
        base = (
            State(WORD, "A", can_stop=True),  # 0: after a word (where a placed word leads)
            State(PUNCT, "A"),
            State(PUNCT, "C"),
            State(OPENER, "C"),
            State(BREAK, "C"),
        )
        return (*base, *SENTENCE_STATES) if self.sentences else base

    def lift_role(self, role: str) -> str:
        """The role whose lifts `role` takes: a word role its base, a stop punctuation's."""
        if role == STOP:
            return PUNCT
        if role == PLACED:
            return WORD
        return role.split()[0]

    def traits(self, role: str) -> tuple[str, bool, bool]:
        """A word role's (base, capitalised, short)."""
        parts = role.split()
        return parts[0], "capital" in parts, "short" in parts

    @cache  # noqa: B019 (a few grammars a process, each asked the same moves every step)
    def next_state(self, state: int, role: str, word: str | None = None) -> int | None:
        """The state after `role`'s token (for PLACED: the `word` placed); None where it
        cannot stand."""
        s, states = self.states[state], self.states
        if role == PLACED or role in self.word_roles:
            if role == PLACED:
                base, capital, short = WORD, word[:1].isupper(), ends_no_sentence(word)
            else:
                base, capital, short = self.traits(role)
            if (s.capital and not capital) or (base == BARE and s.chunk != "C"):
                return None
            return AFTER_SHORT if self.sentences and short else 0
        if role == STOP:
            return STOPPED if s.can_stop else None
        if s.capital and role != BREAK:
            return None  # after a stop: a capitalised word, a line break or the end
        if role == BREAK:
            if s.fresh:
                return STOPPED_THEN_BREAK if s.capital else START_AFTER_SPACE
            return states.index(State(BREAK, "C"))
        if role == PUNCT:
            if self.scheme == "collie" and s.lift in (PUNCT, OPENER) and not s.fresh:
                return None  # two marks side by side may read as a word ("--", "...")
            return states.index(State(PUNCT, s.chunk))
        return states.index(State(OPENER, "C"))

    def start_state(self, prompt: str) -> int:
        """The state the continuation starts in, after `prompt` (a text's start: after a
        break). Where sentences are counted, a fresh one: the judges read the continuation."""
        if not prompt or prompt[-1].isspace():
            after = State(BREAK, "C")
        elif not is_punctuation(prompt[-1]):
            after = State(WORD, "A", can_stop=True)
        else:
            chunk = re.split(r"\s", prompt)[-1]
            after = State(PUNCT, "C" if is_punctuation(chunk) else "A")
        if self.sentences:
            return START_AFTER_SPACE if after.chunk == "C" else START_AFTER_TEXT
        return self.states.index(after)


PLAIN = Grammar()
STATES = PLAIN.states


def next_state(state: int, role: str) -> int | None:
    """The plain grammar's state after a role's token (a placed word is a WORD)."""
    return PLAIN.next_state(state, WORD if role == PLACED else role)


def start_state(prompt: str) -> int:
    """The plain grammar's state after `prompt`."""
    return PLAIN.start_state(prompt)


def is_punctuation(text: str, whitespace: bool = False) -> bool:
    """Only punctuation and symbols (and, if `whitespace`, spaces and line breaks): the plain
    word rules read it as no word."""
    # U+FFFD stands for a token's partial UTF-8 bytes, which may complete a letter.
    return bool(text) and all(
        (whitespace and ch in " \n\r\t") or (ch != "\ufffd" and unicodedata.category(ch)[0] in "PS")
        for ch in text
    )


@cache
def token_classes(
    tokenizer: TextTokenizer, grammar: Grammar = PLAIN
) -> tuple[dict[str, torch.Tensor], dict[str, list]]:
    """Boolean masks over the vocabulary: the tokens of each of `grammar`'s roles (END:
    end-of-text and line breaks alone), and the single tokens that spell each word, with or
    without its space, keyed as the scheme compares words."""
    roles = (*grammar.word_roles, *grammar.punctuation_roles, END)
    classes = {r: torch.zeros(len(tokenizer), dtype=torch.bool) for r in roles}
    classes[END][tokenizer.eos_id] = True
    by_word: dict[str, list[int]] = {}
    special = (tokenizer.eos_id, tokenizer.mask_id)
    read = tokenizer.token_texts()  # as each reads inside a text, whatever the tokenizer
    texts = {i: text for i, text in enumerate(read) if i not in special}
    vocabulary = set(texts.values())
    collie = grammar.scheme == "collie"
    for token_id, text in texts.items():
        letters = text[1:] if text[:1] == " " else text
        if re.fullmatch(r"[A-Za-z]+", letters):
            # Only letters the vocabulary also knows after a space ("The": " The") are a word of
            # their own; the others ("ers", "ization") are pieces of longer words. COLLIE reads
            # some as two words ("cannot", "gonna"): never one word's token there.
            if (letters == text and " " + text not in vocabulary) or (
                collie and split_words(letters, "collie") != [letters]
            ):
                continue
            base = WORD if letters != text else BARE
            if grammar.sentences:
                base += " capital" * letters[0].isupper() + " short" * ends_no_sentence(letters)
            classes[base][token_id] = True
            by_word.setdefault(word_key(letters, grammar.scheme), []).append(token_id)
        elif is_punctuation(text, whitespace=True) and text.strip(" \t") != "":
            marks = "".join(ch for ch in text if ch not in " \n\r\t")
            if collie and (len(marks) > 1 or (marks and marks not in COLLIE_MARKS)):
                continue
            if grammar.sentences and any(stop in marks for stop in SENTENCE_STOPS):
                classes[STOP][token_id] = text in SENTENCE_STOPS
                continue
            if text[-1] in " \n\r\t":
                # Under COLLIE a line break carries no mark: "-" then "-\n" reads as a word.
                classes[BREAK][token_id] = not (collie and marks)
                classes[END][token_id] = set(text) <= set("\r\n")
            elif is_punctuation(text):
                classes[PUNCT][token_id] = True
            else:
                classes[OPENER][token_id] = True
    return classes, by_word
