"""The `similarity` constraint: RDKit's Morgan Tanimoto as the judge, its leads (a SMILES or a
file), its soft n-gram surrogate, the --to flag, and records RDKit agrees with."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
import torch
from rdkit import Chem, DataStructs
from rdkit.Chem import rdMolDescriptors
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.cli.flags import build_spec
from cdd_cli.constraint_values import constraint as api_constraint
from cdd_cli.constraints import table
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.constraints.similarity import (
    JUDGE,
    MAX_TARGETS,
    WRITINGS,
    SimilarityConstraint,
    dense,
    fingerprint,
    lead_grams,
    soft_tanimoto,
    writings,
)
from cdd_cli.errors import InputError
from cdd_cli.models import registry
from cdd_cli.models.surrogate import SparseTokens
from cdd_cli.models.tokenizers import split_smiles
from cdd_cli.spec.entries import check_constraint
from tests.conftest import make_tokenizer

runner = CliRunner()
ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"
SALICYLIC = "O=C(O)c1ccccc1O"
LEAD = "CCC1(CCC#N)CO1"  # a QM9 held-out molecule


def tanimoto(a: str, b: str) -> float:
    """Morgan radius 2, 2,048 bits, by RDKit's older bit-vector function: not the code judged."""
    fa, fb = (
        rdMolDescriptors.GetMorganFingerprintAsBitVect(Chem.MolFromSmiles(s), 2, nBits=2048)
        for s in (a, b)
    )
    return DataStructs.TanimotoSimilarity(fa, fb)


def entry(where: str = "s.yaml:2", **options) -> ConstraintSpec:
    made = ConstraintSpec("similarity", options, where)
    check_constraint(made)
    return made


def constraint(to: str, model_dir: Path, **bounds) -> list[SimilarityConstraint]:
    loaded = registry.load(str(model_dir), "molecules", "cpu")
    return build_constraints([entry(to=to, **bounds)], loaded, "cpu")


def test_the_judge_is_morgan_tanimoto_radius_2_of_2048_bits(uniform_model_dir: Path):
    (similar,) = constraint(ASPIRIN, uniform_model_dir, min=0.4)
    texts = [SALICYLIC, "OC(=O)c1ccccc1OC(C)=O", "CCO", "C1CC"]
    values = similar.judge(texts)
    assert values[0] == pytest.approx(tanimoto(ASPIRIN, SALICYLIC), abs=0)
    assert values[1] == 1.0  # aspirin in another writing
    assert values[2] == tanimoto(ASPIRIN, "CCO") and values[3] is None
    assert [similar.satisfied(v) for v in values] == [values[0] >= 0.4, True, False, False]
    assert similar.judge_name == JUDGE == "rdkit-tanimoto (Morgan radius 2, 2048 bits)"
    assert similar.label() == "similarity >= 0.4 to CC(=O)Oc1ccccc1C(=O)O"
    assert similar.explain(SALICYLIC) is None  # one lead: nothing more to say


def test_min_and_max_are_two_bounds_like_a_propertys(uniform_model_dir: Path):
    low, high = constraint(ASPIRIN, uniform_model_dir, min=0.2, max=0.6)
    assert (low.name, low.upper_bound, low.tau) == ("similarity.min", False, 0.2)
    assert (high.name, high.upper_bound, high.tau) == ("similarity.max", True, 0.6)
    assert not high.satisfied(high.judge([ASPIRIN])[0])  # itself: too similar
    (diverse,) = constraint(ASPIRIN, uniform_model_dir, max=0.3)
    assert diverse.name == "similarity" and diverse.label().startswith("similarity <= 0.3")


def test_a_file_of_leads_judges_by_the_nearest_and_names_it(
    tmp_path: Path, uniform_model_dir: Path
):
    leads = tmp_path / "leads.smi"
    leads.write_text(f"# my series\n{ASPIRIN} aspirin\n\nCCO,ethanol\n{ASPIRIN}\n")
    (similar,) = constraint(str(leads), uniform_model_dir, min=0.4)
    assert similar.leads == ("CC(=O)Oc1ccccc1C(=O)O", "CCO")  # canonical, once each
    value = similar.judge([SALICYLIC])[0]
    assert value == max(tanimoto(ASPIRIN, SALICYLIC), tanimoto("CCO", SALICYLIC))
    assert similar.explain("OCC") == "nearest lead: CCO"
    assert similar.judge(["OCC"]) == [1.0]
    assert similar.label() == "similarity >= 0.4 to leads.smi (nearest of 2)"
    zipped = tmp_path / "leads.smi.gz"
    with gzip.open(zipped, "wt") as f:
        f.write(f"{ASPIRIN}\n")
    (from_gzip,) = constraint(str(zipped), uniform_model_dir, min=0.4)
    assert from_gzip.leads == ("CC(=O)Oc1ccccc1C(=O)O",)


def test_a_file_is_named_by_its_absolute_path_in_the_resolved_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "leads.smi").write_text(f"{ASPIRIN}\n")
    monkeypatch.chdir(tmp_path)
    made = entry(to="leads.smi", min=0.3)
    assert made.options["to"] == str(tmp_path.resolve() / "leads.smi")
    assert made.prepared["targets"] == ("CC(=O)Oc1ccccc1C(=O)O",)
    assert entry(to=ASPIRIN, min=0.3).options["to"] == ASPIRIN  # a SMILES as given


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"to": "C1CC(", "min": 0.4}, "key 'to': RDKit cannot read 'C1CC(' as a SMILES"),
        ({"to": "C" * 3000, "min": 0.4}, "key 'to': RDKit cannot read 'CCCCCCCC"),
        ({"to": "leads.smi", "min": 0.4}, "key 'to': no such file 'leads.smi' (nor a SMILES)"),
        ({"to": "", "min": 0.4}, "key 'to': needs a SMILES or a file of them, not ''"),
        ({"to": " ", "min": 0.4}, "key 'to': needs a SMILES or a file of them, not ' '"),
        ({"to": "[*]CCO", "min": 0.4}, "key 'to': '[*]CCO' has an attachment point ([*])"),
        ({"to": "CCO"}, "'similarity' needs min or max"),
        ({"to": "CCO", "min": 0.6, "max": 0.4}, "min 0.6 > max 0.4"),
        ({"to": "CCO", "min": 1.5}, "key 'min': 1.5 is outside [0, 1]"),
        ({"min": 0.4}, "constraint 'similarity' needs 'to'"),
    ],
)
def test_bad_leads_and_bounds_are_refused_in_one_line(options: dict, said: str):
    with pytest.raises(InputError) as refused:
        entry(**options)
    message = str(refused.value)
    assert message.startswith(f"s.yaml:2: {said}") and "\n" not in message
    assert len(message) < 300


def test_a_bad_file_of_leads_is_refused_in_one_line(tmp_path: Path):
    bad = tmp_path / "bad.smi"
    bad.write_text(f"{ASPIRIN}\nC1CC(\n")
    with pytest.raises(InputError, match=r"bad.smi: SMILES 2 \('C1CC\('\) is not one RDKit"):
        entry(to=str(bad), min=0.4)
    empty = tmp_path / "empty.smi"
    empty.write_text("# nothing\n\n")
    with pytest.raises(InputError, match=r"empty.smi holds no SMILES"):
        entry(to=str(empty), min=0.4)
    many = tmp_path / "many.smi"
    many.write_text("C\n" * (MAX_TARGETS + 1))
    with pytest.raises(InputError, match=rf"holds {MAX_TARGETS + 1} SMILES; at most"):
        entry(to=str(many), min=0.4)
    attached = tmp_path / "attached.smi"
    attached.write_text(f"{ASPIRIN}\nc1ccc([*])cc1\n")
    with pytest.raises(InputError, match=r"attached.smi: SMILES 2: 'c1ccc\(\[\*\]\)cc1' has an"):
        entry(to=str(attached), min=0.4)
    with pytest.raises(InputError, match=r"is a folder, not a file"):
        entry(to=str(tmp_path), min=0.4)
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "leads.fifo"
        os.mkfifo(fifo)
        with pytest.raises(InputError, match=r"not a file"):
            entry(to=str(fifo), min=0.4)  # refused without opening (it would block)


def test_the_surrogate_scores_a_leads_own_writings_1_and_strangers_less():
    tok = make_tokenizer()
    lead = Chem.MolToSmiles(Chem.MolFromSmiles("CC(C)C(=O)NCC#N"))
    grams = lead_grams((lead,), tok, 22, "cpu")
    written = writings(lead, WRITINGS)
    # Distinct writings, the canonical first, the same every time (a fixed seed).
    assert 4 < len(written) <= WRITINGS and written[0] == lead and written == writings(lead, 8)
    texts = [*written, "CC(C)C(=O)NCC", "c1ccccc1"]
    ids = torch.tensor([tok.encode(t, 24) for t in texts])
    scores = soft_tanimoto(dense(ids, len(tok)), grams)
    assert scores[: len(written)].tolist() == pytest.approx([1.0] * len(written))
    assert 0.4 < scores[-2] < 1.0 and scores[-1] < 0.2
    # Tokens after <eos> are not the molecule's: "C", then the lead's tokens, share little.
    spelled = [tok.index[t] for t in split_smiles(lead)]
    after_eos = torch.tensor([[tok.bos_id, tok.index["C"], tok.eos_id, *spelled]])
    alone = torch.tensor([tok.encode("C", after_eos.shape[1])])
    tail = soft_tanimoto(dense(after_eos, len(tok)), grams).item()
    assert tail == pytest.approx(soft_tanimoto(dense(alone, len(tok)), grams).item())
    assert tail < 0.2


def test_the_surrogate_reads_probabilities_and_sparse_supports_alike_with_gradients():
    tok = make_tokenizer()
    grams = lead_grams(("CC(C)C(=O)NCC#N",), tok, 22, "cpu")
    logits = torch.randn(3, 24, len(tok), generator=torch.Generator().manual_seed(0))
    probs = logits.softmax(-1).requires_grad_()
    score = soft_tanimoto(dense(probs, len(tok)), grams)
    (grad,) = torch.autograd.grad(score.sum(), probs)
    assert grad.abs().sum() > 0 and torch.isfinite(grad).all()
    top = probs.detach().topk(5, -1)
    weights = (top.values / top.values.sum(-1, keepdim=True)).requires_grad_()
    sparse = SparseTokens(weights, top.indices)
    as_dense = torch.zeros_like(probs).scatter(-1, top.indices, weights.detach())
    assert torch.allclose(
        soft_tanimoto(dense(sparse, len(tok)), grams), soft_tanimoto(as_dense, grams)
    )
    sparse_score = soft_tanimoto(dense(sparse, len(tok)), grams)
    (sparse_grad,) = torch.autograd.grad(sparse_score.sum(), weights)
    assert sparse_grad.abs().sum() > 0


def test_a_lead_the_vocabulary_cannot_spell_still_judges_and_its_grams_skip_unknowns(
    uniform_model_dir: Path,
):
    # Chlorine is not a QM9 token: its n-grams can never be written, the rest still count.
    (similar,) = constraint("ClCCO", uniform_model_dir, min=0.3)
    assert similar.judge(["ClCCO"]) == [1.0]
    loaded = registry.load(str(uniform_model_dir), "molecules", "cpu")
    ids = torch.tensor([loaded.tokenizer.encode("CCO", loaded.config.model_length)])
    assert 0 < similar.surrogate(ids)[0] < 1


def test_the_type_is_listed_with_its_keys():
    described = table.BUILTINS["similarity"]
    assert described.domain == "molecules"
    assert list(described.keys) == ["to", "min", "max", "margin"]
    assert described.tau_flag == "min" and described.needs_tau and not described.spec_only
    assert "radius 2, 2048 bits" in described.description
    result = runner.invoke(app, ["constraints", "ls", "--json"])
    row = next(r for r in json.loads(result.stdout) if r["type"] == "similarity")
    assert row["keys"]["to"] == {"required": True}


def test_the_to_flag_gives_the_lead_and_tau_the_minimum():
    spec = build_spec(None, None, ["similarity", "sa"], [0.4, 3.5], *[None] * 5, to=ASPIRIN)
    similar, sa = spec.constraints
    assert similar.options == {"min": 0.4, "to": ASPIRIN} and sa.options == {"tau": 3.5}
    with pytest.raises(InputError, match=r"^--to given without a --constraint that takes it"):
        build_spec(None, None, ["sa"], [3.5], *[None] * 5, to=ASPIRIN)


def test_bad_flags_exit_2_with_one_line():
    for args, said in [
        (["-c", "similarity", "--tau", "0.4", "--to", "C1CC("], "RDKit cannot read 'C1CC('"),
        (["-c", "similarity", "--tau", "0.4"], "--constraint similarity: needs 'to'"),
        (["-c", "similarity", "--tau", "0.3", "--to", ""], "needs a SMILES or a file of them"),
        (["-c", "similarity", "--tau", "0.3", "--to", "[*]CCO"], "has an attachment point"),
        (["--to", "CCO"], "--to given without a --constraint that takes it"),
    ]:
        result = runner.invoke(app, ["molecules", "-n", "1", *args])
        assert result.exit_code == 2, (args, result.stderr)
        assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_fingerprints_are_cached_by_smiles():
    assert fingerprint(ASPIRIN) is fingerprint(ASPIRIN) and fingerprint("C1CC") is None


@pytest.mark.slow
def test_records_under_similarity_agree_with_rdkit(tmp_path: Path):
    spec = tmp_path / "similar.yaml"
    spec.write_text(
        f"constraints:\n  - {{type: similarity, to: '{LEAD}', min: 0.3}}\n"
        "projection: {project_from: 0.5}\nrepair: {surrogates_from: 1}\n"
    )
    result = runner.invoke(
        app, ["molecules", "-n", "8", "--spec", str(spec), "--quiet", "-o", "-"]
    )
    assert result.exit_code in (0, 3), result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 8
    for r in records:
        entry_ = r["constraints"]["similarity"]
        assert entry_["judge"] == JUDGE and entry_["min"] == 0.3
        assert isinstance(entry_["surrogate"], float)
        if r["valid"]:
            assert entry_["value"] == tanimoto(LEAD, r["text"])
        assert entry_["satisfied"] == (entry_["value"] is not None and entry_["value"] >= 0.3)
        assert r["satisfied"] == entry_["satisfied"]
    assert sum(r["satisfied"] for r in records) >= 6


def test_the_api_value_is_a_plain_entry_checked_like_a_specs(uniform_model_dir: Path):
    value = api_constraint("similarity", to=ASPIRIN, min=0.4)
    assert (value.type, value.options) == ("similarity", {"to": ASPIRIN, "min": 0.4})
    loaded = registry.load(str(uniform_model_dir), "molecules", "cpu")
    (built,) = build_constraints([value], loaded, "cpu")
    assert built.leads == ("CC(=O)Oc1ccccc1C(=O)O",) and built.tau == 0.4
    with pytest.raises(InputError, match=r"^constraint 'similarity': key 'to': RDKit cannot"):
        api_constraint("similarity", to="C1CC(", min=0.4)
