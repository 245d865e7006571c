"""Plugs the projections into a sampler's per-step hook and keeps per-sample accounts.

At a projected step, differentiable constraints go through the ALM projection first. Under
masked noise (the sampler offers the step's draw) it looks ahead: only samples whose draw from
the unprojected prediction would decide an unacceptable text are projected, and a draw from
the projection that still would is redrawn given acceptability. Then, for
exact constraints (novelty, ...), each sample whose argmax some judge rejects is searched for
the cheapest set of token flips that every judge accepts. At the final prediction that search
runs for every constraint, so surrogate error is repaired against the exact judges.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from cdd_cli.constraints.base import Constraint, DifferentiableConstraint, ExactConstraint
from cdd_cli.diffusion.processes import make_argmax, sample_categorical
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.projection.alm import ALMProgress, ALMSettings, Multipliers, project
from cdd_cli.projection.layout import Plan, WordLayout
from cdd_cli.projection.search import Reader, SearchSettings, best_first


class ProjectionHook:
    """Projects p(x_0 | x_t) at the chosen steps; records what each sample cost."""

    redraws = 8  # draws of a bad decision's tokens tried before their argmax

    def __init__(
        self,
        constraints: Sequence[Constraint],
        settings: ALMSettings,
        fixed_positions: Callable[[torch.Tensor], torch.Tensor],
        generators: Sequence[torch.Generator],
        decode: Callable[[list[int]], str],
        search: SearchSettings | None = None,
        on_progress: Callable[[ALMProgress], None] | None = None,
        layout: WordLayout | None = None,
        reader: Reader | None = None,
        well_formed: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ):
        self.differentiable = [c for c in constraints if isinstance(c, DifferentiableConstraint)]
        self.exact = [c for c in constraints if isinstance(c, ExactConstraint)]
        # Cheap exact checks first; any other judge only sees what they accept.
        self.judges = self.exact + [c for c in constraints if c not in self.exact]
        self.settings = settings
        self.search = search or SearchSettings()
        self.fixed_positions = fixed_positions
        self.generators = list(generators)
        self.decode = decode
        self.reader = reader  # what a sequence reads as, for the search's costs
        self.well_formed = well_formed  # the sampler's syntax (e.g. well-formed SMILES)
        self.on_progress = on_progress
        self.layout = layout  # lexical constraints: applied at every step, from the first
        self.plans: list[Plan] | None = None
        self.multipliers: Multipliers | None = None  # carried from step to step
        n = len(self.generators)
        self.steps = [0] * n
        self.outer = [0] * n
        self.inner = [0] * n
        self.nodes = [0] * n
        self.seconds = [0.0] * n

    def due(self, start: float, info: StepInfo) -> bool:
        # The noise-removal prediction (index == steps) is always projected, and so is the
        # last step, however few steps there are (a masked model may finish before the former).
        return info.index >= min(info.steps - 1, start * info.steps)

    def accept(self, ids: list[int]) -> bool:
        text = self.decode(ids)
        return all(
            c.accepts(text) if isinstance(c, ExactConstraint) else c.satisfied(c.judge([text])[0])
            for c in self.judges
        )

    def __call__(self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        fixed = self.fixed_positions(x)
        touched = [False] * len(self.generators)
        if self.layout is not None:
            started = time.perf_counter()
            # Re-drawn every step, given what is decided so far (see projection/layout.py).
            self.plans = self.layout.plan(probs, x, fixed, self.generators)
            probs = self.layout.apply(probs, self.plans, fixed)
            if info.changing is not None:
                self.layout.order(self.plans, info.changing, fixed)
            share = (time.perf_counter() - started) / len(self.generators)
            for i in range(len(self.generators)):
                touched[i] = True
                self.seconds[i] += share
        # A sample whose step decides no token (most steps of a masked model) goes on
        # unchanged whatever its probabilities: projecting or searching it would be wasted.
        idle = None if info.changing is None else ~info.changing.any(-1)
        if self.differentiable and self.due(self.settings.project_from, info):
            alone = self.left_alone(probs, x, info, idle)
            with torch.enable_grad():
                result = project(
                    probs,
                    self.differentiable,
                    self.settings,
                    fixed | alone[:, None],
                    self.generators,
                    self.on_progress,
                    self.multipliers,
                    x,
                )
            self.multipliers = result.multipliers
            projected = result.projected.tolist()
            for i, seconds in enumerate(result.seconds.tolist()):
                self.seconds[i] += seconds
                if projected[i]:
                    touched[i] = True
                    self.outer[i] += int(result.outer_iters[i])
                    self.inner[i] += int(result.inner_iters[i])
            probs = self.decide_acceptably(result.probs, info, alone, result.projected, touched)
            if self.layout is not None:  # the ALM may have lent mass to tokens off the layout
                probs = self.layout.apply(probs, self.plans, fixed)
        # Exact constraints are searched at their steps; at the final prediction every sample
        # that some judge still rejects is searched too (a cheap, exact repair of surrogate
        # error, instead of redrawing the whole sample).
        final = info.index >= info.steps
        if final or (self.exact and self.due(self.search.project_from, info)):
            probs = self.search_step(probs, fixed, touched, final, idle)
        for i, t in enumerate(touched):
            self.steps[i] += t
        return probs

    def left_alone(
        self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo, idle: torch.Tensor | None
    ) -> torch.Tensor:
        """[B] samples the ALM need not touch at this step: the idle ones and, where the
        process keeps what it decides, those whose step, drawn from the unprojected
        prediction, decides nothing unacceptable (`decides_badly`). Only a decision is
        irreversible; a later step about to make a bad one sees a fresh prediction to project.
        The final prediction (idle None) leaves no sample alone."""
        if idle is None:
            return torch.zeros(len(x), dtype=torch.bool, device=x.device)
        alone = idle.clone()
        rows = (~alone).nonzero().squeeze(-1).tolist()
        if info.decide is not None and rows:
            bad = self.decides_badly(info.decide(probs), rows)
            alone[rows] = ~bad.to(alone.device)
        return alone

    def unacceptable(self, texts: list[str]) -> torch.Tensor:
        """[len(texts)] texts some differentiable constraint's judge rejects, aiming as far
        inside as the surrogates do (a text a judge cannot read counts as rejected)."""
        bad = torch.zeros(len(texts), dtype=torch.bool)
        for c in self.differentiable:
            values = c.judge(texts)
            scores = torch.tensor([torch.nan if v is None else v for v in values])
            bad |= scores.isnan() | (c.surrogate_violation(scores) > self.settings.delta)
        return bad

    def decided_text(self, ids: torch.Tensor) -> str:
        """The text of the decided tokens of one sequence [L], undecided positions left out."""
        return self.decode(ids[self.fixed_positions(ids[None])[0]].tolist())

    def decides_badly(self, ahead: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """[len(rows)] whether the step's draw `ahead` [B, L] leaves the text decided so far
        unacceptable."""
        started = time.perf_counter()
        bad = self.unacceptable([self.decided_text(ahead[i]) for i in rows])
        share = (time.perf_counter() - started) / len(rows)
        for i in rows:
            self.seconds[i] += share
        return bad

    def decide_acceptably(
        self,
        probs: torch.Tensor,
        info: StepInfo,
        alone: torch.Tensor,
        projected: torch.Tensor,
        touched: list[bool],
    ) -> torch.Tensor:
        """`probs` where a sample's draw would still decide badly (the ALM makes the argmax
        feasible, not every draw): its deciding positions take a token drawn from `probs`
        given that the decision is acceptable, by rejection over `redraws` fresh draws, or
        the argmax where none is; handed to the sampler as one-hot rows. Rejection keeps the
        variety of sampling (always taking the argmax cost 1.4-2% of unigram entropy).
        `projected` [B]: the samples the ALM moved; the others' draw is the one already
        judged bad."""
        rows = (~alone).nonzero().squeeze(-1).tolist()
        if info.decide is None or info.changing is None or not rows:
            return probs
        ahead = info.decide(probs)
        moved = [i for i in rows if projected[i]]
        if moved:
            still_bad = self.decides_badly(ahead, moved).tolist()
            settled = {i for i, b in zip(moved, still_bad, strict=True) if not b}
            rows = [i for i in rows if i not in settled]
        if not rows:
            return probs
        # The ALM's output is its own copy; the sampler's prediction (maybe its cache) is not.
        out = probs if projected.any() else probs.clone()
        for i in rows:
            started = time.perf_counter()
            touched[i] = True
            at = info.changing[i]
            choices = probs[i, at]  # [n, V]
            u = torch.rand(self.redraws, len(choices), generator=self.generators[i])
            drawn = sample_categorical(choices.expand(self.redraws, -1, -1), u.to(probs.device))
            texts = []
            for tokens in drawn:
                ids = ahead[i].clone()
                ids[at] = tokens
                texts.append(self.decided_text(ids))
            ok = (~self.unacceptable(texts)).nonzero().squeeze(-1)
            tokens = drawn[ok[0]] if len(ok) else choices.argmax(-1)
            out[i, at] = torch.nn.functional.one_hot(tokens, probs.shape[-1]).to(probs.dtype)
            self.seconds[i] += time.perf_counter() - started
        return out

    def search_step(
        self,
        probs: torch.Tensor,
        fixed: torch.Tensor,
        touched: list[bool],
        final: bool,
        idle: torch.Tensor | None = None,
    ) -> torch.Tensor:
        argmax = probs.argmax(-1).tolist()
        skip = [False] * len(argmax) if idle is None else idle.tolist()
        rejected = [i for i, ids in enumerate(argmax) if not skip[i] and not self.accept(ids)]
        if not rejected:
            return probs
        out = probs.clone()
        # On the final prediction the most probable well-formed sequence is the first thing to
        # try where the argmax fails (the ALM's surrogates are blind to syntax); the search
        # still starts from the argmax, whose cheap flips often mend both.
        well: dict[int, torch.Tensor] = {}
        if final and self.well_formed is not None:
            started = time.perf_counter()
            well = dict(zip(rejected, self.well_formed(probs[rejected]), strict=True))
            share = (time.perf_counter() - started) / len(rejected)
            for i in rejected:
                self.seconds[i] += share
        for i in rejected:
            touched[i] = True
            if i in well:
                ids = well[i].argmax(-1).tolist()
                if ids != argmax[i] and self.accept(ids):
                    out[i] = well[i]
                    continue
            started = time.perf_counter()
            result = best_first(
                probs[i].float().cpu(), ~fixed[i].cpu(), self.accept, self.search, self.reader
            )
            if result.ids is not None:
                out[i] = make_argmax(probs[i], result.ids)
            self.nodes[i] += result.nodes
            self.seconds[i] += time.perf_counter() - started
        return out

    def report(self, i: int) -> dict:
        return {
            "steps": self.steps[i],
            "outer_iters": self.outer[i],
            "inner_iters": self.inner[i],
            "search_nodes": self.nodes[i],
            "seconds": round(self.seconds[i], 4),
        }
