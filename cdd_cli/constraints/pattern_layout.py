"""The closed-form projection of a pattern (`regex`, `json_schema`): a path through the
pattern's token automaton, drawn at every step, that the continuation's tokens must follow.

A masked diffusion model decides tokens out of order, so the next-token masks of
autoregressive structured generation do not apply. What does: every position of the
continuation gets an *edge* of the token automaton (`automaton.py`), a move from one state
to the next, so that the states line up from the start state at the first position to an
accepting one at the end. Any tokens drawn from the edges' token sets then spell a match,
whichever positions are decided first and in whatever order, and the decoded continuation
`fullmatch`es the pattern by construction. After an accepting state the path may take the
end-of-text token and then *hidden* positions (after the end, which no judge reads) that are
left to the model, as the word layout does.

Given the prediction p(x_0 | x_t) [B, L, V], a path's weight is the product over positions of
the mass its edge's tokens hold there (a decided position: 1 if its token is in the set, else
0). The projection draws a path in proportion to that weight (forward filtering, backward
sampling over (position, state), vectorised over the batch), then renormalises each
undecided position's distribution over its edge's tokens: the distribution closest in KL to
the prediction among those whose every draw keeps the path, and the model's distribution
conditioned on the pattern up to the independence of positions the model assumes. A path is
drawn rather than the most probable one taken, so that a choice the pattern leaves open
(an enumeration, an optional field) is made as often as the model makes it, not always its
mode; the argmax of the projection is the most probable sequence along the drawn path.

Every step re-draws the path given the tokens decided so far; those were drawn from the last
path's sets, so that path still fits them and some path always exists (an edge the model
gives no mass keeps a tiny weight, so it is found).

What one projection draws from. Write p_i for the step's prediction at position i (the rows
the step's shaping, temperature and nucleus, then cuts). Drawing every undecided position from
the projection (the path, then each position from its renormalised row) draws a continuation
x with probability

    P(x) = prod_i p_i(x_i) [x's text, up to its first end-of-text, fullmatches] / Z

with the decided positions held and the positions after an end-of-text summed out (their
rows are the model's): the prediction's product of rows conditioned on matching, exactly. The
token automaton is deterministic, so x follows one path, of weight prod_i m_i (m_i: the mass
of its edge's set), and P(x) = (prod_i m_i / Z) prod_i p_i(x_i) / m_i; an edge the model gives
no mass weighs 1e-30 instead of 0. A step that decides only some positions draws them from
this law's marginals. `tests/constraints/test_closed_form_distribution.py` checks the law
against enumeration (three positions, six tokens, `(cat|dog)( (cat|dog))*`). Over a whole run
the samples are the model's distribution conditioned on the pattern only up to the
independence of positions within one prediction: a path is weighed by the later positions'
marginal masses, not by their mass given the earlier choice, so where the model ties the
positions together (a word, then the end of the text) the choice drifts from the model's:
`bench/fidelity_text.py`, setting `structured`, measures it against the sampler's exact law.
`projection.lookahead` closes it at the cost of a forward per decision (`candidates`,
`rows_along` and `log_weight` serve `stages.ClosedFormLookAhead`, which weighs a decision by
the match mass of what follows under the model's next prediction given it).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from cdd_cli.constraints.automaton import TokenAutomaton
from cdd_cli.errors import InputError

TINY = 1e-30  # the weight of an edge the model gives no mass: unlikely, still possible (float32)
FREE = -1  # a hidden position's set: every token
SMALL_ATOM = 2048  # atoms of at most this many tokens are gathered, larger ones multiplied
ROWS = 8  # positions renormalised at once: their rows and masks (3 MB at 50,257 tokens) cached


@dataclass
class PathPlan:
    """One sample's drawn path: per continuation position, the token set its edge allows
    (an index into the layout's sets, or FREE after the end)."""

    sets: list[int]


class PatternLayout:
    """The closed form for one token automaton, over the continuation of `length` tokens that
    starts at position `start` (`placed`: the edges, sets and atoms are built once per
    automaton and shared by the layouts of every batch)."""

    start = 0
    length = 0

    def __init__(
        self,
        automaton: TokenAutomaton,
        vocab_size: int,
        eos_id: int,
        banned: torch.Tensor | None = None,
    ):
        """`banned`: token ids no edge may take (they spell an excluded word)."""
        if banned is not None and len(banned):
            keep = ~torch.isin(automaton.token, banned)
            automaton = replace(
                automaton,
                src=automaton.src[keep],
                token=automaton.token[keep],
                dst=automaton.dst[keep],
            )
        self.shortest = automaton.shortest()
        if self.shortest is None:
            raise InputError("no text matches the pattern with this tokenizer")
        self.vocab_size = vocab_size
        self.edges_from_automaton(automaton, eos_id)

    def placed(self, start: int, length: int) -> PatternLayout:
        """This layout for the continuation of `length` tokens from position `start`;
        InputError where the shortest match does not fit."""
        if self.shortest > length:
            raise InputError(
                f"the shortest text that matches the pattern takes {self.shortest} tokens; "
                f"the continuation has {length}"
            )
        layout = copy.copy(self)
        layout.start, layout.length = start, length
        return layout

    def edges_from_automaton(self, automaton: TokenAutomaton, eos_id: int) -> None:
        """Edges (src -> dst, token set), one per pair of states some token joins; the token
        sets deduplicated (most edges of a pattern share a handful of character classes)."""
        s = automaton.states
        self.end = s  # after end-of-text: every token allowed, nothing read
        self.states = s + 1
        order = torch.argsort(automaton.src * self.states + automaton.dst, stable=True)
        src, dst, token = automaton.src[order], automaton.dst[order], automaton.token[order]
        pair = src * self.states + dst
        starts = torch.ones(len(pair), dtype=torch.bool)
        starts[1:] = pair[1:] != pair[:-1]
        bounds = [*starts.nonzero().squeeze(-1).tolist(), len(pair)]
        ids: dict[bytes, int] = {}
        token_sets: list[torch.Tensor] = []
        edge_src, edge_dst, edge_set = [], [], []
        for a, b in itertools.pairwise(bounds):
            tokens = torch.sort(token[a:b]).values
            key = tokens.numpy().tobytes()
            if key not in ids:
                ids[key] = len(token_sets)
                token_sets.append(tokens)
            edge_src.append(int(src[a]))
            edge_dst.append(int(dst[a]))
            edge_set.append(ids[key])
        eos_set = len(token_sets)
        token_sets.append(torch.tensor([eos_id]))
        for f in automaton.final.nonzero().squeeze(-1).tolist():
            edge_src.append(f)
            edge_dst.append(self.end)
            edge_set.append(eos_set)
        edge_src.append(self.end)
        edge_dst.append(self.end)
        edge_set.append(FREE)
        self.src = torch.tensor(edge_src)
        self.dst = torch.tensor(edge_dst)
        self.edge_set = torch.tensor(edge_set)
        # Each edge's column of the plan's masses [.., U + 1] (FREE: the last one, of ones).
        self.edge_column = torch.where(self.edge_set == FREE, len(token_sets), self.edge_set)
        self.incoming_edges()
        self.accepting = torch.zeros(self.states, dtype=torch.bool)
        self.accepting[:s] = automaton.final
        self.accepting[self.end] = True
        # Each set as a mask [U, V] (membership, and the projection's renormalisation).
        self.masks = torch.zeros(len(token_sets), self.vocab_size, dtype=torch.bool)
        for u, tokens in enumerate(token_sets):
            self.masks[u, tokens] = True
        # By (dtype, device); one dict shared by every placed copy.
        self._multipliers: dict[tuple, torch.Tensor] = {}
        self.mass_by_atoms()

    def incoming_edges(self) -> None:
        """`incoming` [S, K]: each state's incoming edges in edge order, padded to the largest
        in-degree K with the index E, one past the last edge (a product of three patterns:
        17,800 edges, K = 168), so that the backward pass reads a state's own edges only."""
        edges = len(self.dst)
        order = torch.argsort(self.dst, stable=True)  # by target state, in edge order within
        degree = torch.bincount(self.dst, minlength=self.states)
        first = degree.cumsum(0) - degree
        rank = torch.arange(edges) - first[self.dst[order]]
        self.incoming = torch.full((self.states, int(degree.max())), edges, dtype=torch.int64)
        self.incoming[self.dst[order], rank] = order

    def mass_by_atoms(self) -> None:
        """The sets' masses are read through *atoms*: the classes of tokens that belong to
        the same sets (a pattern's sets nest and overlap: strings of at most 1..12 characters
        share most tokens). One pass over the prediction sums each atom; a set's mass is then
        the sum of its atoms'. Large atoms are summed by a matrix product over the vocabulary,
        small ones by gathering their tokens, whichever reads less."""
        used = self.masks.any(0).nonzero().squeeze(-1)  # tokens no set holds weigh nothing
        signatures, atom_of = torch.unique(self.masks[:, used].T, dim=0, return_inverse=True)
        self.membership = signatures.T.float()  # [U, A]
        sizes = torch.bincount(atom_of, minlength=len(signatures))
        large = (sizes > SMALL_ATOM).nonzero().squeeze(-1)
        self.dense = torch.zeros(self.vocab_size, len(large))  # [V, D] one-hot of large atoms
        self.dense_atoms = large
        for k, a in enumerate(large.tolist()):
            self.dense[used[atom_of == a], k] = 1.0
        small = sizes[atom_of] <= SMALL_ATOM
        self.small_tokens, self.small_atoms = used[small], atom_of[small]
        self.atoms = len(signatures)

    # ----------------------------------------------------------------------------------------

    def set_mass(self, probs: torch.Tensor, x: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        """[B, L, U] the mass each token set holds at each continuation position (decided
        positions: 1 where their token is in the set, else 0)."""
        span = slice(self.start, self.start + self.length)
        decided = fixed[:, span]
        b, n = decided.shape
        mass = torch.zeros(b, n, len(self.masks))
        open_ = ~decided
        if bool(open_.any()):
            # Every position of the span is read (a view): copying out the undecided rows
            # first would cost as much as the sums.
            rows = probs[:, span]
            atoms = torch.zeros(b, n, self.atoms, device=rows.device, dtype=rows.dtype)
            dense = self.dense.to(rows.device, rows.dtype)
            columns = self.dense_atoms.to(rows.device)
            small_tokens = self.small_tokens.to(rows.device)
            small_atoms = self.small_atoms.to(rows.device)
            for k in range(b):  # one sample's span is contiguous: no copy, fast kernels
                if len(columns):
                    atoms[k, :, columns] = rows[k] @ dense
                if len(small_tokens):
                    atoms[k].index_add_(1, small_atoms, rows[k].index_select(1, small_tokens))
            atoms = atoms[open_].float().cpu()
            mass[open_.cpu()] = (atoms @ self.membership.T).clamp_min(TINY)
        if bool(decided.any()):
            tokens = x[:, span][decided].cpu()
            mass[decided.cpu()] = self.masks[:, tokens].T.float()
        return mass

    def plan(
        self,
        probs: torch.Tensor,
        x: torch.Tensor,
        fixed: torch.Tensor,
        generators: Sequence[torch.Generator],
    ) -> list[PathPlan]:
        """A path per sample drawn in proportion to its weight under `probs` [B, L, V],
        consistent with the tokens of `x` already decided (`fixed`)."""
        # In float64: a state on the only path that still fits can weigh 1e-30 x 1e-30 next
        # to the rest (float32 flushed it to 0, and the path was lost).
        mass = self.with_free(self.set_mass(probs, x, fixed).double())
        alpha, _ = self.forward(mass)
        return self.paths(mass, alpha, generators)

    def with_free(self, mass: torch.Tensor) -> torch.Tensor:
        """Each edge's weight at each position is its set's mass, FREE's the last column, 1.
        Read one position at a time: [B, L, E] at once is 0.6 GB for a product of three
        patterns (17,800 edges), and writing it costs more than the dynamic programme."""
        ones = torch.ones(len(mass), self.length, 1, dtype=mass.dtype)
        return torch.cat([mass, ones], dim=-1)

    def forward(self, mass: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward filtering over (position, state), each position's state weights rescaled
        to sum 1 (no underflow): the weights [L + 1, B, S] and the log of the rescalings'
        product [B] (with the last position's accepting mass: the log total weight of the
        paths)."""
        b = len(mass)
        # The forward pass runs over [S, B] and [E, B]: a state's or an edge's weights in the
        # batch are one contiguous row, so gathering them and adding each edge's row into its
        # target's are row copies (the sums are taken in the same order, edge after edge, as
        # over [B, S]: the same numbers to the bit).
        by_set = mass.permute(1, 2, 0).contiguous()  # [L, U + 1, B]
        alpha = torch.zeros(self.length + 1, b, self.states, dtype=torch.float64)
        alpha[0, :, 0] = 1.0
        log_total = torch.zeros(b, dtype=torch.float64)
        here = alpha[0].T.contiguous()  # [S, B]
        for i in range(self.length):
            moved = here.index_select(0, self.src) * by_set[i].index_select(0, self.edge_column)
            reached = torch.zeros(self.states, b, dtype=torch.float64)
            nxt = reached.index_add_(0, self.dst, moved).T.contiguous()  # [B, S]
            total = nxt.sum(-1, keepdim=True).clamp_min(1e-300)
            alpha[i + 1] = nxt / total
            log_total += total[:, 0].log()
            here = alpha[i + 1].T.contiguous()
        accepted = (alpha[self.length] * self.accepting).sum(-1)
        return alpha, log_total + accepted.clamp_min(1e-300).log()

    def log_weight(self, probs: torch.Tensor, x: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        """[B] the log total weight of the paths that fit the decided tokens: the mass
        `probs` [B, L, V] gives, position by position apart, to the continuations that
        match (up to an end-of-text)."""
        return self.forward(self.with_free(self.set_mass(probs, x, fixed).double()))[1]

    def paths(
        self,
        mass: torch.Tensor,
        alpha: torch.Tensor,
        generators: Sequence[torch.Generator],
    ) -> list[PathPlan]:
        """A path per row of `mass` [B, L, U + 1] drawn in proportion to its weight, given
        the forward weights `alpha`."""
        b = len(mass)
        last = alpha[self.length] * self.accepting
        if not bool((last.sum(-1) > 0).all()):
            raise InputError("no continuation of this length follows the pattern")
        # Backward sampling, one uniform per position and sample from its own generator.
        u = torch.stack(
            [torch.rand(self.length + 1, generator=g, dtype=torch.float64) for g in generators]
        )
        state = _pick(last, u[:, self.length])
        chosen = torch.empty(b, self.length, dtype=torch.int64)
        # Over the state's incoming edges only, in edge order: the other edges weighed 0 in
        # a draw over all of them, adding 0 to the cumulative sums, so the same edge is drawn.
        e = len(self.src)
        src = torch.cat([self.src, self.src.new_zeros(1)])  # the padding edge: weight 0
        column = torch.cat([self.edge_column, self.edge_column.new_zeros(1)])
        for i in reversed(range(self.length)):
            edges = self.incoming[state]  # [B, K]
            weight = mass[:, i].gather(1, column[edges])
            scores = alpha[i].gather(1, src[edges]) * weight * (edges < e)
            pick = _pick(scores, u[:, i])
            # None weighs (never seen): the last edge, as the draw over all edges took.
            edge = edges.gather(1, pick.clamp_min(0)[:, None]).squeeze(1)
            edge = torch.where(pick < 0, e - 1, edge)
            chosen[:, i] = edge
            state = self.src[edge]
        return [PathPlan(row) for row in self.edge_set[chosen].tolist()]

    def candidates(
        self,
        probs: torch.Tensor,
        x: torch.Tensor,
        fixed: torch.Tensor,
        count: int,
        generator: torch.Generator,
    ) -> tuple[list[PathPlan], torch.Tensor]:
        """`count` paths for one sample (`probs` [L, V], `x` and `fixed` [L]), each drawn
        apart from the same law as `plan`'s, from the sample's generator; and the masses
        [1, L, U + 1] they were drawn by (`log_weight_of` reads them again)."""
        mass = self.with_free(self.set_mass(probs[None], x[None], fixed[None]).double())
        alpha, _ = self.forward(mass)
        paths = self.paths(
            mass.expand(count, -1, -1), alpha.expand(-1, count, -1), [generator] * count
        )
        return paths, mass

    def log_weight_of(
        self, mass: torch.Tensor, x: torch.Tensor, decided: torch.Tensor
    ) -> torch.Tensor:
        """[K] `log_weight` of each of the K sequences `x` [K, L] under one sample's masses
        (`candidates`), the positions `decided` [N] taken as x has them: the sample's
        prediction is summed once for all K, not once each."""
        at = decided - self.start
        mass = mass.expand(len(x), -1, -1).clone()
        tokens = x[:, decided].cpu()  # the sets' masks live on the host
        mass[:, at, :-1] = self.masks[:, tokens].permute(1, 2, 0).double()
        return self.forward(mass)[1]

    def rows_along(
        self, probs: torch.Tensor, plans: list[PathPlan], positions: torch.Tensor
    ) -> torch.Tensor:
        """[K, N, V] one sample's rows (`probs` [L, V]) at continuation `positions` [N],
        kept to each of the K plans' sets there (unnormalised; a row the prediction gives
        nothing is its set, uniform)."""
        masks = self.multipliers(probs.dtype, probs.device)
        at = (positions - self.start).tolist()
        chosen = torch.tensor([[plan.sets[j] for j in at] for plan in plans])
        chosen = torch.where(chosen == FREE, len(self.masks), chosen).to(probs.device)
        rows = probs[positions][None] * masks[chosen]
        empty = rows.sum(-1, keepdim=True) <= 0
        return torch.where(empty, masks[chosen], rows)

    def apply(
        self, probs: torch.Tensor, plans: list[PathPlan], fixed: torch.Tensor
    ) -> torch.Tensor:
        """Project probs [B, L, V]: each undecided continuation position renormalised over its
        edge's tokens (uniform over them where the prediction gives them nothing)."""
        masks = self.multipliers(probs.dtype, probs.device)
        keep = len(self.masks)
        span = slice(self.start, self.start + self.length)
        out = torch.empty_like(probs)
        out[:, : self.start] = probs[:, : self.start]
        out[:, self.start + self.length :] = probs[:, self.start + self.length :]
        sets = torch.tensor([plan.sets for plan in plans])  # [B, L]
        open_ = (~fixed[:, span]).cpu() & (sets != FREE)
        # Each position's row of `masks`: its edge's set, or the row of ones where it stays.
        chosen = torch.where(open_, sets, keep).to(probs.device)
        open_ = open_.to(probs.device)
        total = torch.empty(self.length, 1, dtype=probs.dtype, device=probs.device)
        step = ROWS if probs.device.type == "cpu" else max(self.length, 1)
        for k in range(len(plans)):  # one sample at a time: contiguous rows, no copies
            # A few positions at a time on a CPU, so that the gathered masks and the rows
            # written stay in the cache for the sum and the division (one sample's rows: 13
            # MB); all at once elsewhere (a GPU: 4 kernels a sample, not 4 a few positions).
            for a in range(0, self.length, step):
                at = slice(a, a + step)
                rows = out[k, span][at]
                torch.mul(probs[k, span][at], masks.index_select(0, chosen[k, at]), out=rows)
                torch.sum(rows, -1, keepdim=True, out=total[at])
                rows.div_(torch.where(open_[k, at, None], total[at], 1.0).clamp_min(1e-30))
            for i in (open_[k] & (total[:, 0] <= 0)).nonzero().squeeze(-1).tolist():
                rows = out[k, span]
                rows[i] = masks[chosen[k, i]] / masks[chosen[k, i]].sum()  # nothing left: uniform
        return out

    def multipliers(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The masks [U + 1, V] as numbers to multiply by (a multiplication by a boolean
        converts it first, every time), with one more row of ones: every token, for the
        positions left as they are (decided, hidden)."""
        key = (dtype, str(device))
        if key not in self._multipliers:
            ones = torch.ones(1, self.vocab_size, dtype=torch.bool)
            self._multipliers[key] = torch.cat([self.masks, ones]).to(device, dtype)
        return self._multipliers[key]

    def order(self, plans: list[PathPlan], changing: torch.Tensor, fixed: torch.Tensor) -> None:
        """Positions may be decided in any order: each keeps to its edge whatever the others
        decide."""
        return None


def _pick(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """[B] an index per row drawn in proportion to `weights` [B, K] with uniforms `u` [B]; never
    one of weight 0 (rounding can put u x total at or past the last partial sum, and the
    index past it is often an edge that does not lead where the path goes)."""
    cumulative = weights.cumsum(-1)
    target = u[:, None] * cumulative[:, -1:]
    index = torch.searchsorted(cumulative, target, right=True).squeeze(-1)
    index = index.clamp_max(weights.shape[-1] - 1)
    positive = weights > 0
    missed = ~positive.gather(-1, index[:, None]).squeeze(-1)
    if bool(missed.any()):
        at = torch.arange(weights.shape[-1], device=weights.device)
        last = torch.where(positive, at, -1).max(-1).values  # the last index that weighs
        index = torch.where(missed, last, index)
    return index
