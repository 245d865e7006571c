"""Molecular property constraints: RDKit judges, spec validation, surrogates, novelty
references, and records that RDKit agrees with."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch
from rdkit import Chem
from rdkit.Chem import QED, Crippen, Descriptors
from rdkit.Chem import rdMolDescriptors as descriptors
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.properties import (
    LipinskiConstraint,
    PainsConstraint,
    ProjectedPropertyBound,
    PropertyBound,
    property_bounds,
    substructure,
)
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.errors import InputError
from cdd_cli.evaluate import reference as reference_module
from cdd_cli.evaluate.properties import QUANTITIES, molecule_property
from cdd_cli.evaluate.reference import library, novelty_reference, write_smiles
from cdd_cli.models import registry
from cdd_cli.models.surrogate import SoftTokenRegressor, SurrogateConfig, load_surrogate
from cdd_cli.spec.entries import check_constraint, constraint_from_flags
from cdd_cli.train.properties import TARGETS, train_property_surrogate
from tests.conftest import QM9_SAMPLE

runner = CliRunner()
ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"
# A 5-ene-rhodanine: a PAINS family A alert (ene_rhod_A).
RHODANINE = "O=C1C(=Cc2ccccc2)SC(=S)N1"


def test_every_property_is_rdkit_on_the_canonical_molecule():
    mol = Chem.MolFromSmiles(ASPIRIN)
    expected = {
        "qed": QED.qed(mol),
        "logp": Crippen.MolLogP(mol),
        "mw": Descriptors.MolWt(mol),
        "mw_exact": Descriptors.ExactMolWt(mol),
        "hbd": descriptors.CalcNumHBD(mol),
        "hba": descriptors.CalcNumHBA(mol),
        "rotatable_bonds": descriptors.CalcNumRotatableBonds(mol),
        "rings": descriptors.CalcNumRings(mol),
        "aromatic_rings": descriptors.CalcNumAromaticRings(mol),
        "tpsa": descriptors.CalcTPSA(mol),
    }
    assert set(expected) == set(QUANTITIES)
    for quantity, value in expected.items():
        # Another spelling of the same molecule gets the same value.
        assert molecule_property(quantity, "OC(=O)c1ccccc1OC(C)=O") == pytest.approx(
            value, abs=1e-4
        )
    assert molecule_property("mw", ASPIRIN) == pytest.approx(180.159, abs=1e-3)
    assert molecule_property("mw_exact", ASPIRIN) == pytest.approx(180.0423, abs=1e-4)
    for bad in ("", "C1CC", "not a molecule"):
        assert molecule_property("qed", bad) is None


def options(kind: str, **given) -> dict:
    spec = ConstraintSpec(kind, given, "test")
    check_constraint(spec)
    from cdd_cli.spec.entries import option_defaults

    return {**option_defaults(kind), **given}


def test_a_range_is_two_bounds_each_judged_by_rdkit():
    low, high = property_bounds("logp", options("logp", min=0, max=2), None)
    assert (low.name, high.name) == ("logp.min", "logp.max")
    assert (low.upper_bound, high.upper_bound) == (False, True)
    assert low.label() == "logp >= 0" and high.label() == "logp <= 2"
    value = Crippen.MolLogP(Chem.MolFromSmiles(ASPIRIN))  # 1.31
    assert low.judge([ASPIRIN]) == high.judge([ASPIRIN]) == [round(value, 4)]
    assert low.satisfied(value) and high.satisfied(value)
    assert not high.satisfied(2.01) and not low.satisfied(-0.01)
    assert high.satisfied(2.0) and low.satisfied(0.0)  # bounds are inclusive
    assert not low.satisfied(None) and not high.satisfied(None)
    (alone,) = property_bounds("qed", options("qed", min=0.5), None)
    assert alone.name == "qed" and isinstance(alone, PropertyBound)
    (exact,) = property_bounds("mw", options("mw", max=180.1, weight="exact"), None)
    assert exact.quantity == "mw_exact" and exact.satisfied(exact.judge([ASPIRIN])[0])
    (average,) = property_bounds("mw", options("mw", max=180.1), None)
    assert not average.satisfied(average.judge([ASPIRIN])[0])  # 180.159 on average
    (aromatic,) = property_bounds("rings", options("rings", min=1, aromatic=True), None)
    assert aromatic.judge([ASPIRIN, "C1CC1"]) == [1.0, 0.0]


def test_substructure_lipinski_and_pains_judges():
    carbonyl = substructure({"smarts": "[CX3]=O", "present": True})
    assert carbonyl.judge([ASPIRIN, "CCO", "C1CC"]) == [2.0, 0.0, None]
    assert [carbonyl.satisfied(v) for v in (2.0, 0.0, None)] == [True, False, False]
    no_carbonyl = substructure({"smarts": "[CX3]=O", "present": False})
    assert [no_carbonyl.satisfied(v) for v in (2.0, 0.0, None)] == [False, True, False]
    assert no_carbonyl.label() == "no [CX3]=O"
    greasy = "C" * 40  # logP ~ 15.7, MW ~ 563: two of the four limits broken
    strict, lenient = LipinskiConstraint(tau=0.0), LipinskiConstraint(tau=2.0)
    assert strict.judge([greasy, ASPIRIN, "C1CC"]) == [2.0, 0.0, None]
    assert not strict.satisfied(2.0) and lenient.satisfied(2.0)
    pains = PainsConstraint()
    assert pains.judge([RHODANINE, ASPIRIN, "C1CC"]) == [1.0, 0.0, None]
    assert pains.accepts(ASPIRIN) and not pains.accepts(RHODANINE)
    assert "ene_rhod" in pains.explain(RHODANINE) and pains.explain(ASPIRIN) is None


@pytest.mark.parametrize(
    ("kind", "given", "message"),
    [
        ("qed", {}, "'qed' needs min"),
        ("qed", {"min": 1.5}, "1.5 is outside [0, 1]"),
        ("logp", {"min": 3, "max": 1}, "min 3 > max 1"),
        ("mw", {"min": -1}, "-1 is outside >= 0"),
        ("mw", {"max": 100, "weight": "heavy"}, "'weight' must be one of average, exact"),
        ("substructure", {"smarts": "[C"}, "cannot read '[C' as SMARTS"),
        ("lipinski", {"max_violations": 4}, "must be in [0, 3]"),
        ("novelty", {"reference": "/no/such/file.smi"}, "neither training, all nor a file"),
    ],
)
def test_bad_entries_are_refused_with_the_reason(kind: str, given: dict, message: str):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_constraint(ConstraintSpec(kind, given, "spec.yaml:3"))


def test_tau_flags_name_the_natural_bound():
    assert constraint_from_flags("qed", 0.5).options == {"min": 0.5}
    assert constraint_from_flags("mw", 140).options == {"max": 140}
    assert constraint_from_flags("rings", 1).options == {"min": 1}
    with pytest.raises(InputError, match="spec file"):
        constraint_from_flags("substructure", None)


def test_validate_refuses_contradictions_with_one_line(tmp_path: Path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("constraints:\n  - type: logp\n    min: 2\n    max: 0\n")
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"cdd: error: {spec}:2: min 2 > max 0"]


def tiny_surrogate(path: Path, vocab_size: int, label_range: dict | None = None) -> Path:
    config = SurrogateConfig(
        vocab_size, 24, "properties", hidden_dim=16, n_layers=1, targets=list(TARGETS),
        shift=[1.0] * len(TARGETS), scale=[2.0] * len(TARGETS),
    )  # fmt: skip
    torch.manual_seed(0)
    from cdd_cli.models.surrogate import save_surrogate

    save_surrogate(SoftTokenRegressor(config), path, {"label_range": label_range or {}})
    return path


def test_multi_property_surrogate_outputs_in_label_units(tmp_path: Path, uniform_model_dir: Path):
    loaded = registry.load(str(uniform_model_dir), "molecules", "cpu")
    folder = tiny_surrogate(tmp_path / "s", loaded.config.vocab_size)
    loaded.tokenizer.save(folder)
    net = load_surrogate(folder)
    ids = torch.tensor([loaded.tokenizer.encode("CCO", 24)])
    out = net(ids)
    assert out.shape == (1, len(TARGETS))
    assert torch.allclose(net.normalised(ids), (out - 1.0) / 2.0)
    spec = ConstraintSpec("tpsa", {"max": 40, "surrogate": str(folder)}, "test")
    (bound,) = build_constraints([spec], loaded, "cpu")
    assert isinstance(bound, ProjectedPropertyBound)
    assert bound.surrogate(ids).item() == pytest.approx(out[0, TARGETS.index("tpsa")].item())
    # A surrogate that lacks the quantity is named, not silently ignored.
    config = json.loads((folder / "config.json").read_text())
    config["scale"][0] = -1.0
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="scale should be positive"):
        load_surrogate(folder)


def test_a_bound_no_training_molecule_reaches_is_refused(tmp_path: Path, uniform_model_dir: Path):
    loaded = registry.load(str(uniform_model_dir), "molecules", "cpu")
    folder = tiny_surrogate(tmp_path / "s", loaded.config.vocab_size, {"mw": [16.0, 152.0]})
    loaded.tokenizer.save(folder)
    spec = ConstraintSpec("mw", {"min": 2000, "surrogate": str(folder)}, "spec.yaml:4")
    with pytest.raises(InputError, match=r"looks infeasible .* over \[16, 152\]"):
        build_constraints([spec], loaded, "cpu")
    reachable = ConstraintSpec("mw", {"min": 100, "surrogate": str(folder)}, "spec.yaml:4")
    assert build_constraints([reachable], loaded, "cpu")[0].tau == 100


def test_without_a_fitting_surrogate_bounds_are_exact(uniform_model_dir: Path):
    """The shipped surrogate reads the shipped vocabulary; this model's differs: the bound
    is still built, projected by the exact search stages."""
    loaded = registry.load(str(uniform_model_dir), "molecules", "cpu")
    (bound,) = build_constraints([ConstraintSpec("qed", {"min": 0.4}, "t")], loaded, "cpu")
    assert type(bound) is PropertyBound


@pytest.mark.slow
def test_property_surrogate_trains_and_records_label_ranges(tmp_path: Path, uniform_model_dir):
    model = tmp_path / "model"
    shutil.copytree(uniform_model_dir, model)
    write_smiles(model / "heldout.smi.gz", QM9_SAMPLE[::2], "tests")
    settings = {"steps": 12, "batch_size": 16, "lr": 2e-3, "hidden_dim": 16, "n_layers": 1}
    metrics = train_property_surrogate(
        model, tmp_path / "out", {**settings, "seed": 0}, lambda _: None, lambda *_: None
    )
    assert set(metrics) == set(TARGETS)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    weights = [Descriptors.MolWt(Chem.MolFromSmiles(s)) for s in QM9_SAMPLE]
    low, high = config["label_range"]["mw"]
    assert low == pytest.approx(min(weights), abs=1e-3)
    assert high == pytest.approx(max(weights), abs=1e-3)
    net = load_surrogate(tmp_path / "out")
    assert net.config.targets == TARGETS and len(net.config.shift) == len(TARGETS)


def test_user_library_is_canonicalised_and_cached(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "library.smi.gz"
    text = "smiles name\n# my compounds\nOCC ethanol\nC(=O)O,formic\n\nnot-a-smiles x\n"
    path.write_bytes(gzip.compress(text.encode()))
    with pytest.warns(UserWarning, match="2 of 4 lines are not SMILES"):  # header + bad
        known = library(path)
    assert known == frozenset({"CCO", "O=CO"})
    cached = list((tmp_path / "cache" / "cdd").glob("library-*.smi.gz"))
    assert len(cached) == 1
    (tmp_path / "empty.smi").write_text("xx\n")
    with pytest.raises(InputError, match="no SMILES RDKit can read"):
        library(tmp_path / "empty.smi")
    reference_module._library.cache_clear()
    calls = []
    monkeypatch.setattr(reference_module, "canonicalise_all", lambda s: calls.append(s))
    assert library(path) == known and not calls  # read from the cache, not canonicalised


def test_novelty_reference_choices(tmp_path: Path, uniform_model_dir: Path):
    model = tmp_path / "model"
    shutil.copytree(uniform_model_dir, model)
    loaded = registry.load(str(model), "molecules", "cpu")
    training, label = novelty_reference(loaded, None, "t")
    assert training == frozenset(QM9_SAMPLE) and label.startswith("training")
    with pytest.raises(InputError, match="no held-out molecules"):
        novelty_reference(loaded, "all", "t")
    write_smiles(model / "heldout.smi.gz", ["CCCC", "OCCO"], "tests")
    both, label = novelty_reference(loaded, None, "t")  # all, where held-out molecules ship
    assert both == training | {"CCCC", "OCCO"} and label.startswith("all")
    mine = tmp_path / "mine.smi"
    mine.write_text("CCCC\n")
    (novelty,) = build_constraints(
        [ConstraintSpec("novelty", {"reference": str(mine)}, "t")], loaded, "cpu"
    )
    assert novelty.judge(["CCCC", "CCO"]) == [0.0, 1.0]  # CCO is in training, not in mine
    assert str(mine.resolve()) in novelty.judge_name


@pytest.mark.slow
def test_records_on_the_shipped_model_agree_with_rdkit(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "constraints:\n"
        "  - {type: qed, min: 0.5}\n"
        "  - {type: logp, min: 0, max: 2}\n"
        "  - {type: substructure, smarts: '[CX3]=O'}\n"
        "  - {type: pains}\n"
        "sampling: {batch_size: 4}\n"
    )
    result = runner.invoke(app, ["molecules", "--spec", str(spec), "-n", "4", "--quiet"])
    assert result.exit_code == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 4 and all(r["satisfied"] for r in records)
    pattern = Chem.MolFromSmarts("[CX3]=O")
    pains = PainsConstraint()
    for r in records:
        mol = Chem.MolFromSmiles(r["text"])
        assert QED.qed(mol) >= 0.5 and 0 <= Crippen.MolLogP(mol) <= 2
        assert mol.HasSubstructMatch(pattern) and pains.accepts(r["text"])
        assert set(r["constraints"]) == {"qed", "logp.min", "logp.max", "substructure", "pains"}


def test_the_readme_property_spec_validates(tmp_path: Path):
    readme = (Path(__file__).parents[2] / "docs" / "molecules.md").read_text(encoding="utf-8")
    body = readme.split("cat > props.yaml <<'EOF'\n")[1].split("\nEOF\n")[0]
    path = tmp_path / "props.yaml"
    path.write_text(body + "\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.stderr
    assert "ok (7 constraint(s), model default-molecules)" in result.stderr
    resolved = result.stdout
    assert "present: false" in resolved and "max_violations: 0" in resolved


def test_a_constraint_no_sample_meets_is_named_in_the_summary(tmp_path: Path):
    """QM9's vocabulary has no chlorine: every record violates, none hangs, and the summary
    says which constraint looks infeasible."""
    spec = tmp_path / "chlorine.yaml"
    spec.write_text(
        "constraints:\n  - {type: substructure, smarts: '[Cl]'}\n  - {type: mw, max: 500}\n"
        "search: {max_nodes: 50}\nrepair: {max_redraws: 0}\nsampling: {batch_size: 2}\n"
    )
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["molecules", "--spec", str(spec), "-n", "2", "-o", str(out)])
    assert result.exit_code == 3, result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2 and not any(r["satisfied"] for r in records)
    assert "no sample satisfies [Cl]: it looks infeasible" in result.stderr
    assert "mw <= 500: it looks" not in result.stderr  # mw is met wherever a molecule parses


def test_property_entries_build_the_constraints_they_say(monkeypatch: pytest.MonkeyPatch):
    from cdd_cli.constraints import properties as module
    from cdd_cli.constraints.properties import (
        LipinskiConstraint,
        PainsConstraint,
        exact_molecule_constraint,
        property_bounds,
    )

    (qed,) = property_bounds("qed", {"min": 0.5, "margin": 0.02}, None)
    assert (qed.tau, qed.margin, qed.name, qed.upper_bound) == (0.5, 0.02, "qed", False)
    low, high = property_bounds("mw", {"min": 100, "max": 300}, None)
    assert (low.name, low.tau, low.margin, low.upper_bound) == ("mw.min", 100.0, 0.0, False)
    assert (high.name, high.tau, high.upper_bound) == ("mw.max", 300.0, True)
    # A substructure is present unless the entry says otherwise: at least one match (a lower
    # bound of 1), or none (an upper bound of 0).
    present = exact_molecule_constraint("substructure", {"smarts": "c1ccccc1"})
    assert (present.tau, present.upper_bound, present.smarts) == (1.0, False, "c1ccccc1")
    absent = exact_molecule_constraint("substructure", {"smarts": "c1ccccc1", "present": False})
    assert (absent.tau, absent.upper_bound) == (0.0, True)
    rule = exact_molecule_constraint("lipinski", {"max_violations": 1})
    assert isinstance(rule, LipinskiConstraint) and rule.tau == 1.0
    pains = exact_molecule_constraint("pains", {})
    assert isinstance(pains, PainsConstraint) and pains.label() == "no PAINS alert"
    monkeypatch.setattr(module, "pains_alerts", lambda text: ("ene_one_A", "catechol_A"))
    assert pains.explain("C") == "PAINS alerts: ene_one_A, catechol_A"
    monkeypatch.setattr(module, "pains_alerts", lambda text: ())
    assert pains.explain("C") is None


def test_the_rule_of_five_breaks_a_limit_only_past_it(monkeypatch: pytest.MonkeyPatch):
    from rdkit import Chem
    from rdkit.Chem import Crippen, Descriptors
    from rdkit.Chem import rdMolDescriptors as descriptors

    from cdd_cli.evaluate.properties import rule_of_five_violations

    def measured(weight: float, logp: float, donors: int, acceptors: int) -> int:
        monkeypatch.setattr(Descriptors, "MolWt", lambda mol: weight)
        monkeypatch.setattr(Crippen, "MolLogP", lambda mol: logp)
        monkeypatch.setattr(descriptors, "CalcNumLipinskiHBD", lambda mol: donors)
        monkeypatch.setattr(descriptors, "CalcNumLipinskiHBA", lambda mol: acceptors)
        return rule_of_five_violations(Chem.MolFromSmiles("C"))

    assert measured(500.0, 5.0, 5, 10) == 0  # every limit met exactly
    assert measured(501.0, 6.0, 6, 11) == 4
    assert [measured(*v) for v in [(501, 5, 5, 10), (500, 6, 5, 10), (500, 5, 6, 10)]] == [1] * 3
    assert measured(500, 5, 5, 11) == 1


def test_a_property_entry_names_the_quantity_it_judges():
    from rdkit import Chem
    from rdkit.Chem import QED

    from cdd_cli.evaluate.properties import variant

    assert variant("mw", {}) == variant("mw", {"weight": "average"}) == "mw"
    assert variant("mw", {"weight": "exact"}) == "mw_exact"
    assert variant("rings", {}) == variant("rings", {"aromatic": False}) == "rings"
    assert variant("rings", {"aromatic": True}) == "aromatic_rings"
    assert variant("qed", {"weight": "exact"}) == "qed"
    phenol = Chem.MolFromSmiles("c1ccccc1O")
    assert molecule_property("qed", "Oc1ccccc1") == round(QED.qed(phenol), 4)  # 0.5147
    assert molecule_property("qed", "C1CC") is None
