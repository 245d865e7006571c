"""The exact method's per-step hook: the projection proposes, importance weights correct.

The law a user asks for is the model's own given the constraints, p(x | C) ∝ p(x) 1[x in C].
Each draw's trajectory x_1 .. x_last is drawn step by step from a proposal q instead of the
model's step p, and carries the log-weight

    log w = sum over steps of [log p(x_s | x_t) - log q(x_s | x_t)]

(DESIGN.md §1, "Beyond the paper"). The proposal at a step is the model's prediction x'
tempered toward the projection's steered categorical y (the ALM of `alm.py`):

    q0 = 0.999 normalise(x'^(1 - l) y^l) + 0.001 x'

(l: `ExactSetting.tempering`; the 0.001 of x' keeps every token the model may draw drawable,
so the weights are finite and the law exact), handed to the process's own step: for the
masked process the positions a step unmasks come from the step's uniforms alone, the same
under p and q, so their choice cancels and only the drawn tokens' probabilities enter; for
the uniform process every free position draws from the posterior q(x_s | x_t, x0), so the
weight is a gather per position of the two posteriors. The final prediction is the model's
own (its noise removal is a deterministic function of the last x), so the judges' 0/1 and the
weight make w 1[C] an unbiased estimate of P(C) under the model, and a draw kept with
probability min(1, w / M) is an exact draw of p(x | C) wherever w <= M (`run/drawing.py`).
The mass above M is the only bias, and each record carries what a reader needs to measure it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from cdd_cli.constraints.base import DifferentiableConstraint
from cdd_cli.diffusion.processes import MaskedProcess, UniformProcess
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.models.twist import Twist
from cdd_cli.projection.alm import argmax_ids, project, surrogate_violations
from cdd_cli.settings import ALMSettings

# The share of the model's own prediction in every proposal: the support guarantee.
MODEL_SHARE = 0.001


@dataclass(frozen=True)
class ExactSetting:
    """The exact method's stored design for one model and constraint setting: the proposal
    (how far it tempers toward the projection, and from which share of the steps on), and the
    bound M (as log M) that a draw's weight is accepted against. Calibrated once (bench/
    exact.py), never adapted in a run."""

    tempering: float  # l: 0 is the model itself (every weight 1), 1 the projection's y
    steer_from: float  # steps from this share of the run on are proposed by the projection
    log_bound: float  # log M
    # What steers: "alm" (the projection's categorical y, tempered in by l) or "gradient"
    # (the first-order tilt x' exp(-l grad_x' violation), one surrogate pass a step) or
    # "twist" (x' exp(l grad_x' log P(C | x_t)) on every sample, the twist named below).
    steering: str = "alm"
    twist: str | None = None  # a folder under cdd_cli/assets (`cdd train twist`)


def step_law(
    process: MaskedProcess | UniformProcess,
    x0_probs: torch.Tensor,
    x_t: torch.Tensor,
    t: float,
    s: float,
    changing: torch.Tensor,
) -> torch.Tensor:
    """The law [N, V] the process's step draws each of the N `changing` positions from, given
    the prediction `x0_probs` [B, L, V], as `process.step` shapes and draws it."""
    if isinstance(process, UniformProcess):
        shaped = process.temperature_top_p(x0_probs)
        if shaped is not x0_probs:
            shaped = shaped / shaped.sum(-1, keepdim=True)
        return process.posterior(shaped, x_t, t, s)[changing]
    rows = process.temperature_top_p(x0_probs[changing]).float()
    return rows / rows.sum(-1, keepdim=True)


def step_log_ratio(
    process: MaskedProcess | UniformProcess,
    model: torch.Tensor,
    proposal: torch.Tensor,
    x_t: torch.Tensor,
    x_s: torch.Tensor,
    info: StepInfo,
) -> torch.Tensor:
    """[B] log p(x_s | x_t) - log q(x_s | x_t) of one step: the model's prediction `model` and
    the proposal's `proposal` [B, L, V], read at the drawn tokens of the positions it changed
    (identical tensors give exactly 0)."""
    changing = info.changing
    if changing is None:
        changing = torch.ones_like(x_t, dtype=torch.bool)
    ratio = torch.zeros(x_t.shape, dtype=torch.float64, device=x_t.device)
    if proposal is model or not changing.any():
        return ratio.sum(-1)
    drawn = x_s[changing].unsqueeze(-1)
    log_p = step_law(process, model, x_t, info.t, info.s, changing).gather(-1, drawn).log()
    log_q = step_law(process, proposal, x_t, info.t, info.s, changing).gather(-1, drawn).log()
    ratio[changing] = (log_p - log_q).squeeze(-1).double()
    return ratio.sum(-1)


def tempered(model: torch.Tensor, steered: torch.Tensor, tempering: float) -> torch.Tensor:
    """The proposal's prediction (module docstring) from the model's and the projection's."""
    log_mix = (1 - tempering) * model.clamp_min(1e-30).log() + tempering * steered.clamp_min(
        1e-30
    ).log()
    mix = log_mix.softmax(-1) * (model > 0)  # never a token the model cannot draw
    mix = mix / mix.sum(-1, keepdim=True)
    return (1 - MODEL_SHARE) * mix + MODEL_SHARE * model


def tilt(
    probs: torch.Tensor, gradient: torch.Tensor, strength: float, movable: torch.Tensor
) -> torch.Tensor:
    """x' exp(strength * gradient) at `movable` [B, L] positions, with the model's share."""
    log_tilted = probs.clamp_min(1e-30).log() + strength * gradient * movable[..., None]
    tilted = log_tilted.softmax(-1) * (probs > 0)
    tilted = tilted / tilted.sum(-1, keepdim=True)
    return (1 - MODEL_SHARE) * tilted + MODEL_SHARE * probs


def gradient_tilt(
    probs: torch.Tensor,
    constraints: Sequence[DifferentiableConstraint],
    strength: float,
    movable: torch.Tensor,
) -> torch.Tensor:
    """The first-order proposal (Ou, Pani, Li 2025): x' exp(-l d violation / d x'), the
    surrogates' summed violation read on the soft prediction, at `movable` [B, L] positions."""
    soft = probs.detach().float().requires_grad_(True)
    with torch.enable_grad():
        violation = surrogate_violations(constraints, soft).sum()
        (grad,) = torch.autograd.grad(violation, soft)
    return tilt(probs, -grad, strength, movable)


def twist_tilt(
    probs: torch.Tensor,
    twist: Twist,
    bounds: Sequence[float],
    t: float,
    strength: float,
    movable: torch.Tensor,
) -> torch.Tensor:
    """The twisted proposal: x' exp(l d log P(C | x_t) / d x'), the twist's estimate at each
    of `bounds` (one per constraint it serves) summed, read on the prediction at time t."""
    soft = probs.detach().float().requires_grad_(True)
    times = torch.full((len(probs),), t, device=probs.device)
    with torch.enable_grad():
        log_value = sum(twist.log_value(soft, times, tau).sum() for tau in bounds)
        (grad,) = torch.autograd.grad(log_value, soft)
    return tilt(probs, grad, strength, movable)


class ExactHook:
    """The sampler's per-step hook for one batch: proposes each regular step and adds its
    log-ratio to each sample's log-weight; hands the final prediction back as it is."""

    def __init__(
        self,
        constraints: Sequence[DifferentiableConstraint],
        settings: ALMSettings,
        setting: ExactSetting,
        process: MaskedProcess | UniformProcess,
        generators: Sequence[torch.Generator],
        fixed_positions: Callable[[torch.Tensor], torch.Tensor],
        twist: Twist | None = None,
        twist_bounds: Sequence[float] = (),
    ):
        self.constraints, self.settings, self.setting = list(constraints), settings, setting
        self.twist, self.twist_bounds = twist, list(twist_bounds)
        self.process, self.generators = process, generators
        self.fixed_positions = fixed_positions
        self.log_weights = torch.zeros(len(generators), dtype=torch.float64)
        self.seconds = [0.0] * len(generators)  # each sample's share of the proposing
        self.stage_seconds = {"exact proposal": 0.0}
        self.steered_steps = [0] * len(generators)

    def __call__(self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        if info.draw is None:  # the final prediction: the model's own decoding
            return probs
        started = time.perf_counter()
        proposal = probs
        steer = self.setting.tempering > 0 and (self.constraints or self.twist is not None)
        if steer and info.index >= self.setting.steer_from * info.steps:
            proposal = self.propose(probs, x, info.t)
        x_s = (info.decide or info.draw)(proposal)
        if proposal is not probs:  # an unsteered step's ratio is 1: nothing to gather
            self.log_weights += step_log_ratio(self.process, probs, proposal, x, x_s, info).cpu()
        elapsed = time.perf_counter() - started
        self.stage_seconds["exact proposal"] += elapsed
        self.seconds = [s + elapsed / len(x) for s in self.seconds]
        return proposal

    def propose(self, probs: torch.Tensor, x: torch.Tensor, t: float) -> torch.Tensor:
        """The proposal's prediction at a steered step: twisted, every sample (a path the
        model already writes inside the bound must be lifted too, or M >= 1); by the
        surrogates, the model's for a sample whose predicted argmax they already accept,
        steered for the others."""
        fixed = self.fixed_positions(x)
        masked = isinstance(self.process, MaskedProcess)
        if self.setting.steering == "twist":
            strength = self.setting.tempering
            proposal = twist_tilt(probs, self.twist, self.twist_bounds, t, strength, ~fixed)
            for i in range(len(probs)):
                self.steered_steps[i] += 1
            return proposal
        if self.setting.steering == "gradient":
            hard = argmax_ids(probs, ~fixed, x if masked else None)
            with torch.no_grad():
                rows = surrogate_violations(self.constraints, hard).gt(0).any(-1).nonzero()
            rows = rows.squeeze(-1)
            steered = None
        else:
            result = project(
                probs,
                self.constraints,
                self.settings,
                fixed,
                self.generators,
                tokens=x if masked else None,
            )
            rows = result.projected.nonzero().squeeze(-1)
            steered = result.probs
        if not len(rows):
            return probs
        proposal = probs.clone()
        if steered is None:
            strength = self.setting.tempering
            proposal[rows] = gradient_tilt(probs[rows], self.constraints, strength, ~fixed[rows])
        else:
            proposal[rows] = tempered(probs[rows], steered[rows], self.setting.tempering)
        for i in rows.tolist():
            self.steered_steps[i] += 1
        return proposal

    def reports(self) -> list[dict]:
        """Each sample's projection account: the steps its proposal was steered."""
        return [
            {
                "steps": n,
                "outer_iters": 0,
                "inner_iters": 0,
                "search_nodes": 0,
                "seconds": s,
                "settled_by": None,
            }
            for n, s in zip(self.steered_steps, self.seconds, strict=True)
        ]
