"""The projection engine: what happens to the model's prediction at each denoising step.

The sampler hands every step's prediction x' = p(x_0 | x_t) [B, L, V] to the engine, which
passes it through its stages in order and hands back what the sampler then draws from
(the paper's KL projection, Cardei et al. 2025, §4: y* = argmin KL(x' || y) subject to
argmax(y) satisfying every constraint; `alm.py` states its augmented Lagrangian). Each stage
(`stages/`) leaves alone the samples an earlier stage settled at this step, except
ClosedForms (every sample, every step) and FlipSearch (which judges every sample not idle,
or not accepted at the final prediction).

`cdd` (the default method), at a step:

  1. ClosedForms      every step: each family's closed-form projection (the lexical layout)
  2. FinalJudges      final prediction: the exact judges read every argmax; accepted = settled
  3. LinearisedLadder final prediction, rejected by a surrogate's judge: the argmax of
                      log x' - lam * grad g for lam = 0.25 .. 64, first accepted kept
                      (from the draw `repair.surrogates_from` on, as the ALM's final step)
  4. LookAhead        masked steps: a sample whose draw decides nothing unacceptable is
                      settled; a bad decision is redrawn given acceptability
  5. ALM              the augmented Lagrangian on the surrogates, for what is left
  6. RedrawAfterALM   masked steps: a draw from the projection that still decides badly is
                      redrawn given acceptability
  7. KeepClosedForms  the closed forms again, where the ALM moved mass
  8. FlipSearch       exact constraints (novelty) from search.project_from; at the final
                      prediction every sample a judge still rejects (surrogate error repaired)

After sampling, a record the judges still reject is redrawn whole with the surrogates aiming
further inside (`methods.py`, `repair`), at most `repair.max_redraws` times, in the next pass
beside other samples: `Parts` projects each kind of draw of a pass by its own engine.

`paper`: the paper's algorithm with its settings (`methods.py`): ClosedForms, the ALM at
every step over the whole vocabulary, FlipSearch for exact constraints only, no look-ahead,
ladder or redraw; a sample it leaves violating is reported violating. (The paper's own
lexical projection aligns words to the decoded tokens; here lexical constraints keep their
family's closed form, the word layout, under both methods.)

The methods' stage lists live in `methods.py`; this module runs whatever list it is given,
checked when built: each stage's `needs` provided by a stage before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from cdd_cli.constraints.base import (
    ClosedFormProjection,
    Constraint,
)
from cdd_cli.diffusion.processes import MaskedProcess, UniformProcess
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.projection.alm import ALMProgress
from cdd_cli.projection.exact import ExactSetting
from cdd_cli.projection.search import Reader
from cdd_cli.projection.step import Accounts, Step


@dataclass
class StageProgress:
    """A stage beginning or ending at a step, for a progress display: what it did is read off
    `Step` (the samples it changed, those settled), never computed for the display."""

    stage: str  # the stage's `name` ("LookAhead", "ALM", "FlipSearch", ...)
    step: int  # the sampler's step index; `steps`: the final prediction
    steps: int
    samples: int  # samples in the batch
    settled: int  # samples settled at this step so far
    touched: int = 0  # samples the stage changed at this step (0 as it begins)
    ended: bool = False


class Stage(Protocol):
    # Stable: records (`projection.settled_by`) and displays use it, so renaming a class
    # changes neither.
    name: str
    needs: tuple[str, ...]  # fields of `Step` it reads, set by an earlier stage
    provides: tuple[str, ...]  # fields of `Step` it sets

    def due(self, step: Step) -> bool: ...

    def run(self, step: Step, accounts: Accounts) -> None: ...


class Engine:
    """The sampler's per-step hook: the stages in order, and each sample's accounts."""

    def __init__(
        self,
        stages: Sequence[Stage],
        fixed_positions: Callable[[torch.Tensor], torch.Tensor],
        samples: int,
        on_stage: Callable[[StageProgress], None] | None = None,
    ):
        self.stages = list(stages)
        self.on_stage = on_stage
        check_order(self.stages)
        self.fixed_positions = fixed_positions
        self.accounts = Accounts(samples)
        # Wall seconds each stage spent on the batch, by stage name: where the time goes.
        self.stage_seconds = {s.name: 0.0 for s in self.stages}

    def __call__(self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        if not self.stages:  # the model's own draws (`repair.own_draws`): nothing to do
            return probs
        n = len(x)
        step = Step(
            probs,
            x,
            info,
            self.fixed_positions(x),
            touched=[False] * n,
            settled=torch.zeros(n, dtype=torch.bool, device=x.device),
        )
        touched = [False] * n
        for stage in self.stages:
            started = time.perf_counter()
            name = stage.name
            if stage.due(step):
                step.touched = [False] * n  # this stage's own, to name who changed what
                self.tell(name, step)
                stage.run(step, self.accounts)
                for i in (i for i, t in enumerate(step.touched) if t):
                    touched[i] = True
                    self.accounts.settled_by[i] = name
                self.tell(name, step, ended=True)
            self.stage_seconds[name] += time.perf_counter() - started
        for i, t in enumerate(touched):
            self.accounts.steps[i] += t
        return step.probs

    def tell(self, name: str, step: Step, ended: bool = False) -> None:
        # A stage can run for minutes (the final projection of a batch): a display says which.
        if self.on_stage is not None:
            info, settled = step.info, int(step.settled.sum())
            touched = sum(step.touched) if ended else 0
            self.on_stage(
                StageProgress(name, info.index, info.steps, len(step.x), settled, touched, ended)
            )

    @property
    def seconds(self) -> list[float]:
        return self.accounts.seconds

    def report(self, i: int) -> dict:
        return self.accounts.report(i)

    def reports(self) -> list[dict]:
        """Every sample's `report`, in order."""
        return [self.accounts.report(i) for i in range(len(self.accounts.steps))]


class Parts:
    """One batch projected in contiguous parts, each by its own engine: draws of a pass that
    differ in how the projection treats them (a redraw's surrogates aim further inside than
    a first draw's) share the model's passes and nothing else. Each engine sees its rows as
    a batch of their own; a sample's projection does not depend on its batch-mates (the
    model's products pad to a fixed row count, `models/rows.py`), so it is what it would
    be in a pass of its own."""

    def __init__(self, parts: Sequence[tuple[int, int, Engine]]):
        self.parts = list(parts)

    def __call__(self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        if len(self.parts) == 1:
            return self.parts[0][2](probs, x, info)
        for a, b, engine in self.parts:
            rows = probs[a:b]  # a view: an engine's edits in place are the batch's
            projected = engine(rows, x[a:b], info.rows(a, b))
            if projected.data_ptr() != rows.data_ptr():
                rows.copy_(projected)
        return probs

    @property
    def stage_seconds(self) -> dict[str, float]:
        seconds: dict[str, float] = {}
        for _, _, engine in self.parts:
            for name, value in engine.stage_seconds.items():
                seconds[name] = seconds.get(name, 0.0) + value
        return seconds

    @property
    def seconds(self) -> list[float]:
        return [s for _, _, engine in self.parts for s in engine.seconds]

    def reports(self) -> list[dict]:
        return [r for _, _, engine in self.parts for r in engine.reports()]


@dataclass(kw_only=True)
class Job:
    """What the engine is built for: one batch of samples of one prompt (built by name: most
    fields are callables, which a position would not tell apart)."""

    constraints: Sequence[Constraint]
    closed_forms: list[ClosedFormProjection]
    fixed_positions: Callable[[torch.Tensor], torch.Tensor]  # x [B, L] -> [B, L] unchangeable
    generators: Sequence[torch.Generator]  # one per sample
    decode: Callable[[list[int]], str]  # ids -> the text the judges read
    reader: Reader | None = None  # how the tokenizer reads ids, for the search's costs
    well_formed: Callable[[torch.Tensor], torch.Tensor] | None = None  # the sampler's syntax
    on_progress: Callable[[ALMProgress], None] | None = None
    on_stage: Callable[[StageProgress], None] | None = None  # each stage's start and end
    # Whether the surrogates may move a final prediction the judges reject (the ladder, the
    # ALM); else the exact search alone repairs it (`repair.surrogates_from`).
    final_surrogates: bool = True
    # Whether the language's syntax can read a sequence at all (SMILES; None: no syntax).
    readable: Callable[[list[int]], bool] | None = None
    # The reverse process the sampler draws with, for a method that weighs its steps (exact).
    process: MaskedProcess | UniformProcess | None = None
    # The exact method's stored proposal and bound for this model and constraints.
    proposal: ExactSetting | None = None


def check_order(stages: Sequence[Stage]) -> None:
    """Each stage's needs provided by a stage before it (ValueError naming the first that is
    not): the stages talk through `Step`'s optional fields, and this makes the order a checked
    contract rather than a convention."""
    provided: set[str] = set()
    for stage in stages:
        missing = [need for need in stage.needs if need not in provided]
        if missing:
            raise ValueError(
                f"{stage.name} needs {', '.join(missing)}, which no stage before it "
                "provides"
            )
        provided.update(stage.provides)
