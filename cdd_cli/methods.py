"""The sampling methods, one object each: `cdd`, `paper`, `reject`, `unconstrained`.

A method says how a batch is drawn (its projection engine's stages, or none), how often a
sample the judges reject is drawn again (its attempt policy, and how far inside its bounds
each redraw aims), and what it fills into the settings a spec leaves out, by the loaded
model's kind (`LoadedModel.kind`: "smiles", "masked text", "uniform text").

Every value in the tables below was chosen by a measurement; the comment beside it says which
(the current tables are in bench/README.md; the runs of the values that lost are in the issue
notes and in git history). A value a spec gives always wins: only None is filled.

- `cdd` fills from `CDD_SHARED`, then `CDD_BY_MODEL[kind]`; a sample's first
  `repair.own_draws` draws are the model's own (unsteered, judged: rejection), then a sample
  the judges reject is redrawn with the projection, its surrogate bounds tightened by
  `repair.margin_step` per redraw, at most `repair.max_redraws` times.
- `paper` runs the paper's algorithm as published: the ALM at every step over the whole
  vocabulary with the paper's hyperparameters for the constraint family (`PAPER_BY_FAMILY`),
  exact constraints (novelty, lexical) searched at every step, the constraint families' closed
  forms, and no look-ahead, linearised ladder or redraw: what it leaves violating is reported.
- `reject`: best-of-N rejection sampling, redrawing a sample until every judge accepts it or
  `reject.max_attempts` draws are spent.
- `unconstrained`: one draw per sample, judged and reported.
- `exact`: the model's own conditional law, p(x | C): each draw proposed by the projection
  tempered into the model's step, weighed by how much likelier the model makes it, and kept
  with probability min(1, w / M) (`projection/exact.py`), else drawn again up to
  `reject.max_attempts` times. Its proposal and M are stored per model and constraint
  setting (`EXACT_BY_SETTING`, calibrated by bench/exact.py); a setting without one draws the
  model's own steps (every weight 1): rejection, its weights reported.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from cdd_cli.constraints.base import DifferentiableConstraint, ExactConstraint
from cdd_cli.models.registry import ASSETS
from cdd_cli.models.twist import Twist, load_twist
from cdd_cli.projection.engine import Engine, Job
from cdd_cli.projection.exact import ExactHook, ExactSetting
from cdd_cli.projection.judges import Judges
from cdd_cli.projection.stages import (
    ALM,
    ClosedFormLookAhead,
    ClosedForms,
    FinalJudges,
    FlipSearch,
    KeepClosedForms,
    LinearisedLadder,
    LookAhead,
    RedrawAfterALM,
    Redraws,
)
from cdd_cli.settings import (
    ALMSettings,
    RejectSettings,
    RepairSettings,
    SearchSettings,
)

CDD_SHARED: dict[str, Any] = {
    "eta": 1.0,  # the paper's SA step; with support-restricted logits it converged in all runs
    "mu_max": 1000.0,  # the paper's
    "alpha": 2.0,  # growth of mu per outer iteration
    "temperature": 0.5,  # Gumbel-softmax temperature of the relaxation
    # A sample at mu_max whose violation has not fallen for 5 outer iterations stops (the later
    # stages take over): QM9, SA tau 3.5, 512 samples: the same valid, unique and novel counts
    # as without it, in less time.
    "patience": 5,
}

CDD_BY_MODEL: dict[str, dict[str, Any]] = {
    # QM9 SMILES (V = 35), uniform noise.
    "smiles": {
        # 3 / 4: a larger first penalty reaches feasibility in fewer outer iterations (QM9,
        # 128 samples, 0 violating and 128 valid with each: SA tau 3.5, 0.11 s a sample
        # against 0.23 s with inner 5, mu 1; tau 3.0, 0.19 against 0.29 s).
        "inner_iters": 3,
        "mu_init": 4.0,
        # SA tau 3.0, 128 samples: 128 valid, 0 violating with 20 or 50; 0.31 against 0.48 s.
        "max_outer_iters": 20,
        # With all 35 tokens the penalties buy surrogate feasibility with tokens the model
        # never puts there and the molecule no longer parses (SA tau 3.5, 64 samples: 93 of
        # 97 final searches began unparsable; with 4: 64 valid and unique after 1.05 draws).
        "support": 4,
        # The final prediction alone (on 32 steps; 0.9 adds steps 29-30): 256 samples, tau
        # 3.5, 1.51x / 1.06x the unconstrained time (mean / median) against 2.12x / 1.49x.
        "project_from": 0.95,
    },
    # GPT-2 vocabulary (V = 50,258), masked noise.
    "masked text": {
        # The paper's toxicity 10 / 1 spent most outer iterations raising mu before any token
        # moved (tweets model, tau 0.5: 4.1x / 1.35x against 1.8x / 1.09x with 5 / 64).
        "inner_iters": 5,
        "mu_init": 64.0,
        "max_outer_iters": 50,
        # Every V-wide operation of an inner step costs ~100 ms a sample on a CPU, and tokens
        # outside the top 256 carry almost no mass.
        "support": 256,
        # Every step, each looked ahead at first (most leave the ALM idle): 16 toxic prompts x
        # 4, tau 0.5, 0 violating against 4.7% when projecting from 0.9 without the look-ahead.
        "project_from": 0.0,
    },
    # GPT-2 vocabulary, uniform noise: every step would be a full projection.
    "uniform text": {
        "inner_iters": 5,
        "mu_init": 64.0,
        "max_outer_iters": 50,
        "support": 256,
        "project_from": 0.9,
    },
}

# The search and the redraws by model kind. QM9 (64 samples, one run, bench/README.md
# "Molecular properties"): the search at the final prediction alone with 300 nodes, then up to
# 15 redraws, against from 0.9 with 2,000 nodes and 3 redraws: a carbonyl + novelty 64/64
# satisfied in 12.6 s (344,430 nodes before: 63/64 in 47.7 s); QED >= 0.5, logP in [0, 2], a
# carbonyl and no PAINS 63/64 in 40.3 s (55/64 in 77.6 s); novelty alone 3.0 s (3.6 s); QED
# and SA alone unchanged. Drawing a QM9 sample costs ~35 ms at batch 64: a redraw is cheaper
# than a long search. (Novelty against the training set alone, 1,024 samples, had measured
# 1.68x / 1.43x / 1.37x the unconstrained mean from 0.75 / 0.9 / 1.0.)
CDD_SEARCH_BY_MODEL: dict[str, dict[str, Any]] = {
    "smiles": {"project_from": 1.0, "max_nodes": 300},
    "masked text": {"project_from": 0.9, "max_nodes": 2000},
    "uniform text": {"project_from": 0.9, "max_nodes": 2000},
}
REPAIR_BY_MODEL: dict[str, dict[str, Any]] = {
    # The surrogates move a rejected final prediction from the 8th draw on: before, the
    # flip search (the model's own probabilities) or a redraw. QM9, 256 molecules against the
    # model's own accepted ones (bench/README.md "How close to the model"): SA <= 3.5, heavy
    # atoms 9.1 on average (the model's: 8.9) against 11.5 with the surrogates first (the
    # ladder opened rings into chains), at 0.081 against 0.048 s a molecule; 4 and 8 gave
    # the same sizes at 4.0, 8 closer at 3.5 (KS 0.12 vs 0.17); 8 and 17 the same records.
    "smiles": {"max_redraws": 15, "surrogates_from": 8},
    # A text sample costs 0.2-20 s: a few redraws with the surrogate aiming further inside.
    # (Whether the ladder's moves drift text from the model's own has not been measured.)
    "masked text": {"max_redraws": 3, "surrogates_from": 1},
    "uniform text": {"max_redraws": 3, "surrogates_from": 1},
}

# The paper's settings (its experiments section), by the constraint the ALM serves. A constraint the
# paper did not run takes its SA settings, the paper's defaults.
_PAPER_COMMON: dict[str, Any] = {
    "max_outer_iters": 1000,
    "mu_max": 1000.0,
    "alpha": 2.0,
    "temperature": 0.5,
    "project_from": 0.0,  # every step
    "support": 0,  # the whole vocabulary
    "patience": 1000,  # no early stop before the outer cap
}
# By constraint type, in precedence: a spec that serves several takes the first one's.
PAPER_BY_FAMILY: dict[str, dict[str, Any]] = {
    "toxicity": {**_PAPER_COMMON, "inner_iters": 10, "eta": 0.2, "mu_init": 1.0},
    "sa": {**_PAPER_COMMON, "inner_iters": 100, "eta": 1.0, "mu_init": 1.0},
}
PAPER_DEFAULT_FAMILY = "sa"  # the settings a constraint the paper did not run takes
PAPER_SEARCH: dict[str, Any] = {"project_from": 0.0, "max_nodes": 2000}


# The exact method's steered designs by (model revision, the constraints' labels joined by
# ", "): the proposal and the bound M, calibrated once by bench/exact.py (bench/README.md, "The
# exact method"), never adapted in a run. A setting not listed draws the model's own steps
# (UNSTEERED: every weight 1, M 1), which is rejection with its weights reported; a design is
# stored only where it accepts more per second than that. None is stored: on the shipped QM9
# model (revision 846ef2a2056e) no design of 14 (the surrogates' gradient tilt at strength
# 0.5-16 from 50% or 85% of the steps, the ALM's categorical tempered in by 0.05-0.3, a learned
# twist steering every step) accepted more than the model's own draws at SA <= 3.5 or <= 4.0
# (2,048 draws each, seed 21: the best, the gradient tilt at 0.5 from 85%, 0.152 against 0.158
# and 0.269 against 0.294, with 1% of the weight truncated in sample and 2.4-7.3% out of it).
EXACT_BY_SETTING: dict[tuple[str, str], ExactSetting] = {}
UNSTEERED = ExactSetting(0.0, 1.0, 0.0)


@functools.cache
def shipped_twist(name: str) -> Twist:
    """A shipped twist (a folder under cdd_cli/assets), loaded once per process."""
    return load_twist(ASSETS / name)


def exact_setting(revision: str, labels: list[str]) -> ExactSetting:
    """The stored exact design for a model revision and its constraints' labels, else the
    model's own steps."""
    return EXACT_BY_SETTING.get((revision, ", ".join(sorted(labels))), UNSTEERED)


@dataclass(frozen=True)
class Method:
    """What every method answers; this base draws each sample once and projects nothing."""

    name: str
    description: str
    projects = False  # whether its records carry a `projection` account
    # Whether its draws carry importance weights and are kept by weight (exact): then a pass
    # is one engine (no margins to tell draws apart) and its records say their weights.
    weighs = False

    def engine(
        self, job: Job, projection: ALMSettings, search: SearchSettings
    ) -> Engine | ExactHook | None:
        """The per-step hook for one batch (None: the model's own draws)."""
        return None

    def attempts(self, repair: RepairSettings, reject: RejectSettings) -> int:
        """Draws a sample may take before its record is written as it is."""
        return 1

    def margin(self, repair: RepairSettings, attempt: int) -> float:
        """How far inside its bounds (in repair units) a sample's `attempt`-th draw aims."""
        return 0.0

    def own_draws(self, repair: RepairSettings) -> int:
        """A sample's first draws that are the model's own, unsteered (`repair.own_draws`,
        which only cdd reads)."""
        return 0

    def steered(self, repair: RepairSettings, attempt: int) -> int | None:
        """Which of the projection's own draws a sample's `attempt`-th draw (0: its first)
        is (0: the first it steers), or None where the draw is the model's own, unsteered."""
        own = self.own_draws(repair)
        return attempt - own if attempt >= own else None

    def projection_defaults(self, kind: str, types: list[str]) -> dict[str, Any]:
        """ALM settings for a model of `kind` serving constraints of `types`."""
        return {**CDD_SHARED, **CDD_BY_MODEL[kind]}

    def search_defaults(self, kind: str) -> dict[str, Any]:
        return CDD_SEARCH_BY_MODEL[kind]


@dataclass(frozen=True)
class Unconstrained(Method):
    pass


@dataclass(frozen=True)
class Reject(Method):
    def attempts(self, repair: RepairSettings, reject: RejectSettings) -> int:
        return reject.max_attempts


@dataclass(frozen=True)
class CDD(Method):
    projects = True

    def engine(self, job: Job, projection: ALMSettings, search: SearchSettings) -> Engine:
        judges = Judges(job.constraints, job.decode, job.fixed_positions, job.readable)
        redraws = Redraws(judges, job.generators)
        differentiable = [c for c in job.constraints if isinstance(c, DifferentiableConstraint)]
        closed_forms = ClosedForms(job.closed_forms, job.generators)
        ladder = LinearisedLadder(judges, projection.support, job.well_formed)
        lookahead = ClosedFormLookAhead(closed_forms, job.generators, projection.lookahead)
        stages = [
            closed_forms,
            *([lookahead] if projection.lookahead else []),
            FinalJudges(judges),
            *([ladder] if job.final_surrogates else []),
            LookAhead(redraws, projection.project_from),
            ALM(differentiable, projection, job.generators, job.on_progress, job.final_surrogates),
            RedrawAfterALM(redraws),
            KeepClosedForms(closed_forms),
            FlipSearch(judges, search, job.reader, job.well_formed, repair=True),
        ]
        return Engine(stages, job.fixed_positions, len(job.generators), job.on_stage)

    def attempts(self, repair: RepairSettings, reject: RejectSettings) -> int:
        return self.own_draws(repair) + 1 + repair.max_redraws

    def margin(self, repair: RepairSettings, attempt: int) -> float:
        return repair.margin_step * (self.steered(repair, attempt) or 0)

    def own_draws(self, repair: RepairSettings) -> int:
        return repair.own_draws or 0


@dataclass(frozen=True)
class Paper(Method):
    projects = True

    def engine(self, job: Job, projection: ALMSettings, search: SearchSettings) -> Engine:
        exact = [c for c in job.constraints if isinstance(c, ExactConstraint)]
        differentiable = [c for c in job.constraints if isinstance(c, DifferentiableConstraint)]
        closed_forms = ClosedForms(job.closed_forms, job.generators)
        judges = Judges(exact, job.decode, job.fixed_positions, job.readable)
        stages = [
            closed_forms,
            ALM(differentiable, projection, job.generators, job.on_progress),
            KeepClosedForms(closed_forms),
            FlipSearch(judges, search, job.reader, None, repair=False),
        ]
        return Engine(stages, job.fixed_positions, len(job.generators), job.on_stage)

    def projection_defaults(self, kind: str, types: list[str]) -> dict[str, Any]:
        # The settings of the first family the paper ran that is served, else its defaults.
        served = [family for family in PAPER_BY_FAMILY if family in types]
        return PAPER_BY_FAMILY[served[0] if served else PAPER_DEFAULT_FAMILY]

    def search_defaults(self, kind: str) -> dict[str, Any]:
        return PAPER_SEARCH


@dataclass(frozen=True)
class Exact(Method):
    projects = True
    weighs = True

    def engine(self, job: Job, projection: ALMSettings, search: SearchSettings) -> ExactHook:
        if job.process is None or job.proposal is None:
            raise ValueError("the exact method needs the job's process and stored proposal")
        differentiable = [c for c in job.constraints if isinstance(c, DifferentiableConstraint)]
        twist = shipped_twist(job.proposal.twist) if job.proposal.twist else None
        served = (
            []
            if twist is None
            else [
                c.tau
                for c in job.constraints
                if c.name == twist.config.constraint and c.upper_bound == twist.config.upper_bound
            ]
        )
        return ExactHook(
            differentiable,
            projection,
            job.proposal,
            job.process,
            job.generators,
            job.fixed_positions,
            twist,
            served,
        )

    def attempts(self, repair: RepairSettings, reject: RejectSettings) -> int:
        return reject.max_attempts


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        CDD("cdd", "the projection engine, redrawing what the judges still reject"),
        Paper("paper", "the paper's algorithm as published"),
        Unconstrained("unconstrained", "the model's own samples, judged"),
        Reject("reject", "best-of-N rejection sampling"),
        Exact("exact", "the model's own conditional law: proposed, weighed, kept by weight"),
    )
}
