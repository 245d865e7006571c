"""Plugs the projections into a sampler's per-step hook and keeps per-sample accounts.

At a projected step, differentiable constraints go through the ALM projection first. Under
masked noise (the sampler offers the step's draw) it looks ahead: a sample whose draw from
the unprojected prediction would decide an unacceptable text first has that decision redrawn
given acceptability, i.e. drawn from the step's distribution conditioned on the constraint
(the distribution over acceptable decisions closest to the model's in KL, sampled by
rejection); only a sample none of whose `redraws` draws is acceptable is projected by the
ALM, and a draw from its projection that still decides badly is redrawn the same way. Then,
for exact constraints (novelty, ...), each sample whose argmax some judge rejects is searched
for the cheapest set of token flips that every judge accepts.

The final prediction is the output itself, one deterministic decision, so the judges read
every argmax first: a sample they accept is left as it is (whatever its surrogates say), and
one they reject first tries the linearised projection (`linearized.py`, one surrogate pass
where the ALM takes ~20), then the ALM, then the flip search, which runs there for every
constraint so that surrogate error is repaired against the exact judges."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from cdd_cli.constraints.base import Constraint, DifferentiableConstraint, ExactConstraint
from cdd_cli.diffusion.processes import make_argmax, sample_categorical
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.projection.alm import ALMProgress, ALMSettings, Multipliers, argmax_ids, project
from cdd_cli.projection.layout import Plan, WordLayout
from cdd_cli.projection.linearized import linearised_search
from cdd_cli.projection.search import Reader, SearchSettings, best_first


def decide_as(probs: torch.Tensor, i: int, at: torch.Tensor, tokens: torch.Tensor) -> None:
    """Make sample i's positions `at` [L] one-hot on `tokens`, in place: the sampler's draw
    then decides exactly those tokens there."""
    probs[i, at] = torch.nn.functional.one_hot(tokens, probs.shape[-1]).to(probs.dtype)


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
        # Ancestral steps are indexed 0 .. steps - 2 and the noise-removal prediction `steps`,
        # which is always due (on 32 steps, 0.95 projects that prediction alone; 0.9 also
        # steps 29 and 30). A masked model with nothing left to remove skips that prediction:
        # every token is decided, and nothing is left to project.
        return info.index >= start * info.steps

    def accept(self, ids: list[int]) -> bool:
        return self.accept_all([ids])[0]

    def accept_all(self, sequences: list[list[int]]) -> list[bool]:
        """Whether every judge accepts each sequence; each judge reads, in one call, only the
        texts the judges before it accepted."""
        texts = [self.decode(ids) for ids in sequences]
        ok = [True] * len(texts)
        for c in self.judges:
            pending = [k for k, good in enumerate(ok) if good]
            if not pending:
                break
            if isinstance(c, ExactConstraint):
                verdicts = [c.accepts(texts[k]) for k in pending]
            else:
                verdicts = [c.satisfied(v) for v in c.judge([texts[k] for k in pending])]
            for k, verdict in zip(pending, verdicts, strict=True):
                ok[k] = verdict
        return ok

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
        final = info.index >= info.steps
        # At the final prediction the judges read every argmax first: what they accept is
        # done, and what they reject tries the linearised projection before the ALM.
        accepted = None
        if final:
            probs, accepted = self.final_check(probs, x, fixed, touched)
        if self.differentiable and self.due(self.settings.project_from, info):
            alone, ahead = self.left_alone(probs, x, info, idle)
            if accepted is not None:
                alone |= accepted.to(alone.device)
            # The cheapest projection first: a bad decision redrawn given acceptability.
            probs, settled = self.condition(probs, info, ahead, ~alone, touched)
            alone |= settled
            # Most steps leave every sample alone: the ALM's bookkeeping alone would cost 1%.
            if not bool(alone.all()):
                probs = self.alm_step(probs, x, info, fixed, alone, touched)
        # Exact constraints are searched at their steps; at the final prediction every sample
        # that some judge still rejects is searched too (a cheap, exact repair of surrogate
        # error, instead of redrawing the whole sample).
        if final or (self.exact and self.due(self.search.project_from, info)):
            skip = idle if accepted is None else accepted
            probs = self.search_step(probs, x, fixed, touched, final, skip)
        for i, t in enumerate(touched):
            self.steps[i] += t
        return probs

    def final_check(
        self, probs: torch.Tensor, x: torch.Tensor, fixed: torch.Tensor, touched: list[bool]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """At the final prediction: `probs` with the samples settled by the linearised
        projection (`linearised_search`) made to decide what it found, and [B] the samples
        every judge now accepts (their argmax as it was, or as settled)."""
        started = time.perf_counter()
        free = ~fixed
        ids = argmax_ids(probs, free, x)
        sequences = ids.tolist()
        accepted = torch.tensor(self.accept_all(sequences), dtype=torch.bool)
        # Every sample's output is read here, accepted or not: an equal share each.
        share = (time.perf_counter() - started) / len(accepted)
        for i in range(len(accepted)):
            self.seconds[i] += share
        rows = (~accepted).nonzero().squeeze(-1).tolist()
        if not self.differentiable or not rows:
            return probs, accepted
        # Only where a surrogate's own judge objects: what only an exact judge (novelty, ...)
        # rejects is left to the flip search, which finds the cheapest change it accepts.
        started = time.perf_counter()
        objected = self.unacceptable([self.decode(sequences[i]) for i in rows]).tolist()
        share = (time.perf_counter() - started) / len(rows)
        for i in rows:
            self.seconds[i] += share
        rows = [i for i, bad in zip(rows, objected, strict=True) if bad]
        if not rows:
            return probs, accepted
        result = linearised_search(
            probs,
            rows,
            free,
            ids,
            self.differentiable,
            self.settings.support,
            self.accept_all,
            self.well_formed,
        )
        for i in rows:
            touched[i] = True
            self.seconds[i] += result.seconds[i]
            self.nodes[i] += result.judged[i]
            if i in result.found:
                # In place: the sampler never reads its final prediction again (sampler.py).
                probs[i] = make_argmax(probs[i], result.found[i])
                accepted[i] = True
        return probs, accepted

    def alm_step(
        self,
        probs: torch.Tensor,
        x: torch.Tensor,
        info: StepInfo,
        fixed: torch.Tensor,
        alone: torch.Tensor,
        touched: list[bool],
    ) -> torch.Tensor:
        """`probs` projected by the ALM, except the samples left `alone` [B] (and positions
        `fixed`), with the draws that would still decide badly redrawn; accounts kept."""
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
            # Only where it did: a sample left alone may hold what the judges just accepted.
            probs = self.layout.apply(probs, self.plans, fixed | alone[:, None])
        return probs

    def left_alone(
        self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo, idle: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[B] samples the ALM need not touch at this step, and the step's draw [B, L] from
        the unprojected prediction where the process keeps what it decides (else None).
        Left alone: the idle samples and those whose draw decides nothing unacceptable
        (`decides_badly`). Only a decision is irreversible; a later step about to make a bad
        one sees a fresh prediction to project. The final prediction (idle None) leaves no
        sample alone."""
        if idle is None:
            return torch.zeros(len(x), dtype=torch.bool, device=x.device), None
        alone = idle.clone()
        rows = (~alone).nonzero().squeeze(-1).tolist()
        ahead = None
        if info.decide is not None and rows:
            ahead = info.decide(probs)
            bad = self.decides_badly(ahead, rows)
            alone[rows] = ~bad.to(alone.device)
        return alone, ahead

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

    def acceptable_draws(
        self, probs: torch.Tensor, info: StepInfo, ahead: torch.Tensor, rows: list[int]
    ) -> dict[int, torch.Tensor | None]:
        """For each of `rows`, tokens for the positions its step decides, drawn from `probs`
        given that the decision is acceptable: the first acceptable one of `redraws` draws
        (None where none is). All candidates are judged in one call."""
        drawn: dict[int, torch.Tensor] = {}
        texts: list[str] = []
        for i in rows:
            at = info.changing[i]
            u = torch.rand(self.redraws, int(at.sum()), generator=self.generators[i])
            drawn[i] = sample_categorical(probs[i, at].expand(self.redraws, -1, -1), u)
            for tokens in drawn[i]:
                ids = ahead[i].clone()
                ids[at] = tokens
                texts.append(self.decided_text(ids))
        bad = self.unacceptable(texts).view(len(rows), self.redraws)
        found: dict[int, torch.Tensor | None] = {}
        for row, i in enumerate(rows):
            ok = (~bad[row]).nonzero().squeeze(-1)
            found[i] = drawn[i][ok[0]] if len(ok) else None
        return found

    def condition(
        self,
        probs: torch.Tensor,
        info: StepInfo,
        ahead: torch.Tensor | None,
        bad: torch.Tensor,
        touched: list[bool],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`probs` with the decision of each sample in `bad` [B] (its draw `ahead` decides
        badly) redrawn given acceptability, and [B] the samples so settled, which the ALM
        then leaves alone. The step's distribution conditioned on acceptability is, of all
        distributions over acceptable decisions, the closest to the model's (KL(q || p) =
        -log p(acceptable)); rejection samples it exactly. A sample none of whose draws is
        acceptable goes to the ALM, which can also move the positions still masked."""
        settled = torch.zeros_like(bad)
        rows = bad.nonzero().squeeze(-1).tolist()
        if ahead is None or info.changing is None or not rows:
            return probs, settled
        started = time.perf_counter()
        found = self.acceptable_draws(probs, info, ahead, rows)
        share = (time.perf_counter() - started) / len(rows)
        for i, tokens in found.items():
            self.seconds[i] += share
            if tokens is None:
                continue
            # In place (a copy of [B, L, V] costs more than the judging): a step that decides
            # something never reuses its prediction (sampler.py), and this one does.
            decide_as(probs, i, info.changing[i], tokens)
            settled[i] = True
            touched[i] = True
        return probs, settled

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
        given that the decision is acceptable (`acceptable_draws`), or the argmax where none
        is; handed to the sampler as one-hot rows. Rejection keeps the variety of sampling
        (always taking the argmax cost 1.4-2% of unigram entropy). `projected` [B]: the
        samples the ALM moved; the others' draw is the one already judged bad."""
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
        started = time.perf_counter()
        found = self.acceptable_draws(probs, info, ahead, rows)
        share = (time.perf_counter() - started) / len(rows)
        # The ALM's output is its own copy; the sampler's prediction (maybe its cache) is not.
        out = probs if projected.any() else probs.clone()
        for i, tokens in found.items():
            touched[i] = True
            at = info.changing[i]
            decide_as(out, i, at, probs[i, at].argmax(-1) if tokens is None else tokens)
            self.seconds[i] += share
        return out

    def search_step(
        self,
        probs: torch.Tensor,
        x: torch.Tensor,
        fixed: torch.Tensor,
        touched: list[bool],
        final: bool,
        skip: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`probs` with each sample whose argmax some judge rejects searched (`best_first`)
        for the cheapest accepted flips; samples in `skip` [B] (idle at this step, or already
        accepted) are not judged."""
        # A fixed position keeps its token whatever its probabilities: the argmax is needed
        # only where the step may still change something (a V-wide argmax over every position
        # of a text model cost 2% of sampling time, at the final prediction alone).
        argmax = argmax_ids(probs, ~fixed, x).tolist()
        skipped = [False] * len(argmax) if skip is None else skip.tolist()
        judged = [i for i in range(len(argmax)) if not skipped[i]]
        verdicts = self.accept_all([argmax[i] for i in judged])
        rejected = [i for i, ok in zip(judged, verdicts, strict=True) if not ok]
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
