"""The stages of the final prediction, the output itself: the exact judges read every
sample's argmax (`FinalJudges`), and what a surrogate's judge objects to takes the linearised
projection first (`LinearisedLadder`), before the look-ahead and the ALM see the rest."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

import torch

from cdd_cli.diffusion.processes import make_argmax
from cdd_cli.projection.alm import argmax_ids
from cdd_cli.projection.judges import Judges
from cdd_cli.projection.linearized import linearised_search
from cdd_cli.projection.step import Accounts, Step


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
