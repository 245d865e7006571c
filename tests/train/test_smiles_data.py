"""`cdd train molecules --data`: a user's SMILES file, MOSES from the molsets wheel."""

from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path

import pytest
from rdkit import Chem
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.errors import InputError
from cdd_cli.evaluate.reference import MAX_SMILES_CHARS, read_smiles
from cdd_cli.train.smiles_data import (
    MOSES_TRAIN,
    locate_moses,
    molecule_data,
    read_moses,
    read_smiles_file,
)

MOSES_WHEEL = Path("/tmp/mol/molsets-0.3.1-py3-none-any.whl")


def hundred_smiles() -> list[str]:
    """100 distinct, readable SMILES: chains, rings and heteroatoms."""
    tails = ["", "O", "N", "Cl", "C(=O)O", "c1ccccc1", "C1CC1", "OC", "C#N", "F"]
    return [f"{'C' * (i + 1)}{tail}" for i in range(10) for tail in tails]


def test_a_smiles_file_counts_its_bad_lines_and_canonicalises(tmp_path: Path):
    path = tmp_path / "library.smi"
    lines = ["OCC name-1", "CCO", "", "C[C@H](O)N", "not-a-smiles", "C" * (MAX_SMILES_CHARS + 1)]
    lines.insert(0, "# a comment, not a molecule")
    path.write_text("\n".join(lines) + "\n")
    read = read_smiles_file(path)
    assert read.smiles == ["CCO", "CC(N)O"]
    assert (read.lines, read.empty, read.unparsable, read.too_long) == (6, 1, 1, 1)
    summary = read.bad_summary("library.smi")
    assert summary.startswith("3 of 6 lines of library.smi: 1 unparsable, 1 empty, 1 over 2,000")


def test_a_csv_is_read_by_its_smiles_column_else_its_first(tmp_path: Path):
    named = tmp_path / "named.csv.gz"
    with gzip.open(named, "wt") as f:
        f.write('id,SMILES,score\n1,CCO,0.5\n2,"c1ccccc1",0.1\n3,,0\n')
    read = read_smiles_file(named)
    assert read.smiles == ["CCO", "c1ccccc1"] and read.empty == 1
    bare = tmp_path / "bare.csv"
    bare.write_text("CCN,1\nCCCl,2\n")
    assert read_smiles_file(bare).smiles == ["CCN", "CCCl"]


def fake_molsets_wheel(path: Path, smiles: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(MOSES_TRAIN, gzip.compress(("SMILES\n" + "\n".join(smiles)).encode()))
    return path


def test_moses_is_read_by_path_from_a_wheel_or_folder(tmp_path: Path):
    wheel = fake_molsets_wheel(tmp_path / "molsets-0.3.1-py3-none-any.whl", ["OCC", "c1ccncc1"])
    data = molecule_data(str(wheel), None)
    assert (data.name, data.source) == ("MOSES", "molsets-0.3.1")
    assert data.read().smiles == ["CCO", "c1ccncc1"]
    folder = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(folder)
    assert read_moses(locate_moses(folder)).smiles == ["CCO", "c1ccncc1"]


def test_missing_data_is_one_line_naming_what_to_do(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(InputError, match=r"pip download --no-deps molsets==0\.3\.1"):
        molecule_data("moses", None)
    with pytest.raises(InputError, match="not qm9, moses, or an existing file"):
        molecule_data(str(tmp_path / "absent.smi"), None)
    (tmp_path / "x.sdf").write_text("")
    with pytest.raises(InputError, match="not a SMILES file"):
        molecule_data(str(tmp_path / "x.sdf"), None)
    with pytest.raises(InputError, match=r"--qm9 is for --data qm9, not --data x\.sdf"):
        molecule_data("x.sdf", tmp_path)


@pytest.mark.skipif(not MOSES_WHEEL.is_file(), reason=f"no molsets wheel at {MOSES_WHEEL}")
def test_the_real_molsets_wheel_is_located_and_holds_moses_train_set():
    assert locate_moses(MOSES_WHEEL) == MOSES_WHEEL
    with zipfile.ZipFile(MOSES_WHEEL) as wheel, gzip.open(wheel.open(MOSES_TRAIN)) as f:
        assert f.readline().strip() == b"SMILES"


TINY = ["--hidden-dim", "32", "--n-blocks", "1", "--n-heads", "2", "--cond-dim", "16"]


@pytest.mark.slow
def test_train_on_a_100_line_smiles_file_then_sample(tmp_path: Path):
    library = tmp_path / "library.smi"
    library.write_text("\n".join([*hundred_smiles()[:98], "", "not-a-smiles"]) + "\n")
    out = tmp_path / "run"
    args = ["train", "molecules", "--data", str(library), "--out", str(out), *TINY]
    args += ["--batch-size", "16", "--eval-every", "10", "--save-every", "10"]
    args += ["--sample-steps", "4", "--device", "cpu", "--quiet"]
    runner = CliRunner()
    result = runner.invoke(app, [*args, "--max-steps", "20"])
    assert result.exit_code == 0, result.stderr
    assert "skipped 2 of 100 lines of library.smi: 1 unparsable, 1 empty" in result.stderr
    assert "final validity over 1,000 samples" in result.stderr
    config = json.loads((out / "config.json").read_text())
    longest = max(len(s) for s in hundred_smiles()[:98])  # one character a token here
    assert config["model_length"] == longest + 2
    assert config["training_data"] == "library.smi" and config["training_steps"] == 20
    header, train = read_smiles(out / "reference.smi.gz")
    held_out = read_smiles(out / "heldout.smi.gz")[1]
    assert str(tmp_path) not in header and len(train) + len(held_out) == 98
    # Run again with more steps: it resumes, at the length it chose.
    result = runner.invoke(app, [*args, "--max-steps", "22"])
    assert result.exit_code == 0, result.stderr
    assert "resuming" in result.stderr
    assert json.loads((out / "config.json").read_text())["model_length"] == longest + 2
    assert json.loads((out / "train_state.json").read_text())["step"] == 22
    sampled = runner.invoke(app, ["molecules", "--model", str(out), "-n", "4", "--quiet"])
    assert sampled.exit_code == 0, sampled.stderr
    assert len(sampled.stdout.splitlines()) == 4


@pytest.mark.slow
def test_train_selfies_then_sample_and_refuse_what_needs_smiles(tmp_path: Path):
    library = tmp_path / "library.smi"
    library.write_text("\n".join(hundred_smiles()) + "\n")
    out = tmp_path / "run"
    args = ["train", "molecules", "--data", str(library), "--out", str(out), *TINY]
    args += ["--batch-size", "16", "--eval-every", "10", "--save-every", "10"]
    args += ["--sample-steps", "4", "--device", "cpu", "--quiet", "--noise", "masked"]
    runner = CliRunner()
    result = runner.invoke(app, [*args, "--max-steps", "20", "--representation", "selfies"])
    assert result.exit_code == 0, result.stderr
    assert json.loads((out / "tokenizer.json").read_text())["type"] == "selfies"
    assert json.loads((out / "config.json").read_text())["tokenizer"] == "selfies"
    # The run is resumed with its own representation only.
    again = runner.invoke(app, [*args, "--max-steps", "22"])
    assert again.exit_code == 2 and "resume it with its own --representation" in again.stderr
    sampled = runner.invoke(
        app, ["molecules", "--model", str(out), "-n", "6", "--quiet", "--method", "unconstrained"]
    )
    assert sampled.exit_code == 0, sampled.stderr
    records = [json.loads(line) for line in sampled.stdout.splitlines()]
    assert len(records) == 6
    for record in records:  # what a record says of its SMILES, RDKit says too
        assert record["valid"] == (Chem.MolFromSmiles(record["text"] or "?") is not None)
        assert record["text"] != "?"  # no special is drawn out of its place
    spec = tmp_path / "spec.yaml"
    spec.write_text("sampling: {decode: well-formed}\n")
    refused = runner.invoke(app, ["molecules", "--model", str(out), "--spec", str(spec)])
    assert refused.exit_code == 2 and "SELFIES is read plain" in refused.stderr
    design = runner.invoke(app, ["design", "--model", str(out), "--scaffold", "[*]C1CC1"])
    assert design.exit_code == 2 and "parts are kept as SMILES tokens" in design.stderr
