"""The SELFIES tokenizer: UDLM's layout over SELFIES tokens, read back as SMILES."""

from __future__ import annotations

import random

from rdkit import Chem

from cdd_cli.models.tokenizers import SelfiesTokenizer, SmilesTokenizer, load_tokenizer
from tests.conftest import QM9_SAMPLE

DRUGS = [
    "CC(=O)Oc1ccccc1C(=O)O",  # aspirin
    "CN1C=NC2=C1C(=O)N(C)C(=O)N2C",  # caffeine
    "O=C(O)c1ccc(Cl)cc1Br",
    "C1CC2CCC1C2",
]


def canonical(smiles: str) -> str | None:
    mol = Chem.MolFromSmiles(smiles)
    return None if mol is None else Chem.MolToSmiles(mol)


def test_round_trip_keeps_the_molecule(tmp_path):
    molecules = [*QM9_SAMPLE, *DRUGS]
    tok = SelfiesTokenizer.from_corpus(molecules)
    assert tok.vocab[:5] == ["<bos>", "<eos>", "<mask>", "<pad>", "<unk>"]
    assert "[C]" in tok.vocab and "[Ring1]" in tok.vocab and "C" not in tok.vocab
    for smiles in molecules:
        ids = tok.encode(smiles, 64)
        assert ids is not None and len(ids) == 64 and ids[0] == tok.bos_id
        assert canonical(tok.decode(ids)) == canonical(smiles)
    assert tok.encode(DRUGS[0], 8) is None  # 13 tokens do not fit in 8
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert isinstance(again, SelfiesTokenizer) and again.vocab == tok.vocab


def test_every_string_with_an_atom_is_a_molecule():
    tok = SelfiesTokenizer.from_corpus([*QM9_SAMPLE, *DRUGS])
    stream = random.Random(0)
    words = list(range(5, len(tok)))
    atoms = [i for i in words if not any(w in tok.vocab[i] for w in ("Ring", "Branch"))]
    empty = 0
    for _ in range(300):
        ids = [tok.bos_id, *stream.choices(words, k=stream.randint(1, 40)), tok.eos_id]
        smiles = tok.decode(ids)
        if not set(ids) & set(atoms):  # only ring and branch tokens: no atom, no molecule
            assert smiles == "" and not tok.readable(ids)
            empty += 1
            continue
        assert tok.readable(ids) and Chem.MolFromSmiles(smiles) is not None, smiles
    assert empty < 30


def test_specials_out_of_place_read_as_no_molecule():
    tok = SelfiesTokenizer.from_corpus(DRUGS)
    c = tok.index["[C]"]
    assert canonical(tok.decode([tok.bos_id, c, c, tok.eos_id, c])) == "CC"
    assert canonical(tok.decode([tok.bos_id, c, tok.mask_id, tok.pad_id, c, tok.eos_id])) == "CC"
    for ids in ([c, tok.bos_id, c], [tok.bos_id, c, tok.unk_id], [tok.bos_id, tok.eos_id]):
        assert Chem.MolFromSmiles(tok.decode(ids) or "?") is None or not tok.decode(ids)
        assert not tok.readable(ids)


def test_a_smiles_and_a_selfies_tokenizer_are_told_apart(tmp_path):
    SmilesTokenizer.from_corpus(DRUGS).save(tmp_path)
    assert isinstance(load_tokenizer(tmp_path), SmilesTokenizer)
    assert SelfiesTokenizer([]).syntax() is None  # nothing to decode by: every string reads


def test_the_layout_keeps_specials_in_their_places():
    import torch

    tok = SelfiesTokenizer.from_corpus(DRUGS)
    layout = tok.layout()
    probs = torch.full((2, 4, len(tok)), 1.0 / len(tok))
    probs[1, 2] = 0.0
    probs[1, 2, tok.bos_id] = 1.0  # nothing but a stray <bos>: left as it is, not made NaN
    out = layout.restrict(probs.clone())
    assert torch.allclose(out[0].sum(-1), torch.ones(4))
    assert out[0, 0, tok.bos_id] > 0 and (out[0, 1:, tok.bos_id] == 0).all()
    assert (out[0, :, tok.unk_id] == 0).all()
    assert torch.equal(out[1, 2], probs[1, 2])
    assert SmilesTokenizer.from_corpus(DRUGS).layout() is None  # SMILES records as they were
