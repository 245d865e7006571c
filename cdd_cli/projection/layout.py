"""The closed-form projection of lexical constraints: a word layout of the continuation.

Word positions are only well defined once the text is, and a masked diffusion model fixes
tokens in random order, so positions cannot be aligned after the fact. Instead the layout
makes token positions and words line up by construction:

- every free position may only hold a *word token*: a GPT-2 token that is a space and letters
  (" the", " whale"), so each free token is exactly one word under the plain word rules;
- a word a constraint places (`word_at`, the answer of `count`, an `include` word) is pinned
  as the tokens of " word" at its slot (several tokens when BPE splits it: only the first
  starts with a space, so they read as one word, and later slots shift by the extra tokens);
- `word_count` fixes the number of words N; positions after the N words hold end-of-text;
- `exclude` removes the word tokens that are a forbidden word.

Projected at every step, the KL-closest distribution with that support is the model's own,
renormalised over the allowed tokens (a pinned position becomes one-hot), which keeps the
rest of each distribution. `include` words go to the free slots where their tokens cost least,
-sum log p, under the first prediction (the cheapest insertion in KL). The price is fluency:
free positions hold no punctuation, digits or word pieces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

import torch

from cdd_cli.constraints.lexical import LexicalConstraint
from cdd_cli.errors import InputError
from cdd_cli.evaluate.lexical import split_words
from cdd_cli.models.tokenizers import Gpt2Tokenizer

WORD_TOKEN = re.compile(r"^ [A-Za-z]+$")


@cache
def word_token_ids(tokenizer: Gpt2Tokenizer) -> tuple[torch.Tensor, dict[str, list[int]]]:
    """Ids of the word tokens and, for each word, the ids of its tokens."""
    by_word: dict[str, list[int]] = {}
    ids = []
    for token_id in range(tokenizer.mask_id):
        text = tokenizer.token_text(token_id)
        if WORD_TOKEN.match(text):
            ids.append(token_id)
            by_word.setdefault(text[1:], []).append(token_id)
    return torch.tensor(ids), by_word


@dataclass
class Plan:
    """One sample's layout: pinned token per position, free positions, end-of-text positions."""

    pinned: dict[int, int] = field(default_factory=dict)
    free: list[int] = field(default_factory=list)


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
        self.words_of = {}
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
        extra = sum(len(self.words_of[w]) - 1 for w in pins.values()) + sum(
            len(self.words_of[w]) - 1 for w in includes if w not in pins.values()
        )
        capacity = length - extra
        n_words = capacity if high is None else min(high, capacity)
        placed = len(set(pins.values()) | set(includes))
        needed = max([low, placed, *(abs(p) for p in pins)], default=0)
        if n_words < needed or n_words < 1:
            limit = (
                f"word_count allows at most {high}"
                if high is not None and high < capacity
                else f"{length} continuation tokens hold at most {max(capacity, 0)}"
                + (f" (the placed words take {extra + placed} tokens)" if placed else "")
            )
            raise InputError(f"the constraints need {max(needed, 1)} word(s), but {limit}")
        self.n_words = n_words
        self.slots = {(p - 1 if p > 0 else n_words + p): w for p, w in pins.items()}
        if len(self.slots) != len(pins):
            raise InputError("two word positions name the same word slot")
        self.includes = [w for w in includes if w not in self.slots.values()]
        ids, by_word = word_token_ids(tokenizer)
        allowed = torch.zeros(len(tokenizer), dtype=torch.bool)
        allowed[ids] = True
        for word in forbidden:
            allowed[by_word.get(word, [])] = False
        self.allowed = allowed

    def positions(self, slots: dict[int, str]) -> tuple[dict[int, int], list[int]]:
        """Token position of every slot given the words placed so far, and the first
        position after the last word."""
        where, position = {}, self.start
        for slot in range(self.n_words):
            where[slot] = position
            position += len(self.words_of[slots[slot]]) if slot in slots else 1
        return where, list(range(position, self.start + self.length))

    def plan(self, probs: torch.Tensor) -> Plan:
        """The layout of one sample, placing `include` words where they cost least under
        `probs` [L, V] (the first prediction)."""
        slots = dict(self.slots)
        log_probs = probs.float().clamp_min(1e-30).log()
        for word in sorted(self.includes, key=lambda w: -len(self.words_of[w])):
            tokens = self.words_of[word]
            where, _ = self.positions(slots)
            best, best_cost = None, None
            for slot in range(self.n_words):
                if slot in slots or where[slot] + len(tokens) > self.start + self.length:
                    continue
                cost = -sum(log_probs[where[slot] + i, t].item() for i, t in enumerate(tokens))
                if best_cost is None or cost < best_cost:
                    best, best_cost = slot, cost
            slots[best] = word  # the constructor made sure a slot is left
        where, tail = self.positions(slots)
        plan = Plan()
        for slot, position in where.items():
            if slot in slots:
                for i, token in enumerate(self.words_of[slots[slot]]):
                    plan.pinned[position + i] = token
            else:
                plan.free.append(position)
        for position in tail:
            plan.pinned[position] = self.tokenizer.eos_id
        return plan

    def apply(self, probs: torch.Tensor, plans: list[Plan], fixed: torch.Tensor) -> torch.Tensor:
        """Project probs [B, L, V]: free positions renormalised over the allowed tokens, pinned
        positions one-hot; positions the sampler already fixed are left as they are."""
        out = probs.clone()
        allowed = self.allowed.to(probs.device, probs.dtype)
        for b, plan in enumerate(plans):
            free = [p for p in plan.free if not fixed[b, p]]
            if free:
                rows = out[b, free] * allowed
                total = rows.sum(-1, keepdim=True)
                # A row with no mass left on allowed tokens becomes uniform over them.
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


def layout_for(
    constraints: list, tokenizer: Gpt2Tokenizer, start: int, length: int
) -> WordLayout | None:
    """The layout of the lexical ones among `constraints` (None without any); InputError when
    no continuation of `length` tokens after `start` can satisfy them."""
    lexical = [c for c in constraints if isinstance(c, LexicalConstraint)]
    return WordLayout(lexical, tokenizer, start, length) if lexical else None
