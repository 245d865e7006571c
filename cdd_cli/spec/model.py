"""The spec as plain data: its settings (`settings.py`'s dataclasses, one a section), its
constraint entries, the resolved configuration written beside an output file, and the check
of a whole spec, run after every way of making one (a file, flags, an API call)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path

import yaml

from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.lexical import SCHEMES
from cdd_cli.diffusion.processes import SAMPLERS
from cdd_cli.errors import InputError
from cdd_cli.models.registry import SHIPPED
from cdd_cli.settings import (
    ALMSettings,
    RejectSettings,
    RepairSettings,
    SamplingSettings,
    SearchSettings,
    problems,
)
from cdd_cli.spec.entries import check_count, check_together, option_defaults
from cdd_cli.suggest import did_you_mean


@dataclass
class Spec:
    model: str | None = None
    constraints: list[ConstraintSpec] = field(default_factory=list)
    projection: ALMSettings = field(default_factory=ALMSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    repair: RepairSettings = field(default_factory=RepairSettings)
    reject: RejectSettings = field(default_factory=RejectSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    method: str = "cdd"
    # The word rules every lexical constraint is judged and laid out by: "plain" (whitespace
    # words, DESIGN.md §5) or "collie" (the COLLIE benchmark's NLTK-style words and sentences).
    words: str = "plain"
    source: str = "command line"

    def resolved(self) -> dict:
        """The configuration actually used, as plain data (written beside output files).
        Folders named relative to the current directory are written absolute, so that the
        file means the same wherever it is used from."""
        constraints = [{"type": c.type, **c.options} for c in self.constraints]
        for c in constraints:
            for key, value in option_defaults(c["type"]).items():
                c.setdefault(key, value)
            if "surrogate" in c:
                c["surrogate"] = absolute_folder(c["surrogate"])
            if c.get("reference") not in (None, "training", "all"):
                c["reference"] = str(Path(c["reference"]).expanduser().resolve())
            if isinstance(c.get("schema"), str):  # a .json file's path
                c["schema"] = str(Path(c["schema"]).expanduser().resolve())
        return {
            "model": absolute_folder(self.model),
            "method": self.method,
            "words": self.words,
            "constraints": constraints,
            "projection": asdict(self.projection),
            "search": asdict(self.search),
            "repair": asdict(self.repair),
            "reject": asdict(self.reject),
            "sampling": asdict(self.sampling),
        }


def sections(spec: Spec) -> list[str]:
    """The spec's settings sections (`projection`, ..., `sampling`), in its order."""
    return [f.name for f in fields(spec) if is_dataclass(getattr(spec, f.name))]


def absolute_folder(name: str | None) -> str | None:
    """A local folder's absolute path; a shipped model's or a hub id's name as it is."""
    if name is None or name in SHIPPED or not Path(name).expanduser().is_dir():
        return name
    return str(Path(name).expanduser().resolve())


def dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def check_settings(spec: Spec, where: str) -> None:
    """A whole spec, however it was made: each setting within its allowed values (its field's
    check, `settings.py`), the word rules, the number of entries, contradictions between
    entries, and no entry twice."""
    for section in sections(spec):
        found = problems(section, getattr(spec, section))
        if found:
            raise InputError(f"{where}: {found[0]}")
    # The samplers are the diffusion layer's to name, above the settings' own layer.
    sampler = spec.sampling.sampler
    if sampler not in (None, *SAMPLERS):
        raise InputError(
            f"{where}: sampling.sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}"
            f"{did_you_mean(sampler, SAMPLERS)}"
        )
    if spec.words not in SCHEMES:
        raise InputError(
            f"{where}: words must be one of {', '.join(SCHEMES)}, got {spec.words!r}"
            f"{did_you_mean(spec.words, SCHEMES)}"
        )
    check_count(len(spec.constraints), where)
    check_together(spec.constraints, spec.words)
    seen: dict[str, str] = {}
    for c in spec.constraints:
        key = repr((c.type, sorted(c.options.items())))
        if key in seen:
            raise InputError(f"{c.where}: repeats the constraint at {seen[key]}")
        seen[key] = c.where
