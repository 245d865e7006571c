"""The flip search stage, last in every method's order: exact constraints (novelty, ...)
and, at the final prediction, whatever a judge still rejects (`search.py`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

import torch

from cdd_cli.constraints.base import ExactConstraint
from cdd_cli.diffusion.processes import make_argmax
from cdd_cli.projection.alm import argmax_ids
from cdd_cli.projection.judges import Judges
from cdd_cli.projection.search import Reader, best_first
from cdd_cli.projection.step import Accounts, Step
from cdd_cli.settings import SearchSettings


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
