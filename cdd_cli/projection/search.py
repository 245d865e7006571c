"""Exact projection for constraints without gradients: best-first search over token flips.

From the argmax sequence a of p [L, V], flipping position i to token v costs
`p_i(a_i) - p_i(v)` (>= 0 for the top-k alternatives). Sets of flips (at most one per position)
are enumerated in order of total cost with a priority queue: the flips are sorted by cost, and
a set whose largest flip index is j has two successors, "add flip j+1" and "replace flip j by
flip j+1"; both cost at least as much, and every set is reached exactly once. The first
sequence the judges accept wins; its tokens are then made the argmax of their positions by
swapping their probability with the old argmax (so each row keeps its mass and its shape).
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
) -> SearchResult:
    """Cheapest flips of the argmax of `probs` [L, V] (only where `movable` [L]) that `accept`."""
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
    heap: list[tuple[float, tuple[int, ...]]] = [(0.0, ())]
    pops = 0
    while heap and nodes < settings.max_nodes and pops < 20 * settings.max_nodes:
        cost, chosen = heapq.heappop(heap)
        pops += 1
        positions = [flip_pos[j] for j in chosen]
        if len(set(positions)) == len(positions):  # one flip per position
            nodes += 1
            candidate = list(base)
            for j in chosen:
                candidate[flip_pos[j]] = flip_tok[j]
            if accept(candidate):
                return SearchResult(candidate, nodes)
        last = chosen[-1] if chosen else -1
        if last + 1 < len(flip_cost):
            heapq.heappush(heap, (cost + flip_cost[last + 1], (*chosen, last + 1)))
            if chosen:
                replaced = cost - flip_cost[last] + flip_cost[last + 1]
                heapq.heappush(heap, (replaced, (*chosen[:-1], last + 1)))
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
