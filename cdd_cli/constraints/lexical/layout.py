"""The lexical family's closed-form projection: a layout of the continuation's words.

Every lexical constraint names `WordLayout` as its `closed_form()`: the engine builds one layout
for all of them together (`constraints.base.closed_forms`) and applies it at every step.

Word positions are only defined once the text is, and a masked diffusion model fixes tokens in
random order, so word indices cannot be aligned after the fact. Instead every position of the
continuation gets a *role* that makes tokens and words line up by construction (a word,
punctuation, a placed word, the end, the hidden positions after it: `grammar.py`).

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
then renormalises each position's distribution over its role's tokens (a placed word's and
the end-of-text after the end: one-hot; hidden positions: the model's row as it is).

What one projection draws from. Write p_i for the step's prediction at position i (the rows
the step's shaping, temperature and nucleus, then cuts). Drawing every undecided position from
the projection (the layout, then each position from its row) draws a continuation x with
probability

    P(x) = (1/Z) sum over the layouts L that read x of  prod_{i up to the end} p_i(x_i)
           x prod_{neighbouring undecided roles} ROLE_LIFTS[role, next role] (the end unlifted)
           x F_e x prod_{hidden positions h} F_h p_h(x_h)

where "read x" means the roles fit x's tokens, the grammar lets each role follow the one
before, and the constraints hold (the word count, the placed words, no excluded spelling); e
is the end-of-text pinned after the end, and F_i the mass free text (word and punctuation
roles) holds at i. Where a token fits one role only, x has one layout and P(x) is the
prediction's product of rows restricted to the texts the constraints accept, each weighted by
its roles' lifts; a line break fits a break and, last, the end, so it sums two layouts. A step
that decides only some positions draws them from this law's marginals (the layout is drawn
again, given them, at the next step). `tests/constraints/test_closed_form_distribution.py`
checks the law against enumeration on three positions (two words, a comma or a line break).
Over a whole run this is the model's distribution conditioned on the constraints up to these
approximations: the lifts stand in for the dependence between undecided positions (the model
predicts them independently); the positions after the end weigh as free text (F), not as
their own tokens; a paragraph break followed by the end can be read as either role; with
positions from the end but no exact word count, each sample's number of words is drawn once,
without those positions' weights. It keeps the model's own punctuation and sentence ends
where the constraints leave room.

Every step re-draws the layout conditioned on the tokens already decided, so the layout follows
the model as the text forms; the tokens decided so far fit the previous layout, so some layout
always exists (roles the model gives probability 0 keep a tiny weight, so it is found).

Under COLLIE's rules, or where sentences are counted, the roles adapt (`grammar.Grammar`).
The dynamic programme that draws the layouts is `programme.py`.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from cdd_cli.constraints.lexical.grammar import (
    AFTER_END,
    END,
    HIDDEN,
    PLACED,
    Grammar,
    token_classes,
)
from cdd_cli.constraints.lexical.programme import Counting, LayoutProgramme, Plan
from cdd_cli.constraints.lexical.rules import split_words, word_key
from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import TextTokenizer


class WordLayout(LayoutProgramme):
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
        schemes = {c.scheme for c in constraints}
        if len(schemes) > 1:
            raise InputError(f"lexical constraints under different word rules: {sorted(schemes)}")
        scheme = schemes.pop() if schemes else "plain"
        key = partial(word_key, scheme=scheme)
        self.words_of: dict[str, list[int]] = {}
        pins: dict[int, str] = {}
        includes: list[str] = []
        forbidden: set[str] = set()
        low, high = 0, None
        sentence_low, sentence_high, counts_sentences = 0, None, False
        for c in constraints:
            for position, word in c.pinned().items():
                if key(pins.get(position, word)) != key(word):
                    raise InputError(
                        f"word {position} cannot be both {pins[position]!r} and {word!r}"
                    )
                pins[position] = word
            includes += [w for w in c.included() if key(w) not in map(key, includes)]
            forbidden |= {key(w) for w in c.forbidden()}
            c_low, c_high = c.word_bounds()
            low = max(low, c_low or 0)
            if c_high is not None:
                high = c_high if high is None else min(high, c_high)
            s_low, s_high = c.sentence_bounds()
            if s_low is not None or s_high is not None:
                counts_sentences = True
                sentence_low = max(sentence_low, s_low or 0)
                if s_high is not None:
                    sentence_high = s_high if sentence_high is None else min(sentence_high, s_high)
        if sentence_high is not None and sentence_low > sentence_high:
            raise InputError(
                f"the constraints need at least {sentence_low} sentence(s) and at most "
                f"{sentence_high}"
            )
        self.grammar = Grammar(scheme, counts_sentences)
        self.states = self.grammar.states
        self.sentence_bounds = (sentence_low, sentence_high)
        for word in [*pins.values(), *includes]:
            read = split_words(word, scheme)
            if [key(w) for w in read] != [key(word)]:
                raise InputError(
                    f"{word!r} is not one word under the {scheme} word rules (it reads as {read!r})"
                )
            if key(word) in forbidden:
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
        self.includes = [w for w in includes if key(w) not in map(key, pins.values())]
        classes, by_word = token_classes(tokenizer, self.grammar)
        self.classes = dict(classes)
        for role in self.grammar.word_roles:  # no free word spells a forbidden one
            self.classes[role] = classes[role].clone()
            for word in forbidden:
                self.classes[role][by_word.get(word, [])] = False
        self.spellings = {w: by_word.get(key(w), []) for w in self.includes}
        prompt = next((c.prompt for c in constraints), "")
        self.first_state = self.grammar.start_state(prompt)
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
        scores = {r: zero for r in (*self.grammar.punctuation_roles, END, AFTER_END, HIDDEN)}
        scores |= {
            (r, m): zero for r in self.grammar.word_roles for m in range(1 << len(self.includes))
        }
        for word, ids in self.words_of.items():
            starts = np.full((1, self.length), -np.inf, dtype=np.float32)
            starts[:, : max(0, self.length - len(ids) + 1)] = 0.0
            scores[(PLACED, word)] = starts
        scores["lift"] = np.zeros((1, self.length), dtype=bool)
        options = self.word_counts()
        if len(options) > 1:
            slots = {p - 1: w for p, w in self.pins.items() if p > 0}
            counts = [Counting(slots, min(options), max(options), False, self.sentence_counting())]
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
        word_roles = self.grammar.word_roles

        def score(mass: torch.Tensor, fits: torch.Tensor) -> np.ndarray:
            chosen = torch.where(fits, 0.0, -torch.inf)
            # A floor, not 0: a layout the decided tokens allow must keep some weight.
            weight = mass.clamp_min(1e-30).log()
            return torch.where(decided, chosen, weight).cpu().numpy()

        roles = (*self.roles, END)
        # One pass over [B, L, V] for every role's mass.
        masses = dict(
            zip(
                roles,
                (p @ torch.stack([classes[r].float() for r in roles], 1)).unbind(-1),
                strict=True,
            )
        )
        scores: dict = {
            r: score(masses[r], classes[r][tokens]) for r in (*self.grammar.punctuation_roles, END)
        }
        # Positions after the end: the text is over there, and they weigh what free text
        # would weigh in their place, so that a layout ends where the model ends the text,
        # not where ending escapes the layout's restriction to words and punctuation.
        free = sum(masses[r] for r in self.roles)
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
            for r in word_roles:
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
                plans[b] = self.draw(alpha[..., k, :, :], finals[k], part, k, count, generators[b])
        hidden = torch.zeros_like(decided)
        for b, plan in enumerate(plans):
            if plan.end is not None:
                hidden[b, plan.end - self.start + 2 :] = True
        self.last = (decided, hidden)
        return plans  # type: ignore[return-value]

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
            for role in (*self.roles, END):
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
