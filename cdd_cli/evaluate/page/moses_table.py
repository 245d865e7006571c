"""The page's MOSES table: the metrics `cdd eval --moses` wrote, beside MOSES' baseline rows.

The page reads them from the JSON `cdd eval --moses RUN.jsonl > EVAL.json` printed (`cdd
report RUN.jsonl --eval EVAL.json`) instead of computing them: SNN, Frag, Scaf, FCD and the
property distances compare with MOSES' 176,074 test molecules, whose statistics take minutes
the first time (and need the molsets data, and the fcd extra for FCD), where the page of a
1,000-molecule run takes seconds; the cheap metrics alone (validity, uniqueness, IntDiv) would
make a row half empty beside the baselines. Read, the table also shows exactly the numbers
`cdd eval` printed, from its one implementation. Every value reaches the page as a record's
does: numbers to 4 significant digits, anything else escaped and cut.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from pathlib import Path

from cdd_cli.errors import InputError
from cdd_cli.evaluate.moses import PROPERTIES
from cdd_cli.evaluate.moses_baselines import BASELINES, LOWER_IS_BETTER, METRICS, SOURCE
from cdd_cli.evaluate.page.charts import COLOURS
from cdd_cli.evaluate.page.runs import finite
from cdd_cli.evaluate.page.sections import shown, text
from cdd_cli.output.files import open_regular

# `cdd eval`'s report is a few kilobytes; anything far larger is no such report.
MAX_EVAL_BYTES = 1 << 20
HEADINGS = {"unique@1000": "unique@1k", "unique@10000": "unique@10k"}
MISSING = '<td class="none" title="not computed, or undefined for these molecules">–</td>'


@dataclass
class Evaluation:
    """One `cdd eval --moses` report: its file and the metrics under its `moses` key."""

    path: str
    metrics: dict

    @property
    def name(self) -> str:
        return Path(self.path).name


def read_evaluation(path: str) -> Evaluation:
    """The `moses` metrics of the JSON `cdd eval --moses` wrote to `path`; InputError (one
    line) where the file is no such report."""
    how = f"write it with `cdd eval --moses RUN.jsonl > {path}`"
    try:
        with open_regular(path) as f:
            data = f.read(MAX_EVAL_BYTES + 1)
    except OSError as exc:
        raise InputError(f"--eval {path}: cannot read ({exc.strerror or exc})") from None
    except InputError as exc:  # not a regular file: said as the other --eval errors are
        raise InputError(f"--eval {exc}") from None
    if len(data) > MAX_EVAL_BYTES:
        raise InputError(f"--eval {path}: larger than {MAX_EVAL_BYTES >> 20} MiB; {how}")
    try:
        report = json.loads(data.decode("utf-8-sig"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise InputError(f"--eval {path}: not JSON; {how}") from None
    metrics = report.get("moses") if isinstance(report, dict) else None
    if not isinstance(metrics, dict):
        raise InputError(f"--eval {path}: holds no MOSES metrics; {how}")
    return Evaluation(path, metrics)


def value_cell(metrics: dict, key: str) -> str:
    if metrics.get(key) is None:  # FCD without the extra, novelty without a training set
        return MISSING
    return f"<td>{shown(metrics[key])}</td>"


def baseline_cell(row: dict, key: str) -> str:
    if key not in row:
        return '<td class="none" title="not in the MOSES table">–</td>'
    mean, std = row[key]
    spread = "" if std is None else f' <span class="std">± {std:g}</span>'
    return f"<td>{mean:g}{spread}</td>"


def moses_table(evaluations: list[Evaluation]) -> str:
    """A row per evaluation (with its sample count), then the baselines' rows, cited."""
    columns = [*METRICS, *PROPERTIES]
    heads = "".join(
        f"<th>{escape(HEADINGS.get(k, k))} {'↓' if k in LOWER_IS_BETTER else '↑'}</th>"
        for k in METRICS
    ) + "".join(f"<th>{escape(k)} W₁ ↓</th>" for k in PROPERTIES)
    rows, notes = [], []
    for k, evaluation in enumerate(evaluations):
        metrics = evaluation.metrics
        samples = finite(metrics.get("samples"))
        against = metrics.get("novelty_against")
        if against is not None:
            notes.append(f"{text(evaluation.name, 200)}: novelty against {text(against, 200)}")
        rows.append(
            f'<tr class="ours"><th style="color:{COLOURS[k % len(COLOURS)]}">'
            f"{text(evaluation.name, 200)}</th>"
            f"<td>{'–' if samples is None else f'{samples:,.0f}'}</td>"
            + "".join(value_cell(metrics, key) for key in columns)
            + "</tr>"
        )
    for model, row in BASELINES.items():
        rows.append(
            f"<tr><th>{escape(model)}</th><td>–</td>"
            + "".join(baseline_cell(row, key) for key in columns)
            + "</tr>"
        )
    ours = "The first row" if len(evaluations) == 1 else f"The first {len(evaluations)} rows"
    return (
        '<div class="wide"><table class="moses"><tr><th></th><th>samples</th>'
        f"{heads}</tr>{''.join(rows)}</table></div>"
        f'<p class="detail">{ours}: <code>cdd eval --moses</code> as written (W₁: the '
        "property's Wasserstein-1 distance to the test set; – where a "
        "metric was not computed, e.g. FCD without the fcd extra, or is undefined). The other "
        f"rows: {escape(SOURCE)}; Train scores MOSES' training set as a sample. MOSES samples "
        "30,000 molecules a run (its scripts/run.py) and recommends no fewer: unique@10k and "
        "FCD of a smaller sample compare only roughly.</p>"
        + "".join(f'<p class="detail">{note}.</p>' for note in notes)
    )
