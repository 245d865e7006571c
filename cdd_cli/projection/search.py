"""Exact projection for constraints without gradients: best-first search over token flips.

From the argmax sequence a of p [L, V], flipping position i to token v costs
`p_i(a_i) - p_i(v)` (>= 0 for the top-k alternatives). Sets of flips (at most one per position)
are enumerated in order of total cost with a priority queue: the flips are sorted by cost, and
a set whose largest flip index is j has two successors, "add flip j+1" and "replace flip j by
flip j+1"; both cost at least as much, and every set is reached exactly once. The first
sequence the judges accept wins; its tokens are then made the argmax of their positions by
swapping their probability with the old argmax (so each row keeps its mass and its shape).

A tokenizer may read several sequences as one text: a SMILES sequence ends at its first
`<eos>` and drops padding, so one flip to `<eos>` deletes every atom after it. Given
`canonical` (ids -> the ids of the text they decode to, laid out as the training data is), a
candidate is charged for its canonical sequence instead (beyond what the argmax's own reading
costs), e.g. a truncation pays for every token it removes; otherwise the cheapest repair of
almost any molecule is to cut it down to a fragment ("CC"). A reading that costs more than the
flips that led to it is queued at its own cost and judged when it comes first, so readings are
judged in order of cost (up to readings that cost less than their flips: an `<eos>` flipped
away lets the argmax's tokens after it count, and those are judged as soon as they are found).
Each canonical sequence is judged once.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class SearchSettings:
    top_k: int = 4  # alternatives considered per position
    max_nodes: int = 2000  # candidate sequences judged per sample and step
    # Search at steps from this fraction of the trajectory on. QM9, 1,024 samples: from 0.75,
    # 0.9 and 1.0 (final prediction only) all gave 1,024 valid and novel, at 1.68x / 1.43x /
    # 1.37x the unconstrained time (mean) and 1.12x / 1.07x / 1.23x (median).
    project_from: float = 0.9


@dataclass
class SearchResult:
    ids: list[int] | None  # the accepted sequence, or None when the budget ran out
    nodes: int  # candidate sequences judged


def best_first(
    probs: torch.Tensor,
    movable: torch.Tensor,
    accept: Callable[[list[int]], bool],
    settings: SearchSettings,
    canonical: Callable[[list[int]], list[int]] | None = None,
) -> SearchResult:
    """Cheapest flips of the argmax of `probs` [L, V] (only where `movable` [L]) that `accept`;
    with `canonical`, the cheapest canonical sequence (see the module docstring)."""
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
    top = probs.gather(-1, argmax[:, None]).squeeze(-1)
    frozen = (~movable).tolist()

    def deficit(ids: list[int]) -> float:
        index = torch.tensor(ids, device=probs.device)[:, None]
        return (top - probs.gather(-1, index).squeeze(-1)).sum().item()

    # The argmax may itself read as another sequence (tokens after its <eos>); that much is
    # already paid, so a reading is charged only beyond it.
    base_deficit = deficit(canonical(base)) if canonical is not None else 0.0

    def reading(candidate: list[int]) -> tuple[list[int] | None, float]:
        """The canonical sequence of a candidate and its cost (None: it changes a fixed token)."""
        ids = canonical(candidate)
        if any(f and a != b for f, a, b in zip(frozen, ids, base, strict=True)):
            return None, 0.0
        return ids, deficit(ids) - base_deficit

    nodes = 0
    judged: set[tuple[int, ...]] = set()
    # Entries: (cost, tie-breaker, flip set, or None for a queued canonical sequence, its ids).
    heap: list[tuple[float, int, tuple[int, ...] | None, list[int] | None]] = [(0.0, 0, (), None)]
    pushed = 1
    pops = 0
    while heap and nodes < settings.max_nodes and pops < 20 * settings.max_nodes:
        cost, _, chosen, ready = heapq.heappop(heap)
        pops += 1
        candidate = ready
        if chosen is not None:
            positions = [flip_pos[j] for j in chosen]
            if len(set(positions)) == len(positions):  # one flip per position
                candidate = list(base)
                for j in chosen:
                    candidate[flip_pos[j]] = flip_tok[j]
                if canonical is not None:
                    ids, true_cost = reading(candidate)
                    if ids is None:
                        candidate = None
                    elif ids != candidate and true_cost > cost + 1e-9:
                        heapq.heappush(heap, (true_cost, pushed, None, ids))
                        pushed += 1
                        candidate = None
                    else:
                        candidate = ids
            last = chosen[-1] if chosen else -1
            if last + 1 < len(flip_cost):
                added = cost + flip_cost[last + 1]
                heapq.heappush(heap, (added, pushed, (*chosen, last + 1), None))
                pushed += 1
                if chosen:
                    replaced = cost - flip_cost[last] + flip_cost[last + 1]
                    heapq.heappush(heap, (replaced, pushed, (*chosen[:-1], last + 1), None))
                    pushed += 1
        if candidate is None or tuple(candidate) in judged:
            continue
        judged.add(tuple(candidate))
        nodes += 1
        if accept(candidate):
            return SearchResult(candidate, nodes)
    return SearchResult(None, nodes)


def make_argmax(probs: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """Swap each wanted token's probability with its position's current argmax, renormalised."""
    out = probs.clone()
    wanted = torch.tensor(ids, device=probs.device)
    current = probs.argmax(-1)
    rows = torch.nonzero(current != wanted).squeeze(-1)
    top = probs[rows, current[rows]]
    out[rows, current[rows]] = probs[rows, wanted[rows]]
    out[rows, wanted[rows]] = top + 1e-6  # strictly above the old argmax, even on ties
    out[rows] /= out[rows].sum(-1, keepdim=True)
    return out
