"""A run as the page reads it: its records (any JSON object with a `text` string; every other
field taken where it has the type cdd writes, ignored otherwise), the configuration written
beside it, and the numbers its summary shows."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import yaml

from cdd_cli.errors import InputError
from cdd_cli.output.config import read_config
from cdd_cli.output.jsonl import read_jsonl


def finite(value: object) -> float | None:
    """`value` as a float where it is a finite number (not a bool, NaN or infinity, nor an
    integer too large for a float: JSON allows 10**400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value) if math.isfinite(value) else None
    except OverflowError:
        return None


@dataclass
class Run:
    """One JSONL file's records and what was written beside them."""

    path: str
    records: list[dict]
    command: str | None = None  # the `cdd ...` line that wrote the configuration
    config: str | None = None  # the resolved configuration, as YAML
    config_data: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return Path(self.path).name

    @cached_property
    def constraints(self) -> dict[str, dict[str, float]]:
        """Each constraint's name (in the order records give them) and its bounds
        (`{"max": 3.5}`), from the first record that states them as numbers."""
        found: dict[str, dict[str, float]] = {}
        for row in self.records:
            for name, report in row["constraints"].items():
                bounds = {k: finite(report.get(k)) for k in ("min", "max")}
                if name not in found or (not found[name] and any(bounds.values())):
                    found[name] = {k: v for k, v in bounds.items() if v is not None}
        return found

    def constrained_values(self, name: str) -> list[float]:
        values = (row["constraints"].get(name, {}).get("value") for row in self.records)
        return [v for v in map(finite, values) if v is not None]

    def summary(self) -> dict[str, str]:
        """The summary table's rows for this run, as text."""
        rows = self.records
        total = len(rows)
        judged = [r for r in rows if isinstance(r.get("satisfied"), bool)]
        satisfied = sum(r["satisfied"] for r in judged)
        seconds = [v for v in (finite(r.get("seconds")) for r in rows) if v is not None]
        attempts = sum(int(a) for r in rows if (a := finite(r.get("attempts"))) and a >= 1)
        settled = Counter(
            settled_by(r.get("projection")) for r in rows if isinstance(r.get("projection"), dict)
        )
        out = {
            "file": self.path,
            "records": f"{total:,}",
            "model": ", ".join(sorted(words(rows, "model"))) or "-",
            "method": ", ".join(sorted(words(rows, "method"))) or "-",
            "satisfied": share(satisfied, len(judged)) if judged else "no constraints",
            "violating": share(len(judged) - satisfied, len(judged)) if judged else "-",
        }
        valid = [r["valid"] for r in rows if isinstance(r.get("valid"), bool)]
        if valid:
            out["valid"] = share(sum(valid), len(valid))
        if seconds:
            out["seconds a sample"] = (
                f"mean {statistics.fmean(seconds):.4g}, median {statistics.median(seconds):.4g}"
            )
        if attempts:
            out["acceptance"] = f"{total:,} records of {attempts:,} draws ({total / attempts:.1%})"
        own = self.own_draws()
        if own:
            drawn = [a for r in rows if (a := finite(r.get("attempts"))) is not None]
            kept = sum(1 <= a <= own for a in drawn)
            out["kept unsteered"] = f"{share(kept, len(drawn))} (repair.own_draws {own})"
        if settled:
            out["settled by"] = ", ".join(
                f"{stage} {count / sum(settled.values()):.1%}"
                for stage, count in settled.most_common()
            )
        return out

    def own_draws(self) -> int:
        """The first draws of each sample that were the model's own, unsteered
        (`repair.own_draws` of a cdd run's configuration; 0 where it says none)."""
        repair = self.config_data.get("repair")
        own = repair.get("own_draws") if isinstance(repair, dict) else None
        cdd = self.config_data.get("method") == "cdd"
        return own if cdd and isinstance(own, int) and not isinstance(own, bool) else 0


def settled_by(projection: dict) -> str:
    stage = projection.get("settled_by")
    return stage if isinstance(stage, str) else "no stage (as the model drew it)"


def words(rows: list[dict], key: str) -> set[str]:
    return {r[key] for r in rows if isinstance(r.get(key), str)}


def share(count: int, total: int) -> str:
    return f"{count:,} of {total:,} ({count / total:.1%})" if total else "-"


def read_run(path: str) -> Run:
    """The records of `path` (InputError where a line is no JSON object or has no `text`
    string: another tool's file) and its configuration beside it, where one can be read."""
    records = []
    for where, row in read_jsonl(path, "record"):
        if not isinstance(row.get("text"), str):
            raise InputError(f"{where}: not a cdd record (no 'text')")
        if not isinstance(row.get("constraints"), dict):
            row["constraints"] = {}
        row["constraints"] = {
            str(k): v for k, v in row["constraints"].items() if isinstance(v, dict)
        }
        records.append(row)
    if not records:
        raise InputError(f"{path}: holds no records")
    run = Run(path, records)
    beside = Path(f"{path}.config.yaml")
    if path != "-" and beside.is_file():
        try:
            data = read_config(beside)
            first = beside.open(encoding="utf-8").readline()
        except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError, InputError):
            data, first = None, ""
        if isinstance(data, dict):
            run.config_data = data
            run.config = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
            if first.startswith("# latest run: "):
                run.command = first.removeprefix("# latest run: ").strip()
    return run
