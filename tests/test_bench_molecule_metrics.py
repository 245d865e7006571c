"""The metrics of bench/genmol_table.py and bench/lead_opt_table.py against their definitions
on hand-checked molecules (GenMol's denominators, TDC's diversity, JT-VAE's penalised logP and
its own released values)."""

from __future__ import annotations

import pytest
from rdkit import Chem

from bench.genmol_table import core, distance, diversity, holds, scores
from bench.lead_opt_table import DATA, best_edit, leads, penalised_logp, ring_penalty


def test_penalised_logp_matches_jtvae_file() -> None:
    """The data file's column is JT-VAE's logP - SA; its first lead has no ring over 6 atoms."""
    smiles, value = DATA.read_text().splitlines()[0].split()
    assert penalised_logp(Chem.MolFromSmiles(smiles)) == pytest.approx(float(value), abs=1e-6)


def test_ring_penalty_counts_atoms_beyond_six() -> None:
    assert ring_penalty(Chem.MolFromSmiles("c1ccccc1")) == 0
    assert ring_penalty(Chem.MolFromSmiles("C1CCCCCCC1")) == 2
    assert ring_penalty(Chem.MolFromSmiles("CCO")) == 0


def test_diversity_and_distance_ends() -> None:
    assert diversity(["C", "O"]) == 1.0  # no Morgan bit shared
    assert diversity(["CCO", "CCO"]) == 0.0
    assert diversity(["CCO"]) == 0.0  # one molecule: 0, as GenMol's run.py
    assert distance(["CCO"], "CCO") == 0.0


def test_scores_use_genmol_denominators() -> None:
    # Two valid samples hold the benzene (one repeated), one valid sample lacks it, one none.
    # QED >= 0.6 and SA <= 4: the amide (0.85, 1.44) is of quality, toluene (QED 0.46) not.
    texts = ["O=C(NCc1ccccc1)c1ccncc1", "O=C(NCc1ccccc1)c1ccncc1", "Cc1ccccc1", "CCO", None]
    row = scores(texts, "[*]c1ccccc1", "O=C(NCc1ccccc1)c1ccncc1", 5)
    assert (row["valid"], row["parsed"], row["part_broken"]) == (3, 4, 1)
    assert row["validity"] == 3 / 5
    assert row["uniqueness"] == 2 / 3
    assert row["quality"] == 1 / 5  # distinct ones of quality over samples asked


def test_linker_core_needs_both_fragments_on_distinct_atoms() -> None:
    pair = core("[1*]c1ccccc1.[2*]c1ccccc1")
    assert not holds("Cc1ccccc1", pair)
    assert holds("c1ccc(Cc2ccccc2)cc1", pair)


def test_best_edit_skips_the_lead_and_counts_violations() -> None:
    lead = "CCCCC(=O)O"
    records = [
        {"text": lead, "valid": True, "satisfied": True},  # the lead itself: no edit
        {"text": "CCCCCC(=O)O", "valid": True, "satisfied": True},
        {"text": "c1ccccc1", "valid": True, "satisfied": True},  # far: a violation
        {"text": "C(", "valid": False, "satisfied": False},
    ]
    best = best_edit(lead, records, 0.4)
    assert best["edit"] == "CCCCCC(=O)O"
    gain = penalised_logp(Chem.MolFromSmiles("CCCCCC(=O)O")) - penalised_logp(
        Chem.MolFromSmiles(lead)
    )
    assert best["improvement"] == pytest.approx(gain)
    assert best["violations"] == 1


def test_leads_are_written_in_the_model_vocabulary() -> None:
    chosen = leads("moses-mdlm")
    assert len(chosen) == 115
    assert all("@" not in s and "+" not in s and "-]" not in s for s in chosen)
