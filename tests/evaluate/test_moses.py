"""`cdd eval --moses`: the MOSES benchmark's metrics, checked against the reference
implementation's own numbers (molsets==0.3.1, tests/test_metrics.py) and against RDKit."""

from __future__ import annotations

import gzip
import importlib.util
import json
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem, DataStructs
from rdkit.Chem import rdFingerprintGenerator
from rdkit.Contrib.SA_Score import sascorer
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.errors import InputError
from cdd_cli.evaluate import chemnet
from cdd_cli.evaluate.moses import (
    MosesReference,
    cosine_similarity,
    features,
    installed_molsets,
    internal_diversity,
    locate_moses,
    moses_metrics,
    nearest_similarity,
    read_filters,
    read_split,
    wasserstein,
)
from cdd_cli.evaluate.moses_baselines import (
    BASELINES,
    EARLY_BASELINES,
    EARLY_METRICS,
    METRICS,
)
from cdd_cli.evaluate.reference import model_reference
from cdd_cli.models.registry import resolve_directory

runner = CliRunner()
MOSES_SPEC = importlib.util.find_spec("moses")
needs_molsets = pytest.mark.skipif(
    MOSES_SPEC is None, reason="the MOSES data: pip install --no-deps molsets==0.3.1"
)
needs_fcd = pytest.mark.skipif(
    importlib.util.find_spec("fcd") is None, reason="FCD: pip install 'cdd-cli[fcd]'"
)

# The reference implementation's unit test (molsets 0.3.1, tests/test_metrics.py): generated
# molecules, a two-molecule test set, and the numbers `get_all_metrics(gen, test=test, k=3)`
# returns.
GEN = [
    "CNC", "Oc1ccccc1-c1cccc2cnccc12", "INVALID", "CCCP",
    "Cc1noc(C)c1CN(C)C(=O)Nc1cc(F)cc(F)c1", "Cc1nc(NCc2ccccc2)no1-c1ccccc1",
]  # fmt: skip
TEST = ["Oc1ccccc1-c1cccc2cnccc12", "COc1cccc(NC(=O)Cc2coc3ccc(OC)cc23)c1"]
MOSES_TARGET = {
    "valid": 2 / 3, "unique@3": 1.0, "FCD/Test": 52.58371754126664,
    "SNN/Test": 0.3152585653588176, "Frag/Test": 0.3, "Scaf/Test": 0.5,
    "IntDiv": 0.7189187309761661, "Filters": 0.75, "logP": 1.63229,
    "SA": 0.5238335295121783, "QED": 0.20370891752648637, "weight": 106.87,
}  # fmt: skip


def molsets_root() -> Path:
    return locate_moses(None)


@needs_molsets
@pytest.mark.slow
def test_the_reference_implementations_own_numbers():
    reference = MosesReference(features(TEST), None, read_filters(molsets_root()), None)
    metrics = moses_metrics(GEN, reference, ks=(3,))
    for name, target in MOSES_TARGET.items():
        if name in ("FCD/Test", "SA"):
            continue  # FCD: the slow test below; SA: RDKit's scorer (next assertion)
        assert metrics[name] == pytest.approx(target, rel=1e-6), name
    # SA is RDKit's sascorer as records hold it; MOSES' 2020 copy of it scores these
    # molecules otherwise (0.524): the distance is checked against RDKit's scores directly.
    valid = ["CNC", "Oc1ccccc1-c1cccc2cnccc12", "CCCP", "Cc1noc(C)c1CN(C)C(=O)Nc1cc(F)cc(F)c1"]
    gen_sa = [sascorer.calculateScore(Chem.MolFromSmiles(s)) for s in valid]
    test_sa = [sascorer.calculateScore(Chem.MolFromSmiles(s)) for s in TEST]
    assert metrics["SA"] == pytest.approx(wasserstein_by_hand(gen_sa, test_sa), rel=1e-5)
    assert "Novelty" not in metrics and "SNN/TestSF" not in metrics


@needs_fcd
@pytest.mark.slow
def test_fcd_matches_the_reference_implementation():
    valid = [Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in GEN if Chem.MolFromSmiles(s)]
    fcd = chemnet.frechet_distance(valid, chemnet.statistics(TEST))
    assert fcd == pytest.approx(MOSES_TARGET["FCD/Test"], rel=1e-5)
    assert chemnet.frechet_distance(TEST, chemnet.statistics(TEST)) == pytest.approx(0, abs=1e-3)


def wasserstein_by_hand(a: list[float], b: list[float]) -> float:
    """W1 of two small samples as the integral of |F_a - F_b| over a fine grid."""
    grid = np.linspace(min(a + b) - 1, max(a + b) + 1, 2_000_001)
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.sum(np.abs(fa - fb)) * (grid[1] - grid[0]))


def test_wasserstein_is_the_area_between_the_cdfs():
    assert wasserstein(np.array([0.0]), np.array([3.0])) == 3.0
    assert wasserstein(np.array([0.0, 1.0]), np.array([0.0, 1.0])) == 0.0
    a, b = [0.2, 1.7, 3.0, 3.1], [1.0, 2.5]
    assert wasserstein(np.array(a), np.array(b)) == pytest.approx(wasserstein_by_hand(a, b), 1e-5)


def test_cosine_similarity_of_counts():
    assert cosine_similarity(Counter(a=1, b=1), Counter(a=2, b=2)) == pytest.approx(1.0)
    assert cosine_similarity(Counter(a=1), Counter(b=1)) == 0.0
    assert cosine_similarity(Counter(a=3, b=4), Counter(a=1)) == pytest.approx(0.6)
    assert cosine_similarity(Counter(), Counter(a=1)) is None  # MOSES: NaN; reports: null


SMALL = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN(CC)CC", "c1ccc2ccccc2c1", "CCO"]


def rdkit_fingerprints(smiles: list[str]):
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=1024)
    return [generator.GetFingerprint(Chem.MolFromSmiles(s)) for s in smiles]


def test_tanimoto_metrics_agree_with_rdkit():
    fps = rdkit_fingerprints(SMALL)
    matrix = np.array([DataStructs.BulkTanimotoSimilarity(f, fps) for f in fps])
    bits = features(SMALL, properties=False).fingerprints
    assert internal_diversity(bits, 1) == pytest.approx(1 - matrix.mean(), abs=1e-6)
    by_hand = 1 - np.mean(np.sqrt((matrix**2).mean(1)))
    assert internal_diversity(bits, 2) == pytest.approx(by_hand, abs=1e-6)
    test = SMALL[3:]
    across = np.array([DataStructs.BulkTanimotoSimilarity(f, fps[3:]) for f in fps[:3]])
    snn = nearest_similarity(bits[:3], features(test, properties=False).fingerprints)
    assert snn == pytest.approx(across.max(1).mean(), abs=1e-6)


def test_tanimoto_is_exact_past_the_bfloat16_range():
    # A fingerprint with more than 256 bits set is scored in float32, not bfloat16.
    rng = np.random.default_rng(0)
    dense = (rng.random((3, 1024)) < 0.6).astype(np.uint8)
    common = dense.astype(np.int64) @ dense.T.astype(np.int64)
    counts = dense.sum(1)
    exact = common / (counts[:, None] + counts[None, :] - common)
    assert internal_diversity(dense, 1) == pytest.approx(1 - exact.mean(), abs=1e-6)
    assert nearest_similarity(np.zeros((1, 1024), np.uint8), np.zeros((2, 1024), np.uint8)) == 1


def write_moses_folder(root: Path, test: list[str], scaffolds: list[str]) -> Path:
    """A folder laid out as the molsets wheel, with the given test sets and one MCF and one
    PAINS pattern (an epoxide; a quinone)."""
    data = root / "moses" / "dataset" / "data"
    data.mkdir(parents=True)
    for name, smiles in (("test", test), ("test_scaffolds", scaffolds)):
        (data / f"{name}.csv.gz").write_bytes(gzip.compress(("SMILES\n" + "\n".join(smiles) +
                                                              "\n").encode()))  # fmt: skip
    metrics = root / "moses" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "mcf.csv").write_text("names,smarts\nMCF5,[#6]1-[#8]-[#6]-1\n")
    (metrics / "wehi_pains.csv").write_text('"O=C1C=CC(=O)C=C1"   ,"<regId=quinone>"\n')
    return root


def test_the_data_is_read_from_a_folder_or_a_wheel(tmp_path: Path):
    folder = write_moses_folder(tmp_path / "unpacked", ["CCO", "CCN"], ["c1ccccc1"])
    assert read_split(folder, "test")[0] == ["CCO", "CCN"]
    wheel = tmp_path / "molsets.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path in folder.rglob("*"):
            if path.is_file():
                z.write(path, path.relative_to(folder).as_posix())
    assert read_split(wheel, "test") == read_split(folder, "test")
    assert len(read_filters(wheel)) == 2
    with pytest.raises(InputError, match="no such file or folder"):
        locate_moses(tmp_path / "missing")
    with pytest.raises(InputError, match=r"test\.csv\.gz not found"):
        read_split(tmp_path, "test")


def test_the_installed_molsets_is_found_by_path_and_each_caller_says_what_to_do_without_it(
    tmp_path: Path, monkeypatch
):
    (tmp_path / "moses").mkdir()
    (tmp_path / "moses" / "__init__.py").write_text("raise ImportError('never imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert installed_molsets() == tmp_path == locate_moses(None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert installed_molsets() is None
    with pytest.raises(InputError, match=r"MOSES data not found: .*--moses-data"):
        locate_moses(None)


def test_the_baselines_are_the_moses_readmes_rows_keyed_as_cdd_eval_keys_them():
    assert set(BASELINES) == {
        "Train", "HMM", "NGram", "Combinatorial", "CharRNN", "AAE", "VAE", "JTN-VAE", "LatentGAN",
    }  # fmt: skip
    assert all(list(row) == list(METRICS) for row in BASELINES.values())
    assert BASELINES["CharRNN"]["FCD/Test"] == (0.0732, 0.0247)
    assert BASELINES["Train"]["IntDiv"] == (0.8567, None)
    # The 2019 table that older quotes come from (CharRNN valid 0.960, FCD/Test 0.323).
    charrnn = EARLY_BASELINES["CharRNN"]
    assert (charrnn["valid"], charrnn["FCD/Test"], charrnn["Filters"]) == (0.9598, 0.3233, 0.992)
    assert EARLY_BASELINES["JTN-VAE"]["FCD/Test"] == 4.3769
    assert EARLY_BASELINES["AAE"]["FCD/Test"] == 1.3511
    assert all(list(row) == list(EARLY_METRICS) for row in EARLY_BASELINES.values())
    # Every baseline metric is one `cdd eval --moses` writes.
    reference = MosesReference(features(TEST), features(TEST), [], frozenset(TEST), None)
    assert set(METRICS) - {"FCD/Test", "FCD/TestSF"} <= set(moses_metrics(GEN, reference))


def records_file(path: Path, smiles: list[str]) -> Path:
    rows = [
        {"id": f"0-{i}", "text": s, "valid": Chem.MolFromSmiles(s) is not None,
         "model": "default-molecules", "constraints": {}, "seconds": 0.1}
        for i, s in enumerate(smiles)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_eval_moses_from_the_command_line(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    test = ["CC(=O)Nc1ccc(O)cc1", "c1ccc2ccccc2c1", "CCN(CC)CC", "O=C(O)c1ccccc1"]
    data = write_moses_folder(tmp_path / "data", test, ["c1ccc2c(c1)CCC2", "C1CCc2ccccc2C1"])
    records = records_file(tmp_path / "m.jsonl", ["CCO", "CCO", "C1OC1", "C(", "c1ccccc1O"])
    args = ["eval", str(records), "--moses", "--moses-data", str(data)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.splitlines()[0])["moses"]
    assert report["samples"] == 5 and report["valid"] == 0.8
    assert report["unique@1000"] == 0.75  # 3 distinct of the 4 valid
    assert report["Filters"] == 0.75  # the epoxide fails MCF5
    known = model_reference(resolve_directory("default-molecules"))
    distinct = {"CCO", "C1CO1", "Oc1ccccc1"}
    assert report["Novelty"] == pytest.approx(len(distinct - known) / 3)
    assert report["novelty_against"].startswith("training of default-molecules")
    assert report["Scaf/Test"] is None  # no molecule with two rings: no scaffold to compare
    cached = sorted(p.name for p in (tmp_path / "cache" / "cdd").glob("moses-*.npz"))
    assert [n.split("-")[1] for n in cached if "-fcd-" not in n] == ["test", "test_scaffolds"]
    again = runner.invoke(app, args)  # read back from the cache
    assert json.loads(again.stdout.splitlines()[0])["moses"] == report


@pytest.mark.slow
def test_what_eval_moses_prints_is_what_cdd_report_reads(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # Two molecules a set at least: FCD of one hangs in fcd (a NaN covariance).
    scaffolds = ["c1ccc2ccccc2c1", "C1CCc2ccccc2C1"]
    data = write_moses_folder(tmp_path / "data", ["CCO", "c1ccccc1O"], scaffolds)
    records = records_file(tmp_path / "m.jsonl", ["CCO", "CCN", "C(", "c1ccccc1O"])
    result = runner.invoke(app, ["eval", str(records), "--moses", "--moses-data", str(data)])
    assert result.exit_code == 0, result.output
    evaluation = tmp_path / "m.eval.json"
    evaluation.write_text(result.stdout)
    page = tmp_path / "page.html"
    args = ["report", str(records), "--eval", str(evaluation), "-o", str(page)]
    assert runner.invoke(app, args).exit_code == 0
    html = page.read_text(encoding="utf-8")
    assert "m.eval.json</th><td>4</td><td>0.75</td>" in html  # 3 of 4 valid
    assert "novelty against training of default-molecules" in html and "<th>CharRNN</th>" in html


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--moses-data", "x"], "--moses-data is read by --moses only"),
        (["--moses", "--moses-data", "/nonexistent/molsets"], "no such file or folder"),
    ],
)
def test_eval_moses_refusals(tmp_path: Path, args: list[str], expected: str):
    records = records_file(tmp_path / "m.jsonl", ["CCO"])
    result = runner.invoke(app, ["eval", str(records), *args])
    assert result.exit_code == 2 and expected in result.stderr


def test_eval_moses_refuses_text_records(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "0-0", "text": " hello", "constraints": {}}) + "\n")
    result = runner.invoke(app, ["eval", str(path), "--moses", "--no-perplexity", "--no-judge"])
    assert result.exit_code == 2 and "--moses scores molecules" in result.stderr


@needs_molsets
@pytest.mark.slow
def test_the_moses_test_set_against_itself():
    test = read_split(molsets_root(), "test")[0][:1000]
    reference = MosesReference(features(test), None, read_filters(molsets_root()), None)
    if importlib.util.find_spec("fcd") is not None:
        stats = chemnet.statistics([Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in test])
        reference.fcd = {"test": stats, "test_scaffolds": stats}
    metrics = moses_metrics(test, reference, ks=(1000,))
    assert metrics["valid"] == 1.0 and metrics["unique@1000"] == 1.0
    for name in ("SNN/Test", "Frag/Test", "Scaf/Test"):
        assert metrics[name] == pytest.approx(1.0, abs=1e-9), name
    for name in ("logP", "SA", "QED", "weight"):
        assert metrics[name] == pytest.approx(0.0, abs=1e-9), name
    # The MOSES data set was built by these filters: every test molecule passes them.
    assert metrics["Filters"] == 1.0
    # IntDiv of MOSES' training set (its README's Train row): 0.8567, IntDiv2 0.8508.
    assert metrics["IntDiv"] == pytest.approx(0.8567, abs=0.01)
    assert metrics["IntDiv2"] == pytest.approx(0.8508, abs=0.01)
    if reference.fcd is not None:
        assert metrics["FCD/Test"] == pytest.approx(0.0, abs=1e-3)


@needs_molsets
@pytest.mark.slow
def test_features_match_the_reference_implementations_stored_statistics():
    """MOSES ships its test set's statistics (test_stats.npz, a pickle, read here only): the
    first 500 molecules' fingerprints are the same bits, logP, QED and weight the same values."""
    root = molsets_root()
    stored = np.load(root / "moses/dataset/data/test_stats.npz", allow_pickle=True)
    stats = stored["stats"].item()
    test = read_split(root, "test")[0][:500]
    ours = features(test)
    assert (ours.fingerprints == stats["SNN"]["fps"][:500]).all()
    for name in ("logP", "QED", "weight"):
        assert ours.properties[name] == pytest.approx(stats[name]["values"][:500], abs=1e-6)
    # Each of these molecules' fragments is among those MOSES counted over the whole set.
    assert set(ours.fragments) <= set(stats["Frag"]["frag"])


def test_fcd_of_a_single_valid_molecule_is_none_not_a_hang():
    # fcd's matrix square root of a one-molecule (NaN) covariance never returns; the metric
    # is None there. A reference whose statistics would fail if read shows FCD is not tried.
    class Unread(dict):
        def __getitem__(self, key):
            raise AssertionError("FCD computed for one molecule")

    reference = MosesReference(features(TEST), None, [], frozenset(TEST), None)
    reference.fcd = Unread()
    metrics = moses_metrics(["CNC", "INVALID"], reference, ks=(3,))
    assert metrics["FCD/Test"] is None and metrics["FCD/TestSF"] is None
