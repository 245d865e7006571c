"""MOSES conventions: canonical on both sides, empty is invalid, novelty among unique valid."""

from __future__ import annotations

import gzip

from cdd_cli.evaluate.molecules import canonical, describe, summarise
from cdd_cli.evaluate.reference import load_reference, write_smiles


def test_canonical_catches_non_canonical_duplicates():
    assert canonical("OCC") == canonical("CCO") == "CCO"
    assert canonical("c1ccccc1") == canonical("C1=CC=CC=C1")
    assert canonical("") is None
    assert canonical("C") == "C" and canonical("[NH4+]") == "[NH4+]"  # one atom is a molecule
    assert canonical("C1CC") is None  # unclosed ring
    assert canonical("(Non)?") is None


def test_a_molecule_whose_canonical_smiles_rdkit_cannot_read_back_is_invalid():
    # RDKit parses this (a sample the search met) but writes "Cn1nc2cncn21", which it rejects.
    from rdkit import Chem

    from cdd_cli.constraints.sa import rdkit_sa

    smiles = "Cn1=nc2cncn21"
    assert Chem.MolFromSmiles(smiles) is not None
    assert Chem.MolFromSmiles(Chem.MolToSmiles(Chem.MolFromSmiles(smiles))) is None
    assert canonical(smiles) is None and rdkit_sa(smiles) is None
    report = describe(smiles, {"CCO"})
    assert not report.valid and report.sa is None


def test_describe_and_summarise():
    reference = {"CCO"}
    reports = [describe(s, reference) for s in ["OCC", "CCO", "CCN", "", "C1CC", "c1ccccc1"]]
    assert [r.valid for r in reports] == [True, True, True, False, False, True]
    assert [r.novel for r in reports] == [False, False, True, None, None, True]
    ethanol = reports[0]
    assert 1 <= ethanol.sa <= 10 and 0 < ethanol.qed < 1
    summary = summarise(reports)
    assert (summary.total, summary.valid, summary.unique, summary.novel) == (6, 4, 3, 2)
    assert summary.validity == 4 / 6
    assert summary.uniqueness == 3 / 4
    assert summary.novelty == 2 / 3


def test_without_reference_novelty_is_unknown():
    summary = summarise([describe("CCO", None)])
    assert summary.novel is None and summary.novelty is None


def test_reference_from_another_rdkit_is_recanonicalised(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "reference.smi.gz"
    with gzip.open(path, "wt") as f:  # an older canonicaliser wrote non-canonical forms
        f.write("# cdd-reference v1 canonicalizer=rdkit-2000.01.1 source=test\nOCC\nC1=CC=CC=C1\n")
    assert load_reference(path) == {"CCO", "c1ccccc1"}
    assert list((tmp_path / "cache" / "cdd").glob("reference-*.smi.gz"))
    assert load_reference(path) == {"CCO", "c1ccccc1"}  # from the cache
    current = tmp_path / "current.smi.gz"
    write_smiles(current, ["CCO"], "test")
    assert load_reference(current) == {"CCO"}


def test_the_sa_constraint_judges_by_rdkit_and_steers_by_its_surrogate():
    import torch
    from rdkit import Chem
    from rdkit.Contrib.SA_Score import sascorer

    from cdd_cli.constraints.sa import SAConstraint
    from cdd_cli.models.surrogate import SoftTokenRegressor, SurrogateConfig

    torch.manual_seed(0)
    net = SoftTokenRegressor(SurrogateConfig(vocab_size=9, max_length=6, target="sa"))
    sa = SAConstraint(tau=3.0, net=net)
    smiles = ["CCO", "c1ccccc1O", "C1CC", ""]
    expected = [round(sascorer.calculateScore(Chem.MolFromSmiles(s)), 4) for s in smiles[:2]]
    assert sa.judge(smiles) == [*expected, None, None]
    assert sa.satisfied(expected[0]) and not sa.satisfied(None)
    soft = torch.rand(2, 6, 9).softmax(-1)
    with torch.no_grad():
        assert torch.equal(sa.surrogate(soft), net(soft))
    assert (sa.name, sa.judge_name) == ("sa", "rdkit-sa")


def test_a_molecule_report_keeps_its_text_and_rdkits_scores_to_four_places():
    import statistics

    from rdkit import Chem
    from rdkit.Chem import QED
    from rdkit.Contrib.SA_Score import sascorer

    phenol, ethanol = Chem.MolFromSmiles("c1ccccc1O"), Chem.MolFromSmiles("CCO")
    report = describe("Oc1ccccc1", {"CCO"})
    assert (report.text, report.canonical, report.novel) == ("Oc1ccccc1", "Oc1ccccc1", True)
    assert report.qed == round(QED.qed(phenol), 4) and report.sa == round(
        sascorer.calculateScore(phenol), 4
    )
    assert report.fields() == {
        "valid": True,
        "canonical": "Oc1ccccc1",
        "qed": report.qed,
        "sa": report.sa,
        "novel": True,
    }
    invalid = describe("C1CC", None)
    assert invalid.text == "C1CC" and invalid.fields() == {
        "valid": False,
        "canonical": None,
        "qed": None,
        "sa": None,
        "novel": None,
    }
    # Means over the valid molecules, to four places; none without a valid one.
    summary = summarise([report, describe("OCC", None), invalid])
    qeds = [round(QED.qed(m), 4) for m in (phenol, ethanol)]
    sas = [round(sascorer.calculateScore(m), 4) for m in (phenol, ethanol)]
    assert summary.mean_qed == round(statistics.fmean(qeds), 4)
    assert summary.mean_sa == round(statistics.fmean(sas), 4)
    assert summary.mean_qed != round(statistics.fmean(qeds), 5)  # a fifth place is there
    nothing = summarise([invalid])
    assert (nothing.mean_qed, nothing.mean_sa, nothing.validity) == (None, None, 0.0)


def test_a_smiles_rdkit_cannot_survive_is_invalid_and_never_parsed():
    """RDKit canonicalises recursively: 20,000 characters of carbon chain crash it (a record's
    text in `cdd eval` or `cdd report`, a judge's candidate). Past MAX_SMILES_CHARS a string is
    invalid without being handed to RDKit (were it handed over, this test would crash)."""
    from cdd_cli.evaluate.molecules import MAX_SMILES_CHARS, read_smiles

    assert canonical("C" * MAX_SMILES_CHARS) is not None
    assert read_smiles("C" * (MAX_SMILES_CHARS + 1)) is None
    assert canonical("C" * 20_000) is None and describe("C" * 20_000, None).valid is False
