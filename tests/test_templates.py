"""Text templates (`cdd generate --template`): reading them, laying them out in GPT-2 tokens so
the decoded text holds each fixed part exactly, the records a run writes, constraints on one
blank, and one line with exit 2 for a template that cannot be drawn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.constraints.lexical.constraints import lexical_from_spec
from cdd_cli.constraints.registry import unique_names
from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import Gpt2Tokenizer
from cdd_cli.reporting import Tally, satisfaction_note
from cdd_cli.run.templated import TEMPLATE_OWN_DRAWS, FixedText, bind, on_blank
from cdd_cli.templates import (
    Blank,
    FilledTemplate,
    TemplateText,
    blank_lengths,
    lay_out,
    parse_template,
)

runner = CliRunner()
LETTER = "Dear {name:1-3}, thank you for {4-6}."


def test_a_template_reads_as_fixed_text_around_named_and_numbered_blanks():
    t = parse_template(LETTER)
    assert t.fixed == ("Dear ", ", thank you for ", ".")
    assert t.blanks == (Blank("name", 1, 3), Blank("2", 4, 6))
    assert t.blank("name") == 0 and t.blank("2") == 1 and t.blank("1") == 0
    braces = parse_template("{{x}} {3} }}")
    assert braces.fixed == ("{x} ", " }") and braces.blanks == (Blank("1", 3, 3),)
    assert parse_template("{5}").fixed == ("", "")
    with pytest.raises(InputError, match="no blank 'other'"):
        t.blank("other")


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("no blanks here", "no blank"),
        ("Dear {name:1-3", "not closed"),
        ("Dear } you", "closes no blank"),
        ("Dear {a-b}", "is not {LOW-HIGH}"),
        ("Dear {3-1}", "3-1 is not a range"),
        ("Dear {0}", "a blank takes at least 1 token, not 0"),
        ("Dear{0-0}", "a blank takes at least 1 token, not 0"),
        ("Dear {name:}", "is not {LOW-HIGH}"),
        ("Dear {1a:2}", "is not a name"),
        ("Dear{:3}", "the name before ':' is empty"),
        ("{x:1} and {x:2}", "given twice"),
    ],
)
def test_a_malformed_template_is_refused_with_its_reason(source: str, problem: str):
    with pytest.raises(InputError, match=problem):
        parse_template(source)


def test_blank_lengths_are_drawn_in_their_ranges_once_per_seed():
    t = parse_template("{a:1-3} {b:10-20} {c:7}")
    drawn = {blank_lengths(t, seed) for seed in range(40)}
    assert all(1 <= a <= 3 and 10 <= b <= 20 and c == 7 for a, b, c in drawn)
    assert len(drawn) > 5 and blank_lengths(t, 3) == blank_lengths(t, 3)


@pytest.mark.parametrize(
    "source",
    [
        LETTER,
        "Dear{name:1-3}, thank you for{4-6}.",
        "  two spaces {2}\n\nnew lines {3}  ",
        "café {2} naïve — “quoted” {1} 日本語",
        "{2}ending",
    ],
)
def test_each_fixed_part_decodes_exactly_whatever_fills_its_blanks(source: str):
    tokenizer = Gpt2Tokenizer()
    t = parse_template(source)
    layout = lay_out(t, tokenizer.encode, tuple(b.low for b in t.blanks))
    for part, ids in zip(t.fixed, layout.fixed_ids, strict=True):
        assert tokenizer.decode(list(ids)) == part
    ids, kept = layout.ids_and_kept()
    assert len(ids) == layout.length == sum(kept) + sum(layout.lengths)
    text = TemplateText(layout, tokenizer.decode)
    # Fills that glue to their neighbours in a joint tokenisation, a piece of a character,
    # and an end-of-text token (which ends its own blank only).
    fillers = [tokenizer.encode(" x"), tokenizer.encode("é")[:1], [tokenizer.eos_id]]
    for filler in fillers:
        pairs = enumerate(zip(ids, kept, strict=True))
        row = [i if k else filler[n % len(filler)] for n, (i, k) in pairs]
        decoded = text(row)
        assert layout.holds_fixed(decoded), decoded
        for k in range(len(t.blanks)):  # each fill: its own positions' decoding
            start, end = layout.span(k)
            assert decoded.fills[k] == tokenizer.decode(row[start:end])
        at = 0
        for part in t.fixed:  # every fixed part, in order
            at = decoded.index(part, at) + len(part)


def test_the_fixed_text_check_is_a_string_match_that_catches_a_changed_fixed_part():
    tokenizer = Gpt2Tokenizer()
    t = parse_template(LETTER)
    layout = lay_out(t, tokenizer.encode, (2, 5))
    assert layout.holds_fixed("Dear Ann, thank you for the tea. Really.")
    assert not layout.holds_fixed("Dear Ann, thanks for the tea.")
    assert not layout.holds_fixed("Dear Ann, thank you for the tea")
    start, end = layout.span(1)
    assert end - start == 5 and start == len(layout.fixed_ids[0]) + 2 + len(layout.fixed_ids[1])


@pytest.mark.parametrize(
    ("source", "fills"),
    [
        ("{2}{3}", ("ab", "cde")),  # no fixed text between: the text cannot split them
        ("{2}{3}", ("ab", "")),  # end-of-text tokens only in the second blank
        ("a{2}b{1}c", ("zb", "s")),  # "azbbsc" splits as z/bs or zb/s: the positions tell
    ],
)
def test_each_blanks_fill_is_its_own_positions_whatever_the_text_allows(
    source: str, fills: tuple[str, ...]
):
    tokenizer = Gpt2Tokenizer()
    t = parse_template(source)
    layout = lay_out(t, tokenizer.encode, tuple(b.low for b in t.blanks))
    ids, kept = layout.ids_and_kept()
    drawn = iter(
        [i for fill, b in zip(fills, t.blanks, strict=True) for i in spell(fill, b.low, tokenizer)]
    )
    row = [i if k else next(drawn) for i, k in zip(ids, kept, strict=True)]
    text = TemplateText(layout, tokenizer.decode)(row)
    assert text.fills == fills and layout.holds_fixed(text)
    assert layout.fills(text) == {b.name: f for b, f in zip(t.blanks, fills, strict=True)}
    # A constraint on blank 1 judges the model's fill there, not a reading of the text.
    count = on_blank(lexical_from_spec("word_count", {"equals": 1}), "1")
    [scoped] = bind([count], layout)[:1]
    assert scoped.explain(text).startswith(f"{len(fills[0].split())} word")


def spell(fill: str, length: int, tokenizer: Gpt2Tokenizer) -> list[int]:
    """`fill` as `length` GPT-2 tokens, ended by end-of-text tokens where shorter."""
    ids = [tokenizer.encode(char)[0] for char in fill]
    assert len(ids) <= length
    return ids + [tokenizer.eos_id] * (length - len(ids))


def test_a_blank_scoped_count_says_its_own_bounds_in_the_summary_record_and_hint():
    t = parse_template("Dear{name:1-3}, thank you for{10-20}.")
    layout = lay_out(t, Gpt2Tokenizer().encode, (2, 12))
    built = [on_blank(lexical_from_spec("word_count", {"max": 2}), b) for b in ("name", "2")]
    name, other, fixed = bind(unique_names(built), layout)
    assert name.label() == "0..2 words in blank name" and other.label() == "0..2 words in blank 2"
    assert name.tau == 1.0 and not name.upper_bound  # the family's verdict: 1 where it holds
    text = FilledTemplate("Dear Ann Lee Smith, thank you for it.", (" Ann Lee Smith", " it"))
    assert name.explain(text) == "3 words (wanted <= 2)" and other.judge([text]) == [1.0]
    held = {"word_count": 4, "fixed_text": 4}  # blank 2's count: no sample holds it
    note = satisfaction_note([name, other, fixed], 4, 4, "reject", held)
    assert "0/4 satisfy 0..2 words in blank name, 0..2 words in blank 2, fixed_text >= 1" in note
    assert "no sample satisfies 0..2 words in blank 2: it looks infeasible" in note


def test_the_summary_counts_the_records_kept_unsteered_and_says_when_none_were():
    fixed = FixedText(layout=None)

    def row(attempts: int) -> dict:
        verdict = {"value": 1.0, "satisfied": True}
        return {"satisfied": True, "seconds": 0.1, "attempts": attempts,
                "constraints": {"fixed_text": verdict}}  # fmt: skip

    tally = Tally([fixed], "cdd", own_draws=3)
    for attempts in (1, 3, 4, 7):
        tally.add(row(attempts))
    assert "; 2/4 kept as the model drew them, unsteered (repair.own_draws 3)" in tally.note()
    assert "spares them" not in tally.note()
    wasted = Tally([fixed], "cdd", own_draws=3)
    for _ in range(4):
        wasted.add(row(4))
    assert wasted.note().endswith(
        "0/4 kept as the model drew them, unsteered (repair.own_draws 3): none held the "
        "constraints, `repair: {own_draws: 0}` spares them"
    )
    none = Tally([fixed], "cdd")
    none.add(row(1))
    assert "unsteered" not in none.note()


def generate(model: Path, *args: str) -> tuple[int, list[dict], str]:
    result = runner.invoke(
        app, ["generate", "--model", str(model), "--steps", "4", "-q", "--seed", "3", *args]
    )
    records = [json.loads(line) for line in result.stdout.splitlines()]
    return result.exit_code, records, result.stderr


@pytest.mark.slow
def test_a_template_run_keeps_its_fixed_text_and_records_each_blank(text_model_dir: Path):
    code, records, _ = generate(text_model_dir, "--template", LETTER, "-n", "4")
    assert code == 0 and len(records) == 4
    for r in records:
        assert r["prompt"] is None and r["template"] == LETTER
        name, rest = r["blanks"]["name"], r["blanks"]["2"]
        assert r["text"] == f"Dear {name}, thank you for {rest}."
        assert r["constraints"]["fixed_text"] == {
            "value": 1.0, "min": 1.0, "satisfied": True, "surrogate": None,
            "judge": "template-string-match",
        }  # fmt: skip
        assert r["satisfied"] is True and r["method"] == "unconstrained"
    # Each sample's own stream, and the layout drawn once per run: any batch size, the same.
    _, one_by_one, _ = generate(
        text_model_dir, "--template", LETTER, "-n", "4", "--batch-size", "1"
    )
    assert [r["text"] for r in one_by_one] == [r["text"] for r in records]


@pytest.mark.slow
def test_a_constraint_on_a_blank_judges_its_fill(text_model_dir: Path, tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "constraints:\n"
        "  - {type: word_count, max: 40, blank: name}\n"
        "  - {type: word_count, max: 40, blank: 2}\n"
        "  - {type: word_count, max: 60}\n"
    )
    code, records, stderr = generate(
        text_model_dir, "--template", LETTER, "-n", "2", "--spec", str(spec), "--method", "reject"
    )
    assert code in (0, 3), stderr
    for r in records:
        verdicts = r["constraints"]
        assert verdicts["word_count"]["blank"] == "name"
        assert verdicts["word_count#2"]["blank"] == "2"
        assert "blank" not in verdicts["word_count#3"]
        words = lambda text: len(text.split())  # noqa: E731
        for key, text in (("word_count", r["blanks"]["name"]), ("word_count#2", r["blanks"]["2"]),
                          ("word_count#3", r["text"])):  # fmt: skip
            assert verdicts[key]["detail"].startswith(f"{words(text)} word"), (key, text)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--template", "no blank"], "no blank"),
        (["--template", ""], "empty"),
        (["--template", "Dear {1-x}"], "is not {LOW-HIGH}"),
        (["--template", "Dear {30-60}"], "exceed model"),
        (["--template", "Dear{100}"], "its fixed text (1 token) and longest blanks (100 tokens)"),
        (["--template", "Dear {2}", "--prompt", "Hi"], "give no --prompt"),
        (["--template", "Dear {2}", "--length", "8"], "give no --length"),
        (["--template", "Dear {2}", "--chat"], "give no --chat"),
    ],
)
def test_a_template_that_cannot_be_drawn_is_one_line_and_exit_2(
    text_model_dir: Path, args: list[str], message: str
):
    code, records, stderr = generate(text_model_dir, *args)
    assert code == 2 and records == []
    (line,) = stderr.strip().splitlines()
    assert line.startswith("cdd: error: ") and message in line, line


@pytest.mark.parametrize(
    ("entry", "template", "message"),
    [
        ("blank: name", None, "has no template"),
        ("blank: other", LETTER, "no blank 'other'"),
        ("blank: [1, 2]", LETTER, "names a template blank"),
        ("blank: true", LETTER, "names a template blank"),
    ],
)
def test_a_constraint_on_a_blank_the_run_lacks_is_one_line_and_exit_2(
    text_model_dir: Path, tmp_path: Path, entry: str, template: str | None, message: str
):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"constraints:\n  - {{type: word_count, max: 9, {entry}}}\n")
    given = ["--template", template] if template else ["--prompt", "Hi"]
    code, _, stderr = generate(text_model_dir, "--spec", str(spec), *given)
    assert code == 2
    (line,) = stderr.strip().splitlines()
    assert message in line, line


def blank_toxicity(tmp_path: Path, surrogate: Path, tau: float, own: int | None = None) -> str:
    spec = tmp_path / f"tox-{tau}-{own}.yaml"
    text = f"constraints:\n  - {{type: toxicity, tau: {tau}, surrogate: {surrogate}, blank: 2}}\n"
    spec.write_text(text + ("" if own is None else f"repair: {{own_draws: {own}}}\n"))
    return str(spec)


def median_toxicity(model: Path, surrogate: Path, tmp_path: Path) -> float:
    """A bound on blank 2's toxicity that about half the model's own fills hold."""
    free = blank_toxicity(tmp_path, surrogate, 1)
    _, probe, _ = generate(model, "--template", LETTER, "-n", "8", "--spec", free)
    return round(sorted(r["constraints"]["toxicity"]["value"] for r in probe)[3], 4)


@pytest.mark.slow
def test_a_templates_first_draws_are_the_models_own_and_the_projection_steers_after(
    text_model_dir: Path, toxicity_dir: Path, tmp_path: Path
):
    # TEMPLATE_OWN_DRAWS: a sample rejection keeps within that many draws is the very record
    # the default writes, unprojected; one rejection needs more draws for is steered after.
    args = ["--template", LETTER, "-n", "8"]
    tau = median_toxicity(text_model_dir, toxicity_dir, tmp_path)
    spec = blank_toxicity(tmp_path, toxicity_dir, tau)
    _, rejected, _ = generate(text_model_dir, *args, "--spec", spec, "--method", "reject")
    code, records, stderr = generate(text_model_dir, *args, "--spec", spec)
    assert code == 0, stderr
    own = [r["attempts"] <= TEMPLATE_OWN_DRAWS for r in rejected]
    assert any(own) and not all(own), [r["attempts"] for r in rejected]
    for r, reference, kept in zip(records, rejected, own, strict=True):
        if kept:
            assert (r["text"], r["attempts"]) == (reference["text"], reference["attempts"])
            assert r["projection"]["settled_by"] is None and r["projection"]["steps"] == 0
        else:
            assert r["attempts"] > TEMPLATE_OWN_DRAWS and r["satisfied"]
    # With none of its own, every first draw is steered: not rejection's first draws.
    spec = blank_toxicity(tmp_path, toxicity_dir, tau, own=0)
    _, steered, _ = generate(text_model_dir, *args, "--spec", spec)
    assert [r["text"] for r in steered] != [r["text"] for r in records]
    assert any(s["projection"]["steps"] for s in steered if s["attempts"] == 1)


@pytest.mark.slow
def test_a_template_file_drawn_before_own_draws_resumes_as_it_began(
    text_model_dir: Path, toxicity_dir: Path, tmp_path: Path
):
    from tests.test_runs import same_records

    tau = median_toxicity(text_model_dir, toxicity_dir, tmp_path)
    every, default = (blank_toxicity(tmp_path, toxicity_dir, tau, own) for own in (0, None))
    base = ["generate", "--model", str(text_model_dir), "--steps", "4", "-q", "--seed", "3"]
    base += ["--template", LETTER]
    old, whole = tmp_path / "old.jsonl", tmp_path / "whole.jsonl"
    assert runner.invoke(app, [*base, "-n", "3", "--spec", every, "-o", str(old)]).exit_code == 0
    config = Path(f"{old}.config.yaml")
    config.write_text(config.read_text().replace("  own_draws: 0\n", ""))  # as before the key
    assert "own_draws" not in config.read_text()
    resumed = runner.invoke(app, [*base, "-n", "6", "--spec", default, "--resume", "-o", str(old)])
    assert resumed.exit_code == 0, resumed.stderr
    assert "own_draws: 0\n" in config.read_text()
    assert runner.invoke(app, [*base, "-n", "6", "--spec", every, "-o", str(whole)]).exit_code == 0
    assert same_records(old, whole)
    # The default's own draws give the same records at any batch size.
    one, all_ = tmp_path / "one.jsonl", tmp_path / "all.jsonl"
    for batch, out in (("1", one), ("6", all_)):
        run = [*base, "-n", "6", "--spec", default, "--batch-size", batch, "-o", str(out)]
        assert runner.invoke(app, run).exit_code == 0
    assert same_records(one, all_) and not same_records(one, whole)
    assert f"own_draws: {TEMPLATE_OWN_DRAWS}\n" in Path(f"{one}.config.yaml").read_text()
    # Another method reads no own draws, and its resolved configuration says so.
    rejected = tmp_path / "rejected.jsonl"
    run = [*base, "-n", "2", "--spec", default, "--method", "reject", "-o", str(rejected)]
    assert runner.invoke(app, run).exit_code == 0
    assert "own_draws: 0\n" in Path(f"{rejected}.config.yaml").read_text()


def template_fidelity():
    """bench/template_fidelity.py as a module (bench/ is no package)."""
    import importlib
    import sys

    bench = Path(__file__).resolve().parents[1] / "bench"
    sys.path.insert(0, str(bench))
    try:
        return importlib.import_module("template_fidelity")
    finally:
        sys.path.remove(str(bench))


def test_template_fidelity_reads_a_sample_of_the_same_law_near_its_null():
    # bench/template_fidelity.py: fills drawn from one law read near 1x their permutation
    # null; fills whose constrained blank scores higher (a method off rejection's law) read
    # far over 2x on the score, not on what is the same.
    import random

    fidelity = template_fidelity()
    stream = random.Random(0)
    words = ["thee", "lord", "good", "day", "night", "sweet", "my", "and"]

    def record(shift: float) -> dict:
        fill = " ".join(stream.choice(words) for _ in range(stream.randint(2, 6)))
        value = stream.random() * 0.05 + shift
        constraint = {"value": value, "surrogate": value, "blank": "2"}
        return {"blanks": {"name": " friend", "2": fill}, "constraints": {"toxicity": constraint}}

    reference = [record(0.0) for _ in range(200)]
    same = fidelity.compared([record(0.0) for _ in range(200)], reference, "2", 50, stream)
    assert same["ks_other_chars"]["ratio"] is None  # every name the same: nothing to read
    assert same["ks_value"]["ratio"] < 2 and same["tv_unigram"]["ratio"] < 2, same
    off = fidelity.compared([record(0.02) for _ in range(200)], reference, "2", 50, stream)
    assert off["ks_value"]["ratio"] > 2 and off["tv_unigram"]["ratio"] < 2, off


def test_template_fidelity_recounts_the_fixed_parts_from_the_text():
    # bench/template_fidelity.py's own string match: the text must be the template's fixed
    # parts with the record's fills between them, in order.
    fidelity = template_fidelity()
    kept = {"template": "Dear{name:1}, thank you for{12}.",
            "blanks": {"name": " Ann", "2": " the tea"},
            "text": "Dear Ann, thank you for the tea."}  # fmt: skip
    assert fidelity.fixed_kept(kept)
    assert not fidelity.fixed_kept({**kept, "text": "Dear Ann, thank you for the tea!"})
    assert not fidelity.fixed_kept({**kept, "text": "Dear Ann, thanks you for the tea."})
    assert not fidelity.fixed_kept({**kept, "blanks": {"name": " Ann"}})
