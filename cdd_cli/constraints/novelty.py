"""Novelty: the molecule is valid and not known — neither in the model's training set nor
generated earlier in the same run.

Judge: RDKit canonical SMILES looked up in the reference set (the model's training molecules,
canonicalised by the same RDKit; see evaluate/reference.py) and in the run's seen set. Value
1.0 novel, 0.0 known, None invalid (never satisfied). Not differentiable: projected by the
best-first flip search (projection/search.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdd_cli.constraints.base import ExactConstraint
from cdd_cli.evaluate.molecules import canonical


@dataclass(frozen=True)
class NoveltyConstraint(ExactConstraint):
    tau: float = 1.0
    upper_bound: bool = False  # satisfied when value >= 1 (novel)
    name: str = "novelty"
    judge_name: str = "canonical-lookup"
    reference: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    seen: set[str] = field(default_factory=set, compare=False, repr=False)

    def label(self) -> str:
        return "novel"

    def known(self, smiles: str) -> bool:
        return smiles in self.reference or smiles in self.seen

    def judge(self, texts: list[str]) -> list[float | None]:
        """In order: a repeat of an earlier text of the same list is not novel either."""
        earlier: set[str] = set()
        values: list[float | None] = []
        for text in texts:
            can = canonical(text)
            if can is None:
                values.append(None)
                continue
            values.append(0.0 if self.known(can) or can in earlier else 1.0)
            earlier.add(can)
        return values

    def accepts(self, text: str) -> bool:
        can = canonical(text)
        return can is not None and not self.known(can)

    def remember(self, texts: list[str]) -> None:
        self.seen.update(c for t in texts if (c := canonical(t)) is not None)
