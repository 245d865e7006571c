"""The `alerts` constraint: RDKit's FilterCatalog families and MOSES' MCF as an exact judge,
its spec keys, and records RDKit agrees with."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from rdkit import Chem
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.constraints import table
from cdd_cli.constraints.alerts import (
    DEFAULT_FILTERS,
    FAMILIES,
    MCF_FILE,
    AlertsConstraint,
    alerts_of,
    mcf_patterns,
)
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.properties import LipinskiConstraint, PainsConstraint
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.errors import InputError
from cdd_cli.models import registry
from cdd_cli.spec.entries import check_constraint, constraint_from_flags

runner = CliRunner()
PEROXIDE = "OOCC1=CCCCC1"  # written by the README's API example; passes PAINS and Lipinski
IBUPROFEN = "CC(C)Cc1ccc(cc1)C(C)C(=O)O"


def test_the_readme_peroxide_is_refused_by_the_default_set_though_pains_and_lipinski_pass():
    assert PainsConstraint().accepts(PEROXIDE) and LipinskiConstraint(tau=0).accepts(PEROXIDE)
    alerts = AlertsConstraint()
    assert alerts.filters == DEFAULT_FILTERS == ("pains", "brenk", "mcf")
    assert not alerts.accepts(PEROXIDE)
    assert "brenk:peroxide" in alerts.explain(PEROXIDE)
    # Each of RDKit's other drug-likeness families flags it too; PAINS and MCF do not.
    for family in ("brenk", "nih", "zinc"):
        assert alerts_of(PEROXIDE, (family,)), family
    assert alerts_of(PEROXIDE, ("pains",)) == () and alerts_of(PEROXIDE, ("mcf",)) == ()


def test_the_judge_counts_alerts_and_names_them():
    alerts = AlertsConstraint(filters=("brenk", "mcf"))
    # Acetaldehyde: Brenk's aldehyde and MCF7 (an aldehyde H); invalid SMILES: no value.
    assert alerts.judge([IBUPROFEN, "CC=O", "C1CC"]) == [0.0, 2.0, None]
    assert alerts.accepts(IBUPROFEN) and alerts.explain(IBUPROFEN) is None
    assert alerts.explain("CC=O") == "structural alerts: brenk:aldehyde, mcf:MCF7"
    assert not alerts.satisfied(None)
    assert alerts.label() == "no structural alert (brenk, mcf)"
    assert AlertsConstraint(filters=("pains",)).judge(["O=C1C(=Cc2ccccc2)SC(=S)N1"]) == [1.0]


def test_mcf_is_the_vendored_moses_file_matched_with_explicit_hydrogens():
    with MCF_FILE.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [name for name, _ in mcf_patterns()] == [f"MCF{i}" for i in range(1, 23)]
    assert all(pattern is not None for _, pattern in mcf_patterns()) and len(rows) == 22
    assert (MCF_FILE.parent / "LICENSE").read_text().startswith("Copyright 2018 Insilico")
    # MCF4 (a CH2 halide) spells its hydrogens: it matches only as MOSES matches, with Hs added.
    assert alerts_of("CCCl", ("mcf",)) == ("mcf:MCF4",)
    assert not Chem.MolFromSmiles("CCCl").HasSubstructMatch(dict(mcf_patterns())["MCF4"])


def test_the_type_is_listed_with_its_key_and_default():
    described = table.BUILTINS["alerts"]
    assert described.domain == "molecules" and list(described.keys) == ["filters"]
    assert described.defaults == {"filters": ["pains", "brenk", "mcf"]}
    assert not described.needs_tau and not described.spec_only
    assert "default pains, brenk, mcf" in described.description
    result = runner.invoke(app, ["constraints", "ls", "--json"])
    assert result.exit_code == 0, result.stderr
    row = next(r for r in json.loads(result.stdout) if r["type"] == "alerts")
    assert row["keys"] == {"filters": {"required": False}}


def test_a_flag_takes_the_default_set_and_a_spec_names_families(uniform_model_dir: Path):
    loaded = registry.load(str(uniform_model_dir), "molecules", "cpu")
    flag = constraint_from_flags("alerts", None)
    assert flag.options == {}
    (built,) = build_constraints([flag], loaded, "cpu")
    assert isinstance(built, AlertsConstraint) and built.filters == DEFAULT_FILTERS
    chosen = ConstraintSpec("alerts", {"filters": ["zinc", "nih", "zinc"]}, "t")
    check_constraint(chosen)
    (built,) = build_constraints([chosen], loaded, "cpu")
    assert built.filters == ("zinc", "nih") and built.tau == 0.0


def test_unknown_or_no_filter_families_are_refused_in_one_line():
    with pytest.raises(InputError) as refused:
        check_constraint(ConstraintSpec("alerts", {"filters": ["brenck", "mcf"]}, "s.yaml:2"))
    assert str(refused.value) == (
        "s.yaml:2: key 'filters': unknown filter family 'brenck'; did you mean 'brenk'? "
        f"(known: {', '.join(FAMILIES)})"
    )
    with pytest.raises(InputError, match=r"^s.yaml:2: key 'filters' names no family"):
        check_constraint(ConstraintSpec("alerts", {"filters": []}, "s.yaml:2"))


def test_cdd_validate_refuses_an_unknown_family_with_exit_code_2(tmp_path: Path):
    spec = tmp_path / "alerts.yaml"
    spec.write_text("constraints:\n  - {type: alerts, filters: [brenk, pan]}\n")
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2
    assert "unknown filter family 'pan'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_records_under_alerts_agree_with_rdkit():
    result = runner.invoke(
        app, ["molecules", "-n", "8", "-c", "alerts", "--steps", "8", "--quiet", "-o", "-"]
    )
    assert result.exit_code in (0, 3), result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 8
    for r in records:
        entry = r["constraints"]["alerts"]
        found = alerts_of(r["text"], DEFAULT_FILTERS)
        assert entry["satisfied"] == (found == ()) and entry["judge"] == "rdkit-filter-catalog"
        assert entry["value"] == (None if found is None else float(len(found)))
        if found:
            assert entry["detail"] == f"structural alerts: {', '.join(found)}"
    assert sum(r["satisfied"] for r in records) >= 6
