"""What a sampling run tells as it goes: the reporter interface, and what its records add up
to (the progress tally, the summary's clause on constraints). No torch imported here, so the
CLI can subclass the reporter without paying for torch at start-up (the pace of a run, how
long its rest should take, is the display's: `cli/pace.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdd_cli.diffusion.sampler import StepInfo
    from cdd_cli.projection.alm import ALMProgress
    from cdd_cli.projection.engine import StageProgress


@dataclass(frozen=True)
class ProjectionPlan:
    """What a run's projection will do, as its method and settings say, before it does it:
    from which draw of a sample its final prediction runs the ALM on the surrogates, and how
    many rounds (outer iterations) the ALM may run at a step."""

    surrogates_from: int  # the draw (1: the first) from which the ALM projects the final step
    max_outer: int  # ALM rounds at most at a step, each of `inner_iters` gradient steps
    inner_iters: int
    project_from: float  # the share of a pass's steps after which the ALM projects


class Reporter:
    """Every method does nothing here: the CLI's live display overrides them
    (`cli.progress.RichReporter`), and so may any caller of the Python API. A run calls
    `run_started`, `draws_allowed`, `projection_planned` (a method that projects on
    surrogates), then `resumed` (only where records were already written), then per pass of
    the sampler `pass_started`, its steps, stages and ALM iterations, and `records_done` as
    each record is final."""

    def run_started(self, label: str, total: int, batch_size: int) -> None:
        """A run of `total` records of `label` ("molecules", "samples") begins; its passes
        draw at most `batch_size` samples together."""

    def draws_allowed(self, cap: int) -> None:
        """No sample of the run is drawn more than `cap` times (its method's attempts)."""

    def projection_planned(
        self, plan: ProjectionPlan, round_seconds: Callable[[], float | None]
    ) -> None:
        """The run's projection will work as `plan` says. `round_seconds()` measures one ALM
        round of the run's own surrogates on one sample (under a second on a CPU), for a
        reporter that must foresee what the ALM costs before it first runs; not called, it
        costs nothing."""

    def resumed(self, present: int, draws: int) -> None:
        """`present` of the `total` records were already written (--resume), after `draws`
        draws of their samples in all; `records_done` counts them."""

    def pass_started(self, samples: int, redraws: int, steps: int) -> None:
        """A pass of the sampler begins: `samples` draws denoised together, each through
        `steps` steps, `redraws` of them samples the judges rejected in the pass before (a
        pass takes every such sample first, then samples not yet begun, up to the batch size;
        samples of different prompts never share a pass)."""

    def records_done(self, done: int, info: str) -> None:
        """`done` records are final; `info`: a short tally (valid, violating)."""

    def step(self, info: StepInfo) -> None:
        """A denoising step of the pass at hand ended (index 0 begins a pass)."""

    def stage(self, progress: StageProgress) -> None:
        """A projection stage began or ended at the step at hand (`projection/engine.py`)."""

    def alm(self, progress: ALMProgress) -> None:
        """An ALM outer iteration ended."""


class Display(Reporter):
    """A reporter that is also a context: a live display runs inside it."""

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def satisfaction_note(
    constraints: list,
    total: int,
    violating: int,
    method: str,
    held: dict[str, int] | None = None,
) -> str:
    """The summary's clause on constraints ("" without any). `held`: per constraint name, how
    many records satisfy it; one no record satisfies is named as looking infeasible."""
    if not constraints:
        return ""
    labels = ", ".join(c.label() for c in constraints)
    judges = ", ".join(sorted({c.judge_name for c in constraints}))
    note = f"; {total - violating}/{total} satisfy {labels} ({method}, judged by {judges})"
    never = [c.label() for c in constraints if held is not None and not held.get(c.name)]
    if never and total and method == "unconstrained":
        # Nothing steered the samples toward it: no sign that it cannot be met.
        note += f"; no sample satisfies {', '.join(never)} (unconstrained: nothing steered to it)"
    elif never and total:
        note += (
            f"; no sample satisfies {', '.join(never)}: it looks infeasible for this model "
            "(check its bounds against what the model makes)"
        )
    return note


class Tally:
    """What a run's records add up to, as they are written: the progress display's short
    tally and the closing summary's counts (a domain adds its own, e.g. validity)."""

    def __init__(self, constraints: list, method: str, own_draws: int = 0):
        self.constraints, self.method = constraints, method
        # A sample's first draws that are the model's own (`repair.own_draws`), and the
        # records kept on one of them: exact samples, drawn unsteered.
        self.own_draws, self.unsteered = own_draws, 0
        self.count = self.violating = 0
        self.seconds = 0.0  # the records' own seconds, summed
        self.held: dict[str, int] = {}  # per constraint name, the records that satisfy it
        self.weighed = WeightTally()  # the exact method's draws

    def add(self, row: dict) -> None:
        self.count += 1
        self.violating += row["satisfied"] is False
        self.seconds += row["seconds"]
        for name, verdict in (row.get("constraints") or {}).items():
            self.held[name] = self.held.get(name, 0) + bool(verdict["satisfied"])
        if row.get("exact"):
            self.weighed.add(row["exact"])
        self.unsteered += 0 < row.get("attempts", 0) <= self.own_draws

    def progress(self) -> str:
        tally = f"violating {self.violating}" if self.constraints else ""
        return tally + (f", {self.weighed.progress()}" if self.weighed.draws else "")

    def note(self) -> str:
        note = satisfaction_note(
            self.constraints, self.count, self.violating, self.method, self.held
        )
        if self.own_draws and self.constraints and self.count:
            note += (
                f"; {self.unsteered}/{self.count} kept as the model drew them, unsteered "
                f"(repair.own_draws {self.own_draws})"
            )
            if not self.unsteered and self.count >= 4:
                # Each sample spent its own draws for nothing: say how to spare them.
                note += ": none held the constraints, `repair: {own_draws: 0}` spares them"
        return note + (f"; {self.weighed.note()}" if self.weighed.draws else "")


class WeightTally:
    """The exact method's draws as its records tell them: acceptance, the effective sample
    size of the importance weights w 1[C], their mean (an unbiased estimate of P(C) under
    the model, with its standard error) and the truncated mass, the weight above M over all
    the weight (the one bias of the method)."""

    def __init__(self) -> None:
        self.draws = self.accepted = 0
        self.total = self.squares = self.above = 0.0

    def add(self, exact: dict) -> None:
        self.draws += len(exact["weights"])
        self.accepted += bool(exact["accepted"])
        self.total += sum(exact["weights"])
        self.squares += sum(w * w for w in exact["weights"])
        self.above += exact["above_bound"]

    def estimate(self) -> tuple[float, float]:
        """P(C) estimated by the mean weight, and its standard error."""
        mean = self.total / self.draws
        variance = max(self.squares / self.draws - mean * mean, 0.0)
        return mean, (variance / max(self.draws - 1, 1)) ** 0.5

    def progress(self) -> str:
        return f"acceptance {self.accepted / self.draws:.3f}"

    def note(self) -> str:
        mean, error = self.estimate()
        ess = self.total**2 / self.squares if self.squares else 0.0
        truncated = self.above / self.total if self.total else 0.0
        return (
            f"exact: {self.accepted} accepted by weight in {self.draws} draws (acceptance "
            f"{self.accepted / self.draws:.3f}), effective sample size {ess:.1f}, P(constraints) "
            f"under the model {mean:.3f} ± {error:.3f} (mean weight), truncated mass "
            f"{truncated:.2%}"
        )
