"""The most probable well-formed SMILES under a factorised distribution.

A diffusion model's last prediction p(x_0 | x_t) [B, L, V] factorises over positions, so its
argmax is read position by position and nothing stops it from opening a branch or a ring bond
that it never closes. Most invalid samples of the shipped QM9 model were of that kind
(bench/README.md). The best sequence under p that SMILES syntax accepts is found exactly by a
search over a finite automaton whose state is

    (what came last, branch depth, the status of each ring-bond label)

A label is shut, open, opened on the current atom, opened on the atom the current one is
bonded to, or opened on an open branch's branch point: closing it on the atom that opened it,
or on that atom's neighbour, would bond two atoms twice, and RDKit rejects both. Tokens the
automaton cannot tell apart form one class (every atom behaves alike; each label is its own
class), so a position offers its best token per class.

The search is A* over (position, state), expanding the most promising partial sequence first.
Its heuristic is exact dynamic programming over a coarser automaton, whose states keep only
how many labels are open: what a completion can add from a coarse state bounds what it can
add from any of its states, so the first complete sequence the search reaches is the most
probable one, and the bound is tight enough that it expands a few dozen states per sample.
States are made as they are reached (there are ~10^5 reachable ones).

The layout is the tokenizer's: `<bos>`, the SMILES, then `<eos>` and `<pad>` to the end (or
no `<eos>` when the SMILES fills the sequence). Two ring bonds between the same two atoms
(`C12CC12`) are not caught, and branches deeper than `MAX_DEPTH` are not written. Chemistry
(valence, aromaticity) is not syntax: it is left to the model and to RDKit.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from math import inf

import torch

BONDS = {"-", "=", "#", "$", ":", "/", "\\", "."}
MAX_DEPTH = 8  # branch depth written at most; QM9's deepest is 2

# What came last (a ring-bond label counts as part of its atom).
BEGIN, START, ATOM, BOND_AFTER_ATOM, BOND_AFTER_OPEN, BOND_AFTER_CLOSE, OPEN, CLOSE, END = range(9)
# A label's status: shut; open far from the current atom; opened on the current atom; opened
# on the atom the current one is bonded to (the one before it); opened on the branch point of
# the open branch of depth k (POINT + k - 1), or on that point when it is the atom before the
# current one (the branch's first atom: BESIDE_POINT + k - 1).
SHUT, FAR, HERE, PREVIOUS, POINT = range(5)
BESIDE_POINT = POINT + MAX_DEPTH

# Token classes; the ring-bond labels come after these, one class each.
C_BOS, C_EOS, C_PAD, C_ATOM, C_BOND, C_OPEN, C_CLOSE = range(7)
C_LABEL = 7

State = tuple[int, int, tuple[int, ...]]
QUANTUM = 2.0**16
# What a probability of 0 counts as where nothing well formed avoids one: the log of the
# smallest normal float32 (about -87.3 nats), below any probability a model gives.
LOG_TINY = math.log(torch.finfo(torch.float32).tiny)
IMPOSSIBLE = object()  # a row with no well-formed sequence of positive probability
tie = itertools.count()  # orders queue entries of equal priority without comparing states


def token_classes(vocab: Sequence[str]) -> tuple[list[int], int]:
    """Each token's class (-1: never written, e.g. `<mask>`), and the number of labels."""
    labels = sorted({t for t in vocab if t.isdigit() or t.startswith("%")})
    fixed = {"<bos>": C_BOS, "<eos>": C_EOS, "<pad>": C_PAD, "(": C_OPEN, ")": C_CLOSE}
    classes = []
    for token in vocab:
        if token in fixed:
            classes.append(fixed[token])
        elif token in labels:
            classes.append(C_LABEL + labels.index(token))
        elif token in BONDS:
            classes.append(C_BOND)
        elif token.startswith("<"):
            classes.append(-1)
        else:
            classes.append(C_ATOM)
    return classes, len(labels)


def relabel(labels: tuple[int, ...], mapping: dict[int, int]) -> tuple[int, ...]:
    return tuple(mapping.get(s, s) for s in labels)


def transition(state: State, cls: int) -> State | None:
    """The state after a token of class `cls`, or None where SMILES syntax forbids it."""
    last, depth, labels = state
    if last == BEGIN:
        return (START, 0, labels) if cls == C_BOS else None
    if last == END:
        return (END, 0, labels) if cls == C_PAD else None
    if cls == C_ATOM:
        # The new atom is bonded to the current one (the branch point, first in a branch).
        mapping = {HERE: PREVIOUS, PREVIOUS: FAR}
        for k in range(MAX_DEPTH):
            mapping[BESIDE_POINT + k] = POINT + k
        if last in (OPEN, BOND_AFTER_OPEN):
            mapping[POINT + depth - 1] = BESIDE_POINT + depth - 1
        return (ATOM, depth, relabel(labels, mapping))
    if cls >= C_LABEL:
        label = cls - C_LABEL
        status = labels[label]
        if last not in (ATOM, BOND_AFTER_ATOM, CLOSE):
            return None
        if status in (HERE, PREVIOUS) or status >= BESIDE_POINT:
            return None  # would bond the atom to itself, or to its neighbour a second time
        new = list(labels)
        new[label] = HERE if status == SHUT else SHUT
        return (ATOM, depth, tuple(new))
    if cls == C_BOND:
        follows = {ATOM: BOND_AFTER_ATOM, OPEN: BOND_AFTER_OPEN, CLOSE: BOND_AFTER_CLOSE}
        return (follows[last], depth, labels) if last in follows else None
    ends_atom = last in (ATOM, CLOSE)
    if cls == C_OPEN:
        if not ends_atom or depth == MAX_DEPTH:
            return None
        mapping = {HERE: POINT + depth, PREVIOUS: FAR}
        for k in range(MAX_DEPTH):
            mapping[BESIDE_POINT + k] = POINT + k
        return (OPEN, depth + 1, relabel(labels, mapping))
    if cls == C_CLOSE:
        if not ends_atom or depth == 0:
            return None
        # The branch point is the current atom again.
        mapping = {HERE: FAR, PREVIOUS: FAR, POINT + depth - 1: HERE}
        mapping[BESIDE_POINT + depth - 1] = HERE
        return (CLOSE, depth - 1, relabel(labels, mapping))
    if cls == C_EOS:
        done = ends_atom and depth == 0 and not any(labels)
        return (END, 0, labels) if done else None
    return None  # `<bos>` past the start, `<pad>` before the end


class SmilesSyntax:
    """For each row of p [B, L, V], the most probable sequence that SMILES syntax accepts."""

    MAX_EXPANDED = 20_000  # states expanded per row before it keeps its argmax

    def __init__(self, vocab: Sequence[str]):
        classes, self.n_labels = token_classes(vocab)
        self.token_class = classes
        self.n_classes = C_LABEL + self.n_labels
        self.members = torch.zeros(len(vocab), self.n_classes, dtype=torch.bool)
        for token, cls in enumerate(classes):
            if cls >= 0:
                self.members[token, cls] = True
        self.begin: State = (BEGIN, 0, (SHUT,) * self.n_labels)
        self.transitions: dict[tuple[State, int], State | None] = {}
        self.build_summary()

    def next(self, state: State, cls: int) -> State | None:
        key = (state, cls)
        if key not in self.transitions:
            self.transitions[key] = transition(state, cls) if cls >= 0 else None
        return self.transitions[key]

    def reads(self, classes: Sequence[int]) -> bool:
        """Whether a SMILES of tokens of `classes` (its text alone: no `<bos>`, `<eos>` or
        padding) is well formed, i.e. can be read at all: a necessary condition for RDKit,
        in microseconds where RDKit takes a fifth of a millisecond to refuse."""
        state: State | None = (START, 0, self.begin[2])
        for cls in classes:
            if state[0] == BOND_AFTER_CLOSE and cls >= C_LABEL:
                # RDKit also reads a ring bond written after a branch (`C(CO)=1`), which the
                # sampler's automaton never writes: its bond belongs to the branch point.
                state = (CLOSE, state[1], state[2])
            state = self.next(state, cls)
            if state is None:
                return False
        return state[0] in (ATOM, CLOSE) and state[1] == 0 and not any(state[2])

    @staticmethod
    def accepting(state: State) -> bool:
        last, depth, labels = state
        return last in (END, ATOM, CLOSE) and depth == 0 and not any(labels)

    @staticmethod
    def summary(state: State) -> tuple[int, int, int]:
        """A state with its labels reduced to how many are open."""
        last, depth, labels = state
        return last, depth, len(labels) - labels.count(SHUT)

    def build_summary(self) -> None:
        """The automaton over summaries. Each summary steps to what any of its states could
        (a label may open or close, whatever its status), so the best completion of a summary
        bounds the best completion of each of its states: the search's heuristic."""
        begin = self.summary(self.begin)
        self.summaries = {begin: 0}
        edges, frontier = [], [begin]
        while frontier:
            last, depth, n_open = frontier.pop()
            # Stand-ins: the first label shut or open (far), the rest open as far as needed.
            stand_ins = set()
            for first in (SHUT, FAR):
                rest = n_open - (first == FAR)
                if 0 <= rest <= self.n_labels - 1:
                    labels = (first,) + (FAR,) * rest + (SHUT,) * (self.n_labels - 1 - rest)
                    stand_ins.add((last, depth, labels))
            for cls in range(self.n_classes):
                # Labels are interchangeable here: label 0's moves stand for every label's.
                moved = C_LABEL if cls >= C_LABEL else cls
                for stand_in in stand_ins:
                    target = transition(stand_in, moved)
                    if target is None:
                        continue
                    target = self.summary(target)
                    if target not in self.summaries:
                        self.summaries[target] = len(self.summaries)
                        frontier.append(target)
                    edges.append(
                        (self.summaries[(last, depth, n_open)], cls, self.summaries[target])
                    )
        self.summary_source, self.summary_class, self.summary_target = torch.tensor(
            sorted(set(edges))
        ).T
        self.summary_done = [
            i
            for (last, depth, n_open), i in self.summaries.items()
            if last in (END, ATOM, CLOSE) and depth == 0 and n_open == 0
        ]

    def to_go(self, class_logp: torch.Tensor) -> torch.Tensor:
        """The best log-probability that positions p.. can add from each summary, for rows of
        class scores [B, L, C]: [B, L + 1, S] (-inf where no well-formed completion exists)."""
        batch, length, _ = class_logp.shape
        # Rows last ([L, C, B], [L + 1, S, B]): each edge then reads and writes B contiguous
        # values (twice as fast as rows first for 64-256 rows, and no slower for one).
        gains = class_logp.permute(1, 2, 0).contiguous()
        best = torch.full((length + 1, len(self.summaries), batch), -inf, dtype=gains.dtype)
        best[length, self.summary_done] = 0.0
        source = self.summary_source[:, None].expand(-1, batch)
        for position in range(length - 1, -1, -1):
            value = gains[position, self.summary_class] + best[position + 1, self.summary_target]
            best[position].scatter_reduce_(0, source, value, "amax")
        return best.permute(2, 0, 1)

    def accepts(self, ids: torch.Tensor) -> list[bool]:
        """Whether each row of ids [B, L] is well formed."""
        verdicts = []
        for row in ids.tolist():
            state: State | None = self.begin
            for token in row:
                state = self.next(state, self.token_class[token])
                if state is None:
                    break
            verdicts.append(state is not None and self.accepting(state))
        return verdicts

    def best(self, probs: torch.Tensor) -> torch.Tensor | None:
        """The most probable well-formed ids [B, L] under `probs` [B, L, V] (a row past
        `MAX_EXPANDED` keeps its argmax); None when every argmax is well formed. A row whose
        every well-formed sequence holds a token of probability 0 (a projection can make a
        distribution that sharp) is read with such tokens at the smallest float's
        probability: the decoding never writes what SMILES syntax refuses."""
        logp = probs.detach().float().cpu().clamp_min(0).log()
        ids = logp.argmax(-1)
        ill_formed = [i for i, ok in enumerate(self.accepts(ids)) if not ok]
        if not ill_formed:
            return None
        found = self.search_rows(logp[ill_formed])
        impossible = [k for k, row in enumerate(found) if row is IMPOSSIBLE]
        if impossible:
            floored = logp[[ill_formed[k] for k in impossible]].clamp_min(LOG_TINY)
            for k, row in zip(impossible, self.search_rows(floored), strict=True):
                found[k] = row
        for row, sequence in zip(ill_formed, found, strict=True):
            if isinstance(sequence, list):
                ids[row] = torch.tensor(sequence)
        return ids.to(probs.device)

    def search_rows(self, logp: torch.Tensor) -> list[list[int] | object | None]:
        """For rows of log-probabilities [N, L, V]: each row's most probable well-formed ids,
        IMPOSSIBLE where every well-formed sequence holds a token of log-probability -inf, or
        None where the search stopped at `MAX_EXPANDED`."""
        # A position's best token and its log-probability in each class: [N, L, C].
        masked = logp.unsqueeze(-1).masked_fill(~self.members, -torch.inf)
        class_logp, class_token = masked.max(2)
        # On a grid of 2^-16 nats sums are exact in float64, so sequences whose scores differ
        # only by rounding (a model's output varies in its last bits with the batch size) tie
        # exactly, and ties go to the first found: the same seed gives the same molecules.
        class_logp = (class_logp.double() * QUANTUM).round() / QUANTUM
        # The heuristic stays an array: a search reads a few hundred of its L x S entries,
        # and making all of them Python floats cost as much as the search.
        to_go = self.to_go(class_logp).numpy()
        return [
            IMPOSSIBLE if bound[0][0] == -inf else self.search(scores, tokens, bound)
            for scores, tokens, bound in zip(
                class_logp.tolist(), class_token.tolist(), to_go, strict=True
            )
        ]

    def search(
        self, scores: list[list[float]], tokens: list[list[int]], to_go: Sequence[Sequence[float]]
    ) -> list[int] | None:
        """A* over (position, state) for one row's class scores [L][C], their tokens, and the
        summaries' best completions [L + 1][S] as the heuristic: it never underestimates, so
        the first complete sequence taken from the queue is the most probable."""
        length = len(scores)
        if to_go[0][0] == -inf:
            return None  # nothing well formed (e.g. a position only `<unk>` can fill)
        step = self.next
        summary_of: dict[State, int] = {}
        reached: dict[tuple[int, State], float] = {(0, self.begin): 0.0}
        came: dict[tuple[int, State], tuple[State, int]] = {}
        queue = [(-to_go[0][0], 0, next(tie), self.begin, 0.0)]
        expanded = 0
        while queue and expanded < self.MAX_EXPANDED:
            _, position, _, state, score = heapq.heappop(queue)
            if score < reached[(position, state)]:
                continue  # reached again with a better score since it was queued
            if position == length:
                found = []
                for back in range(length, 0, -1):
                    state, token = came[(back, state)]
                    found.append(token)
                return found[::-1]
            expanded += 1
            rest = to_go[position + 1]
            for cls, gain in enumerate(scores[position]):
                if gain == -inf:
                    continue
                target = step(state, cls)
                if target is None:
                    continue
                if target not in summary_of:
                    summary_of[target] = self.summaries[self.summary(target)]
                bound = float(rest[summary_of[target]])
                if bound == -inf:
                    continue  # cannot finish well formed in the positions left
                key = (position + 1, target)
                value = score + gain
                if value > reached.get(key, -inf):
                    reached[key] = value
                    came[key] = (state, tokens[position][cls])
                    entry = (-(value + bound), position + 1, next(tie), target, value)
                    heapq.heappush(queue, entry)
        return None
