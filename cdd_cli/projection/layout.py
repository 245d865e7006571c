"""The closed-form projection of lexical constraints: a layout of the continuation's words.

Word positions are only defined once the text is, and a masked diffusion model fixes tokens in
random order, so word indices cannot be aligned after the fact. Instead every position of the
continuation gets a *role* that makes tokens and words line up by construction:

- a free word: a GPT-2 token that is a space and letters (" the", " whale"), exactly one word
  under the plain word rules;
- punctuation: a token of only punctuation, symbols or line breaks (",", ".\\n\\n", '"'). It
  attaches to the word before it or stands alone, and the word rules strip it: no word;
- a placed word (`word_at`, the answer of `count`, an `include` word): the tokens of " word"
  (several when BPE splits it: only the first starts with a space, so they read as one word);
- end: a paragraph break or end-of-text, after which every token is end-of-text (the text is
  over). A model trained on documents ends a paragraph far more often than a document, and
  either ends what the judges read. Its weight is the model's probability of ending there;
  the positions after it weigh what free text would weigh in their place.

A *layout* is a role per position that satisfies every constraint: the word at position k is
the k-th word-role, `word_count` bounds the number of words before the end, `include` words are
placed once each (free words before the placement are not that word, so a text that uses it
twice has one layout, not two), `exclude` removes the word tokens that spell a forbidden word.
Given the model's p(x_0 | x_t), a layout's weight is the product over positions of the mass its
role holds. The projection draws a layout with probability proportional to that weight (exact
forward filtering, backward sampling over (position, words so far, includes placed)), then
renormalises each position's distribution over its role's tokens. Sampling tokens from the
result samples the model's factorised distribution conditioned on the constraints (the KL
projection of that distribution onto the texts they allow), restricted to these roles and up
to three approximations: the positions after the end weigh as free text; a paragraph break
followed by the end can be read as either role; and with positions from the end but no exact
word count, each sample's number of words is drawn once, without those positions' weights.
It keeps the model's own punctuation and sentence ends where the constraints leave room.

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

from cdd_cli.constraints.lexical import LexicalConstraint
from cdd_cli.errors import InputError
from cdd_cli.evaluate.lexical import split_words
from cdd_cli.models.tokenizers import Gpt2Tokenizer

WORD_TOKEN = re.compile(r"^ [A-Za-z]+$")
NEUTRAL, WORD, PLACED, END, AFTER_END = "neutral", "word", "placed", "end", "after end"


def is_punctuation(text: str) -> bool:
    """Only punctuation, symbols and line breaks: the plain word rules read it as no word and
    it cannot join two words into one."""
    # U+FFFD stands for a token's partial UTF-8 bytes, which may complete a letter.
    return bool(text) and all(
        ch in "\n\r" or (ch != "\ufffd" and unicodedata.category(ch)[0] in "PS") for ch in text
    )


@cache
def token_classes(
    tokenizer: Gpt2Tokenizer,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """Word, punctuation and end tokens (end-of-text and line breaks alone) as boolean masks
    over the vocabulary, and the ids of the word tokens of each word."""
    words = torch.zeros(len(tokenizer), dtype=torch.bool)
    punctuation = torch.zeros(len(tokenizer), dtype=torch.bool)
    ends = torch.zeros(len(tokenizer), dtype=torch.bool)
    ends[tokenizer.eos_id] = True
    by_word: dict[str, list[int]] = {}
    for token_id in range(tokenizer.mask_id):
        if token_id == tokenizer.eos_id:
            continue
        text = tokenizer.token_text(token_id)
        if WORD_TOKEN.match(text):
            words[token_id] = True
            by_word.setdefault(text[1:], []).append(token_id)
        elif is_punctuation(text):
            punctuation[token_id] = True
            ends[token_id] = set(text) <= set("\r\n")
    return words, punctuation, ends, by_word


@dataclass
class Plan:
    """One sample's layout: token per placed position (placed words, end-of-text after the
    end), and the positions that hold a free word, punctuation, or the end."""

    pinned: dict[int, int] = field(default_factory=dict)
    words: list[int] = field(default_factory=list)
    not_yet: dict[int, list[int]] = field(default_factory=dict)  # free word: not these
    punctuation: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Counting:
    """What the dynamic programme counts: `slots` maps 0-based word slots to placed words;
    words beyond `top` are counted as `top` when `saturate` (nothing depends on them)."""

    slots: dict[int, str]
    low: int
    top: int
    saturate: bool


class WordLayout:
    def __init__(
        self,
        constraints: list[LexicalConstraint],
        tokenizer: Gpt2Tokenizer,
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
        words, punctuation, ends, by_word = token_classes(tokenizer)
        self.allowed = words.clone()
        for word in forbidden:
            self.allowed[by_word.get(word, [])] = False
        self.punctuation, self.ends = punctuation, ends
        self.check_some_layout_exists()
        # With positions counted from the end, the number of words is drawn once per sample.
        self.counts: list[int] | None = None

    def check_some_layout_exists(self) -> None:
        """InputError unless some layout fits: the dynamic programme with every role weighing
        1 wherever it fits. (With positions from the end and no exact count, each sample's
        count is checked when drawn.)"""
        zero = np.zeros((1, self.length), dtype=np.float32)
        scores = {NEUTRAL: zero, END: zero, AFTER_END: zero}
        scores |= {(WORD, m): zero for m in range(1 << len(self.includes))}
        for word, ids in self.words_of.items():
            starts = np.full((1, self.length), -np.inf, dtype=np.float32)
            starts[:, : max(0, self.length - len(ids) + 1)] = 0.0
            scores[(PLACED, word)] = starts
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

    def role_scores(self, probs: torch.Tensor, x: torch.Tensor, fixed: torch.Tensor) -> dict:
        """log mass of each role at each continuation position, [B, L] (and for each placed
        word, of its tokens starting there); a decided position scores 0 for the roles its
        token fits and -inf for the others."""
        s, e = self.start, self.start + self.length
        p = probs[:, s:e].float()
        decided, tokens = fixed[:, s:e], x[:, s:e]
        classes = (self.allowed, self.punctuation, self.ends)
        allowed, punctuation, ends = (c.to(p.device) for c in classes)

        def score(mass: torch.Tensor, fits: torch.Tensor) -> np.ndarray:
            chosen = torch.where(fits, 0.0, -torch.inf)
            # A floor, not 0: a layout the decided tokens allow must keep some weight.
            weight = mass.clamp_min(1e-30).log()
            return torch.where(decided, chosen, weight).cpu().numpy()

        # One pass over [B, L, V] for the three masses.
        word_mass, punctuation_mass, end_mass = (
            p @ torch.stack([c.float() for c in (allowed, punctuation, ends)], dim=1)
        ).unbind(-1)
        scores = {
            WORD: score(word_mass, allowed[tokens]),
            NEUTRAL: score(punctuation_mass, punctuation[tokens]),
            END: score(end_mass, ends[tokens]),
            # Positions after the end: the text is over there, and they weigh what free text
            # would weigh in their place, so that a layout ends where the model ends the text,
            # not where ending escapes the layout's restriction to words and punctuation.
            AFTER_END: score(word_mass + punctuation_mass, tokens == self.tokenizer.eos_id),
        }
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
            waiting = self.waiting_tokens(m)
            if waiting:
                ids = torch.tensor(waiting, device=p.device)
                mass = word_mass - p[..., ids].sum(-1)
                scores[(WORD, m)] = score(mass, allowed[tokens] & ~torch.isin(tokens, ids))
            else:
                scores[(WORD, m)] = scores[WORD]
        return scores

    def waiting_tokens(self, m: int) -> list[int]:
        """The one-token include words not in bitmask m (multi-token ones are never a free
        word)."""
        return [
            self.words_of[w][0]
            for j, w in enumerate(self.includes)
            if not m >> j & 1 and len(self.words_of[w]) == 1
        ]

    def forward(self, scores: dict[str, np.ndarray], count: _Counting) -> np.ndarray:
        """alpha[i, m, b, w]: log total weight of the role sequences of the first i positions
        that placed the include words in bitmask m and hold w words (w = top: at least top
        when saturated)."""
        n, length = len(scores[NEUTRAL]), self.length
        masks = 1 << len(self.includes)
        alpha = np.full((length + 1, masks, n, count.top + 1), -np.inf, dtype=np.float32)
        alpha[0, 0, :, 0] = 0.0
        placed_slot = np.zeros(count.top + 1, dtype=bool)
        placed_slot[[s for s in count.slots if s <= count.top]] = True

        def add_word(target: np.ndarray, source: np.ndarray, score: np.ndarray) -> None:
            # One more free or include word: w -> w + 1 where slot w is not placed.
            moved = np.where(placed_slot, -np.inf, source + score[:, None])
            np.logaddexp(target[:, 1:], moved[:, :-1], out=target[:, 1:])
            if count.saturate:
                np.logaddexp(target[:, -1], moved[:, -1], out=target[:, -1])

        with np.errstate(invalid="ignore"):
            for i in range(length):
                for m in range(masks):
                    source = alpha[i, m]
                    if not np.isfinite(source).any():
                        continue
                    np.logaddexp(alpha[i + 1, m], source + scores[NEUTRAL][:, i, None],
                                 out=alpha[i + 1, m])  # fmt: skip
                    add_word(alpha[i + 1, m], source, scores[(WORD, m)][:, i])
                    for slot, word in count.slots.items():
                        end = i + len(self.words_of[word])
                        if end <= length:
                            target = alpha[end, m, :, slot + 1]
                            np.logaddexp(target, source[:, slot] + scores[(PLACED, word)][:, i],
                                         out=target)  # fmt: skip
                    for j, word in enumerate(self.includes):
                        end = i + len(self.words_of[word])
                        if not m >> j & 1 and end <= length:
                            add_word(alpha[end, m | 1 << j], source, scores[(PLACED, word)][:, i])
        return alpha

    def finals(self, alpha: np.ndarray, scores: dict[str, np.ndarray], count: _Counting):
        """log weight [B, L + 1, top + 1] of ending after i positions with w words (the rest
        end of text), -inf where the constraints are not met."""
        after = scores[AFTER_END]
        behind = np.cumsum(after[:, ::-1], axis=1)[:, ::-1]  # sum over positions >= i
        behind = np.concatenate([behind[:, 1:], np.zeros((len(after), 1))], axis=1)
        tail = np.concatenate([scores[END] + behind, np.zeros((len(after), 1))], axis=1)
        last = max([count.low, *(s + 1 for s in count.slots)])
        ok = np.arange(count.top + 1) >= last
        with np.errstate(invalid="ignore"):
            weights = alpha[:, -1].transpose(1, 0, 2) + tail[:, :, None]
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
        consistent with the tokens of `x` already decided (`fixed`)."""
        scores = self.role_scores(probs, x, fixed)
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
                plans[b] = self.draw(alpha[:, :, k], finals[k], part, k, count, generators[b])
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
        finals = self.finals(self.forward(scores, count), scores, count)  # [B, L + 1, W + 1]
        totals = np.logaddexp.reduce(finals, axis=1)
        feasible = [self.counting(n) is not None for n in options]
        weights = np.where(feasible, totals[:, options], -np.inf)
        return [options[_choose(row, g)] for row, g in zip(weights, generators, strict=True)]

    def draw(
        self,
        alpha: np.ndarray,
        finals: np.ndarray,
        scores: dict[str, np.ndarray],
        b: int,
        count: _Counting,
        generator: torch.Generator,
    ) -> Plan:
        """Backward sampling of one sample's layout; alpha [L + 1, masks, top + 1]."""
        flat = finals.reshape(-1)
        if not np.isfinite(flat).any():
            raise InputError("no continuation fits the lexical constraints together")
        i, w = divmod(_choose(flat, generator), count.top + 1)
        m = (1 << len(self.includes)) - 1
        plan = Plan()
        if i < self.length:
            plan.end.append(self.start + i)
        for position in range(i + 1, self.length):
            plan.pinned[self.start + position] = self.tokenizer.eos_id
        while i > 0:
            # Every move that ends in state (i, m, w): (role, previous i, m, w, placed word).
            moves = [(NEUTRAL, i - 1, m, w, None)]
            if w > 0 and (w - 1) in count.slots:
                word = count.slots[w - 1]
                moves.append((PLACED, i - len(self.words_of[word]), m, w - 1, word))
            previous = [w - 1] if w > 0 else []
            if count.saturate and w == count.top:
                previous.append(w)
            for v in (v for v in previous if v not in count.slots):
                moves.append((WORD, i - 1, m, v, None))
                for j, word in enumerate(self.includes):
                    if m >> j & 1:
                        moves.append((PLACED, i - len(self.words_of[word]), m ^ 1 << j, v, word))
            moves = [move for move in moves if move[1] >= 0]
            key = {NEUTRAL: NEUTRAL, WORD: (WORD, m)}
            weights = [
                alpha[i_, m_, w_] + scores[(PLACED, word) if word else key[role]][b, i_]
                for role, i_, m_, w_, word in moves
            ]
            role, i, m, w, word = moves[_choose(np.array(weights), generator)]
            if role == NEUTRAL:
                plan.punctuation.append(self.start + i)
            elif role == WORD:
                plan.words.append(self.start + i)
                if waiting := self.waiting_tokens(m):
                    plan.not_yet[self.start + i] = waiting
            else:
                for k, token in enumerate(self.words_of[word]):
                    plan.pinned[self.start + i + k] = token
        plan.words.reverse()
        plan.punctuation.reverse()
        return plan

    # ----------------------------------------------------------------------------------------
    # The projection

    def apply(self, probs: torch.Tensor, plans: list[Plan], fixed: torch.Tensor) -> torch.Tensor:
        """Project probs [B, L, V]: each position renormalised over its role's tokens (placed
        positions one-hot); positions the sampler already fixed are left as they are."""
        out = probs.clone()
        for b, plan in enumerate(plans):
            for position, tokens in plan.not_yet.items():
                if not fixed[b, position]:
                    out[b, position, tokens] = 0.0
            for positions, allowed in (
                (plan.words, self.allowed),
                (plan.punctuation, self.punctuation),
                (plan.end, self.ends),
            ):
                free = [p for p in positions if not fixed[b, p]]
                if not free:
                    continue
                allowed = allowed.to(probs.device, probs.dtype)
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


def layout_for(
    constraints: list, tokenizer: Gpt2Tokenizer, start: int, length: int
) -> WordLayout | None:
    """The layout of the lexical ones among `constraints` (None without any); InputError when
    no continuation of `length` tokens after `start` can satisfy them."""
    lexical = [c for c in constraints if isinstance(c, LexicalConstraint)]
    return WordLayout(lexical, tokenizer, start, length) if lexical else None
