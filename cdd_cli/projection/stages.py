"""The engine's stages (`engine.py` runs them in order). Each is a small object with one job:

- `due(step)`: whether it runs at this step;
- `needs` / `provides`: the optional fields of `Step` it reads / sets (the engine refuses an
  order in which a stage reads what no earlier stage provides);
- `run(step, accounts)`: what it may change: `step.probs` [B, L, V] (in place or replaced),
  for the samples its docstring names, and what it marks: `step.settled` [B] (no later
  stage need touch the sample at this step) or `step.accepted` [B] (the final prediction's
  judges accept it); it charges each sample its share of the time in `accounts`.

What stages read: the prediction, the sampler's tokens x_t and step (`StepInfo`), the
positions the step cannot change (`step.fixed`), and the constraints through `Judges` (exact
verdicts on decoded text), their surrogates (the ALM and the ladder) or their closed forms.

Tensors stay on the prediction's device; values come back to the host only where a stage
must read them (the judges read decoded text; accounts, the flip search and the layouts are
Python): each such place is listed with its reason in tests/projection/test_host_syncs.py,
which fails on one added without being listed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from cdd_cli.constraints.base import (
    ClosedFormProjection,
    Constraint,
    DifferentiableConstraint,
    ExactConstraint,
)
from cdd_cli.diffusion.processes import make_argmax, sample_categorical
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.projection.alm import ALMProgress, Multipliers, argmax_ids, project
from cdd_cli.projection.linearized import linearised_search
from cdd_cli.projection.search import Reader, best_first
from cdd_cli.settings import ALMSettings, SearchSettings


@dataclass
class Step:
    """One step's prediction as the stages pass it on."""

    probs: torch.Tensor  # [B, L, V] p(x_0 | x_t), projected stage by stage
    x: torch.Tensor  # [B, L] the sampler's tokens x_t
    info: StepInfo
    fixed: torch.Tensor  # [B, L] positions no draw of this step can change
    touched: list[bool]  # samples some stage worked on (the record's `projection.steps`)
    settled: torch.Tensor  # [B] samples later stages leave alone at this step
    accepted: torch.Tensor | None = None  # [B] final prediction: the judges accept its argmax
    argmax: torch.Tensor | None = None  # [B, L] final prediction: the argmax the judges read
    ahead: torch.Tensor | None = None  # [B, L] the step's draw from the unprojected prediction
    projected: torch.Tensor | None = None  # [B] samples the ALM moved at this step
    plans: dict[int, list] = field(default_factory=dict)  # closed form -> its plans
    unprojected: torch.Tensor | None = None  # [B, L, V] the prediction before the closed forms

    @property
    def final(self) -> bool:
        """The noise removal: its prediction is the output itself."""
        return self.info.index >= self.info.steps

    @property
    def idle(self) -> torch.Tensor | None:
        """[B] samples whose step decides no token (most steps of a masked model): they go on
        unchanged whatever their probabilities. None where every token may change."""
        return None if self.info.changing is None else ~self.info.changing.any(-1)

    def due(self, start: float) -> bool:
        # Steps are indexed 0 .. steps - 2 and the noise removal `steps`, which is always due.
        return self.info.index >= start * self.info.steps


class Accounts:
    """What each sample cost: steps touched, ALM iterations, search nodes, seconds."""

    def __init__(self, n: int):
        self.steps = [0] * n
        self.outer = [0] * n
        self.inner = [0] * n
        self.nodes = [0] * n
        self.seconds = [0.0] * n
        # The last stage that changed each sample's prediction (None: none did, the model's
        # own draws were accepted as they were): what did the work, for the record.
        self.settled_by: list[str | None] = [None] * n

    def charge(self, rows: Sequence[int], started: float) -> None:
        """Time since `started`, shared equally by `rows`."""
        if rows:
            share = (time.perf_counter() - started) / len(rows)
            for i in rows:
                self.seconds[i] += share

    def report(self, i: int) -> dict:
        return {
            "steps": self.steps[i],
            "outer_iters": self.outer[i],
            "inner_iters": self.inner[i],
            "search_nodes": self.nodes[i],
            "seconds": round(self.seconds[i], 4),
            "settled_by": self.settled_by[i],
        }


class Judges:
    """The exact verdicts on decoded sequences that the stages ask for."""

    def __init__(
        self,
        constraints: Sequence[Constraint],
        decode: Callable[[list[int]], str],
        fixed_positions: Callable[[torch.Tensor], torch.Tensor],
        readable: Callable[[list[int]], bool] | None = None,
    ):
        exact = [c for c in constraints if isinstance(c, ExactConstraint)]
        # Cheap exact checks first; any other judge only sees what they accept.
        self.order = exact + [c for c in constraints if c not in exact]
        self.differentiable = [c for c in constraints if isinstance(c, DifferentiableConstraint)]
        self.decode = decode
        self.fixed_positions = fixed_positions
        # Where the language has a syntax: a sequence it cannot read is rejected unjudged
        # (no judge of a molecule accepts what RDKit cannot parse; the flip search's
        # candidates were 71% unreadable at SA tau 3.0-4.0, each 0.2 ms of RDKit to refuse).
        self.readable = readable

    def accept(self, ids: list[int]) -> bool:
        return self.accept_all([ids])[0]

    def accept_all(self, sequences: list[list[int]]) -> list[bool]:
        """Whether every judge accepts each sequence; each judge reads, in one call, only the
        texts the judges before it accepted."""
        ok = [True] * len(sequences)
        if self.readable is not None:
            ok = [self.readable(ids) for ids in sequences]
        texts = [self.decode(ids) if good else "" for ids, good in zip(sequences, ok, strict=True)]
        for c in self.order:
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

    def unacceptable(self, texts: list[str]) -> torch.Tensor:
        """[len(texts)] texts some differentiable constraint's judge rejects, aiming as far
        inside as the surrogates do (a text a judge cannot read counts as rejected)."""
        bad = torch.zeros(len(texts), dtype=torch.bool)
        for c in self.differentiable:
            values = c.judge(texts)
            scores = torch.tensor([torch.nan if v is None else v for v in values])
            bad |= scores.isnan() | (c.surrogate_violation(scores) > 0)
        return bad

    def decided_text(self, ids: torch.Tensor) -> str:
        """The text of the decided tokens of one sequence [L], undecided positions left out."""
        return self.decode(ids[self.fixed_positions(ids[None])[0]].tolist())


class ClosedForms:
    """Every step, from the first: each constraint family's closed-form projection (the
    lexical word layout), re-planned given what is decided so far. Touches every sample."""

    name: ClassVar[str] = "ClosedForms"
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ("plans", "unprojected")

    def __init__(self, projections: list[ClosedFormProjection], generators):
        self.projections, self.generators = projections, generators

    def due(self, step: Step) -> bool:
        return bool(self.projections)

    def run(self, step: Step, accounts: Accounts) -> None:
        started = time.perf_counter()
        step.unprojected = step.probs
        for k, projection in enumerate(self.projections):
            plans = projection.plan(step.probs, step.x, step.fixed, self.generators)
            step.probs = projection.apply(step.probs, plans, step.fixed)
            if step.info.changing is not None:
                projection.order(plans, step.info.changing, step.fixed)
            step.plans[k] = plans
        rows = range(len(step.touched))
        accounts.charge(rows, started)
        for i in rows:
            step.touched[i] = True


class ClosedFormLookAhead:
    """Masked steps, where the job has one closed form and it can weigh its matches
    (`projection.lookahead` candidates, 0: off). A closed form weighs what follows a decision
    by the step's prediction, in which the positions not yet decided do not depend on the
    decision; in the model they do (a word's first token and its last, a word and the end
    after it), so its choices drift from the model's (`bench/fidelity_text.py`, structured).
    Here each sample's decision of the step is drawn from `count` candidates of the closed
    form's own law, kept in proportion to the mass of the matches that follow under the
    model's next prediction given the candidate over that under this prediction
    (sampling-importance-resampling; the model's law conditioned on the match where the rest
    is decided in one step, as the count grows). One forward of the distinct candidates (at
    most `count` rows) per sample and step that decides a position the form serves."""

    name: ClassVar[str] = "ClosedFormLookAhead"
    needs: tuple[str, ...] = ("unprojected",)
    provides: tuple[str, ...] = ()

    def __init__(self, closed_forms: ClosedForms, generators, count: int):
        self.closed_forms, self.generators, self.count = closed_forms, generators, count

    def due(self, step: Step) -> bool:
        forms = self.closed_forms.projections
        return (
            len(forms) == 1
            and hasattr(forms[0], "log_weight")
            and step.info.decide is not None
            and step.info.predict is not None
        )

    def run(self, step: Step, accounts: Accounts) -> None:
        layout = self.closed_forms.projections[0]
        probs, info = step.unprojected, step.info
        span = slice(layout.start, layout.start + layout.length)
        deciding = torch.zeros_like(step.fixed)
        deciding[:, span] = info.changing[:, span] & ~step.fixed[:, span]
        deciding = deciding.cpu()  # read here: which samples decide, and where
        for i in deciding.any(-1).nonzero().squeeze(-1).tolist():
            started = time.perf_counter()
            g = self.generators[i]
            at = deciding[i].nonzero().squeeze(-1)
            plans, mass = layout.candidates(probs[i], step.x[i], step.fixed[i], self.count, g)
            rows = layout.rows_along(probs[i], plans, at.to(probs.device))
            u = torch.rand(self.count, len(at), generator=g)
            tokens = sample_categorical(rows, u)  # [K, N]
            x = step.x[i].expand(self.count, -1).clone()
            x[:, at] = tokens
            fixed = step.fixed[i].expand(self.count, -1).clone()
            fixed[:, at] = True
            # Each distinct candidate weighed once (a decision the pattern forces is the same
            # in every candidate); one alone, or nothing left to follow: each weighs the same.
            x, inverse = torch.unique(x, dim=0, return_inverse=True)
            fixed = fixed[: len(x)]
            pick = 0
            if len(x) > 1 and not bool(fixed[0, span].all()):
                here = layout.log_weight_of(mass, x, at)
                ahead = layout.log_weight(info.predict(x), x, fixed)
                weights = torch.softmax((ahead - here)[inverse.to(ahead.device)], 0)
                pick = int(_draw(weights, float(torch.rand(1, generator=g, dtype=torch.float64))))
            decide_as(step.probs, i, deciding[i].to(step.probs.device), tokens[pick])
            step.touched[i] = True
            accounts.charge([i], started)


def _draw(weights: torch.Tensor, u: float) -> int:
    """An index drawn in proportion to `weights` [K] (float64) with the uniform `u`."""
    cumulative = weights.cumsum(0)
    index = int(torch.searchsorted(cumulative, u * cumulative[-1], right=True))
    return min(index, len(weights) - 1)


class KeepClosedForms:
    """After the ALM (which may lend mass to tokens a closed form excludes): the step's
    closed-form plans applied again, to the samples the ALM was free to move only."""

    name: ClassVar[str] = "KeepClosedForms"
    needs: tuple[str, ...] = ("plans", "projected")
    provides: tuple[str, ...] = ()

    def __init__(self, closed_forms: ClosedForms):
        self.closed_forms = closed_forms

    def due(self, step: Step) -> bool:
        return step.projected is not None and bool(self.closed_forms.projections)

    def run(self, step: Step, accounts: Accounts) -> None:
        frozen = step.fixed | step.settled[:, None]
        for k, projection in enumerate(self.closed_forms.projections):
            step.probs = projection.apply(step.probs, step.plans[k], frozen)


class FinalJudges:
    """The final prediction is the output itself, one deterministic decision: the judges read
    every sample's argmax first, and what they accept is settled exactly as it is (whatever
    its surrogates say)."""

    name: ClassVar[str] = "FinalJudges"
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ("accepted", "argmax")

    def __init__(self, judges: Judges):
        self.judges = judges

    def due(self, step: Step) -> bool:
        return step.final

    def run(self, step: Step, accounts: Accounts) -> None:
        started = time.perf_counter()
        step.argmax = argmax_ids(step.probs, ~step.fixed, step.x)
        verdicts = self.judges.accept_all(step.argmax.tolist())
        step.accepted = torch.tensor(verdicts, dtype=torch.bool)
        accounts.charge(range(len(step.accepted)), started)
        step.settled |= step.accepted.to(step.settled.device)


class LinearisedLadder:
    """Final prediction, samples the judges rejected where a surrogate's own judge objects
    (what only an exact judge rejects is the flip search's): the linearised projection
    (`linearized.py`), one surrogate pass where the ALM takes ~20. What it finds is decided
    and settled."""

    name: ClassVar[str] = "LinearisedLadder"
    needs: tuple[str, ...] = ("accepted", "argmax")
    provides: tuple[str, ...] = ()

    def __init__(
        self,
        judges: Judges,
        support: int,
        well_formed: Callable[[torch.Tensor], torch.Tensor] | None,
    ):
        self.judges, self.support, self.well_formed = judges, support, well_formed

    def due(self, step: Step) -> bool:
        return step.final and bool(self.judges.differentiable) and step.accepted is not None

    def run(self, step: Step, accounts: Accounts) -> None:
        rows = (~step.accepted).nonzero().squeeze(-1).tolist()
        if not rows:
            return
        started = time.perf_counter()
        ids = step.argmax
        texts = [self.judges.decode(ids[i].tolist()) for i in rows]
        objected = self.judges.unacceptable(texts).tolist()
        accounts.charge(rows, started)
        rows = [i for i, bad in zip(rows, objected, strict=True) if bad]
        if not rows:
            return
        result = linearised_search(
            step.probs,
            rows,
            ~step.fixed,
            ids,
            self.judges.differentiable,
            self.support,
            self.judges.accept_all,
            self.well_formed,
        )
        for i in rows:
            step.touched[i] = True
            accounts.seconds[i] += result.seconds[i]
            accounts.nodes[i] += result.judged[i]
            if i in result.found:
                # In place: the sampler never reads its final prediction again (sampler.py).
                step.probs[i] = make_argmax(step.probs[i], result.found[i])
                step.accepted[i] = True
                step.settled[i] = True


def decide_as(probs: torch.Tensor, i: int, at: torch.Tensor, tokens: torch.Tensor) -> None:
    """Make sample i's positions `at` [L] one-hot on `tokens`, in place: the sampler's draw
    then decides exactly those tokens there."""
    probs[i, at] = torch.nn.functional.one_hot(tokens, probs.shape[-1]).to(probs.dtype)


class Redraws:
    """Draws of a step's decision given acceptability: the step's distribution conditioned on
    the constraints (of all distributions over acceptable decisions, the closest to the
    model's: KL(q || p) = -log p(acceptable)), sampled by rejection over `count` draws."""

    def __init__(self, judges: Judges, generators: Sequence[torch.Generator], count: int = 8):
        self.judges, self.generators, self.count = judges, generators, count

    def decides_badly(
        self, ahead: torch.Tensor, rows: list[int], accounts: Accounts
    ) -> torch.Tensor:
        """[len(rows)] whether the draw `ahead` [B, L] leaves the decided text unacceptable."""
        started = time.perf_counter()
        bad = self.judges.unacceptable([self.judges.decided_text(ahead[i]) for i in rows])
        accounts.charge(rows, started)
        return bad

    def acceptable(
        self, probs: torch.Tensor, info: StepInfo, ahead: torch.Tensor, rows: list[int]
    ) -> dict[int, torch.Tensor | None]:
        """For each of `rows`, tokens for the positions its step decides, drawn from `probs`
        given that the decision is acceptable: the first acceptable of `count` draws (None
        where none is). All candidates are judged in one call."""
        drawn: dict[int, torch.Tensor] = {}
        texts: list[str] = []
        for i in rows:
            at = info.changing[i]
            u = torch.rand(self.count, int(at.sum()), generator=self.generators[i])
            drawn[i] = sample_categorical(probs[i, at].expand(self.count, -1, -1), u)
            for tokens in drawn[i]:
                ids = ahead[i].clone()
                ids[at] = tokens
                texts.append(self.judges.decided_text(ids))
        bad = self.judges.unacceptable(texts).view(len(rows), self.count)
        found: dict[int, torch.Tensor | None] = {}
        for row, i in enumerate(rows):
            ok = (~bad[row]).nonzero().squeeze(-1)
            found[i] = drawn[i][ok[0]] if len(ok) else None
        return found


class LookAhead:
    """Steps that keep what they decide (masked noise), from `project_from` on: only a
    decision is irreversible, so the step's draw from the unprojected prediction is looked at
    first. A sample whose draw decides nothing unacceptable is settled (a later step about to
    decide badly sees a fresh prediction); one whose draw does has its decision redrawn given
    acceptability and is settled if some draw is acceptable. The rest go to the ALM."""

    name: ClassVar[str] = "Redraws"
    name: ClassVar[str] = "LookAhead"
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ("ahead",)

    def __init__(self, redraws: Redraws, project_from: float):
        self.redraws, self.project_from = redraws, project_from

    def due(self, step: Step) -> bool:
        return bool(self.redraws.judges.differentiable) and step.due(self.project_from)

    def run(self, step: Step, accounts: Accounts) -> None:
        idle, info = step.idle, step.info
        if idle is None:  # the final prediction: every token may change, nothing to look at
            return
        step.settled |= idle
        rows = (~step.settled).nonzero().squeeze(-1).tolist()
        if info.decide is None or not rows:
            return
        step.ahead = info.decide(step.probs)
        bad = self.redraws.decides_badly(step.ahead, rows, accounts).to(step.settled.device)
        step.settled[rows] = ~bad
        rows = [i for i, b in zip(rows, bad.tolist(), strict=True) if b]
        if not rows:
            return
        started = time.perf_counter()
        found = self.redraws.acceptable(step.probs, info, step.ahead, rows)
        accounts.charge(rows, started)
        for i, tokens in found.items():
            if tokens is None:
                continue
            # In place (a copy of [B, L, V] costs more than the judging): a step that decides
            # something never reuses its prediction (sampler.py), and this one does.
            decide_as(step.probs, i, info.changing[i], tokens)
            step.settled[i] = True
            step.touched[i] = True


class ALM:
    """The augmented-Lagrangian projection (`alm.py`) of every sample not settled, on the
    differentiable constraints' surrogates. Its multipliers carry over from a sample's last
    projection. Marks `step.projected`."""

    name: ClassVar[str] = "ALM"
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ("projected",)

    def __init__(
        self,
        constraints: list[DifferentiableConstraint],
        settings: ALMSettings,
        generators: Sequence[torch.Generator],
        on_progress: Callable[[ALMProgress], None] | None,
        at_final: bool = True,
    ):
        self.constraints, self.settings = constraints, settings
        self.generators, self.on_progress = generators, on_progress
        self.at_final = at_final  # whether it projects the final prediction too
        self.multipliers: Multipliers | None = None

    def due(self, step: Step) -> bool:
        return (
            bool(self.constraints)
            and step.due(self.settings.project_from)
            and (self.at_final or not step.final)
            and not bool(step.settled.all())  # the bookkeeping alone would cost 1%
        )

    def run(self, step: Step, accounts: Accounts) -> None:
        with torch.enable_grad():
            result = project(
                step.probs,
                self.constraints,
                self.settings,
                step.fixed | step.settled[:, None],
                self.generators,
                self.on_progress,
                self.multipliers,
                step.x,
            )
        self.multipliers = result.multipliers
        projected = result.projected.tolist()
        for i, seconds in enumerate(result.seconds.tolist()):
            accounts.seconds[i] += seconds
            if projected[i]:
                step.touched[i] = True
                accounts.outer[i] += int(result.outer_iters[i])
                accounts.inner[i] += int(result.inner_iters[i])
        step.probs, step.projected = result.probs, result.projected


class RedrawAfterALM:
    """After the ALM, under masked noise: the ALM makes the argmax feasible, not every draw.
    Where a sample's draw would still decide badly, its deciding positions take a token drawn
    given acceptability (`Redraws`), or the argmax where none is, handed to the sampler as
    one-hot rows. Rejection keeps the variety of sampling (always taking the argmax cost
    1.4-2% of unigram entropy)."""

    name: ClassVar[str] = "RedrawAfterALM"
    needs: tuple[str, ...] = ("projected",)
    provides: tuple[str, ...] = ()

    def __init__(self, redraws: Redraws):
        self.redraws = redraws

    def due(self, step: Step) -> bool:
        return step.projected is not None and step.info.decide is not None

    def run(self, step: Step, accounts: Accounts) -> None:
        info = step.info
        rows = (~step.settled).nonzero().squeeze(-1).tolist()
        if info.changing is None or not rows:
            return
        probs = step.probs
        ahead = info.decide(probs)
        # Samples the ALM did not move draw what was already judged bad.
        moved = [i for i in rows if step.projected[i]]
        if moved:
            still_bad = self.redraws.decides_badly(ahead, moved, accounts).tolist()
            good = {i for i, b in zip(moved, still_bad, strict=True) if not b}
            rows = [i for i in rows if i not in good]
        if not rows:
            return
        started = time.perf_counter()
        found = self.redraws.acceptable(probs, info, ahead, rows)
        share = (time.perf_counter() - started) / len(rows)
        # The ALM's output is its own copy; the sampler's prediction (maybe its cache) is not.
        out = probs if step.projected.any() else probs.clone()
        for i, tokens in found.items():
            step.touched[i] = True
            at = info.changing[i]
            decide_as(out, i, at, probs[i, at].argmax(-1) if tokens is None else tokens)
            accounts.seconds[i] += share
        step.probs = out


class FlipSearch:
    """Exact constraints (novelty, ...) at their steps from `project_from` on, and (with
    `repair`) at the final prediction every sample some judge still rejects: the cheapest set
    of token flips of its argmax that every judge accepts (`search.py`), made the argmax.
    Under a syntax the final prediction first tries the most probable well-formed sequence
    (the surrogates are blind to syntax). Samples idle at the step, or already accepted at
    the final prediction, are not judged."""

    name: ClassVar[str] = "FlipSearch"
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()

    def __init__(
        self,
        judges: Judges,
        settings: SearchSettings,
        reader: Reader | None,
        well_formed: Callable[[torch.Tensor], torch.Tensor] | None,
        repair: bool,
    ):
        self.judges, self.settings, self.reader = judges, settings, reader
        self.well_formed, self.repair = well_formed, repair
        exact = [c for c in judges.order if isinstance(c, ExactConstraint)]
        self.exact = bool(exact)
        # Before the final prediction the search serves the exact constraints alone (the ALM
        # serves the others at those steps): QM9, PAINS + rule of five + SA <= 3.5, 64
        # samples: SA's rejections searched at steps 29-31 too had cost 107,451 nodes.
        self.exact_judges = Judges(exact, judges.decode, judges.fixed_positions, judges.readable)

    def due(self, step: Step) -> bool:
        if step.final and self.repair:
            return True
        return self.exact and step.due(self.settings.project_from)

    def run(self, step: Step, accounts: Accounts) -> None:
        probs, fixed = step.probs, step.fixed
        # A fixed position keeps its token whatever its probabilities: the argmax is needed
        # only where the step may still change something (a V-wide argmax over every position
        # of a text model cost 2% of sampling time, at the final prediction alone).
        argmax = argmax_ids(probs, ~fixed, step.x).tolist()
        skip = step.idle if step.accepted is None else step.accepted
        skipped = [False] * len(argmax) if skip is None else skip.tolist()
        judged = [i for i in range(len(argmax)) if not skipped[i]]
        judges = self.judges if step.final else self.exact_judges
        verdicts = judges.accept_all([argmax[i] for i in judged])
        rejected = [i for i, ok in zip(judged, verdicts, strict=True) if not ok]
        if not rejected:
            return
        out = probs.clone()
        well: dict[int, torch.Tensor] = {}
        if step.final and self.well_formed is not None:
            started = time.perf_counter()
            well = dict(zip(rejected, self.well_formed(probs[rejected]), strict=True))
            accounts.charge(rejected, started)
        for i in rejected:
            step.touched[i] = True
            if i in well:
                ids = well[i].argmax(-1).tolist()
                if ids != argmax[i] and judges.accept(ids):
                    out[i] = well[i]
                    continue
            started = time.perf_counter()
            result = best_first(
                probs[i].float().cpu(),
                ~fixed[i].cpu(),
                judges.accept,
                self.settings,
                self.reader,
            )
            if result.ids is not None:
                out[i] = make_argmax(probs[i], result.ids)
            elif i in well:  # none accepted: still what the well-formed decoding reads
                out[i] = well[i]
            accounts.nodes[i] += result.nodes
            accounts.seconds[i] += time.perf_counter() - started
        step.probs = out
