"""The engine's stages, one module per part of the projected step; `engine.py` runs them in
the order a method lists them (`methods.py`). In `cdd`'s order (the engine's docstring says
what each does):

    closed_forms  1. ClosedForms, ClosedFormLookAhead; 7. KeepClosedForms
    final         2. FinalJudges, 3. LinearisedLadder (the final prediction)
    redraws       4. LookAhead, 6. RedrawAfterALM (masked steps), both through Redraws
    alm           5. ALM
    flip_search   8. FlipSearch

Each stage is a small object with one job:

- `name`: stable (records' `projection.settled_by` and the display use it);
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

from cdd_cli.projection.stages.alm import ALM
from cdd_cli.projection.stages.closed_forms import (
    ClosedFormLookAhead,
    ClosedForms,
    KeepClosedForms,
)
from cdd_cli.projection.stages.final import FinalJudges, LinearisedLadder
from cdd_cli.projection.stages.flip_search import FlipSearch
from cdd_cli.projection.stages.redraws import LookAhead, RedrawAfterALM, Redraws

__all__ = [
    "ALM",
    "ClosedFormLookAhead",
    "ClosedForms",
    "FinalJudges",
    "FlipSearch",
    "KeepClosedForms",
    "LinearisedLadder",
    "LookAhead",
    "RedrawAfterALM",
    "Redraws",
]
