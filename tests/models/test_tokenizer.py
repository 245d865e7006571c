"""The SMILES tokenizer in the UDLM QM9 layout."""

from __future__ import annotations

import pytest

from cdd_cli.errors import InputError
from cdd_cli.models.tokenizers import SmilesTokenizer, load_tokenizer, split_smiles
from tests.conftest import QM9_SAMPLE, make_tokenizer


def test_layout_and_vocabulary():
    tok = make_tokenizer()
    assert tok.vocab[:5] == ["<bos>", "<eos>", "<mask>", "<pad>", "<unk>"]
    assert (tok.bos_id, tok.eos_id, tok.mask_id, tok.pad_id, tok.unk_id) == (0, 1, 2, 3, 4)
    assert len(tok) == 35  # QM9's 30 SMILES tokens, as in UDLM
    assert split_smiles("C[NH3+]c1cc[nH]c1Br") == [
        "C",
        "[NH3+]",
        "c",
        "1",
        "c",
        "c",
        "[nH]",
        "c",
        "1",
        "Br",
    ]


def test_encode_decode_round_trip(tmp_path):
    tok = make_tokenizer()
    for smiles in QM9_SAMPLE:
        ids = tok.encode(smiles, 24)
        assert ids is not None and len(ids) == 24
        assert ids[0] == tok.bos_id and tok.eos_id in ids
        assert tok.decode(ids) == smiles
    assert tok.encode("C" * 23, 24) is None  # does not fit with <bos> and <eos>
    tok.save(tmp_path)
    assert load_tokenizer(tmp_path).vocab == tok.vocab


def test_decode_stops_at_eos_and_marks_unreadable_tokens():
    tok = make_tokenizer()
    c = tok.index["C"]
    assert tok.decode([tok.bos_id, c, c, tok.eos_id, c, c]) == "CC"
    assert tok.decode([tok.bos_id, c, tok.pad_id, c, tok.eos_id]) == "CC"
    assert tok.decode([c, tok.bos_id, c]) == "C?C"  # a stray <bos> must not vanish
    assert tok.decode([tok.bos_id, c, tok.unk_id]) == "C?"


def test_bad_tokenizer_files(tmp_path):
    with pytest.raises(InputError, match=r"no tokenizer\.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"type": "smiles-regex", "vocab": ["C"]}')
    with pytest.raises(InputError, match="first five tokens"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{")
    with pytest.raises(InputError, match="not a cdd tokenizer"):
        load_tokenizer(tmp_path)
    assert isinstance(SmilesTokenizer(["C"]), SmilesTokenizer)
