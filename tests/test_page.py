"""`cdd report`: the HTML page of a run, built from records made here; hostile records stay
text; nothing is fetched; the page as a real browser renders it (slow, where Chromium is)."""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdd_cli.cli import sampling
from cdd_cli.cli.app import app
from cdd_cli.errors import InputError, Interrupted
from cdd_cli.evaluate.page.charts import histogram, ks_distance
from cdd_cli.evaluate.page.document import MAX_CARDS, write_page
from cdd_cli.models.registry import ASSETS
from cdd_cli.run.runner import Output
from tests.limits import HANG_S

runner = CliRunner()
URL = re.compile(r"\b(https?|ftp|file):", re.I)  # a scheme the browser would fetch from


def molecule(index: int, smiles: str, sa: float = 3.0, qed: float = 0.5) -> dict:
    return {
        "id": f"0-{index}", "prompt_id": None, "prompt": None, "text": smiles, "seed": 0,
        "model": "default-molecules", "method": "cdd", "satisfied": sa <= 3.5,
        "constraints": {"sa": {"value": sa, "max": 3.5, "satisfied": sa <= 3.5,
                               "surrogate": sa, "judge": "rdkit-sa"}},
        "projection": {"steps": 1, "settled_by": "FlipSearch" if index % 2 else None},
        "attempts": 1 + index % 2, "valid": True, "canonical": smiles, "qed": qed, "sa": sa,
        "novel": True, "seconds": 0.1,
    }  # fmt: skip


def text_record(index: int, text: str, prompt: str | None = "Say") -> dict:
    return {
        "id": f"0-{index}", "prompt": prompt, "text": text, "model": "default-text",
        "method": "cdd", "satisfied": True,
        "constraints": {"include": {"value": 1.0, "min": 1.0, "satisfied": True},
                        "toxicity": {"value": 0.1, "max": 0.5, "satisfied": True}},
        "seconds": 0.2,
    }  # fmt: skip


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def qm9_smiles(count: int) -> list[str]:
    """`count` real molecules: the shipped model's held-out QM9 set."""
    with gzip.open(ASSETS / "qm9-udlm" / "heldout.smi.gz", "rt") as f:
        smiles = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    return (smiles * (count // len(smiles) + 1))[:count]


def test_a_molecule_page_draws_each_molecule_and_the_bound(tmp_path: Path):
    rows = [molecule(i, s, sa=2.5 + i / 4) for i, s in enumerate(qm9_smiles(6))]
    rows.append({**molecule(6, "C1CC"), "valid": False, "canonical": None})
    records = write_jsonl(tmp_path / "run.jsonl", rows)
    (tmp_path / "run.jsonl.config.yaml").write_text(
        "# latest run: cdd molecules -n 7 -c sa --tau 3.5\nmodel: default-molecules\n"
    )
    said = write_page([records], str(tmp_path / "page.html"))
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "7 records (7 shown)" in said
    size = len((tmp_path / "page.html").read_bytes())  # tens of kB: said so, not "0.0 MB"
    assert size < 1e6 and said.endswith(f", {size / 1e3:.0f} kB")
    assert page.count('<img src="data:image/svg+xml;base64,') == 6
    assert "not a molecule RDKit reads" in page  # the invalid one, its SMILES as text
    assert "max 3.5" in page  # the bound on the SA histogram
    for name in ("qed", "logp", "mw", "heavy_atoms"):
        assert f"<b>{name}</b>" in page
    assert "cdd molecules -n 7 -c sa --tau 3.5" in page and "default-molecules" in page
    assert "FlipSearch" in page and "no stage (as the model drew it)" in page  # settled_by shares
    assert 'data-p-sa="2.5"' in page  # what the script sorts and filters by
    assert not URL.search(page)


def test_hostile_records_stay_text_and_the_only_script_is_the_pages(tmp_path: Path):
    hostile = "<script>alert(1)</script>"
    rows = [
        {**molecule(0, f"C{hostile}"), "id": hostile},
        {**molecule(1, "CCO"), "qed": math.nan, "sa": math.inf,
         "constraints": {f"<b>{hostile}": {"value": {"x": hostile}, "max": "<i>",
                                           "satisfied": "yes", "detail": hostile}}},
        {**molecule(2, "C" * 300_000), "model": hostile},
        {"text": "\ud800 lone surrogate \x00", "id": 7, "constraints": [1], "prompt": 3},
        {**molecule(4, "CCN"), "constraints": {f"c{k}": {"value": k} for k in range(5000)}},
    ]  # fmt: skip
    records = write_jsonl(tmp_path / "run.jsonl", rows)
    write_page([records], str(tmp_path / "page.html"))
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert page.count("<script>") == 1 and "alert(1)</script>" not in page
    assert "<b><" not in page and "<i>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "characters more" in page  # the huge SMILES cut, its size stated
    assert len(page) < 1_000_000
    assert "nan" in page and "inf" in page
    assert "4,960 more" in page and page.count("<figure>") < 50  # a few of 5,000 names


def test_another_tools_jsonl_is_one_line_and_exit_2(tmp_path: Path):
    records = write_jsonl(tmp_path / "other.jsonl", [{"smiles": "CCO", "score": 1}])
    result = runner.invoke(app, ["report", records, "-o", str(tmp_path / "page.html")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"cdd: error: {records}:1: not a cdd record (no 'text')"
    assert not (tmp_path / "page.html").exists()
    (tmp_path / "not.jsonl").write_text("<html>\n")
    result = runner.invoke(app, ["report", str(tmp_path / "not.jsonl"), "-o", "x.html"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1


def test_the_page_never_overwrites_its_records_and_can_go_to_stdout(tmp_path: Path):
    records = write_jsonl(tmp_path / "run.jsonl", [molecule(0, "CCO")])
    result = runner.invoke(app, ["report", records, "-o", records])
    assert result.exit_code == 2 and "is one of the records files" in result.stderr
    assert json.loads(Path(records).read_text())["text"] == "CCO"
    result = runner.invoke(app, ["report", records, "-o", "-"])
    assert result.exit_code == 0 and result.stdout.startswith("<!DOCTYPE html>")


def test_a_second_file_is_overlaid_with_its_ks_distance(tmp_path: Path):
    smiles = qm9_smiles(8)
    first = write_jsonl(tmp_path / "cdd.jsonl", [molecule(i, s, 2.0) for i, s in enumerate(smiles)])
    other = write_jsonl(
        tmp_path / "free.jsonl", [molecule(i, s, 5.0) for i, s in enumerate(smiles)]
    )
    write_page([first, other], str(tmp_path / "page.html"))
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "KS free.jsonl: 1.000" in page and "KS free.jsonl: 0.000" in page  # sa; qed
    assert ks_distance([1, 2, 3], [1, 2, 3]) == 0
    assert ks_distance([1, 2], [3, 4]) == 1
    assert ks_distance([1, 2, 3, 4], [3, 4, 5, 6]) == 0.5


def test_a_run_with_own_draws_says_how_many_records_were_kept_unsteered(tmp_path: Path):
    rows = [molecule(i, s) for i, s in enumerate(qm9_smiles(4))]
    for row, attempts in zip(rows, (1, 2, 4, 5), strict=True):
        row["attempts"] = attempts
    path = write_jsonl(tmp_path / "own.jsonl", rows)
    config = Path(f"{path}.config.yaml")
    config.write_text("method: cdd\nrepair:\n  own_draws: 2\n")
    write_page([path], str(tmp_path / "page.html"))
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "2 of 4 (50.0%) (repair.own_draws 2)" in page
    assert "no stage (as the model drew it)" in page  # a record no stage changed
    # Another method draws every sample as the model does: no such row.
    config.write_text("method: reject\nrepair:\n  own_draws: 2\n")
    write_page([path], str(tmp_path / "page.html"))
    assert "repair.own_draws" not in (tmp_path / "page.html").read_text(encoding="utf-8")


def test_a_text_run_beside_a_molecule_run_is_refused(tmp_path: Path):
    # `cdd report mols.jsonl texts.jsonl` drew every molecular chart with "KS texts.jsonl:
    # nan" and exited 0: runs of two kinds have no distribution to compare.
    mols = write_jsonl(tmp_path / "mols.jsonl", [molecule(0, "CCO")])
    texts = write_jsonl(tmp_path / "texts.jsonl", [text_record(0, "a harbor")])
    for first, second, kinds in ((mols, texts, "text, not molecules"),
                                 (texts, mols, "molecules, not text")):  # fmt: skip
        with pytest.raises(InputError) as info:
            write_page([first, second], str(tmp_path / "page.html"))
        assert str(info.value) == (
            f"{second}: records of {kinds} as {first}'s; compare runs of one kind"
        )
        assert not (tmp_path / "page.html").exists()


def test_a_histogram_draws_its_bounds_and_says_when_nothing_is_finite():
    svg = histogram([[1.0, 2.0, 2.5]], {"min": 0.5, "max": 3.0})
    assert svg.startswith("<svg") and "min 0.5" in svg and "max 3" in svg
    assert "no finite values" in histogram([[]], {})


def test_texts_mark_required_and_forbidden_words_and_json_is_pretty_printed(tmp_path: Path):
    records = write_jsonl(
        tmp_path / "run.jsonl",
        [text_record(0, " the cat and the dog.", "<script>x</script>"), text_record(1, " a")],
    )
    (tmp_path / "run.jsonl.config.yaml").write_text(
        "constraints:\n- {type: include, words: [the]}\n- {type: exclude, words: [and]}\n"
        "- {type: regex, pattern: '[a-z ]+'}\n"
    )
    write_page([records], str(tmp_path / "page.html"))
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert page.count('<mark class="req">') == 2 and '<mark class="forbid">and</mark>' in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page  # the prompt beside it, escaped
    assert "/[a-z ]+/" in page and "<b>toxicity</b>" in page and "max 0.5" in page
    schema = {"json_schema": {"value": 1.0, "min": 1.0, "satisfied": True}}
    rows = [
        {**text_record(0, '{"a": [1, 2]}'), "constraints": schema},
        {**text_record(1, "{oops"), "constraints": {}},
    ]
    write_page([write_jsonl(tmp_path / "json.jsonl", rows)], str(tmp_path / "json.html"))
    page = (tmp_path / "json.html").read_text(encoding="utf-8")
    assert "valid JSON" in page and "&quot;a&quot;: [\n    1," in page and "not JSON" in page


def test_a_plugin_constraint_shows_by_its_name_and_value(tmp_path: Path):
    row = molecule(0, "CCO")
    row["constraints"]["rotatable_bonds"] = {"value": 4, "max": 5, "satisfied": True}
    write_page([write_jsonl(tmp_path / "run.jsonl", [row])], str(tmp_path / "page.html"))
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "<td>rotatable_bonds</td><td>4</td><td>max 5</td>" in page
    assert "<b>rotatable_bonds</b>" in page and 'data-p-rotatable_bonds="4.0"' in page


def test_cards_are_capped_and_the_page_says_so(tmp_path: Path):
    rows = [text_record(i, f" word {i}") for i in range(MAX_CARDS + 5)]
    said = write_page([write_jsonl(tmp_path / "run.jsonl", rows)], str(tmp_path / "page.html"))
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert f"the first {MAX_CARDS:,} of {MAX_CARDS + 5:,} records" in page
    assert page.count('<div class="card"') == MAX_CARDS and f"({MAX_CARDS:,} shown)" in said


def test_report_needs_a_records_file_and_writes_what_a_stopped_run_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    page = tmp_path / "page.html"
    with pytest.raises(InputError, match="--report reads the run's records back"):
        sampling.sample(None, "molecules", Output("-"), "cpu", True, False, str(page))  # type: ignore[arg-type]

    def stopped(output: Output, *args: object, **kwargs: object) -> int:
        write_jsonl(Path(output.path), [molecule(0, "CCO")])
        raise Interrupted("1 of 8 records kept")

    monkeypatch.setattr(sampling, "write_run", stopped)
    out = Output(str(tmp_path / "run.jsonl"))
    with pytest.raises(Interrupted):
        sampling.sample(None, "molecules", out, "cpu", True, False, str(page))  # type: ignore[arg-type]
    assert "all 1 records" in page.read_text(encoding="utf-8")


def test_a_report_page_in_a_missing_folder_or_on_the_records_is_refused_before_sampling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # `--report nodir/page.html` sampled the whole run, then failed at its end with exit 2.
    drawn = []
    monkeypatch.setattr(sampling, "write_run", lambda *args, **kwargs: drawn.append(1) or 0)
    page = tmp_path / "nodir" / "page.html"
    out = Output(str(tmp_path / "run.jsonl"))
    with pytest.raises(InputError) as info:
        sampling.sample(None, "molecules", out, "cpu", True, False, str(page))  # type: ignore[arg-type]
    assert str(info.value) == f"--report {page}: its folder {page.parent} does not exist"
    # `-o run.jsonl --report run.jsonl`: refused at the end too, as "-o run.jsonl: ...".
    with pytest.raises(InputError) as info:
        sampling.sample(None, "molecules", out, "cpu", True, False, out.path)  # type: ignore[arg-type]
    assert str(info.value) == f"--report {out.path}: is the records file; the page goes to another"
    assert not drawn


@pytest.mark.slow
def test_a_thousand_molecules_page_is_quick_and_small(tmp_path: Path):
    rows = [
        molecule(i, s, 2 + (i % 30) / 10, (i % 10) / 10) for i, s in enumerate(qm9_smiles(1000))
    ]
    records = write_jsonl(tmp_path / "run.jsonl", rows)
    start = time.perf_counter()
    write_page([records, records], str(tmp_path / "page.html"))
    took = time.perf_counter() - start
    size = (tmp_path / "page.html").stat().st_size
    assert took < 10 and size < 5_000_000, (took, size)
    # 10,000 records: all counted, the first MAX_CARDS drawn, still under the size.
    many = write_jsonl(tmp_path / "many.jsonl", rows * 10)
    write_page([many], str(tmp_path / "many.html"))
    page = (tmp_path / "many.html").read_text(encoding="utf-8")
    assert "10,000" in page and len(page.encode()) < 5_000_000 and not URL.search(page)


@pytest.mark.slow
def test_molecules_and_generate_with_report_write_the_page_at_the_end(tmp_path: Path):
    out, page = tmp_path / "run.jsonl", tmp_path / "page.html"
    result = subprocess.run(
        [sys.executable, "-m", "cdd_cli", "molecules", "-n", "8", "-c", "sa", "--tau", "3.5",
         "-o", str(out), "--report", str(page), "-q"],
        capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert result.returncode in (0, 3), result.stderr
    html = page.read_text(encoding="utf-8")
    assert f"{page}: 8 records (8 shown)" in result.stderr
    assert "cdd molecules -n 8 -c sa --tau 3.5" in html and "max 3.5" in html
    texts, page = tmp_path / "texts.jsonl", tmp_path / "texts.html"
    result = subprocess.run(
        [sys.executable, "-m", "cdd_cli", "generate", "--prompt", "<script>alert(1)</script>",
         "-n", "2", "--length", "8", "--steps", "2", "-o", str(texts), "--report", str(page),
         "-q"],
        capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert result.returncode in (0, 3), result.stderr
    html = page.read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)" in html and html.count("<script>") == 1


def png_colours(data: bytes) -> set:
    """The distinct pixels of a PNG: by PIL where installed, else from the PNG's IDAT chunks
    (8-bit RGB or RGBA, as Chromium writes) with zlib, sampled."""
    try:
        from PIL import Image
    except ImportError:
        pass
    else:
        with Image.open(io.BytesIO(data)) as image:
            return {colour for _, colour in image.convert("RGB").getcolors(1 << 24)}
    width, height, depth, kind = struct.unpack(">IIBB", data[16:26])
    assert depth == 8 and kind in (2, 6)
    chunks, at = [], 8
    while at < len(data):
        (size,) = struct.unpack(">I", data[at : at + 4])
        if data[at + 4 : at + 8] == b"IDAT":
            chunks.append(data[at + 8 : at + 8 + size])
        at += 12 + size
    raw = zlib.decompress(b"".join(chunks))
    step = 3 if kind == 2 else 4
    stride = width * step + 1
    # Filtered rows still differ between a blank page and a drawn one: unfiltered rows of one
    # colour give one value, anything drawn gives several.
    return {raw[r * stride + 1 + c : r * stride + 1 + c + step]
            for r in range(0, height, 7) for c in range(0, width * step, step * 5)}  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="no headless Chromium (Debian's `chromium` package)"
)
def test_the_page_renders_in_chromium_with_its_molecules(tmp_path: Path):
    rows = [molecule(i, s, 2.5 + (i % 8) / 4) for i, s in enumerate(qm9_smiles(24))]
    write_page([write_jsonl(tmp_path / "run.jsonl", rows)], str(tmp_path / "page.html"))
    browser = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000"]  # fmt: skip
    url = (tmp_path / "page.html").as_uri()
    dom = subprocess.run(
        [*browser, "--dump-dom", url], capture_output=True, text=True, timeout=HANG_S
    ).stdout
    assert 'data-images="loaded"' in dom and 'data-image-count="24"' in dom, dom[:500]
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*browser, "--window-size=1200,900", f"--screenshot={shot}", url],
        capture_output=True, timeout=HANG_S,
    )  # fmt: skip
    assert len(png_colours(shot.read_bytes())) > 10  # not blank


def moses_eval(path: Path, metrics: dict) -> str:
    """A `cdd eval --moses` report holding `metrics` under its `moses` key."""
    path.write_text(json.dumps({"kind": "molecules", "samples": 2, "moses": metrics}))
    return str(path)


def test_the_moses_table_shows_evals_metrics_beside_the_cited_baselines(tmp_path: Path):
    records = write_jsonl(tmp_path / "run.jsonl", [molecule(0, "CCO"), molecule(1, "CCN")])
    metrics = {
        "samples": 10_000, "valid": 0.9712, "unique@1000": 1.0, "unique@10000": 0.9991,
        "Novelty": 0.93, "FCD/Test": 1.2345, "SNN/Test": 0.51, "Scaf/Test": None,
        "IntDiv": 0.8611, "Filters": 0.97, "logP": 0.25,
        "novelty_against": "training of moses-mdlm (1,584,663)",
    }  # fmt: skip
    evaluation = moses_eval(tmp_path / "run.eval.json", metrics)
    page = tmp_path / "page.html"
    result = runner.invoke(app, ["report", records, "--eval", evaluation, "-o", str(page)])
    assert result.exit_code == 0, result.output
    html = page.read_text(encoding="utf-8")
    assert "<h2>MOSES metrics</h2>" in html and "run.eval.json</th><td>10,000</td>" in html
    assert "<td>0.9712</td><td>1</td><td>0.9991</td><td>1.234</td>" in html
    assert "novelty against training of moses-mdlm (1,584,663)" in html
    # MOSES' README rows with their standard deviations, and where they come from.
    assert '<th>CharRNN</th><td>–</td><td>0.9748 <span class="std">± 0.0264</span>' in html
    assert "0.0732 <span" in html and "<th>JTN-VAE</th>" in html and "<th>Train</th>" in html
    assert "molecularsets/moses README.md at commit 7b8f83b" in html
    assert not URL.search(html)
    # Without --eval there is no table; the page is otherwise the same.
    write_page([records], str(tmp_path / "plain.html"))
    assert "MOSES metrics" not in (tmp_path / "plain.html").read_text(encoding="utf-8")


def test_hostile_values_in_an_eval_stay_text(tmp_path: Path):
    hostile = "<script>alert(1)</script>"
    records = write_jsonl(tmp_path / "run.jsonl", [molecule(0, "CCO")])
    evaluation = tmp_path / "eval.json"
    # NaN and Infinity: Python's json reads them; an integer too large for a float.
    evaluation.write_text(
        '{"moses": {"valid": NaN, "FCD/Test": Infinity, "unique@1000": "' + hostile.replace(
            "/", "\\/") + '", "SNN/Test": {"x": "<b>"}, "IntDiv": [1, "<i>"], "Filters": true, '
        '"Novelty": 1' + "0" * 400 + ', "samples": "' + "9" * 5000 + '", '
        '"<script>": 1, "novelty_against": "<img src=x onerror=alert(1)>"}}'
    )  # fmt: skip
    write_page([records], str(tmp_path / "page.html"), [str(evaluation)])
    html = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert html.count("<script>") == 1 and "alert(1)</script>" not in html
    assert "<b>" not in html.split("<h2>MOSES metrics</h2>")[1] and "<i>" not in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<td>nan</td><td>&lt;script&gt;alert(1)&lt;/script&gt;</td>" in html
    assert "<td>inf</td>" in html and "characters more" in html


def test_an_integer_too_large_for_a_float_in_a_record_is_text_not_a_crash(tmp_path: Path):
    row = molecule(0, "CCO")
    row["seconds"] = row["constraints"]["sa"]["value"] = 10**400
    said = write_page([write_jsonl(tmp_path / "run.jsonl", [row])], str(tmp_path / "page.html"))
    assert "1 records" in said
    assert "<td>sa</td><td>1000000000" in (tmp_path / "page.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{oops", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        ('{"kind": "text", "samples": 2}', "holds no MOSES metrics"),
        ('{"moses": [1, 2]}', "holds no MOSES metrics"),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
        (" " * (2 << 20), "larger than 1 MiB"),
        (None, "cannot read"),
    ],
)
def test_an_eval_that_is_no_moses_report_is_one_line_and_exit_2(
    tmp_path: Path, content: str | bytes | None, expected: str
):
    records = write_jsonl(tmp_path / "run.jsonl", [molecule(0, "CCO")])
    evaluation = tmp_path / "eval.json"
    if isinstance(content, bytes):
        evaluation.write_bytes(content)
    elif content is not None:
        evaluation.write_text(content)
    page = tmp_path / "page.html"
    result = runner.invoke(app, ["report", records, "--eval", str(evaluation), "-o", str(page)])
    assert result.exit_code == 2, result.output
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not page.exists()


def test_the_page_never_overwrites_an_eval_and_a_fifo_is_not_waited_on(tmp_path: Path):
    records = write_jsonl(tmp_path / "run.jsonl", [molecule(0, "CCO")])
    evaluation = moses_eval(tmp_path / "eval.json", {"valid": 1.0})
    result = runner.invoke(app, ["report", records, "--eval", evaluation, "-o", evaluation])
    assert result.exit_code == 2 and "is one of the --eval files" in result.stderr
    assert json.loads(Path(evaluation).read_text())["moses"] == {"valid": 1.0}
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    result = runner.invoke(app, ["report", records, "--eval", str(fifo), "-o", "-"])
    assert result.exit_code == 2 and "not a regular file" in result.stderr


def test_an_eval_that_is_a_folder_is_named_as_an_eval(tmp_path: Path):
    records = write_jsonl(tmp_path / "run.jsonl", [molecule(0, "CCO")])
    result = runner.invoke(app, ["report", records, "--eval", str(tmp_path), "-o", "-"])
    assert result.exit_code == 2
    said = f"cdd: error: --eval {tmp_path}: is a directory, not a regular file"
    assert result.stderr.strip() == said


def test_a_page_into_a_missing_folder_names_the_path_given(tmp_path: Path):
    records = write_jsonl(tmp_path / "run.jsonl", [molecule(0, "CCO")])
    page = tmp_path / "none" / "x.html"
    result = runner.invoke(app, ["report", records, "-o", str(page)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"cdd: error: {page}: No such file or directory"
    assert not (tmp_path / "none").exists()
