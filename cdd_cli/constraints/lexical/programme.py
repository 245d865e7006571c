"""The word layout's dynamic programme: layouts drawn in proportion to their weight.

A layout is drawn with probability proportional to its weight (`layout.py` says what
the weights are) by exact forward filtering and backward sampling over (position, includes
placed, grammar state, words so far, sentences stopped so far): `forward` sums the weight of
every prefix, `finals` adds the end, and `draw` samples one layout backwards from them with
the sample's own generator. `Counting` says what it counts for one sample; `Plan` is what it
draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from cdd_cli.constraints.lexical.grammar import (
    AFTER_END,
    END,
    HIDDEN,
    PLACED,
    PUNCT,
    PUNCTUATION_ROLES,
    ROLE_LIFTS,
    STOP,
    WORD_ROLES,
    Grammar,
    State,
)
from cdd_cli.constraints.lexical.rules import word_key
from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import TextTokenizer


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
        """Free words' positions (any word role: "word", "bare capital", ...)."""
        return sorted(p for p, r in self.roles.items() if r.split()[0] in WORD_ROLES)

    @property
    def punctuation(self) -> list[int]:
        return self.where(*PUNCTUATION_ROLES, STOP)


@dataclass(frozen=True)
class Counting:
    """What the dynamic programme counts: `slots` maps 0-based word slots to placed words;
    words beyond `top` are counted as `top` when `saturate` (nothing depends on them).
    Sentences likewise (`sentences`: low, top, saturate; (0, 0, True) when not counted)."""

    slots: dict[int, str]
    low: int
    top: int
    saturate: bool
    sentences: tuple[int, int, bool] = (0, 0, True)


class LayoutProgramme:
    """The programme over one job's roles; `WordLayout` sets what it reads: the grammar and
    its states, the continuation's `start` and `length`, the placed words (`pins` by
    position, `includes`, each word's tokens in `words_of`) and the word and sentence
    bounds."""

    tokenizer: TextTokenizer
    start: int
    length: int
    grammar: Grammar
    states: tuple[State, ...]
    first_state: int
    words_of: dict[str, list[int]]
    pins: dict[int, str]
    includes: list[str]
    low: int
    high: int | None
    most: int
    needed: int
    sentence_bounds: tuple[int, int | None]

    @property
    def roles(self) -> tuple[str, ...]:
        """Every one-token role of this layout's grammar (words, punctuation, stops)."""
        return (*self.grammar.word_roles, *self.grammar.punctuation_roles)

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

    def sentence_counting(self) -> tuple[int, int, bool]:
        """(low, top, saturate) of the sentences counted: beyond `top` counted as `top` when
        only a lower bound is given; (0, 0, True) when no constraint counts them."""
        low, high = self.sentence_bounds
        return (low, high, False) if high is not None else (low, low, True)

    def counting(self, n_words: int | None) -> Counting | None:
        """The counting for samples with `n_words` words (None: free within the bounds);
        None when two positions then name one word slot with different words."""
        if n_words is None:
            slots = {p - 1: w for p, w in self.pins.items()}
            low, high = self.low, self.most if self.high is not None else None
        else:
            slots = {}
            for p, word in self.pins.items():
                slot = p - 1 if p > 0 else n_words + p
                if word_key(slots.setdefault(slot, word), self.grammar.scheme) != word_key(
                    word, self.grammar.scheme
                ):
                    return None
            low = high = n_words
        # All placed slots come before `top`, so beyond it only an upper bound needs counting.
        top = high if high is not None else max([low, *(s + 1 for s in slots)])
        return Counting(slots, low, top, high is None, self.sentence_counting())

    # ----------------------------------------------------------------------------------------
    # The programme

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
                lift = ROLE_LIFTS[self.states[state].lift, self.grammar.lift_role(role)]
            lifted = scores[key, state] = scores[key] + np.log(lift) * scores["lift"]
        return lifted

    def weight(self, scores: dict, key, state: int, role: str, i: int) -> np.ndarray:
        """[B] the `lifted` weight at position i."""
        return self.lifted(scores, key, state, role)[:, i]

    def moves(self, role: str, word: str | None = None) -> list[tuple[int, list[int]]]:
        """`role`'s moves (for PLACED: placing `word`), grouped by the state they lead to:
        (to, [from ...])."""
        to = {q: self.grammar.next_state(q, role, word) for q in range(len(self.states))}
        return [(t, [q for q in to if to[q] == t]) for t in sorted(set(to.values()) - {None})]

    def forward(self, scores: dict, count: Counting) -> np.ndarray:
        """alpha[i, m, q, b, w, s]: log total weight of the role sequences of the first i
        positions that placed the include words in bitmask m, end in state q and hold w words
        (w = top: at least top when saturated) and s stopped sentences (likewise)."""
        n, length, states = len(scores[PUNCT]), self.length, range(len(self.states))
        masks = 1 << len(self.includes)
        _, sentence_top, sentence_saturate = count.sentences
        alpha = np.full(
            (length + 1, masks, len(self.states), n, count.top + 1, sentence_top + 1),
            -np.inf,
            np.float32,
        )
        alpha[0, 0, self.first_state, :, 0, 0] = 0.0
        placed_slot = np.zeros((count.top + 1, 1), dtype=bool)
        placed_slot[[s for s in count.slots if s <= count.top]] = True
        grammar = self.grammar

        def stacked(key, role: str) -> np.ndarray:  # [states, B, L]
            return np.stack([self.lifted(scores, key, q, role) for q in states])

        moves = {role: self.moves(role) for role in self.roles}
        placing = {w: self.moves(PLACED, w) for w in self.words_of}
        weights = {r: stacked(r, r) for r in grammar.punctuation_roles}
        weights |= {(r, m): stacked((r, m), r) for r in grammar.word_roles for m in range(masks)}
        weights |= {(PLACED, w): stacked((PLACED, w), PLACED) for w in self.words_of}

        def arrive(source: np.ndarray, weight: np.ndarray, sources) -> np.ndarray:
            """[B, W, S]: the summed weight of moving from each of `sources` states."""
            return np.logaddexp.reduce(source[sources] + weight[sources, :, None, None], axis=0)

        def add_word(target: np.ndarray, moved: np.ndarray) -> None:
            # One more free or include word: w -> w + 1 where slot w is not placed.
            moved = np.where(placed_slot, -np.inf, moved)
            np.logaddexp(target[:, 1:], moved[:, :-1], out=target[:, 1:])
            if count.saturate:
                np.logaddexp(target[:, -1], moved[:, -1], out=target[:, -1])

        def add_sentence(target: np.ndarray, moved: np.ndarray) -> None:
            np.logaddexp(target[..., 1:], moved[..., :-1], out=target[..., 1:])
            if sentence_saturate:
                np.logaddexp(target[..., -1], moved[..., -1], out=target[..., -1])

        with np.errstate(invalid="ignore"):
            for i in range(length):
                for m in range(masks):
                    source = alpha[i, m]  # [states, B, W, S]
                    if not np.isfinite(source).any():
                        continue
                    for role in grammar.punctuation_roles:
                        for to, sources in moves[role]:
                            moved = arrive(source, weights[role][..., i], sources)
                            if role == STOP:
                                add_sentence(alpha[i + 1, m, to], moved)
                            else:
                                target = alpha[i + 1, m, to]
                                np.logaddexp(target, moved, out=target)
                    for role in grammar.word_roles:
                        for to, sources in moves[role]:
                            moved = arrive(source, weights[role, m][..., i], sources)
                            add_word(alpha[i + 1, m, to], moved)
                    for slot, word in count.slots.items():
                        end = i + len(self.words_of[word])
                        if end <= length:
                            weight = weights[PLACED, word][..., i]  # [states, B]
                            for to, sources in placing[word]:
                                moved = np.logaddexp.reduce(
                                    source[sources, :, slot] + weight[sources, :, None], axis=0
                                )
                                target = alpha[end, m, to, :, slot + 1]
                                np.logaddexp(target, moved, out=target)
                    for j, word in enumerate(self.includes):
                        end = i + len(self.words_of[word])
                        if not m >> j & 1 and end <= length:
                            weight = weights[PLACED, word][..., i]
                            for to, sources in placing[word]:
                                add_word(
                                    alpha[end, m | 1 << j, to], arrive(source, weight, sources)
                                )
        return alpha

    def finals(self, alpha: np.ndarray, scores: dict, count: Counting) -> np.ndarray:
        """log weight [B, L + 1, states, top + 1, sentences top + 1] of ending after i
        positions in a state with w words and s stopped sentences (then end-of-text, then
        hidden), -inf where the constraints are not met."""
        after, hidden = scores[AFTER_END], scores[HIDDEN]
        n = len(after)
        hidden_from = np.cumsum(hidden[:, ::-1], axis=1)[:, ::-1]  # sum over positions >= j
        hidden_from = np.concatenate([hidden_from, np.zeros((n, 2))], axis=1)
        # The end at i: end-of-text at i + 1, hidden from i + 2.
        behind = np.concatenate([after[:, 1:], np.zeros((n, 1))], axis=1)
        behind = behind + hidden_from[:, 2 : self.length + 2]
        tail = np.zeros((n, self.length + 1, len(self.states)))
        for q in range(len(self.states)):
            tail[:, :-1, q] = self.lifted(scores, END, q, END) + behind
        last = max([count.low, *(s + 1 for s in count.slots)])
        words_ok = np.arange(count.top + 1) >= last  # [W]
        # The text's sentences: those stopped, plus the one it is in unless nothing but
        # whitespace came since the last stop (or the start).
        low, top, saturate = count.sentences
        open_sentence = np.array([not q.fresh for q in self.states])  # [Q]
        sentences = np.arange(top + 1)[None, :] + open_sentence[:, None]  # [Q, S]
        if saturate:
            sentences = np.minimum(sentences, top)
        sentences_ok = (sentences >= low) & (sentences <= top)  # [Q, S]
        ok = words_ok[None, :, None] & sentences_ok[:, None, :]  # [Q, W, S]
        with np.errstate(invalid="ignore"):
            weights = alpha[:, -1].transpose(2, 0, 1, 3, 4) + tail[..., None, None]
        return np.where(ok, weights, -np.inf)

    def draw_counts(
        self, scores: dict, options: list[int], generators: list[torch.Generator]
    ) -> list[int]:
        """For positions counted from the end without an exact word count: each sample's
        number of words, drawn in proportion to the total weight of the layouts with that many
        words under the other constraints (one pass that counts every word; the positions
        from the end weigh in once the number is drawn, which is cheaper than a pass per
        number and only approximately the exact conditional)."""
        slots = {p - 1: w for p, w in self.pins.items() if p > 0}
        count = Counting(slots, min(options), max(options), False, self.sentence_counting())
        finals = self.finals(self.forward(scores, count), scores, count)  # [B, L+1, Q, W+1, S]
        totals = np.logaddexp.reduce(
            np.moveaxis(finals, 3, 1).reshape(len(finals), count.top + 1, -1), axis=2
        )
        feasible = [self.counting(n) is not None for n in options]
        weights = np.where(feasible, totals[:, options], -np.inf)
        return [options[_choose(row, g)] for row, g in zip(weights, generators, strict=True)]

    def draw(
        self,
        alpha: np.ndarray,
        finals: np.ndarray,
        scores: dict,
        b: int,
        count: Counting,
        generator: torch.Generator,
    ) -> Plan:
        """Backward sampling of one sample's layout; alpha [L + 1, masks, states, top + 1,
        sentences top + 1]."""
        flat = finals.reshape(-1)
        if not np.isfinite(flat).any():
            raise InputError("no continuation fits the lexical constraints together")
        i, q, w, s = np.unravel_index(_choose(flat, generator), finals.shape)
        i, q, w, s = int(i), int(q), int(w), int(s)
        m = (1 << len(self.includes)) - 1
        grammar, states = self.grammar, range(len(self.states))
        _, sentence_top, sentence_saturate = count.sentences
        plan = Plan()
        if i < self.length:
            plan.end = self.start + i
            plan.roles[plan.end] = END
        if i + 1 < self.length:
            plan.pinned[self.start + i + 1] = self.tokenizer.eos_id
        while i > 0:
            # Every move that ends in state (i, m, q, w, s): (role, previous i, m, q, w, s,
            # word placed).
            moves = []
            for p in states:
                for role in PUNCTUATION_ROLES:
                    if grammar.next_state(p, role) == q:
                        moves.append((role, i - 1, m, p, w, s, None))
                if grammar.sentences and grammar.next_state(p, STOP) == q:
                    before = [s - 1] if s > 0 else []
                    if sentence_saturate and s == sentence_top:
                        before.append(s)
                    moves += [(STOP, i - 1, m, p, w, s_, None) for s_ in before]
            previous = [w - 1] if w > 0 else []
            if count.saturate and w == count.top:
                previous.append(w)
            for p in states:
                if w > 0 and (w - 1) in count.slots:
                    word = count.slots[w - 1]
                    if grammar.next_state(p, PLACED, word) == q:
                        span = len(self.words_of[word])
                        moves.append((PLACED, i - span, m, p, w - 1, s, word))
                for v in (v for v in previous if v not in count.slots):
                    for role in grammar.word_roles:
                        if grammar.next_state(p, role) == q:
                            moves.append((role, i - 1, m, p, v, s, None))
                    for j, word in enumerate(self.includes):
                        if m >> j & 1 and grammar.next_state(p, PLACED, word) == q:
                            span = len(self.words_of[word])
                            moves.append((PLACED, i - span, m ^ 1 << j, p, v, s, word))
            moves = [move for move in moves if move[1] >= 0]
            weights = []
            for role, i_, m_, p, w_, s_, word in moves:
                key = (PLACED, word) if word else (role, m_) if role in grammar.word_roles else role
                weights.append(alpha[i_, m_, p, w_, s_] + self.weight(scores, key, p, role, i_)[b])
            role, i, m, q, w, s, word = moves[_choose(np.array(weights), generator)]
            if word is None:
                plan.roles[self.start + i] = role
                if role in grammar.word_roles and (waiting := self.waiting_tokens(m)):
                    plan.not_yet[self.start + i] = waiting
            else:
                plan.placed.append([self.start + i + k for k in range(len(self.words_of[word]))])
                for k, token in enumerate(self.words_of[word]):
                    plan.pinned[self.start + i + k] = token
        return plan


def _choose(log_weights: np.ndarray, generator: torch.Generator) -> int:
    """An index drawn in proportion to exp(log_weights), with the sample's own generator."""
    weights = np.exp(log_weights - np.max(log_weights))
    cumulative = np.cumsum(np.nan_to_num(weights))
    u = torch.rand((), generator=generator).item() * cumulative[-1]
    return int(min(np.searchsorted(cumulative, u, side="right"), len(cumulative) - 1))
