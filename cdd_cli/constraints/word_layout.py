"""The lexical family's closed-form projection: a layout of the continuation's words.

Every lexical constraint names `WordLayout` as its `closed_form()`: the engine builds one layout
for all of them together (`constraints.base.closed_forms`) and applies it at every step.

Word positions are only defined once the text is, and a masked diffusion model fixes tokens in
random order, so word indices cannot be aligned after the fact. Instead every position of the
continuation gets a *role* that makes tokens and words line up by construction:

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

A *layout* is a role per position that satisfies every constraint: the word at position k is
the k-th word-role, `word_count` bounds the number of words before the end, `include` words are
placed once each (free words before the placement are not that word, so a text that uses it
twice has one layout, not two), `exclude` removes the word tokens that spell a forbidden word.
Given the model's p(x_0 | x_t), a layout's weight is the product over positions of the mass its
role holds, times a *lift* for each pair of neighbouring roles that are both still undecided:
how much more likely the second role is after the first than anywhere in English text
(`ROLE_LIFTS`; punctuation after punctuation is 9x rarer, a spaced word after a line break
1,000x).
The model predicts undecided positions independently of each other, so without the lifts a
word count shorter than the model's text spreads punctuation everywhere (there are many more
ways to scatter it than to end early), and a line break is followed by " And" as readily as by
"And". Where a neighbour is decided the model has already seen it, so no lift applies.

The projection draws a layout with probability proportional to that weight (exact forward
filtering, backward sampling over (position, includes placed, previous role, words so far)),
then renormalises each position's distribution over its role's tokens. Sampling tokens from the
result samples the model's distribution conditioned on the constraints, restricted to these
roles and up to these approximations: the lifts stand in for the dependence between undecided
positions; the positions after the end weigh as free text; a paragraph break followed by the
end can be read as either role; and with positions from the end but no exact word count, each
sample's number of words is drawn once, without those positions' weights. It keeps the
model's own punctuation and sentence ends where the constraints leave room.

Every step re-draws the layout conditioned on the tokens already decided, so the layout follows
the model as the text forms; the tokens decided so far fit the previous layout, so some layout
always exists (roles the model gives probability 0 keep a tiny weight, so it is found).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import torch

from cdd_cli.errors import InputError
from cdd_cli.evaluate.lexical import split_words
from cdd_cli.models.tokenizers import TextTokenizer

WORD, BARE, PUNCT, OPENER, BREAK = "word", "bare", "punct", "opener", "break"
PLACED, END, AFTER_END, HIDDEN = "placed", "end", "after end", "hidden"
WORD_ROLES = (WORD, BARE)
PUNCTUATION_ROLES = (PUNCT, OPENER, BREAK)

# Role bigram lifts P(role | previous role) / P(role) over the public-domain corpus (State of
# the Union addresses, Moby-Dick, Shakespeare; 400,000 characters of each), from
# `python bench/role_lifts.py`. A placed word's first token is a WORD; a bare word ends its
# chunk in letters, as a word does.
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

# The layout's states: the previous role and whether the text since the last whitespace has
# letters ("A") or only punctuation ("C": a bare word may start a word here).
STATES = ((WORD, "A"), (PUNCT, "A"), (PUNCT, "C"), (OPENER, "C"), (BREAK, "C"))


def next_state(state: int, role: str) -> int | None:
    """The state after a role's token (a placed word is a WORD); None where it cannot stand."""
    chunk = STATES[state][1]
    if role in (WORD, PLACED):
        return 0
    if role == BARE:
        return 0 if chunk == "C" else None
    if role == PUNCT:
        return STATES.index((PUNCT, chunk))
    return STATES.index((role, "C"))


def is_punctuation(text: str, whitespace: bool = False) -> bool:
    """Only punctuation and symbols (and, if `whitespace`, spaces and line breaks): the plain
    word rules read it as no word."""
    # U+FFFD stands for a token's partial UTF-8 bytes, which may complete a letter.
    return bool(text) and all(
        (whitespace and ch in " \n\r\t") or (ch != "\ufffd" and unicodedata.category(ch)[0] in "PS")
        for ch in text
    )


@cache
def token_classes(tokenizer: TextTokenizer) -> tuple[dict[str, torch.Tensor], dict[str, list]]:
    """Boolean masks over the vocabulary: the tokens of each role (END: end-of-text and line
    breaks alone), and the single tokens that spell each word, with or without its space."""
    classes = {r: torch.zeros(len(tokenizer), dtype=torch.bool) for r in (*WORD_ROLES, END)}
    classes |= {r: torch.zeros(len(tokenizer), dtype=torch.bool) for r in PUNCTUATION_ROLES}
    classes[END][tokenizer.eos_id] = True
    by_word: dict[str, list[int]] = {}
    special = (tokenizer.eos_id, tokenizer.mask_id)
    read = tokenizer.token_texts()  # as each reads inside a text, whatever the tokenizer
    texts = {i: text for i, text in enumerate(read) if i not in special}
    vocabulary = set(texts.values())
    for token_id, text in texts.items():
        if re.fullmatch(r" [A-Za-z]+", text):
            classes[WORD][token_id] = True
            by_word.setdefault(text[1:], []).append(token_id)
        elif re.fullmatch(r"[A-Za-z]+", text):
            # Only letters the vocabulary also knows after a space ("The": " The") are a word of
            # their own; the others ("ers", "ization") are pieces of longer words.
            if " " + text in vocabulary:
                classes[BARE][token_id] = True
                by_word.setdefault(text, []).append(token_id)
        elif is_punctuation(text, whitespace=True) and text.strip(" \t") != "":
            if text[-1] in " \n\r\t":
                classes[BREAK][token_id] = True
                classes[END][token_id] = set(text) <= set("\r\n")
            elif is_punctuation(text):
                classes[PUNCT][token_id] = True
            else:
                classes[OPENER][token_id] = True
    return classes, by_word


def start_state(prompt: str) -> int:
    """The state the continuation starts in, after `prompt` (a text's start: after a break)."""
    if not prompt or prompt[-1].isspace():
        return STATES.index((BREAK, "C"))
    if not is_punctuation(prompt[-1]):
        return STATES.index((WORD, "A"))
    chunk = re.split(r"\s", prompt)[-1]
    return STATES.index((PUNCT, "C" if is_punctuation(chunk) else "A"))


@dataclass
class Plan:
    """One sample's layout: token per placed position (placed words, end-of-text after the
    end), and the role of every other position of the continuation up to `end` (positions
    after the end-of-text that follows it are hidden: the model's own)."""

    pinned: dict[int, int] = field(default_factory=dict)
    roles: dict[int, str] = field(default_factory=dict)
    not_yet: dict[int, list[int]] = field(default_factory=dict)  # free word: not these
    placed: list[list[int]] = field(default_factory=list)  # each placed word's positions
    end: int | None = None  # the end's position; None when the text fills the continuation

    def where(self, *roles: str) -> list[int]:
        return sorted(p for p, r in self.roles.items() if r in roles)

    @property
    def words(self) -> list[int]:
        return self.where(*WORD_ROLES)

    @property
    def punctuation(self) -> list[int]:
        return self.where(*PUNCTUATION_ROLES)


@dataclass(frozen=True)
class _Counting:
    """What the dynamic programme counts: `slots` maps 0-based word slots to placed words;
    words beyond `top` are counted as `top` when `saturate` (nothing depends on them)."""

    slots: dict[int, str]
    low: int
    top: int
    saturate: bool


class WordLayout:
    """One layout for a job's lexical constraints (each says what it needs through `pinned`,
    `included`, `forbidden` and `word_bounds`); a `ClosedFormProjection`."""

    lays_out_every_position = True  # a role for each position: no other such layout beside it

    def __init__(
        self,
        constraints: list,
        tokenizer: TextTokenizer,
        start: int,
        length: int,
    ):
        """`start`: the first continuation position (the prompt's length); `length`: tokens
        in the continuation. Raises InputError for layouts no text can satisfy."""
        self.tokenizer, self.start, self.length = tokenizer, start, length
        self.words_of: dict[str, list[int]] = {}
        pins: dict[int, str] = {}
        includes: list[str] = []
        forbidden: set[str] = set()
        low, high = 0, None
        for c in constraints:
            for position, word in c.pinned().items():
                if pins.get(position, word) != word:
                    raise InputError(
                        f"word {position} cannot be both {pins[position]!r} and {word!r}"
                    )
                pins[position] = word
            includes += [w for w in c.included() if w not in includes]
            forbidden |= set(c.forbidden())
            c_low, c_high = c.word_bounds()
            low = max(low, c_low or 0)
            if c_high is not None:
                high = c_high if high is None else min(high, c_high)
        for word in [*pins.values(), *includes]:
            if split_words(word) != [word]:
                raise InputError(
                    f"{word!r} is not one word under the word rules (it reads as "
                    f"{split_words(word)!r})"
                )
            if word in forbidden:
                raise InputError(f"{word!r} is both required and forbidden")
            self.words_of[word] = tokenizer.encode(" " + word)
        # Tokens beyond one per word that the placed words take, at the least (a word placed
        # at a position and at one from the end may be placed once).
        extra = sum(len(self.words_of[w]) - 1 for w in set(pins.values()) | set(includes))
        capacity = length - extra
        most = capacity if high is None else min(high, capacity)
        placed = len(set(pins.values()) | set(includes))
        needed = max([low, placed, *(abs(p) for p in pins)], default=0)
        if most < needed or most < 1:
            limit = (
                f"word_count allows at most {high}"
                if high is not None and high < capacity
                else f"{length} continuation tokens hold at most {max(capacity, 0)}"
                + (f" (the placed words take {extra + placed} tokens)" if placed else "")
            )
            raise InputError(f"the constraints need {max(needed, 1)} word(s), but {limit}")
        self.pins, self.low, self.high, self.most = pins, low, high, most
        self.needed = needed
        if not any(self.counting(n) for n in self.word_counts()):
            raise InputError("two word positions name the same word slot")
        self.includes = [w for w in includes if w not in pins.values()]
        classes, by_word = token_classes(tokenizer)
        self.classes = dict(classes)
        for role in WORD_ROLES:  # no free word spells a forbidden one
            self.classes[role] = classes[role].clone()
            for word in forbidden:
                self.classes[role][by_word.get(word, [])] = False
        self.spellings = {w: by_word.get(w, []) for w in self.includes}
        prompt = next((c.prompt for c in constraints), "")
        self.first_state = start_state(prompt)
        self.check_some_layout_exists()
        # With positions counted from the end, the number of words is drawn once per sample.
        self.counts: list[int] | None = None
        # [B, L] continuation tokens decided while their position was hidden: the end may move
        # back over these, not over text. Carried from plan to plan, with what the last plan
        # saw decided and hid.
        self.drawn_hidden: torch.Tensor | None = None
        self.last: tuple[torch.Tensor, torch.Tensor] | None = None

    def check_some_layout_exists(self) -> None:
        """InputError unless some layout fits: the dynamic programme with every role weighing
        1 wherever it fits. (With positions from the end and no exact count, each sample's
        count is checked when drawn.)"""
        zero = np.zeros((1, self.length), dtype=np.float32)
        scores = {r: zero for r in (*PUNCTUATION_ROLES, END, AFTER_END, HIDDEN)}
        scores |= {(r, m): zero for r in WORD_ROLES for m in range(1 << len(self.includes))}
        for word, ids in self.words_of.items():
            starts = np.full((1, self.length), -np.inf, dtype=np.float32)
            starts[:, : max(0, self.length - len(ids) + 1)] = 0.0
            scores[(PLACED, word)] = starts
        scores["lift"] = np.zeros((1, self.length), dtype=bool)
        options = self.word_counts()
        if len(options) > 1:
            slots = {p - 1: w for p, w in self.pins.items() if p > 0}
            counts = [_Counting(slots, low=min(options), top=max(options), saturate=False)]
        else:
            counts = [self.counting(options[0])]
        for count in counts:
            finals = self.finals(self.forward(scores, count), scores, count)
            if np.isfinite(finals).any():
                return
        raise InputError(
            f"no continuation of {self.length} tokens satisfies the lexical constraints together"
        )

    # ----------------------------------------------------------------------------------------
    # What is counted

    def word_counts(self) -> list[int | None]:
        """The numbers of words a sample may be given before its layouts are drawn: one when
        the count is exact, every feasible one when positions count from the end (each sample
        draws its own), None (free within the bounds) otherwise."""
        if self.low == self.high:
            return [self.high]
        if any(p < 0 for p in self.pins):
            return list(range(self.needed, self.most + 1))
        return [None]

    def counting(self, n_words: int | None) -> _Counting | None:
        """The counting for samples with `n_words` words (None: free within the bounds);
        None when two positions then name one word slot with different words."""
        if n_words is None:
            slots = {p - 1: w for p, w in self.pins.items()}
            low, high = self.low, self.most if self.high is not None else None
        else:
            slots = {}
            for p, word in self.pins.items():
                slot = p - 1 if p > 0 else n_words + p
                if slots.setdefault(slot, word) != word:
                    return None
            low = high = n_words
        # All placed slots come before `top`, so beyond it only an upper bound needs counting.
        top = high if high is not None else max([low, *(s + 1 for s in slots)])
        return _Counting(slots, low, top, saturate=high is None)

    # ----------------------------------------------------------------------------------------
    # The layout's weights

    def role_scores(
        self, probs: torch.Tensor, x: torch.Tensor, fixed: torch.Tensor, drawn_hidden: torch.Tensor
    ) -> dict:
        """log mass of each role at each continuation position, [B, L] (and for each placed
        word, of its tokens starting there); a decided position scores 0 for the roles its
        token fits and -inf for the others (hidden fits end-of-text and `drawn_hidden`).
        "lift" [B, L]: the position and the one before it are both undecided."""
        s, e = self.start, self.start + self.length
        p = probs[:, s:e].float()
        decided, tokens = fixed[:, s:e], x[:, s:e]
        classes = {r: c.to(p.device) for r, c in self.classes.items()}

        def score(mass: torch.Tensor, fits: torch.Tensor) -> np.ndarray:
            chosen = torch.where(fits, 0.0, -torch.inf)
            # A floor, not 0: a layout the decided tokens allow must keep some weight.
            weight = mass.clamp_min(1e-30).log()
            return torch.where(decided, chosen, weight).cpu().numpy()

        roles = (*WORD_ROLES, *PUNCTUATION_ROLES, END)
        # One pass over [B, L, V] for every role's mass.
        masses = dict(
            zip(
                roles,
                (p @ torch.stack([classes[r].float() for r in roles], 1)).unbind(-1),
                strict=True,
            )
        )
        scores: dict = {r: score(masses[r], classes[r][tokens]) for r in PUNCTUATION_ROLES}
        scores[END] = score(masses[END], classes[END][tokens])
        # Positions after the end: the text is over there, and they weigh what free text
        # would weigh in their place, so that a layout ends where the model ends the text,
        # not where ending escapes the layout's restriction to words and punctuation.
        free = sum(masses[r] for r in (*WORD_ROLES, *PUNCTUATION_ROLES))
        eos = tokens == self.tokenizer.eos_id
        scores[AFTER_END] = score(free, eos)
        scores[HIDDEN] = score(free, eos | drawn_hidden.to(eos.device))
        for word, ids in self.words_of.items():
            # Weight of the word's tokens starting at i: the sum of each token's score.
            starts = np.full(decided.shape, -np.inf, dtype=np.float32)
            room = self.length - len(ids) + 1
            if room > 0:
                starts[:, :room] = 0.0
                for j, t in enumerate(ids):
                    starts[:, :room] += score(p[..., t], tokens == t)[:, j : j + room]
            scores[(PLACED, word)] = starts
        # A free word is not an include word that is still to be placed: the first copy of
        # an include word is its placement, so each text has one layout, not one per copy.
        for m in range(1 << len(self.includes)):
            waiting = torch.tensor(self.waiting_tokens(m), dtype=torch.long, device=p.device)
            for r in WORD_ROLES:
                fits = classes[r][tokens] & ~torch.isin(tokens, waiting)
                spelled = (p[..., waiting] * classes[r][waiting]).sum(-1)
                scores[(r, m)] = score(masses[r] - spelled, fits)
        together = ~decided
        together[:, 1:] &= ~decided[:, :-1]
        together[:, 0] = False  # the prompt, or nothing, comes before: decided
        scores["lift"] = together.cpu().numpy()
        return scores

    def waiting_tokens(self, m: int) -> list[int]:
        """The single tokens that spell an include word not in bitmask m, with or without its
        space (a word that takes several tokens is never a free word)."""
        return [t for j, w in enumerate(self.includes) if not m >> j & 1 for t in self.spellings[w]]

    def lifted(self, scores: dict, key, state: int, role: str) -> np.ndarray:
        """[B, L] log weight of `role` (scored under `key`) at each position after `state`:
        its mass, times the lift from the previous role where both positions are undecided.
        Computed once per plan."""
        lifted = scores.get((key, state))
        if lifted is None:
            # The end is not lifted: a line break after a sentence is common in the corpus
            # (wrapped prose, verse), the end of a text is not, and ends lifted as breaks cut
            # free texts short (COLLIE c09: 28 words against 35, perplexity +33%).
            lift = 1.0
            if role != END:
                lift = ROLE_LIFTS[STATES[state][0], WORD if role == PLACED else role]
            lifted = scores[key, state] = scores[key] + np.log(lift) * scores["lift"]
        return lifted

    def weight(self, scores: dict, key, state: int, role: str, i: int) -> np.ndarray:
        """[B] the `lifted` weight at position i."""
        return self.lifted(scores, key, state, role)[:, i]

    def forward(self, scores: dict, count: _Counting) -> np.ndarray:
        """alpha[i, m, q, b, w]: log total weight of the role sequences of the first i
        positions that placed the include words in bitmask m, end in state q and hold w words
        (w = top: at least top when saturated)."""
        n, length, states = len(scores[PUNCT]), self.length, range(len(STATES))
        masks = 1 << len(self.includes)
        alpha = np.full((length + 1, masks, len(STATES), n, count.top + 1), -np.inf, np.float32)
        alpha[0, 0, self.first_state, :, 0] = 0.0
        placed_slot = np.zeros(count.top + 1, dtype=bool)
        placed_slot[[s for s in count.slots if s <= count.top]] = True

        def stacked(key, role: str) -> np.ndarray:  # [states, B, L]
            return np.stack([self.lifted(scores, key, q, role) for q in states])

        # Each one-token role's moves, grouped by the state they lead to: (to, [from ...]).
        moves = {}
        for role in (*PUNCTUATION_ROLES, *WORD_ROLES):
            to = {q: next_state(q, role) for q in states}
            moves[role] = [
                (t, [q for q in states if to[q] == t]) for t in set(to.values()) - {None}
            ]
        weights = {r: stacked(r, r) for r in PUNCTUATION_ROLES}
        weights |= {(r, m): stacked((r, m), r) for r in WORD_ROLES for m in range(masks)}
        weights |= {(PLACED, w): stacked((PLACED, w), PLACED) for w in self.words_of}

        def arrive(source: np.ndarray, weight: np.ndarray, sources) -> np.ndarray:
            """[B, W]: the summed weight of moving from each of `sources` states."""
            return np.logaddexp.reduce(source[sources] + weight[sources, :, None], axis=0)

        def add_word(target: np.ndarray, moved: np.ndarray) -> None:
            # One more free or include word: w -> w + 1 where slot w is not placed.
            moved = np.where(placed_slot, -np.inf, moved)
            np.logaddexp(target[:, 1:], moved[:, :-1], out=target[:, 1:])
            if count.saturate:
                np.logaddexp(target[:, -1], moved[:, -1], out=target[:, -1])

        with np.errstate(invalid="ignore"):
            for i in range(length):
                for m in range(masks):
                    source = alpha[i, m]  # [states, B, W]
                    if not np.isfinite(source).any():
                        continue
                    for role in PUNCTUATION_ROLES:
                        for to, sources in moves[role]:
                            target = alpha[i + 1, m, to]
                            moved = arrive(source, weights[role][..., i], sources)
                            np.logaddexp(target, moved, out=target)
                    for role in WORD_ROLES:
                        for to, sources in moves[role]:
                            moved = arrive(source, weights[role, m][..., i], sources)
                            add_word(alpha[i + 1, m, to], moved)
                    for slot, word in count.slots.items():
                        end = i + len(self.words_of[word])
                        if end <= length:
                            weight = weights[PLACED, word][..., i]  # [states, B]
                            moved = np.logaddexp.reduce(source[:, :, slot] + weight, axis=0)
                            target = alpha[end, m, 0, :, slot + 1]
                            np.logaddexp(target, moved, out=target)
                    for j, word in enumerate(self.includes):
                        end = i + len(self.words_of[word])
                        if not m >> j & 1 and end <= length:
                            weight = weights[PLACED, word][..., i]
                            add_word(alpha[end, m | 1 << j, 0], arrive(source, weight, states))
        return alpha

    def finals(self, alpha: np.ndarray, scores: dict, count: _Counting) -> np.ndarray:
        """log weight [B, L + 1, states, top + 1] of ending after i positions in a state with
        w words (then end-of-text, then hidden), -inf where the constraints are not met."""
        after, hidden = scores[AFTER_END], scores[HIDDEN]
        n = len(after)
        hidden_from = np.cumsum(hidden[:, ::-1], axis=1)[:, ::-1]  # sum over positions >= j
        hidden_from = np.concatenate([hidden_from, np.zeros((n, 2))], axis=1)
        # The end at i: end-of-text at i + 1, hidden from i + 2.
        behind = np.concatenate([after[:, 1:], np.zeros((n, 1))], axis=1)
        behind = behind + hidden_from[:, 2 : self.length + 2]
        tail = np.zeros((n, self.length + 1, len(STATES)))
        for q in range(len(STATES)):
            tail[:, :-1, q] = self.lifted(scores, END, q, END) + behind
        last = max([count.low, *(s + 1 for s in count.slots)])
        ok = np.arange(count.top + 1) >= last
        with np.errstate(invalid="ignore"):
            weights = alpha[:, -1].transpose(2, 0, 1, 3) + tail[..., None]
        return np.where(ok, weights, -np.inf)

    # ----------------------------------------------------------------------------------------
    # Drawing layouts

    def plan(
        self,
        probs: torch.Tensor,
        x: torch.Tensor,
        fixed: torch.Tensor,
        generators: list[torch.Generator],
    ) -> list[Plan]:
        """A layout per sample drawn in proportion to its weight under `probs` [B, L, V],
        consistent with the tokens of `x` already decided (`fixed`). Called once per step of
        one batch: it keeps track of the tokens decided while hidden."""
        decided = fixed[:, self.start : self.start + self.length].cpu()
        if self.last is None:
            self.drawn_hidden = torch.zeros_like(decided)
        else:
            was_decided, was_hidden = self.last
            self.drawn_hidden |= decided & ~was_decided & was_hidden
        scores = self.role_scores(probs, x, fixed, self.drawn_hidden)
        n = len(generators)
        options = self.word_counts()
        if len(options) > 1 and self.counts is None:
            self.counts = self.draw_counts(scores, options, generators)
        counts = self.counts if len(options) > 1 else options * n
        plans: list[Plan | None] = [None] * n
        for value in dict.fromkeys(counts):
            rows = [b for b in range(n) if counts[b] == value]
            part = {k: v[rows] for k, v in scores.items()}
            count = self.counting(value)
            alpha = self.forward(part, count)
            finals = self.finals(alpha, part, count)
            for k, b in enumerate(rows):
                plans[b] = self.draw(alpha[..., k, :], finals[k], part, k, count, generators[b])
        hidden = torch.zeros_like(decided)
        for b, plan in enumerate(plans):
            if plan.end is not None:
                hidden[b, plan.end - self.start + 2 :] = True
        self.last = (decided, hidden)
        return plans  # type: ignore[return-value]

    def draw_counts(
        self, scores: dict, options: list[int], generators: list[torch.Generator]
    ) -> list[int]:
        """For positions counted from the end without an exact word count: each sample's
        number of words, drawn in proportion to the total weight of the layouts with that many
        words under the other constraints (one pass that counts every word; the positions
        from the end weigh in once the number is drawn, which is cheaper than a pass per
        number and only approximately the exact conditional)."""
        slots = {p - 1: w for p, w in self.pins.items() if p > 0}
        count = _Counting(slots, low=min(options), top=max(options), saturate=False)
        finals = self.finals(self.forward(scores, count), scores, count)  # [B, L+1, Q, W+1]
        totals = np.logaddexp.reduce(finals.reshape(len(finals), -1, count.top + 1), axis=1)
        feasible = [self.counting(n) is not None for n in options]
        weights = np.where(feasible, totals[:, options], -np.inf)
        return [options[_choose(row, g)] for row, g in zip(weights, generators, strict=True)]

    def draw(
        self,
        alpha: np.ndarray,
        finals: np.ndarray,
        scores: dict,
        b: int,
        count: _Counting,
        generator: torch.Generator,
    ) -> Plan:
        """Backward sampling of one sample's layout; alpha [L + 1, masks, states, top + 1]."""
        flat = finals.reshape(-1)
        if not np.isfinite(flat).any():
            raise InputError("no continuation fits the lexical constraints together")
        i, rest = divmod(_choose(flat, generator), len(STATES) * (count.top + 1))
        q, w = divmod(rest, count.top + 1)
        m = (1 << len(self.includes)) - 1
        plan = Plan()
        if i < self.length:
            plan.end = self.start + i
            plan.roles[plan.end] = END
        if i + 1 < self.length:
            plan.pinned[self.start + i + 1] = self.tokenizer.eos_id
        while i > 0:
            # Every move that ends in state (i, m, q, w): (role, previous i, m, q, w, word).
            moves = []
            for p in range(len(STATES)):
                for role in PUNCTUATION_ROLES:
                    if next_state(p, role) == q:
                        moves.append((role, i - 1, m, p, w, None))
            if q == 0:  # a word ends here
                previous = [w - 1] if w > 0 else []
                if count.saturate and w == count.top:
                    previous.append(w)
                for p in range(len(STATES)):
                    if w > 0 and (w - 1) in count.slots:
                        word = count.slots[w - 1]
                        moves.append((PLACED, i - len(self.words_of[word]), m, p, w - 1, word))
                    for v in (v for v in previous if v not in count.slots):
                        for role in WORD_ROLES:
                            if next_state(p, role) == 0:
                                moves.append((role, i - 1, m, p, v, None))
                        for j, word in enumerate(self.includes):
                            if m >> j & 1:
                                moves.append(
                                    (PLACED, i - len(self.words_of[word]), m ^ 1 << j, p, v, word)
                                )
            moves = [move for move in moves if move[1] >= 0]
            weights = []
            for role, i_, m_, p, w_, word in moves:
                key = (PLACED, word) if word else (role, m_) if role in WORD_ROLES else role
                weights.append(alpha[i_, m_, p, w_] + self.weight(scores, key, p, role, i_)[b])
            role, i, m, q, w, word = moves[_choose(np.array(weights), generator)]
            if word is None:
                plan.roles[self.start + i] = role
                if role in WORD_ROLES and (waiting := self.waiting_tokens(m)):
                    plan.not_yet[self.start + i] = waiting
            else:
                plan.placed.append([self.start + i + k for k in range(len(self.words_of[word]))])
                for k, token in enumerate(self.words_of[word]):
                    plan.pinned[self.start + i + k] = token
        return plan

    # ----------------------------------------------------------------------------------------
    # The projection

    def order(self, plans: list[Plan], changing: torch.Tensor, fixed: torch.Tensor) -> None:
        """Edit `changing` [B, L] (the step's decisions) in place so that a placed word is
        decided no later than the positions beside it: where the step would decide a
        neighbour of a placed word still undecided, it decides the word instead and leaves
        the neighbour to a later step, which predicts it knowing the word. (Decided at
        random, a word's neighbours were often written blind to it: on c05 the token after a
        placed word cost 0.41 nats more than other free tokens, and 0.24 less after this.
        Holding back three positions on each side instead of one made c05 worse: +44.2%
        against +25.5% perplexity, 80 samples.)"""
        for b, plan in enumerate(plans):
            placed = {p for span in plan.placed for p in span}
            for span in plan.placed:
                if all(fixed[b, p] for p in span):
                    continue
                beside = [
                    p
                    for p in (span[0] - 1, span[-1] + 1)
                    if self.start <= p < self.start + self.length and p not in placed
                ]
                if any(changing[b, p] for p in beside):
                    changing[b, span] = ~fixed[b, span]
                    changing[b, beside] = False

    def apply(self, probs: torch.Tensor, plans: list[Plan], fixed: torch.Tensor) -> torch.Tensor:
        """Project probs [B, L, V]: each position renormalised over its role's tokens (placed
        positions one-hot); positions the sampler already fixed are left as they are."""
        out = probs.clone()
        for b, plan in enumerate(plans):
            for position, tokens in plan.not_yet.items():
                if not fixed[b, position]:
                    out[b, position, tokens] = 0.0
            for role in (*WORD_ROLES, *PUNCTUATION_ROLES, END):
                free = [p for p in plan.where(role) if not fixed[b, p]]
                if not free:
                    continue
                allowed = self.classes[role].to(probs.device, probs.dtype)
                rows = out[b, free] * allowed
                total = rows.sum(-1, keepdim=True)
                # A row with no mass left on its tokens becomes uniform over them.
                rows = torch.where(
                    total > 0, rows / total.clamp_min(1e-30), allowed / allowed.sum()
                )
                out[b, free] = rows
            pinned = [(p, t) for p, t in plan.pinned.items() if not fixed[b, p]]
            if pinned:
                positions = torch.tensor([p for p, _ in pinned], device=probs.device)
                tokens = torch.tensor([t for _, t in pinned], device=probs.device)
                out[b, positions] = 0.0
                out[b, positions, tokens] = 1.0
        return out


def _choose(log_weights: np.ndarray, generator: torch.Generator) -> int:
    """An index drawn in proportion to exp(log_weights), with the sample's own generator."""
    weights = np.exp(log_weights - np.max(log_weights))
    cumulative = np.cumsum(np.nan_to_num(weights))
    u = torch.rand((), generator=generator).item() * cumulative[-1]
    return int(min(np.searchsorted(cumulative, u, side="right"), len(cumulative) - 1))
