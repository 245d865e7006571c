"""The CDD projection, solved with an augmented Lagrangian (the paper's method).

The paper: Cardei, Christopher, Hartvigsen, Kailkhura, Fioretto, "Constrained Discrete
Diffusion", NeurIPS 2025 (arXiv 2503.09790), §4. The formulas below are its, named by what
they say rather than by an equation number (which could not be checked here against the
paper's text); DESIGN.md §1 states the same.

The KL projection of the model's prediction x' subject to the constraints:

    y* = argmin_y KL(x' || y)  subject to  argmax(y) in C

For every sample whose argmax already violates some constraint (judged by the surrogates on
the one-hot argmax), the logits of y start at log x' and take `inner_iters` gradient steps
y <- y - eta grad_y L on the augmented Lagrangian

    L(y; lam, mu) = KL(x' || softmax y) + sum_i lam_i dg_i(phi(y)) + mu_i / 2 dg_i(phi(y))^2

where dg_i = max(0, g_i - tau_i) is constraint i's violation and phi the Gumbel-softmax
relaxation of y (`gumbel_noise`): phi(y) = softmax((y + G) / T_sample), G ~ Gumbel(0, 1).
Each outer iteration then updates the multipliers on the argmax,

    lam_i <- lam_i + mu_i dg_i(argmax y),    mu_i <- min(alpha mu_i, mu_max).

lam and mu are per sample and per constraint. A sample whose
argmax becomes feasible is frozen (its y is no longer touched) while the rest keep iterating;
a sample that is feasible from the start costs one surrogate call and is returned unchanged,
and so is one with no movable position (every token already decided by a masked model).
The projection sees only a probability tensor and a list of constraints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import torch

from cdd_cli.constraints.base import DifferentiableConstraint
from cdd_cli.models.surrogate import SparseTokens, Tokens
from cdd_cli.settings import ALMSettings


@dataclass
class ALMProgress:
    outer: int
    inner: int
    violating: int  # samples still projected after this outer iteration
    lam_range: tuple[float, float]
    mu_range: tuple[float, float]
    samples: int = 0  # samples this projection started with
    max_outer: int = 0


@dataclass
class Multipliers:
    """lam and mu [B, C] per sample and constraint. Passed back in at a sample's next
    projection, the ALM starts where the last one ended instead of ramping mu up again."""

    lam: torch.Tensor
    mu: torch.Tensor


@dataclass
class ProjectionResult:
    probs: torch.Tensor
    projected: torch.Tensor  # [B] bool: the sample needed projecting
    outer_iters: torch.Tensor  # [B] outer iterations spent on each sample
    inner_iters: torch.Tensor  # [B] inner iterations spent on each sample
    # [B] bool: argmax satisfies every surrogate at the end (a sample with nothing movable is
    # not judged and reads False)
    feasible: torch.Tensor
    # [B] each sample's share of the time: every outer iteration's time split among the samples
    # it iterated on (a sample frozen early does not pay for the ones still iterating).
    seconds: torch.Tensor
    # Where each sample's multipliers ended (those of samples not projected: as passed in).
    multipliers: Multipliers | None = None


def surrogate_violations(
    constraints: Sequence[DifferentiableConstraint], tokens: Tokens
) -> torch.Tensor:
    """[B, C] violations max(0, g - tau) of token ids [B, L] or soft tokens."""
    return torch.stack([c.surrogate_violation(c.surrogate(tokens)) for c in constraints], -1)


def argmax_ids(
    probs: torch.Tensor, movable: torch.Tensor, tokens: torch.Tensor | None
) -> torch.Tensor:
    """[B, L] the argmax of `probs` [B, L, V], read V wide only at `movable` positions where
    the tokens of the others are known (a masked model's decided tokens are most of a text
    late in sampling)."""
    if tokens is None:
        return probs.argmax(-1)
    ids = tokens.to(probs.device).clone()
    ids[movable] = probs[movable].argmax(-1)
    return ids


def floored(probs: torch.Tensor, vocab: int) -> torch.Tensor:
    """`probs` [..., V] floored at 0.35 / V per token and renormalised."""
    out = probs.clamp_min(0.35 / vocab)
    return out / out.sum(-1, keepdim=True)


def restricted(
    probs: torch.Tensor, rows: torch.Tensor, movable: torch.Tensor, tokens: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The `k` most likely token ids [R, L, k] of `probs` [B, L, V] at each position of
    `rows` [R], and their x' mass floored as by `floored` [R, L, k]. Only `movable` [R, L]
    positions are read V wide (a masked model's decided tokens are most of a text late in
    sampling); any other position's support is its token (`tokens` [R, L]) k times over,
    which reads as exactly that token whatever the weights on it."""
    at_rows, at_positions = movable.nonzero(as_tuple=True)
    moving = probs[rows[at_rows], at_positions].float()  # [M, V]
    likely = moving.topk(k, dim=-1).indices
    support = tokens.to(probs.device)[..., None].repeat(1, 1, k)
    inside = torch.full(support.shape, 1.0 / k, device=probs.device)
    support[at_rows, at_positions] = likely
    inside[at_rows, at_positions] = floored(moving, probs.shape[-1]).gather(-1, likely)
    return support, inside


def gumbel_noise(
    shape: tuple[int, ...], generators: Sequence[torch.Generator] | None, device: torch.device
) -> torch.Tensor:
    """Gumbel(0, 1) noise G of `shape`, for the relaxation phi(y) = softmax((y + G) / T_sample)
    (the paper's Gumbel-softmax relaxation of the argmax, §4)."""
    # One generator per row keeps each sample's result independent of the batch around it.
    if generators is None:
        u = torch.rand(shape, device=device)
    else:
        u = torch.stack([torch.rand(shape[1:], generator=g) for g in generators]).to(device)
    return -torch.log(-torch.log(u.clamp(1e-10, 1 - 1e-7)))


def project(
    probs: torch.Tensor,
    constraints: Sequence[DifferentiableConstraint],
    settings: ALMSettings,
    fixed: torch.Tensor | None = None,
    generators: Sequence[torch.Generator] | None = None,
    on_progress: Callable[[ALMProgress], None] | None = None,
    multipliers: Multipliers | None = None,
    tokens: torch.Tensor | None = None,
) -> ProjectionResult:
    """The KL projection of x' = `probs` [B, L, V] onto the constraints, solved with the
    augmented Lagrangian (module docstring). `fixed` [B, L] marks positions the sampler will
    not change (they keep their distribution), and `tokens` [B, L], where given, what those
    positions hold (the sampler's x_t; else their argmax, read V wide)."""
    if any(getattr(settings, f.name) is None for f in fields(settings)):
        raise ValueError("ALMSettings left to the model: see run.defaults.fill_defaults")
    started = time.perf_counter()
    batch, device = probs.shape[0], probs.device
    zeros = torch.zeros(batch, dtype=torch.long, device=device)
    # Nothing to move (a masked model's decided tokens, a sample the hook leaves alone):
    # nothing to do, not even the V-wide argmax of the judging.
    movable_at_all = (
        torch.ones(probs.shape[:2], dtype=torch.bool, device=device) if fixed is None else ~fixed
    )
    movable_rows = movable_at_all.any(-1)
    violation = torch.zeros(batch, len(constraints), device=device)
    if movable_rows.any():
        hard = argmax_ids(probs, movable_at_all, tokens)  # also the fixed positions' tokens
        with torch.no_grad():
            violation[movable_rows] = surrogate_violations(constraints, hard[movable_rows])
    active = (violation > 0).any(-1) & movable_rows
    now = time.perf_counter()
    seconds = torch.full((batch,), (now - started) / batch, dtype=torch.float64)
    started = now
    feasible = (violation <= 0).all(-1) & movable_rows
    if not active.any():
        return ProjectionResult(probs, active, zeros, zeros.clone(), feasible, seconds, multipliers)

    rows = active.nonzero().squeeze(-1)
    vocab = probs.shape[-1]
    # Fixed positions (the sampler will not change them) keep their distribution exactly.
    movable_at = movable_at_all[rows]
    movable = movable_at.float()[..., None]
    # x', floored at 0.35 / V per token (1e-2 for QM9's 35 tokens) and renormalised: from a
    # near one-hot x' the relaxation's gradient reaches no alternative token and the ALM
    # stalls (QM9, final step, 50 outer iterations: 22/32 samples feasible with x' itself,
    # 31/32 floored; flooring only the start of y did not help). The argmax is unchanged.
    support = None
    if 0 < settings.support < vocab:
        # Only movable positions are read V wide (a masked model's decided tokens are most of
        # them late in sampling): y = x' outside the support; inside, (its x' mass) x
        # softmax(logits over the support), so KL(x' || y) is that mass times the KL of the
        # renormalised restrictions. A fixed position's support is its token K times over,
        # which reads as exactly that token whatever y's weights there.
        support, inside = restricted(probs, rows, movable_at, hard[rows], settings.support)
        inside_mass = inside.sum(-1, keepdim=True)
        target = inside / inside_mass
    else:
        full = probs[rows].float()
        target = floored(full, vocab)
    log_target = target.log()
    logits = log_target.clone()  # y starts at the target
    row_gens = None if generators is None else [generators[i] for i in rows.tolist()]
    n_constraints = len(constraints)
    lam = torch.zeros(len(rows), n_constraints, device=device)  # the paper's lam0
    mu = torch.full((len(rows), n_constraints), settings.mu_init, device=device)
    if multipliers is not None:  # where an earlier step's projection of the sample ended
        lam = torch.maximum(lam, multipliers.lam[rows].to(device))
        mu = torch.maximum(mu, multipliers.mu[rows].to(device))
    running = torch.ones(len(rows), dtype=torch.bool, device=device)
    outer_iters = torch.zeros(len(rows), dtype=torch.long, device=device)
    reached = torch.zeros(len(rows), dtype=torch.bool, device=device)  # feasible argmax
    best = violation[rows].sum(-1)  # lowest violation of each sample's argmax so far
    # Outer iterations each sample has spent at mu_max without its violation falling.
    stalled = torch.zeros(len(rows), dtype=torch.long, device=device)

    now = time.perf_counter()  # the set-up above is shared by the projected samples
    row_seconds = torch.full((len(rows),), (now - started) / len(rows), dtype=torch.float64)
    started = now
    for outer in range(1, settings.max_outer_iters + 1):
        live = running.nonzero().squeeze(-1)
        gens = None if row_gens is None else [row_gens[i] for i in live.tolist()]
        y = logits[live]
        x, log_x, move = target[live], log_target[live], movable[live]
        lam_live, mu_live = lam[live], mu[live]
        support_live = None if support is None else support[live]
        for _ in range(settings.inner_iters):
            y = y.detach().requires_grad_(True)
            noise = gumbel_noise(tuple(y.shape), gens, device)
            # phi(y): the Gumbel-softmax relaxation the surrogates read.
            soft: Tokens = ((y + noise) / settings.temperature).softmax(-1)
            if support is not None:  # read over the support, never V wide
                soft = SparseTokens(soft, support_live)
            dg = surrogate_violations(constraints, soft)
            kl = (x * (log_x - y.log_softmax(-1))).sum((-1, -2))
            # The augmented Lagrangian L(y; lam, mu) of the module docstring.
            loss = kl + (lam_live * dg).sum(-1) + (mu_live / 2 * dg.square()).sum(-1)
            (grad,) = torch.autograd.grad(loss.sum(), y)
            y = y.detach() - settings.eta * grad * move
        with torch.no_grad():
            logits[live] = y
            top = y.argmax(-1)
            if support is not None:
                top = support_live.gather(-1, top[..., None]).squeeze(-1)
            dg_hard = surrogate_violations(constraints, top)
            # The multiplier updates, on the argmax's violations.
            lam[live] = lam_live + mu_live * dg_hard
            mu[live] = (mu_live * settings.alpha).clamp(max=settings.mu_max)
            outer_iters[live] += 1
            done = (dg_hard <= 0).all(-1)
            total = dg_hard.sum(-1)
            improved = total < best[live] - 1e-6
            best[live] = torch.minimum(best[live], total)
            at_max = (mu_live >= settings.mu_max).all(-1)  # only then is no progress a stall
            stalled[live] = torch.where(improved, 0, stalled[live] + at_max.long())
            stuck = stalled[live] >= settings.patience
            reached[live[done]] = True
            running[live[done | stuck]] = False
        now = time.perf_counter()
        row_seconds[live.cpu()] += (now - started) / len(live)
        started = now
        if on_progress is not None:
            on_progress(
                ALMProgress(
                    outer,
                    settings.inner_iters,
                    int(running.sum()),
                    (lam.min().item(), lam.max().item()),
                    (mu.min().item(), mu.max().item()),
                    len(rows),
                    settings.max_outer_iters,
                )
            )
        if not running.any():
            break

    projected = probs.clone()
    result = logits.softmax(-1)
    if support is not None:
        # Outside the support x' keeps its mass, unfloored (the feasibility checks above read
        # the support's argmax, which in all but flat rows is the argmax of the whole row).
        at_rows, at_positions = movable_at.nonzero(as_tuple=True)
        moving = probs[rows[at_rows], at_positions].float()  # [M, V]
        inside = (result * inside_mass)[at_rows, at_positions]
        moving = moving.scatter(-1, support[at_rows, at_positions], inside)
        moving = moving / moving.sum(-1, keepdim=True)
        projected[rows[at_rows], at_positions] = moving.to(probs.dtype)
    else:
        projected[rows] = torch.where(movable.bool(), result.to(probs.dtype), probs[rows])
    all_outer = zeros.clone()
    all_outer[rows] = outer_iters
    feasible[rows] = reached
    row_seconds += (time.perf_counter() - started) / len(rows)
    seconds[rows.cpu()] += row_seconds
    ended = Multipliers(
        torch.zeros(batch, n_constraints, device=device),
        torch.full((batch, n_constraints), settings.mu_init, device=device),
    )
    if multipliers is not None:
        ended = Multipliers(multipliers.lam.clone(), multipliers.mu.clone())
    ended.lam[rows], ended.mu[rows] = lam, mu
    return ProjectionResult(
        projected, active, all_outer, all_outer * settings.inner_iters, feasible, seconds, ended
    )
