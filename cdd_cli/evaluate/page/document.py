"""The whole page: one HTML file with its style, its drawings and charts, and one small inline
script (sorting and filtering the cards), which a Content-Security-Policy keeps from loading
anything: the page opens from disk and fetches nothing."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from html import escape
from pathlib import Path

from cdd_cli.errors import InputError
from cdd_cli.evaluate.page.moses_table import Evaluation, moses_table, read_evaluation
from cdd_cli.evaluate.page.runs import Run, read_run
from cdd_cli.evaluate.page.sections import (
    attribute_name,
    card,
    distributions,
    sort_keys,
    summary,
    text,
)
from cdd_cli.output.config import write_whole_file
from cdd_cli.version import __version__

# Cards (and so drawings) on one page: a 1,000-molecule run is drawn whole in about 3.7 MB;
# beyond it the page says how many it shows, and the summary and charts still count all.
MAX_CARDS = 1_000
POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em}h2{font-size:1.15em;border-bottom:1px solid #ddd;margin-top:1.6em}
table.summary th{text-align:left;padding-right:1em;vertical-align:top}
table.summary td{padding-right:1.5em}
pre{background:#f6f6f6;padding:.5em;overflow:auto;max-height:30em;white-space:pre-wrap}
.charts{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0}
figcaption{font-size:.9em}.chart text{font-size:10px}
.key{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 1em;vertical-align:middle}
#cards{display:flex;flex-wrap:wrap;gap:.6em}
.card{border:1px solid #ddd;border-radius:4px;padding:.4em;width:230px;font-size:12px;
overflow-wrap:anywhere}
.text .card{width:420px}.card table{border-collapse:collapse;width:100%}
.card td{padding:0 .3em 0 0}.card img{display:block;margin:auto}
.smiles{font-family:monospace;margin:.2em 0}.detail{color:#666}
.noimg{height:110px;display:flex;align-items:center;justify-content:center;color:#999}
.ok{color:#1e8a3c;font-weight:bold}.bad{color:#c0392b;font-weight:bold}.none{color:#999}
.cut{color:#999}.prompt{color:#666}.cont{margin:.2em 0}
mark.req{background:#c8f0cf}mark.forbid{background:#f8c6c0}
.controls{margin:.5em 0}.controls input{width:6em}
.wide{overflow-x:auto}table.moses{border-collapse:collapse;font-size:12px}
table.moses th,table.moses td{padding:.15em .5em;text-align:right;white-space:nowrap}
table.moses tr.ours{font-weight:bold}table.moses tr:nth-child(even){background:#f6f6f6}
.std{color:#888;font-size:.9em}
"""
SCRIPT = """
(function () {
  var grid = document.getElementById('cards');
  var cards = grid ? Array.prototype.slice.call(grid.children) : [];
  function el(id) { return document.getElementById(id); }
  function num(c, k) { var v = c.getAttribute('data-p-' + k); return v === null ? NaN : +v; }
  function update() {
    var k = el('sort').value, dir = el('order').value === 'desc' ? -1 : 1, p = el('prop').value;
    var lo = el('lo').value === '' ? -Infinity : +el('lo').value;
    var hi = el('hi').value === '' ? Infinity : +el('hi').value, s = el('status').value;
    var kept = cards.filter(function (c) {
      if (s !== '' && c.getAttribute('data-ok') !== s) return false;
      if (p) { var v = num(c, p); if (isNaN(v) || v < lo || v > hi) return false; }
      return true;
    });
    if (k) kept.sort(function (x, y) {
      var u = num(x, k), w = num(y, k);
      if (isNaN(u)) return 1; if (isNaN(w)) return -1; return dir * (u - w);
    });
    cards.forEach(function (c) { c.hidden = true; });
    kept.forEach(function (c) { c.hidden = false; grid.appendChild(c); });
    el('shown').textContent = kept.length + ' shown';
  }
  if (grid) ['sort', 'order', 'prop', 'lo', 'hi', 'status'].forEach(function (id) {
    el(id).addEventListener('input', update); el(id).addEventListener('change', update);
  });
  window.addEventListener('load', function () {
    var images = document.images, ok = true;
    for (var i = 0; i < images.length; i++)
      if (!images[i].complete || images[i].naturalWidth === 0) ok = false;
    document.body.setAttribute('data-images', ok ? 'loaded' : 'missing');
    document.body.setAttribute('data-image-count', String(images.length));
  });
})();
"""


def is_molecules(run: Run) -> bool:
    return any(isinstance(row.get("valid"), bool) for row in run.records)


def has_json(run: Run) -> bool:
    entries = run.config_data.get("constraints")
    typed = entries if isinstance(entries, list) else []
    return any(isinstance(e, dict) and e.get("type") == "json_schema" for e in typed) or any(
        name.startswith("json_schema") for name in run.records[0]["constraints"]
    )


def controls(keys: list[str], count: int) -> str:
    options = "".join(f'<option value="{attribute_name(k)}">{text(k, 80)}</option>' for k in keys)
    return (
        '<div class="controls">sort by <select id="sort"><option value="">record order</option>'
        f'{options}</select> <select id="order"><option value="asc">ascending</option>'
        '<option value="desc">descending</option></select> · keep <select id="prop">'
        f'<option value="">any property</option>{options}</select> from <input id="lo" '
        'type="number" step="any"> to <input id="hi" type="number" step="any"> · '
        '<select id="status"><option value="">all records</option><option value="1">'
        'satisfied</option><option value="0">violating</option></select> · '
        f'<span id="shown">{count:,} shown</span></div>'
    )


def page(runs: list[Run], evaluations: Sequence[Evaluation] = ()) -> str:
    """The HTML of the page about `runs[0]`, the others compared with it; the MOSES table
    where `evaluations` (`cdd eval --moses` reports) are given."""
    run = runs[0]
    molecules = is_molecules(run)
    shown = run.records[:MAX_CARDS]
    json_texts = not molecules and has_json(run)
    cards = "\n".join(card(row, run.config_data, molecules, json_texts) for row in shown)
    stated = (
        f"the first {len(shown):,} of {len(run.records):,} records (at most {MAX_CARDS:,} a "
        "page; the summary and the distributions count them all)"
        if len(shown) < len(run.records)
        else f"all {len(run.records):,} records"
    )
    kind = "Molecules" if molecules else "Texts"
    title = text(run.name, 200)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{POLICY}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cdd report: {title}</title><style>{STYLE}</style></head>
<body data-images="pending">
<h1>cdd report: {title}</h1>
<p>Written by cdd {escape(__version__)} from {len(runs)} file(s). Values and marks are the
exact judges' as recorded.</p>
<h2>Summary</h2>
{summary(runs)}
<h2>Distributions</h2>
{distributions(runs, molecules)}
{f"<h2>MOSES metrics</h2>{moses_table(list(evaluations))}" if evaluations else ""}
<h2>{kind}</h2>
<p>{stated}.</p>
{controls(sort_keys(shown, molecules), len(shown))}
<div id="cards" class="{"molecules" if molecules else "text"}">
{cards}
</div>
<script>{SCRIPT}</script>
</body></html>
"""


def write_page(sources: Sequence[str], out: str, evaluations: Sequence[str] = ()) -> str:
    """The page of the runs in `sources` (the first the one it is about), with the MOSES
    metrics of the `cdd eval --moses` reports in `evaluations`, written whole to `out` (or
    stdout: "-"); what was written, in one line."""
    if out != "-" and any(s != "-" and Path(s).resolve() == Path(out).resolve() for s in sources):
        raise InputError(f"-o {out}: is one of the records files; the page goes to another")
    if out != "-" and any(Path(e).resolve() == Path(out).resolve() for e in evaluations):
        raise InputError(f"-o {out}: is one of the --eval files; the page goes to another")
    runs = [read_run(source) for source in sources]
    kind = {True: "molecules", False: "text"}
    for other in runs[1:]:  # a text run's values have no place on a molecule's charts
        if is_molecules(other) != is_molecules(runs[0]):
            raise InputError(
                f"{other.path}: records of {kind[is_molecules(other)]}, not "
                f"{kind[is_molecules(runs[0])]} as {runs[0].path}'s; compare runs of one kind"
            )
    html = page(runs, [read_evaluation(path) for path in evaluations])
    if out == "-":
        sys.stdout.write(html)
        sys.stdout.flush()
    else:
        write_whole_file(Path(out), html)
    shown = min(len(runs[0].records), MAX_CARDS)
    size = len(html.encode("utf-8"))
    # A page of a few records is tens of kB: "0.0 MB" would say it is empty.
    said = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{max(size / 1e3, 1):.0f} kB"
    return f"{out}: {len(runs[0].records):,} records ({shown:,} shown), {said}"
