"""Novelty: the molecule is valid and not known — neither in the model's training set nor
generated earlier in the same run.

Judge: RDKit canonical SMILES looked up in the reference set (the model's training molecules,
canonicalised by the same RDKit; see evaluate/reference.py) and in the run's seen set. Value
1.0 novel, 0.0 known, None invalid (never satisfied). Not differentiable: projected by the
best-first flip search (projection/search.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from cdd_cli.constraints.base import ExactConstraint
from cdd_cli.constraints.descriptor import ConstraintSpec, Descriptor, Key
from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import canonical
from cdd_cli.evaluate.reference import novelty_reference
from cdd_cli.models.files import special_kind
from cdd_cli.models.registry import LoadedModel


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

    def for_run(self) -> NoveltyConstraint:
        return replace(self, seen=set())


def check(entry: ConstraintSpec) -> None:
    """A reference that is neither a name cdd knows nor a file."""
    reference = entry.options.get("reference")
    known = reference is None or reference in ("training", "all")
    kind = None if known else special_kind(Path(reference).expanduser())
    if kind is not None:  # a FIFO would block a reader, a device never end: never opened
        raise InputError(f"{entry.where}: key 'reference': {reference!r} is {kind}, not a file")
    if not known and not Path(reference).expanduser().is_file():
        raise InputError(
            f"{entry.where}: key 'reference': {reference!r} is neither training, all nor a file"
        )


def build(
    entry: ConstraintSpec, model: LoadedModel, device: str, words: str
) -> list[NoveltyConstraint]:
    reference, known = novelty_reference(model, entry.options.get("reference"), entry.where)
    return [NoveltyConstraint(reference=reference, judge_name=f"canonical-lookup in {known}")]


DESCRIPTOR = Descriptor(
    name="novelty",
    domain="molecules",
    description="not in the reference (reference: training, all, or a SMILES file) nor earlier "
    "in the run (canonical SMILES)",
    # What "known" means: the model's training molecules, those and its held-out ones
    # (`all`), or a SMILES file of the user's own library.
    keys={"reference": Key((str,))},
    check=check,
    build=build,
)
