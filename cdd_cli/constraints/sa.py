"""Synthetic accessibility: RDKit's SA score (1 easy .. 10 hard) must be at most tau.

Judge: `sascorer.calculateScore` on the decoded SMILES (an invalid SMILES cannot be scored
and is never satisfied). Surrogate: a soft-token regressor trained on RDKit SA labels over the
diffusion model's vocabulary (`cdd train sa-surrogate`), which also scores unreadable
sequences as 10 so the projection steers away from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import torch
from rdkit.Contrib.SA_Score import sascorer

from cdd_cli.constraints.base import DifferentiableConstraint
from cdd_cli.constraints.descriptor import NUMBER, ConstraintSpec, Descriptor, Key
from cdd_cli.constraints.surrogates import surrogate_for
from cdd_cli.evaluate.molecules import parse
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.surrogate import SoftTokenRegressor


def sa_score(smiles: str) -> float | None:
    """RDKit's SA score to four places; None for a SMILES `parse` refuses."""
    parsed = parse(smiles)
    return None if parsed is None else round(sascorer.calculateScore(parsed[1]), 4)


# The projection judges a sample's final argmax and the record judges the same text again; the
# flip search and the redraws meet the same strings too. Wrapped rather than decorated: mutation
# testing (bench/mutation.sh) skips decorated functions, and this is a judge.
rdkit_sa = lru_cache(maxsize=1 << 16)(sa_score)


@dataclass(frozen=True)
class SAConstraint(DifferentiableConstraint):
    net: SoftTokenRegressor | None = field(default=None, compare=False, repr=False)
    name: str = "sa"
    judge_name: str = "rdkit-sa"

    def surrogate(self, soft_tokens: torch.Tensor) -> torch.Tensor:
        return self.net(soft_tokens)

    def judge(self, texts: list[str]) -> list[float | None]:
        return [rdkit_sa(t) for t in texts]


def build(entry: ConstraintSpec, model: LoadedModel, device: str, words: str) -> list[SAConstraint]:
    # RDKit reads its SA fragment table on the first score (~0.3 s once a process): now,
    # rather than in the first sample's projection time.
    rdkit_sa("C")
    net = surrogate_for(
        entry, model, device, train="`cdd train sa-surrogate --model {directory} --out DIR`"
    )
    return [SAConstraint(tau=float(entry.tau), margin=float(entry.options["margin"]), net=net)]


DESCRIPTOR = Descriptor(
    name="sa",
    domain="molecules",
    description="RDKit's synthetic accessibility score (1 easy .. 10 hard) at most tau",
    keys={"tau": Key(NUMBER, required=True), "surrogate": Key((str,)), "margin": Key(NUMBER)},
    defaults={"margin": 0.0},
    tau_range=(1.0, 10.0),
    needs_tau=True,
    build=build,
)
