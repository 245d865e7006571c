"""Molecules from parts (`cdd design`): the parts laid out as SMILES tokens and blanks, the
kept part certified by RDKit, the canvases, and the command's refusals and records."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from rdkit import Chem
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.constraints import kept
from cdd_cli.constraints.kept import Blank, KeptConstraint
from cdd_cli.diffusion.sampler import Canvas
from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import SMILES_PATTERN, load_tokenizer, split_smiles
from cdd_cli.run.designs import LAYOUT_DRAWS, atom_ends, canvases

QM9 = Path(__file__).resolve().parents[1] / "cdd_cli" / "assets" / "qm9-udlm"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(QM9)


def written(design, fill: str = "C") -> str:
    """The design's SMILES with each blank written as `fill` once."""
    return "".join(fill if isinstance(s, Blank) else s for s in design.segments)


def test_scaffold_attachment_points_become_blanks(tokenizer):
    design = kept.scaffold("c1ccc([*])cc1", tokenizer)
    assert design.kept == {"scaffold": "*c1ccccc1"}
    assert design.segments == (Blank(1), *split_smiles("c1ccccc1"))
    two = kept.scaffold("[*]c1ccc([*])cc1", tokenizer)
    assert written(two) == "Cc1ccc(C)cc1"  # the second point a branch
    assert kept.certified(two, written(two))


def test_a_part_kept_anywhere_has_all_its_writings(tokenizer):
    design = kept.scaffold("[*]C1CC1", tokenizer)
    assert design.writings[0] == design.segments  # canonical first
    texts = ["".join("*" if isinstance(s, Blank) else s for s in w) for w in design.writings]
    assert texts == ["*C1CC1", "C1CC1*"]  # the point first or last, not `C1(*)CC1`
    two = kept.scaffold("[*]c1ccc([*])cc1", tokenizer)  # one point inside at least
    inside = [sum(isinstance(s, Blank) for s in w[1:-1]) for w in two.writings]
    assert len(two.writings) > 1 and set(inside) == {1}
    for writing in design.writings:  # each writing, decorated, holds the scaffold
        assert kept.certified(design, "".join("O" if isinstance(s, Blank) else s for s in writing))
    sized = design.fitted(Blank(2, 3), 24)
    assert {b for w in sized.writings for b in w if isinstance(b, Blank)} == {Blank(2, 3)}
    assert kept.motif("C1CC1", tokenizer).writings == (tuple(split_smiles("C1CC1")),)
    assert not kept.edit("CCCO", 0.5, 0, tokenizer).writings  # an edit stays in place


def test_canvases_draw_a_layout_per_sample(tokenizer):
    design = kept.scaffold("c1ccc([*])cc1", tokenizer).fitted(None, 24)
    layouts = canvases(design, tokenizer, 24, 1, 0)
    canvas = Canvas.stacked([layouts(k, 0) for k in range(40)])
    assert canvas.ids.shape == (40, 24) and torch.equal(layouts(2, 0).ids, canvas.ids[2:3])
    # A sample is laid out again every LAYOUT_DRAWS draws, the same for the same draw.
    again = Canvas.stacked([layouts(k, LAYOUT_DRAWS) for k in range(40)])
    assert not torch.equal(again.ids, canvas.ids)
    same = Canvas.stacked([layouts(k, LAYOUT_DRAWS - 1) for k in range(40)])
    assert torch.equal(same.ids, canvas.ids)
    assert torch.equal(layouts(5, 2 * LAYOUT_DRAWS - 1).ids, again.ids[5:6])
    writings = {tuple(s for s in w if isinstance(s, str)) for w in design.writings}
    drawn, offsets = set(), set()
    for ids, keep in zip(canvas.ids.tolist(), canvas.kept.tolist(), strict=True):
        assert ids[0] == tokenizer.bos_id and keep[0]
        part = tuple(tokenizer.vocab[i] for i, k in zip(ids[1:], keep[1:], strict=True) if k)
        assert part in writings  # the kept tokens: one writing of the part, in order
        drawn.add(part)
        offsets.add(keep.index(True, 1))
        # The end is the model's to write: no <eos> or <pad> kept.
        kept_ids = {i for i, k in zip(ids, keep, strict=True) if k}
        assert not {tokenizer.eos_id, tokenizer.pad_id} & kept_ids
    assert len(drawn) == len(writings) and len(offsets) > 4


def test_ring_bonds_may_follow_each_aliphatic_atom_of_a_part(tokenizer):
    assert atom_ends(tuple(split_smiles("C1CC1"))) == {1, 2, 4}  # after an atom's labels
    assert atom_ends(tuple(split_smiles("C1(O)C12"))) == {1, 3, 7}
    assert atom_ends(tuple(split_smiles("c1cc[nH]c1C"))) == {7}  # not an aromatic atom
    design = kept.scaffold("[*]C1CC1", tokenizer).fitted(None, 24)
    layouts = canvases(design, tokenizer, 24, 1, 0)
    canvas = Canvas.stacked([layouts(k, 0) for k in range(64)])
    # A free position between two kept tokens of the part: a ring-bond label's place.
    inside = canvas.kept[:, :-2] & ~canvas.kept[:, 1:-1] & canvas.kept[:, 2:]
    assert 0 < int(inside.any(1).sum()) < 64


def test_scaffold_certified_by_substructure(tokenizer):
    design = kept.scaffold("c1ccc([*])cc1", tokenizer)
    assert kept.certified(design, "Cc1ccccc1") is True
    assert kept.certified(design, "c1ccccc1") is False  # the attachment point needs an atom
    assert kept.certified(design, "CC1CCCCC1") is False  # not the aromatic ring
    assert kept.certified(design, "c1ccc") is None  # invalid: certifies nothing


@pytest.mark.parametrize("numbered", ["[1*]c1ccccc1", "[*:1]c1ccccc1", "c1ccc([3*])cc1"])
def test_numbered_attachment_points_are_attachment_points(tokenizer, numbered):
    # As RDKit's fragmenters and REINVENT write them: kept 0.0 on every phenyl before.
    design = kept.scaffold(numbered, tokenizer)
    assert design == kept.scaffold("[*]c1ccccc1", tokenizer)
    assert kept.certified(design, "Cc1ccccc1") is True
    assert kept.certified(kept.motif(numbered, tokenizer), "OCc1ccccc1") is True


def test_a_fitted_design_too_long_names_its_kept_tokens_and_blanks(tokenizer):
    # It said "the kept part (23 tokens)" of 13 kept tokens and 5 blanks of up to 2 each.
    long = kept.edit("C" * 18, 0.3, 0, tokenizer)
    with pytest.raises(InputError, match=r"kept part \(13 tokens\) and its blanks \(up to 10\) "
                       r"cannot fit the model's length of 24 tokens \(22 between"):  # fmt: skip
        long.fitted(None, 24)


def test_an_unwritten_attachment_bond_is_the_decorations(tokenizer):
    single = kept.scaffold("[*]C1CC1", tokenizer)
    assert kept.certified(single, "O=C1CC1") and kept.certified(single, "OC1CC1")
    double = kept.scaffold("[*]=C1CC1", tokenizer)  # written: kept, and certified so
    assert double.segments[:2] == (Blank(1), "=")
    assert kept.certified(double, "O=C1CC1") and not kept.certified(double, "OC1CC1")


def test_link_puts_the_blank_between_the_fragments(tokenizer):
    design = kept.link("c1ccc([*])cc1", "[*]N1CCCC1", tokenizer)
    assert design.kept == {"fragment1": "*c1ccccc1", "fragment2": "*N1CCCC1"}
    smiles = written(design, "CC")
    # Ring label 1 is open where the second fragment goes in: it is written with label 2.
    assert Chem.MolToSmiles(Chem.MolFromSmiles(smiles)) == Chem.CanonSmiles("c1ccccc1CCN1CCCC1")
    assert kept.certified(design, smiles)
    assert not kept.certified(design, "c1ccccc1CC")  # one fragment alone
    assert kept.certified(design, "c1ccccc1CN1CCCC1")  # a linker of one atom
    assert not kept.certified(kept.link("C1CC1[*]", "[*]C1CC1", tokenizer), "C1CC1")  # one ring
    with pytest.raises(InputError, match="second fragment needs one attachment point"):
        kept.link("c1ccc([*])cc1", "N1CCCC1", tokenizer)


def test_relabelled_avoids_labels_held_open():
    assert kept.relabelled(list("c1ccccc1"), {"1"}) == list("c2ccccc2")
    assert kept.open_labels(split_smiles("c1ccc(")) == {"1"}


def test_motif_has_a_blank_each_side(tokenizer):
    design = kept.motif("C1CC1", tokenizer)
    assert design.segments[0] == Blank(0) and design.segments[-1] == Blank(0)
    assert kept.certified(design, "OCC1CC1N")
    assert not kept.certified(design, "CCCC")


def test_edit_remasks_the_same_positions_for_a_lead(tokenizer):
    one = kept.edit("CC(=O)Nc1ccc(O)cc1", 0.3, 0, tokenizer)
    again = kept.edit("OC1=CC=C(NC(C)=O)C=C1", 0.3, 0, tokenizer)  # the same molecule
    assert one.segments == again.segments
    assert one.kept["lead"] == "CC(=O)Nc1ccc(O)cc1"
    tokens = split_smiles(one.kept["lead"])
    assert len(one.blanks) == round(0.3 * len(tokens))
    assert one.kept["tokens"].count(kept.BLANK_TEXT) == len(one.blanks)
    assert kept.certified(one, one.kept["lead"])  # the lead keeps its own tokens
    other = kept.edit("CC(=O)Nc1ccc(O)cc1", 0.3, 0, tokenizer, 2)  # another round
    assert other.segments != one.segments
    with pytest.raises(InputError, match=r"--remask: expected a fraction in \(0, 1\]"):
        kept.edit("CCO", 0.0, 0, tokenizer)


def test_edit_certified_by_tokens_in_place(tokenizer):
    design = kept.edit("CCCO", 0.25, 0, tokenizer)
    blank = design.segments.index(Blank(1, 2))  # a re-masked token: one or two tokens
    for fill in ("N", "NC"):
        tokens = [fill if k == blank else t for k, t in enumerate(design.segments)]
        assert kept.certified(design, "".join(tokens))
    tokens = ["NCC" if k == blank else t for k, t in enumerate(design.segments)]
    assert kept.certified(design, "".join(tokens)) is False  # three tokens where two fit
    moved = "".join(reversed(split_smiles("CCCO")))  # OCCC: the kept tokens out of place
    assert kept.certified(design, moved) is False


def test_edit_remasks_a_named_fragment(tokenizer):
    hydroxy = kept.read_fragment("[OX2H]")
    design = kept.edit("OC1=CC=C(NC(C)=O)C=C1", 0.3, 0, tokenizer, fragment=hydroxy)
    assert design.kept == {"lead": "CC(=O)Nc1ccc(O)cc1", "tokens": "CC(=O)Nc1ccc(_)cc1"}
    ring = kept.edit("CC(=O)Nc1ccc(O)cc1", 0.3, 0, tokenizer, fragment=kept.read_fragment("a"))
    assert ring.kept["tokens"] == "CC(=O)N_1___(O)__1"  # every aromatic atom's token
    with pytest.raises(InputError, match="--fragment: no match in the lead CCO"):
        kept.edit("CCO", 0.3, 0, tokenizer, fragment=kept.read_fragment("c"))
    with pytest.raises(InputError, match="--fragment: RDKit cannot parse the SMARTS"):
        kept.read_fragment("C(")


def test_laid_out_reads_blanks_of_their_range():
    segments = ("C", Blank(1, 2), "O", Blank(0, 1))
    assert kept.laid_out(segments, list("CNO"))
    assert kept.laid_out(segments, list("CNNOC"))
    assert not kept.laid_out(segments, list("CO"))
    assert not kept.laid_out(segments, list("CNNNO"))
    assert not kept.laid_out(segments, list("CNOCC"))


@pytest.mark.parametrize(
    ("smiles", "message"),
    [
        ("c1ccc", "scaffold: RDKit cannot parse 'c1ccc'"),
        ("", "scaffold: empty SMILES"),
        ("c1ccccc1", r"no attachment point \[\*\]"),
        ("C[*]C", "must be bonded to one atom, this one is bonded to 2"),
        ("S[*]", "token 'S' at an attachment point is not in the model's vocabulary"),
        ("[*]CCCl", "token 'Cl' is not in the model's vocabulary"),
    ],
)
def test_bad_scaffolds_refused(tokenizer, smiles, message):
    with pytest.raises(InputError, match=message):
        kept.scaffold(smiles, tokenizer)


def test_fitted_sizes_blanks_to_the_model_length(tokenizer):
    design = kept.scaffold("[*]c1ccc([*])cc1", tokenizer)  # 10 kept tokens
    assert design.fitted(None, 24).blanks == [Blank(1, 6), Blank(1, 6)]  # (24-2-10)//2
    assert design.fitted(None, 100).blanks == [Blank(1, 8), Blank(1, 8)]
    assert design.fitted(Blank(2, 3), 24).blanks == [Blank(2, 3), Blank(2, 3)]
    with pytest.raises(InputError, match="--blank 1-7: 2 blank"):
        design.fitted(Blank(1, 7), 24)
    with pytest.raises(InputError, match=r"kept part \(10 tokens\) leaves no room"):
        design.fitted(None, 12)
    motif = kept.motif("C1CC1", tokenizer).fitted(None, 24)
    assert motif.blanks == [Blank(0, 8), Blank(0, 8)]


@pytest.mark.parametrize("text", ["x", "0-3", "4-2", "1-", "-1"])
def test_bad_blank_ranges_refused(text):
    with pytest.raises(InputError, match="--blank"):
        kept.parse_blank(text)


def test_blank_range_read():
    assert kept.parse_blank("2-5") == Blank(2, 5)
    assert kept.parse_blank("3") == Blank(3, 3)


def test_kept_constraint_judges_by_the_prompts_design(tokenizer):
    scaffold = kept.scaffold("c1ccc([*])cc1", tokenizer)
    constraint = KeptConstraint(design=scaffold).with_prompt("", 0)
    assert constraint.judge(["Cc1ccccc1", "CCO", "c1cc"]) == [1.0, 0.0, None]
    assert [constraint.satisfied(v) for v in (1.0, 0.0, None)] == [True, False, False]
    a, b = (kept.edit(s, 0.5, 0, tokenizer) for s in ("CCCO", "CCCN"))
    edits = KeptConstraint(design=a, by_prompt={"CCCO": a, "CCCN": b})
    told = edits.with_prompt("CCCN", 0)
    assert told.design is b and told.judge_name == "kept-tokens"
    assert told.judge(["CCCN"]) == [1.0]


# The command, on a tiny random model over the shipped QM9 vocabulary (tests/conftest.py).

runner = CliRunner()
TEMPLATE = re.compile(SMILES_PATTERN.pattern[:-1] + "|_)")  # an edit's tokens, "_" re-masked
# Independent of the kept constraint's queries: SMARTS written by hand.
BENZENE_PLUS_ONE = Chem.MolFromSmarts("*-,=c1ccccc1")


def in_a_writing(design: kept.Design, text: str) -> bool:
    """Whether `text`'s tokens are one of the part's writings, in order, each attachment
    point a token or more, each atom perhaps a ring-bond label more, anything before and
    after it."""
    anything = Blank(0, len(text))

    def layout(writing: tuple) -> list:
        ends, laid = atom_ends(writing), [anything]
        for k, segment in enumerate(writing):
            laid.append(Blank(1, len(text)) if isinstance(segment, Blank) else segment)
            laid += [Blank(0, 1)] if k in ends else []  # a ring bond's label, or nothing
        return [*laid, anything]

    return any(kept.laid_out(layout(w), split_smiles(text)) for w in design.writings)


def design(model: Path, *args: str) -> tuple[int, list[dict], str]:
    result = runner.invoke(app, ["design", "--model", str(model), "--quiet", *args])
    records = [json.loads(line) for line in result.stdout.splitlines()]
    return result.exit_code, records, result.stderr


@pytest.mark.slow
def test_scaffold_records_say_what_was_kept_and_certify_it(shipped_vocab_model_dir, tokenizer):
    code, records, _ = design(shipped_vocab_model_dir, "--scaffold", "c1ccc([*])cc1", "-n", "6")
    assert len(records) == 6 and code in (0, 3)
    for r in records:
        assert r["kept"] == {"scaffold": "*c1ccccc1"}
        assert r["prompt"] == "scaffold *c1ccccc1, blanks 1-8"
        assert in_a_writing(kept.scaffold("c1ccc([*])cc1", tokenizer), r["text"]), r["text"]
        judged = r["constraints"]["kept"]
        assert judged["judge"] == "rdkit-substructure"
        mol = Chem.MolFromSmiles(r["text"]) if r["valid"] else None
        expected = None if mol is None else float(mol.HasSubstructMatch(BENZENE_PLUS_ONE))
        assert judged["value"] == expected, r["text"]
        assert r["satisfied"] is (expected == 1.0)
    assert code == (0 if all(r["satisfied"] for r in records) else 3)


def test_a_method_the_run_names_runs_as_named(shipped_vocab_model_dir, tmp_path):
    # A part kept anywhere, its only constraint, is drawn by rejection against the kept
    # judge where the run names no method; a method named by --method or the spec file runs
    # as named: unconstrained draws each sample once, its record saying where it broke.
    args = ["--scaffold", "[*]C1CC1", "-n", "4", "--seed", "1", "--steps", "4"]
    unnamed = tmp_path / "unnamed.yaml"
    unnamed.write_text("sampling:\n  batch_size: 4\n")
    for given in ([], ["--spec", str(unnamed)]):
        _, records, stderr = design(shipped_vocab_model_dir, *args, *given)
        assert [r["method"] for r in records] == ["reject"] * 4, stderr
    named = tmp_path / "named.yaml"
    named.write_text("method: unconstrained\n")
    for given in (["--method", "unconstrained"], ["--spec", str(named)]):
        code, records, stderr = design(shipped_vocab_model_dir, *args, *given)
        assert [r["method"] for r in records] == ["unconstrained"] * 4, stderr
        assert all(r["attempts"] == 1 for r in records)
        for r in records:
            assert r["satisfied"] is (r["constraints"]["kept"]["value"] == 1.0)
        assert code == (0 if all(r["satisfied"] for r in records) else 3)


def test_a_link_alone_is_drawn_by_rejection_against_its_kept_part(shipped_vocab_model_dir):
    # A linker may open a branch or ring the kept tokens do not close: drawn once, 6 of 16
    # links of the README's example were invalid; drawn again, as a scaffold is, none.
    args = ["--link", "C1CC1[*]", "[*]c1ccoc1", "-n", "6", "--blank", "1-4", "--steps", "8"]
    code, records, stderr = design(shipped_vocab_model_dir, *args)
    assert [r["method"] for r in records] == ["reject"] * 6, stderr
    assert any(r["attempts"] > 1 for r in records)  # some fill broke the part and was redrawn
    for r in records:
        assert r["satisfied"] is (r["constraints"]["kept"]["value"] == 1.0)
    assert code == (0 if all(r["satisfied"] for r in records) else 3)
    _, edits, _ = design(shipped_vocab_model_dir, "--edit", "CCOC(C)=O", "-n", "2", "--steps", "4")
    assert [r["method"] for r in edits] == ["unconstrained"] * 2  # an edit keeps no part


@pytest.mark.slow
def test_design_records_do_not_depend_on_the_batch(shipped_vocab_model_dir):
    args = ["--motif", "C1CC1", "-n", "5", "--seed", "3"]
    _, one, _ = design(shipped_vocab_model_dir, *args, "--batch-size", "1")
    _, three, _ = design(shipped_vocab_model_dir, *args, "--batch-size", "3")
    # By id: a run that redraws (rejection against the kept judge) writes records as they
    # finish, which may differ by batch; the records may not.
    by_id = lambda records: sorted((r["id"], r["text"]) for r in records)  # noqa: E731
    assert by_id(one) == by_id(three)
    assert len({len(r["text"]) for r in one}) > 1  # blank lengths drawn per sample


def test_link_keeps_both_fragments(shipped_vocab_model_dir):
    _, records, _ = design(
        shipped_vocab_model_dir, "--link", "C1CC1[*]", "[*]c1ccoc1", "-n", "4", "--blank", "2-3"
    )
    assert len(records) == 4
    for r in records:
        assert r["kept"] == {"fragment1": "*C1CC1", "fragment2": "*c1ccoc1"}
        assert r["text"].startswith("C1(") and r["text"].endswith("c2ccoc2)CC1")


@pytest.mark.slow
def test_motif_under_sa_with_per_sample_canvases(shipped_vocab_model_dir, tokenizer):
    # The flip search decodes some rows of a pass: a canvas of a row per sample must not
    # be pinned onto them (a shape error before).
    code, records, _ = design(
        shipped_vocab_model_dir, "--motif", "C1CC1", "-n", "4", "-c", "sa", "--tau", "3.5"
    )
    assert len(records) == 4 and code in (0, 3)
    for r in records:
        assert in_a_writing(kept.motif("C1CC1", tokenizer), r["text"]), r["text"]
        assert set(r["constraints"]) == {"sa", "kept"}


def test_edit_rounds_write_the_last_round(shipped_vocab_model_dir, tmp_path):
    leads = tmp_path / "leads.smi"
    leads.write_text("# two leads\nCC(=O)Nc1ccc(O)cc1 paracetamol\nOCC1CC1\n")
    _, records, stderr = design(
        shipped_vocab_model_dir, "--edit", str(leads), "--remask", "0.25", "--rounds", "2",
        "-n", "3", "--threads", "1",
    )  # fmt: skip
    assert [r["id"] for r in records] == ["0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]
    assert [r["prompt_id"] for r in records] == ["CC(=O)Nc1ccc(O)cc1"] * 3 + ["OCC1CC1"] * 3
    assert "round 1: 6 molecules" in stderr
    for r in records:
        assert r["kept"] == {"remask": 0.25, "round": 2, "rounds": 2}
        assert r["constraints"]["kept"]["judge"] == "kept-tokens"
        template = TEMPLATE.findall(r["prompt"].split("tokens ")[1])
        segments = [Blank(1, 2) if t == "_" else t for t in template]
        laid_out = kept.laid_out(segments, split_smiles(r["text"]))
        assert r["constraints"]["kept"]["value"] == (float(laid_out) if r["valid"] else None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scaffold", "c1ccc"], "scaffold: RDKit cannot parse 'c1ccc'"),
        (["--scaffold", "C[*]", "--motif", "CC"], "(got --scaffold and --motif)"),
        ([], "give one of --scaffold, --link, --motif, --edit (got none)"),
        (["--scaffold", "ClC[*]"], "token 'Cl' is not in the model's vocabulary"),
        (["--scaffold", "[*]" + "C" * 30], "cannot fit the model's length of 24 tokens"),
        (["--scaffold", "C[*]", "--blank", "0-3"], "--blank: expected 1 <= MIN <= MAX"),
        (["--scaffold", "C[*]", "--blank", "1-40"], "--blank 1-40: 1 blank(s) of up to 40"),
        (["--edit", "CCO", "--remask", "1.5"], "--remask: expected a fraction in (0, 1]"),
        (["--edit", "CCO", "--rounds", "0"], "--rounds: expected a positive integer"),
        (["--edit", "CCO", "--blank", "1-2"], "--blank: an edit's blanks are the tokens"),
        (["--link", "C[*]", "CC"], "the second fragment needs one attachment point"),
        (["--scaffold", "C[*]", "--fragment", "O"], "--fragment re-masks a lead's atoms"),
        (["--motif", "CC", "--remask", "0.3"], "--remask re-masks a fraction of a lead's tokens"),
        (["--scaffold", "C[*]", "--rounds", "2"], "--rounds edits a lead round after round"),
        (["--link", "C[*]", "[*]C", "--rounds", "1"], "give --edit (not --link)"),
        (["--edit", "CCO", "--remask", "0.5", "--fragment", "O"], "or --fragment, not both"),
        (["--scaffold", "[*][*]"], "scaffold: '[*][*]' has no atom to keep"),
        (["--motif", "[*]"], "motif: '[*]' has no atom to keep"),
        (["--edit", "CCO", "--fragment", "c"], "--fragment: no match in the lead CCO"),
        # A leads file's name mistyped was read as a SMILES: "RDKit cannot parse 'leds.smi'".
        (["--edit", "leds.smi"], "--edit leds.smi: no such file, and RDKit cannot parse it"),
    ],
)
def test_bad_designs_are_one_line_and_exit_2(shipped_vocab_model_dir, args, message):
    code, records, stderr = design(shipped_vocab_model_dir, *args)
    assert code == 2 and records == []
    (line,) = stderr.strip().splitlines()
    assert line.startswith("cdd: error: ") and message in line, line


@pytest.mark.slow
def test_a_masked_model_keeps_the_parts_too(masked_model_dir, tokenizer):
    code, records, _ = design(masked_model_dir, "--scaffold", "[*]C1CC1", "-n", "3")
    assert len(records) == 3 and code in (0, 3)
    # A masked model's `<eos>` drawn before the part ends the text there (an invalid
    # record, never satisfied): the valid ones show the part in one of its writings.
    for r in records:
        if r["valid"]:
            assert in_a_writing(kept.scaffold("[*]C1CC1", tokenizer), r["text"]), r["text"]
        assert r["satisfied"] is (r["constraints"]["kept"]["value"] == 1.0)


@pytest.mark.slow
def test_a_design_run_resumes_and_refuses_other_blanks(shipped_vocab_model_dir, tmp_path):
    out = str(tmp_path / "parts.jsonl")
    args = ["--scaffold", "[*]C1CC1", "-n", "3", "-o", out]
    assert design(shipped_vocab_model_dir, *args)[0] in (0, 3)
    code, _, stderr = design(shipped_vocab_model_dir, *args, "--resume")
    assert code in (0, 3), stderr
    assert len(Path(out).read_text().splitlines()) == 3
    code, _, stderr = design(shipped_vocab_model_dir, *args, "--blank", "2-3", "--resume")
    assert code == 2, stderr
    assert len(Path(out).read_text().splitlines()) == 3


@pytest.mark.slow
def test_edit_records_say_whether_they_are_the_lead_and_rewrote_the_fragment(
    shipped_vocab_model_dir,
):
    # An edit may write its lead again, or keep the fragment it re-masked: both said.
    hydroxyl = Chem.MolFromSmarts("[OX2H]")
    _, records, _ = design(shipped_vocab_model_dir, "--edit", "CC(=O)C(C)O", "--fragment",
                           "[OX2H]", "-n", "8", "--steps", "4")  # fmt: skip
    assert len(records) == 8
    for r in records:
        mol = Chem.MolFromSmiles(r["text"]) if r["valid"] else None
        assert r["same_as_lead"] == (None if mol is None else r["canonical"] == "CC(=O)C(C)O")
        assert r["fragment_rewritten"] == (
            None if mol is None else not mol.HasSubstructMatch(hydroxyl)
        )
    _, records, _ = design(shipped_vocab_model_dir, "--edit", "CCO", "-n", "2", "--steps", "4")
    assert "same_as_lead" in records[0] and "fragment_rewritten" not in records[0]
    _, records, _ = design(shipped_vocab_model_dir, "--motif", "CC", "-n", "1", "--steps", "4")
    assert "same_as_lead" not in records[0]


def test_an_opened_canvas_keeps_nothing_in_the_rows_drawn_whole():
    ids = torch.tensor([[0, 5, 6, 2], [0, 7, 2, 2]])
    kept = torch.tensor([[True, True, True, False], [True, False, True, False]])
    opened = Canvas(ids, kept).opened(torch.tensor([False, True]))
    assert opened.kept.tolist() == [[True, True, True, False], [False] * 4]
    shared = Canvas(ids[:1], kept[:1]).opened(torch.tensor([True, False, True]))
    assert shared.kept.tolist() == [[False] * 4, [True, True, True, False], [False] * 4]


def test_a_samples_first_draws_are_drawn_whole_then_on_its_canvas():
    from cdd_cli.run.drawing import Draw, drawn_on

    canvas = Canvas(torch.tensor([[0, 5, 2], [0, 6, 2]]), torch.ones(2, 3, dtype=torch.bool))
    draws = [Draw(index=1, attempts=0), Draw(index=0, attempts=2), Draw(index=1, attempts=1)]
    drawn = drawn_on(canvas, draws, 2)
    assert drawn.kept.tolist() == [[False] * 3, [True] * 3, [False] * 3]
    assert drawn.ids[1].tolist() == [0, 5, 2]  # sample 0's own canvas from its third draw


def heldout_dir(tmp_path: Path, smiles: list[str]) -> Path:
    from cdd_cli.evaluate.reference import write_smiles

    tmp_path.mkdir(exist_ok=True)
    write_smiles(tmp_path / "heldout.smi.gz", smiles, "tests")
    return tmp_path


def test_own_draws_where_the_models_molecules_often_hold_the_part(tokenizer, tmp_path):
    from cdd_cli.run.designs import OWN_DRAWS, own_draws

    # A quarter of the held-out molecules hold a cyclopropyl (QM9's share), none benzene.
    folder = heldout_dir(tmp_path, ["CC1CC1", "CCO", "CCN", "OCC=O"] * 30)
    assert own_draws(kept.scaffold("[*]C1CC1", tokenizer), folder) == OWN_DRAWS
    assert own_draws(kept.motif("C1CC1", tokenizer), folder) == OWN_DRAWS
    assert own_draws(kept.scaffold("c1ccc([*])cc1", tokenizer), folder) == 0
    # A link is laid out whole (its two parts are rarely written by chance), an edit too.
    assert own_draws(kept.link("C1CC1[*]", "[*]CO", tokenizer), folder) == 0
    assert own_draws(kept.scaffold("[*]C1CC1", tokenizer), tmp_path / "none") == 0  # no file
    rare = heldout_dir(tmp_path / "rare", ["CC1CC1"] + ["CCO"] * 19)  # 5%
    assert own_draws(kept.scaffold("[*]C1CC1", tokenizer), rare) == 0


def test_a_common_part_is_first_drawn_whole_as_the_model_writes(tokenizer):
    # A quarter of QM9's held-out molecules hold a cyclopropyl: a sample's first draws are
    # the shipped model's own molecules (the generator of `cdd molecules`' sample and
    # attempt), kept where they hold it; the rest are drawn on the sample's layout.
    args = ["--model", str(QM9), "-n", "12", "--seed", "1", "--steps", "8", "--quiet"]
    result = runner.invoke(app, ["design", "--scaffold", "[*]C1CC1", *args])
    designed = {r["id"]: r for r in map(json.loads, result.stdout.splitlines())}
    result = runner.invoke(app, ["molecules", "--method", "unconstrained", *args])
    own = {r["id"]: r["text"] for r in map(json.loads, result.stdout.splitlines())}
    first = [k for k, r in designed.items() if r["attempts"] == 1]
    assert first and all(designed[k]["text"] == own[k] for k in first)
    assert all(r["satisfied"] for r in designed.values())
    design = kept.scaffold("[*]C1CC1", tokenizer)
    assert any(r["attempts"] > 1 for r in designed.values())  # the others drawn again
    # Under one draw a sample is drawn on its layout (the last draw allowed always is).
    once = ["design", "--scaffold", "[*]C1CC1", "--method", "unconstrained", *args]
    result = runner.invoke(app, once)
    once = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(once) == 12 and all(in_a_writing(design, r["text"]) for r in once)
