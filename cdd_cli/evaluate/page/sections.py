"""The page's sections as HTML: the summary, the distributions, and a card per record.

Every string a record or a configuration holds reaches the page through `text()` (escaped,
control characters replaced, cut to MAX_SHOWN characters), and every number through
`shown()`; nothing from a record is ever placed in a script or an attribute unescaped.
"""

from __future__ import annotations

import itertools
import json
import re
from html import escape

from cdd_cli.evaluate.page.charts import COLOURS, histogram, ks_distance
from cdd_cli.evaluate.page.drawing import drawing, extra_properties
from cdd_cli.evaluate.page.runs import Run, finite

MAX_SHOWN = 2_000  # characters of one string a card shows; the rest is counted
# Constraints a card lists, and charts and sort keys a page has: cdd writes a few; a file
# with thousands is another tool's, shown in part rather than as a page nobody can open.
MAX_NAMES = 40
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
# The molecule properties every page plots (recorded or computed), beside the constrained ones.
MOLECULE_PROPERTIES = ("qed", "sa", "logp", "mw", "heavy_atoms")
PUNCTUATION = ".,;:!?\"'()[]{}<>«»“”‘’"


def text(value: object, limit: int = MAX_SHOWN) -> str:
    """Any value as escaped page text, at most `limit` characters of it."""
    string = value if isinstance(value, str) else json.dumps(value, default=str)
    string = CONTROL.sub("\ufffd", string)
    more = len(string) - limit
    shown = escape(string[:limit]) if more > 0 else escape(string)
    return shown + (f'<span class="cut">… ({more:,} characters more)</span>' if more > 0 else "")


def shown(value: object) -> str:
    """A record's value as a card shows it: numbers to 4 significant digits."""
    number = finite(value)
    if number is not None:
        return f"{number:.4g}"
    if isinstance(value, float):  # NaN and infinities, said as they are
        return escape(str(value))
    return text(value, 80)


def mark(ok: object) -> str:
    if ok is True:
        return '<span class="ok" title="satisfied">✓</span>'
    if ok is False:
        return '<span class="bad" title="violated">✗</span>'
    return '<span class="none" title="not judged">–</span>'


def summary(runs: list[Run]) -> str:
    """A table with a column per run, then the first run's command and configuration."""
    tables = [run.summary() for run in runs]
    keys = list(dict.fromkeys(k for t in tables for k in t))
    head = "".join(f'<th style="color:{COLOURS[k % len(COLOURS)]}">{text(r.name, 200)}</th>'
                   for k, r in enumerate(runs))  # fmt: skip
    rows = "".join(
        f"<tr><th>{escape(key)}</th>"
        + "".join(f"<td>{text(t.get(key, '-'), 400)}</td>" for t in tables)
        + "</tr>"
        for key in keys
    )
    parts = [f'<table class="summary"><tr><th></th>{head}</tr>{rows}</table>']
    for run in runs:
        if run.command:
            parts.append(f"<p>{text(run.name, 200)}: <code>{text(run.command)}</code></p>")
        if run.config:
            parts.append(
                f"<details><summary>{text(run.name, 200)}: the resolved configuration"
                f"</summary><pre>{text(run.config, 20_000)}</pre></details>"
            )
        elif run.path != "-":
            parts.append(f"<p>{text(run.name, 200)}: no configuration beside it.</p>")
    return "\n".join(parts)


def property_values(run: Run, name: str) -> list[float]:
    """A run's values of a constrained property or a molecule's (recorded, else computed)."""
    if name in run.constraints:
        return run.constrained_values(name)
    values = []
    for row in run.records:
        value = finite(row.get(name))
        if value is None and name in ("logp", "mw", "heavy_atoms") and row.get("valid") is True:
            value = extra_properties(str(row.get("canonical") or row["text"])).get(name)
        if value is not None:
            values.append(value)
    return values


def distributions(runs: list[Run], molecules: bool) -> str:
    """A histogram per constrained property (and the molecule properties), the runs overlaid
    with each further run's KS distance to the first."""
    bounds = runs[0].constraints
    plotted = (n for n in bounds if runs[0].constrained_values(n))
    names = list(itertools.islice(plotted, MAX_NAMES))
    if molecules:
        names += [n for n in MOLECULE_PROPERTIES if n not in names]
    legend = " ".join(
        f'<span class="key" style="background:{COLOURS[k % len(COLOURS)]}"></span>'
        f"{text(r.name, 200)}"
        for k, r in enumerate(runs)
    )
    charts = []
    for name in names:
        values = [property_values(run, name) for run in runs]
        if not any(values):
            continue
        distances = "".join(
            f"<br>KS {text(run.name, 200)}: {ks_distance(values[0], v):.3f}"
            for run, v in zip(runs[1:], values[1:], strict=True)
        )
        counts = ", ".join(f"{len(v):,}" for v in values)
        charts.append(
            f"<figure><figcaption><b>{text(name, 200)}</b> ({counts} values){distances}"
            f"</figcaption>{histogram(values, bounds.get(name, {}))}</figure>"
        )
    if not charts:
        return "<p>No numeric values to plot.</p>"
    return f'<p class="legend">{legend}</p><div class="charts">{"".join(charts)}</div>'


def marked_words(config: dict) -> tuple[set[str], set[str], list[str]]:
    """(required words, forbidden words, regex patterns) of a run's configuration."""
    required: set[str] = set()
    forbidden: set[str] = set()
    patterns: list[str] = []
    entries = config.get("constraints")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        kind, listed = entry.get("type"), entry.get("words")
        listed = [w for w in listed if isinstance(w, str)] if isinstance(listed, list) else []
        if kind == "include":
            required.update(listed)
        elif kind == "exclude":
            forbidden.update(listed)
        elif kind == "word_at" and isinstance(entry.get("word"), str):
            required.add(entry["word"])
        elif kind == "regex" and isinstance(entry.get("pattern"), str):
            patterns.append(entry["pattern"])
    return required, forbidden, patterns


def continuation(string: str, required: set[str], forbidden: set[str]) -> str:
    """The continuation escaped, its required words marked green and forbidden ones red
    (plain words: split on whitespace, surrounding punctuation stripped)."""
    if len(string) > MAX_SHOWN or not (required or forbidden):
        return text(string)
    parts = []
    for piece in re.split(r"(\s+)", CONTROL.sub("\ufffd", string)):
        word = piece.strip(PUNCTUATION)
        kind = "req" if word in required else "forbid" if word in forbidden else None
        parts.append(f'<mark class="{kind}">{escape(piece)}</mark>' if kind else escape(piece))
    return "".join(parts)


def json_view(string: str) -> str:
    """A JSON text pretty-printed with its validity, or said not to be JSON."""
    try:
        value = json.loads(string)
    except (ValueError, RecursionError):
        return f'<p class="bad">not JSON</p><pre>{text(string)}</pre>'
    pretty = json.dumps(value, indent=2, ensure_ascii=False)
    return f'<p class="ok">valid JSON</p><pre>{text(pretty)}</pre>'


def card(row: dict, config: dict, molecules: bool, json_texts: bool) -> str:
    """One record: a drawing or its text, its constraints with a mark each; its numbers as
    `data-p-NAME` attributes, which the page's script sorts and filters by."""
    values: dict[str, float] = {}
    rows = []
    named = list(row["constraints"].items())
    for name, report in named[:MAX_NAMES]:
        bound = next((f"{k} {shown(report[k])}" for k in ("max", "min") if k in report), "")
        detail = report.get("detail")
        rows.append(
            f"<tr><td>{text(name, 80)}</td><td>{shown(report.get('value'))}</td>"
            f"<td>{bound}</td><td>{mark(report.get('satisfied'))}</td></tr>"
            + (f'<tr><td colspan="4" class="detail">{text(detail, 300)}</td></tr>'
               if isinstance(detail, str) else "")
        )  # fmt: skip
        if (value := finite(report.get("value"))) is not None:
            values[name] = value
    if len(named) > MAX_NAMES:
        rows.append(f'<tr><td colspan="4" class="cut">{len(named) - MAX_NAMES:,} more</td></tr>')
    if molecules:
        for name in ("qed", "sa"):
            if (value := finite(row.get(name))) is not None:
                values.setdefault(name, value)
            if row.get(name) is not None and name not in row["constraints"]:
                rows.append(f"<tr><td>{name}</td><td>{shown(row[name])}</td><td></td></tr>")
    attributes = "".join(
        f' data-p-{attribute_name(name)}="{value!r}"' for name, value in values.items()
    )
    ok = row.get("satisfied")
    status = "1" if ok is True else "0" if ok is False else ""
    head = f'<div class="card" data-ok="{status}"{attributes}><div class="id">{mark(ok)} ' \
           f"{text(row.get('id', ''), 40)}</div>"  # fmt: skip
    table = f"<table>{''.join(rows)}</table>"
    string = row["text"]
    if molecules:
        image = drawing(string)
        picture = (
            f'<img src="{image}" width="150" height="110" alt="molecule">'
            if image
            else '<div class="noimg">not a molecule RDKit reads</div>'
        )
        return f'{head}{picture}<div class="smiles">{text(string, 300)}</div>{table}</div>'
    required, forbidden, patterns = marked_words(config)
    prompt = row.get("prompt")
    body = f'<div class="prompt">{text(prompt)}</div>' if isinstance(prompt, str) else ""
    if json_texts:
        body += json_view(string)
    else:
        body += f'<div class="cont">{continuation(string, required, forbidden)}</div>'
    # The configuration's regex entries and the records' regex reports come in one order.
    judged = [r.get("satisfied") for n, r in named if n.startswith("regex")]
    for pattern, satisfied in zip(patterns, judged + [None] * len(patterns), strict=False):
        body += f'<p class="pattern">{mark(satisfied)} /{text(pattern, 200)}/</p>'
    return f"{head}{body}{table}</div>"


def sort_keys(records: list[dict], molecules: bool) -> list[str]:
    """The property names cards carry as numbers, for the sort and filter controls."""
    names: dict[str, None] = {}
    for row in records:
        for name, report in row["constraints"].items():
            if finite(report.get("value")) is not None:
                names[name] = None
    if molecules:
        names.update({"qed": None, "sa": None})
    return list(names)[:MAX_NAMES]


def attribute_name(name: str) -> str:
    """A property's name as a `data-p-*` attribute holds it."""
    return re.sub(r"[^a-z0-9_]", "_", name.lower())
