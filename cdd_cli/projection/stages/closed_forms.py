"""The closed-form stages: each constraint family's closed-form projection (the lexical word
layout, a pattern's automaton) at every step (`ClosedForms`, first in every method's order),
its look-ahead at the decisions of a masked step (`ClosedFormLookAhead`, right after it) and,
once the ALM has moved mass, the same plans applied again (`KeepClosedForms`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar

import torch

from cdd_cli.constraints.base import ClosedFormProjection, WeighedClosedForm
from cdd_cli.diffusion.processes import sample_categorical
from cdd_cli.projection.step import Accounts, Step, decide_as


class ClosedForms:
    """Every step, from the first: each constraint family's closed-form projection (the
    lexical word layout), re-planned given what is decided so far. Touches every sample."""

    name: ClassVar[str] = "ClosedForms"
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ("plans", "unprojected")

    def __init__(
        self, projections: list[ClosedFormProjection], generators: Sequence[torch.Generator]
    ):
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

    def __init__(
        self, closed_forms: ClosedForms, generators: Sequence[torch.Generator], count: int
    ):
        self.closed_forms, self.generators, self.count = closed_forms, generators, count

    def due(self, step: Step) -> bool:
        forms = self.closed_forms.projections
        return (
            len(forms) == 1
            and isinstance(forms[0], WeighedClosedForm)
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
