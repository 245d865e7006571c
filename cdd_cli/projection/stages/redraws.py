"""The stages that look at a masked step's draw before it decides: a decision is the only
thing a masked step cannot take back, so one that the judges would reject is redrawn given
acceptability (`Redraws`), before the ALM (`LookAhead`) and after it (`RedrawAfterALM`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar

import torch

from cdd_cli.diffusion.processes import sample_categorical
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.projection.judges import Judges
from cdd_cli.projection.step import Accounts, Step, decide_as


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


class RedrawAfterALM:
    """After the ALM, under masked noise: the ALM makes the argmax feasible, not every draw.
    Where a sample's draw would still decide badly, its deciding positions take a token drawn
    given acceptability (`Redraws`), handed to the sampler as one-hot rows, or the sampler's
    own draw from the ALM's categorical where none is. Rejection keeps the variety of sampling
    (always taking the argmax cost 1.4-2% of unigram entropy)."""

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
            accounts.seconds[i] += share
            if tokens is None:
                # None acceptable: the step draws from the ALM's categorical. Its argmax
                # would be drawn again at every such step and write one token wherever the
                # ALM cannot reach its aim (a one-token template blank under toxicity <=
                # 0.05: " you" in 238 of 256 fills, rejection's 13); the final judges and
                # redraws answer for what the draw decides.
                continue
            step.touched[i] = True
            decide_as(out, i, info.changing[i], tokens)
        step.probs = out
