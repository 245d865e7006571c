"""The shipped drug-sized models, `moses-mdlm` (SMILES) and `moses-selfies`: listed, not a
default, their files within the size limit, and each its own SA and property surrogates chosen
for it (they read its tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.constraints.surrogates import default_surrogate
from cdd_cli.models import registry
from cdd_cli.models.tokenizers import load_tokenizer

runner = CliRunner()
ASSETS = registry.ASSETS
# Each drug-sized model -> its SA and property surrogates.
MODELS = {
    "moses-mdlm": ("moses-sa-surrogate", "moses-property-surrogate"),
    "moses-selfies": ("moses-selfies-sa-surrogate", "moses-selfies-property-surrogate"),
}
FOLDERS = tuple(folder for model, both in MODELS.items() for folder in (model, *both))
LIMIT_MB = 30


@pytest.mark.parametrize("model", MODELS)
def test_the_drug_sized_models_are_shipped_but_are_no_default(model: str):
    assert registry.SHIPPED[model] == model
    assert registry.resolve_directory(registry.DEFAULT_FOR["molecules"]).name == "qm9-udlm"
    listed = json.loads(runner.invoke(app, ["models", "ls", "--json"]).stdout)
    rows = {row["name"]: row for row in listed}
    assert rows[model]["kind"] == "diffusion model"
    for surrogate in MODELS[model]:
        assert rows[surrogate]["kind"] == "surrogate"


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_drug_sized_asset_file_is_within_the_limit_and_has_a_card(folder: str):
    files = list((ASSETS / folder).iterdir())
    assert ASSETS / folder / "MODEL_CARD.md" in files
    assert [f.name for f in files if f.stat().st_size > LIMIT_MB * 1_000_000] == []


@pytest.mark.parametrize("model", MODELS)
def test_the_models_config_names_surrogates_that_read_its_tokens_and_length(model: str):
    # The config is the trainer's export plus `surrogates`: a newer export copied over it
    # must keep that key, or `-c sa` falls back to the QM9 surrogate and is refused.
    config = json.loads((ASSETS / model / "config.json").read_text())
    sa, properties = MODELS[model]
    assert config["surrogates"] == {"sa": f"../{sa}", "properties": f"../{properties}"}
    tokenizer = load_tokenizer(ASSETS / model)
    for folder in config["surrogates"].values():
        surrogate = ASSETS / model / folder
        theirs = load_tokenizer(surrogate)
        assert (theirs.kind, theirs.vocab) == (tokenizer.kind, tokenizer.vocab)
        surrogate_config = json.loads((surrogate / "config.json").read_text())
        assert surrogate_config["max_length"] >= config["model_length"]
        assert surrogate_config["trained_for"] == model


@pytest.mark.parametrize("model", MODELS)
def test_constraints_on_a_drug_sized_model_default_to_its_own_surrogates(model: str):
    loaded = registry.load(model, "molecules", weights=False)
    sa, properties = MODELS[model]
    assert default_surrogate("sa", loaded) == ASSETS / sa
    assert default_surrogate("properties", loaded) == ASSETS / properties
    qm9 = registry.load(None, "molecules", weights=False)
    assert default_surrogate("sa", qm9) == ASSETS / "qm9-sa-surrogate"


@pytest.mark.slow
def test_sa_and_qed_records_of_moses_mdlm_are_certified_by_rdkit(tmp_path: Path):
    from rdkit import Chem
    from rdkit.Chem import QED
    from rdkit.Contrib.SA_Score import sascorer

    out = tmp_path / "out.jsonl"
    args = ["molecules", "--model", "moses-mdlm", "-n", "2", "--steps", "4", "-q", "-o", str(out)]
    result = runner.invoke(app, [*args, "-c", "sa", "--tau", "3.0", "-c", "qed", "--tau", "0.6"])
    assert result.exit_code in (0, 3), result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["model"] == "moses-mdlm"
        if record["satisfied"]:
            mol = Chem.MolFromSmiles(record["text"])
            assert sascorer.calculateScore(mol) <= 3.0 and QED.qed(mol) >= 0.6


def moses_table():
    """bench/moses_table.py as a module (bench/ is no package)."""
    import importlib.util

    where = Path(__file__).resolve().parents[2] / "bench" / "moses_table.py"
    spec = importlib.util.spec_from_file_location("moses_table", where)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_moses_tables_rows_are_judged_again_by_rdkit():
    from cdd_cli.constraints.descriptor import ConstraintSpec
    from cdd_cli.spec.entries import check_constraint

    bench = moses_table()
    for row, (_, entries) in bench.ROWS.items():
        for kind, options in entries:
            check_constraint(ConstraintSpec(kind, dict(options), row))  # a valid entry
    acetanilide, benzene = "CC(=O)Nc1ccccc1", "c1ccccc1"
    amide = bench.rdkit_violation("amide", frozenset())
    assert [amide(s) for s in (acetanilide, benzene, "C(", "")] == [False, True, True, True]
    assert not bench.rdkit_violation("unconstrained", frozenset())("C(")
    assert bench.rdkit_violation("qed", frozenset())(benzene)  # QED 0.44
    sa = bench.rdkit_violation("sa", frozenset())
    assert [sa(acetanilide), sa("CC12CC3(C)CC(C1)(C3)C2")] == [False, True]  # SA 1.1, 4.9
    # logP in [1, 3] and novel: known, or earlier in the same row, violates.
    novel = bench.rdkit_violation("logp-novel", frozenset({"CCc1ccccc1"}))
    toluene = "Cc1ccccc1"  # logP 2.3
    assert [novel(s) for s in ("CCc1ccccc1", toluene, toluene, "CCO")] == [True, False, True, True]


def test_the_moses_table_prints_cdds_rows_then_the_baselines():
    bench = moses_table()
    row = {"label": "unconstrained", "valid": 0.5, "unique@1000": 1.0, "samples": 4}
    row |= {"violations": None, "seconds_per_molecule": 0.25, "seconds_per_satisfying": None}
    lines = bench.table([row]).splitlines()
    assert lines[0].startswith("| row | valid | unique@1000 |")
    assert lines[2].startswith("| unconstrained | 0.500 | 1.000 | - |")
    assert lines[3].startswith("| MOSES Train | 1.000 |")
    assert any(line.startswith("| MOSES CharRNN | 0.975 |") for line in lines)
    assert lines[-1].startswith("Baselines: MOSES (Polykovskiy et al.")
