"""Exact projection for constraints without gradients: best-first search over token flips.

From the argmax sequence a of p [L, V], flipping position i to token v costs
`p_i(a_i) - p_i(v)` (>= 0 for the top-k alternatives). Sets of flips (at most one per position)
are enumerated in order of total cost with a priority queue: the flips are sorted by cost, and
a set whose largest flip index is j has two successors, "add flip j+1" and "replace flip j by
flip j+1"; both cost at least as much, and every set is reached exactly once. The first
sequence the judges accept wins; its tokens are then made the argmax of their positions by
swapping their probability with the old argmax (so each row keeps its mass and its shape).

A tokenizer may read several sequences as one text: a SMILES sequence ends at its first `<eos>`
and drops padding, so one flip to `<eos>` deletes every atom after it. Given a `reader` (the
tokenizer: `canonical_ids`, the ids of the text a sequence decodes to laid out as the training
data is, and `text_end`, where its text ends), a candidate is charged for its reading instead,
beyond what the argmax's own reading costs (e.g. atoms left after the argmax's `<eos>`), at
movable positions: a truncation pays for every token it removes; otherwise the cheapest repair
of almost any molecule is to cut it down to a fragment ("CC"). A reading that costs more than
the flips that reached it is queued at its own cost and judged when it comes first; each
reading is judged once. The order is exact up to readings that cost less than every flip set
reaching them (an `<eos>` or `<bos>` flipped away, padding flipped in mid-sequence: the reading
shifts onto the argmax's other tokens), which are judged when first reached. A set with a flip
past the end of its candidate's text reads as the same set without that flip, which costs no
more and comes first: it is not read again.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from cdd_cli.settings import SearchSettings


class Reader(Protocol):
    """How a tokenizer reads a sequence of ids (see the module docstring)."""

    def canonical_ids(self, ids: list[int]) -> list[int]: ...

    def text_end(self, ids: list[int]) -> int: ...


@dataclass
class SearchResult:
    ids: list[int] | None  # the accepted sequence, or None when the budget ran out
    nodes: int  # candidate sequences judged


def best_first(
    probs: torch.Tensor,
    movable: torch.Tensor,
    accept: Callable[[list[int]], bool],
    settings: SearchSettings,
    reader: Reader | None = None,
) -> SearchResult:
    """Cheapest flips of the argmax of `probs` [L, V] (only where `movable` [L]) that `accept`;
    with a `reader`, the cheapest canonical sequence (see the module docstring)."""
    argmax = probs.argmax(-1)
    base = argmax.tolist()
    k = min(settings.top_k, probs.shape[-1] - 1)
    # Top-k alternatives per position, vectorised: the argmax itself is pushed to the bottom.
    others = probs.clone()
    others.scatter_(-1, argmax[:, None], -1.0)
    alt_probs, alt_tokens = others.topk(k, dim=-1)
    costs = probs.gather(-1, argmax[:, None]) - alt_probs  # [L, k], >= 0
    costs[~movable] = torch.inf
    order = costs.flatten().argsort()
    keep = order[torch.isfinite(costs.flatten()[order])]
    flip_cost = costs.flatten()[keep].tolist()
    flip_pos = (keep // k).tolist()
    flip_tok = alt_tokens.flatten()[keep].tolist()

    nodes = 0
    judged: set[tuple[int, ...]] = set()  # readings judged (or queued) so far
    # Entries: (cost, tie-breaker, flip set, or None for a queued reading: its ids, its key).
    tie = itertools.count(1)
    heap: list[tuple] = [(0.0, 0, (), None, None)]
    pops = 0
    reading = None if reader is None else Reading(probs, base, movable, reader.canonical_ids)
    while heap and nodes < settings.max_nodes and pops < 20 * settings.max_nodes:
        cost, _, chosen, candidate, key = heapq.heappop(heap)
        pops += 1
        if chosen is not None:
            positions = [flip_pos[j] for j in chosen]
            if len(set(positions)) == len(positions):  # one flip per position
                candidate = list(base)
                for j in chosen:
                    candidate[flip_pos[j]] = flip_tok[j]
                key = tuple(candidate)
                if reader is not None and max(positions, default=-1) > reader.text_end(candidate):
                    candidate = None  # read as a cheaper set (see the module docstring)
                elif reading is not None:
                    candidate, key, true_cost = reading(candidate)
                    if key not in judged and true_cost > cost + 1e-6:
                        judged.add(key)  # queued: judged when it comes first
                        heapq.heappush(heap, (true_cost, next(tie), None, candidate, key))
                        candidate = None
            last = chosen[-1] if chosen else -1
            if last + 1 < len(flip_cost):
                added = cost + flip_cost[last + 1]
                heapq.heappush(heap, (added, next(tie), (*chosen, last + 1), None, None))
                if chosen:
                    replaced = cost - flip_cost[last] + flip_cost[last + 1]
                    successor = (*chosen[:-1], last + 1)
                    heapq.heappush(heap, (replaced, next(tie), successor, None, None))
            if candidate is None or key in judged:
                continue
            judged.add(key)
        nodes += 1
        if accept(candidate):
            return SearchResult(candidate, nodes)
    return SearchResult(None, nodes)


class Reading:
    """What a candidate reads as (`canonical`) and what that costs beyond the argmax's own
    reading, counted at movable positions (the rest will not change whatever they read as)."""

    def __init__(
        self,
        probs: torch.Tensor,
        base: list[int],
        movable: torch.Tensor,
        canonical: Callable[[list[int]], list[int]],
    ):
        self.base, self.canonical = base, canonical
        # A flip's price per position and token, as nested lists: this runs for every
        # candidate (thousands per search), where indexing the tensor cost 5 us an element.
        top = probs.max(-1, keepdim=True).values
        self.price = (top - probs).tolist()
        self.movable = movable.tolist()
        self.base_deficit = self.deficit(canonical(base))

    def deficit(self, ids: list[int]) -> float:
        price, base, movable = self.price, self.base, self.movable
        return sum(price[j][t] for j, t in enumerate(ids) if t != base[j] and movable[j])

    def __call__(self, candidate: list[int]) -> tuple[list[int], tuple[int, ...], float]:
        """(ids to judge and return, the reading as a key, its cost)."""
        ids = self.canonical(candidate)
        key = tuple(ids)
        cost = self.deficit(ids) - self.base_deficit
        if any(not m and a != b for m, a, b in zip(self.movable, ids, self.base, strict=True)):
            # Laid out canonically it would move a fixed token (one it ignores, e.g. after
            # <eos>): judge the candidate as it stands, which reads the same.
            return candidate, key, cost
        return ids, key, cost
