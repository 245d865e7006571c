"""Novelty: canonical look-ups, the best-first flip search and its budget."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
import torch

from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.novelty import NoveltyConstraint, check
from cdd_cli.diffusion.processes import make_argmax
from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import canonical
from cdd_cli.evaluate.reference import model_reference
from cdd_cli.models import registry
from cdd_cli.projection.search import SearchSettings, best_first
from cdd_cli.projection.stages import flip_search as flip_search_stage
from cdd_cli.spec.model import Spec
from tests.conftest import make_tokenizer
from tests.generation import generation


def test_judge_uses_canonical_forms_on_both_sides():
    novelty = NoveltyConstraint(reference=frozenset({"CCO"}))
    assert novelty.judge(["OCC", "CCO", "CCN", "", "C1CC"]) == [0.0, 0.0, 1.0, None, None]
    assert not novelty.accepts("OCC") and novelty.accepts("NCC")
    # A repeat inside one list, in another spelling, is not novel either.
    assert novelty.judge(["CCN", "NCC"]) == [1.0, 0.0]
    novelty.remember(["NCC"])
    assert novelty.judge(["CCN"]) == [0.0]
    assert novelty.satisfied(1.0) and not novelty.satisfied(0.0) and not novelty.satisfied(None)
    assert novelty.label() == "novel"  # what a summary names it by (no tau to show)


def peaked(tokenizer, smiles: str, length: int = 12, sharpness: float = 5.0) -> torch.Tensor:
    """A distribution whose argmax spells `smiles`, with runners-up at every position."""
    ids = tokenizer.encode(smiles, length)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(length, len(tokenizer), generator=gen)
    logits[torch.arange(length), ids] += sharpness
    return logits.softmax(-1)


def test_known_molecule_is_projected_to_a_novel_valid_one():
    tok = make_tokenizer()
    novelty = NoveltyConstraint(reference=frozenset({"CCO", "CCC", "CCN", "CC=O"}))
    probs = peaked(tok, "CCO")
    assert tok.decode(probs.argmax(-1).tolist()) == "CCO"
    result = best_first(
        probs,
        torch.ones(12, dtype=torch.bool),
        lambda ids: novelty.accepts(tok.decode(ids)),
        SearchSettings(max_nodes=2000),
    )
    assert result.ids is not None and result.nodes >= 2
    text = tok.decode(result.ids)
    assert novelty.judge([text]) == [1.0]
    projected = make_argmax(probs, result.ids)
    assert projected.argmax(-1).tolist() == result.ids
    assert torch.allclose(projected.sum(-1), torch.ones(12), atol=1e-5)
    changed = (projected.argmax(-1) != probs.argmax(-1)).sum()
    assert 1 <= changed <= 3  # cheapest flips, not a rewrite


def test_search_order_is_by_total_flip_cost():
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.6, 0.35, 0.05], [0.9, 0.06, 0.04]])
    seen: list[list[int]] = []

    def record(ids: list[int]) -> bool:
        seen.append(ids)
        return False

    best_first(
        probs, torch.ones(3, dtype=torch.bool), record, SearchSettings(top_k=2, max_nodes=2000)
    )

    def cost(ids):
        return sum(float(probs[i].max() - probs[i, v]) for i, v in enumerate(ids))

    costs = [cost(ids) for ids in seen]
    assert seen[0] == [0, 0, 0]
    assert costs == sorted(costs)
    assert len(seen) == len({tuple(s) for s in seen}) == 3 * 3 * 3  # every combination once


def test_search_respects_its_budget_and_fixed_positions():
    probs = torch.rand(10, 8).softmax(-1)
    calls = []
    movable = torch.ones(10, dtype=torch.bool)
    movable[:4] = False
    base = probs.argmax(-1).tolist()

    def never(ids: list[int]) -> bool:
        calls.append(ids)
        assert ids[:4] == base[:4]
        return False

    result = best_first(probs, movable, never, SearchSettings(top_k=3, max_nodes=50))
    assert result.ids is None and result.nodes == 50 and len(calls) == 50


def test_canonical_ids_pad_after_the_first_eos_and_drop_stray_padding():
    tok = make_tokenizer()
    ids = tok.encode("CCCO", 10)
    truncated = list(ids)
    truncated[3] = tok.eos_id  # <bos> C C <eos> C O <eos> <pad>...
    assert tok.canonical_ids(truncated) == tok.encode("CC", 10)
    gapped = list(ids)
    gapped[2] = tok.pad_id  # <bos> C <pad> C O ...: reads as "CCO"
    assert tok.canonical_ids(gapped) == tok.encode("CCO", 10)
    assert tok.canonical_ids(ids) == ids


def test_canonical_ids_read_as_the_same_text_in_the_training_layout():
    tok = make_tokenizer()
    gen = torch.Generator().manual_seed(0)
    specials = 0
    for _ in range(2000):
        # Mostly real tokens, with specials sprinkled in where the sampler may put them.
        ids = torch.randint(5, len(tok), (10,), generator=gen)
        spots = torch.rand(10, generator=gen) < 0.2
        ids[spots] = torch.randint(0, 5, (int(spots.sum()),), generator=gen)
        ids = ids.tolist()
        read = tok.canonical_ids(ids)
        assert tok.decode(read) == tok.decode(ids)
        assert tok.canonical_ids(read) == read
        # The text round trip defines the layout (the fast path must agree with it).
        assert read == (tok.encode(tok.decode(ids), 10) or ids)
        specials += read != ids
    assert specials > 100  # the draw exercised the slow path too


def one_hot_ish(tok, smiles: str, length: int, runners_up: dict[int, tuple[str, float]]):
    """Rows with 0.9 on the tokens of `smiles` and, at the given positions, one runner-up."""
    ids = tok.encode(smiles, length)
    probs = torch.full((length, len(tok)), 0.01)
    probs[torch.arange(length), ids] = 0.9
    for position, (token, p) in runners_up.items():
        probs[position, tok.index.get(token, tok.eos_id)] = p
    return probs / probs.sum(-1, keepdim=True)


def test_a_truncation_pays_for_every_token_it_removes():
    tok = make_tokenizer()
    # Cutting after "CC" (an <eos> at position 3) is the cheapest single flip, but it removes
    # four tokens; putting an N at position 2 costs slightly more as a flip and removes none.
    probs = one_hot_ish(tok, "CCCCCO", 12, {3: ("<eos>", 0.07), 2: ("N", 0.06)})

    def accept(ids: list[int]) -> bool:
        text = tok.decode(ids)
        return "N" in text or len(text) <= 2

    movable = torch.ones(12, dtype=torch.bool)
    plain = best_first(probs, movable, accept, SearchSettings(max_nodes=2000))
    assert tok.decode(plain.ids) == "CC"
    read = best_first(probs, movable, accept, SearchSettings(max_nodes=2000), tok)
    assert tok.decode(read.ids) == "CNCCCO"
    assert read.ids == tok.encode("CNCCCO", 12)


def test_tokens_after_the_argmax_eos_are_not_charged_to_every_candidate():
    tok = make_tokenizer()
    probs = one_hot_ish(tok, "CCC", 12, {2: ("N", 0.06)})
    for position, token in ((5, "C"), (6, "O")):  # junk after the <eos>: reads as "CCC"
        probs[position] = 0.01
        probs[position, tok.index[token]] = 0.9
        probs[position] /= probs[position].sum()
    assert tok.decode(probs.argmax(-1).tolist()) == "CCC"
    result = best_first(
        probs,
        torch.ones(12, dtype=torch.bool),
        lambda ids: "N" in tok.decode(ids),
        SearchSettings(max_nodes=20),
        tok,
    )
    assert result.ids == tok.encode("CNC", 12) and result.nodes <= 3


def runner_ups_of_ends(tok, smiles: str, length: int) -> torch.Tensor:
    """Peaked rows spelling `smiles`, with <eos> as a runner-up inside the molecule (a cut:
    its reading costs at least its flips, so the order of readings is exact)."""
    probs = peaked(tok, smiles, length=length, sharpness=5.0)
    for position in range(2, len(tok.encode(smiles, length)) - 1):
        probs[position, tok.eos_id] += 0.08
    probs = probs / probs.sum(-1, keepdim=True)
    assert probs.argmax(-1).tolist() == tok.encode(smiles, length)
    return probs


def test_canonical_search_judges_each_reading_once_in_order_of_its_cost():
    tok = make_tokenizer()
    probs = runner_ups_of_ends(tok, "CC(C)CO", 12)
    movable = torch.ones(12, dtype=torch.bool)
    movable[0] = False  # <bos>: flipping it shifts the reading (see the module docstring)
    base = probs.argmax(-1).tolist()
    top = probs.max(-1).values

    def cost(ids: list[int]) -> float:
        return float((top - probs[torch.arange(12), torch.tensor(ids)]).sum())

    def judged_by(reader) -> list[list[int]]:
        seen: list[list[int]] = []

        def record(ids: list[int]) -> bool:
            seen.append(ids)
            return False

        best_first(probs, movable, record, SearchSettings(top_k=3, max_nodes=400), reader)
        return seen

    plain = judged_by(None)
    assert any(tok.canonical_ids(ids) != ids for ids in plain)  # the set-up has cuts
    seen = judged_by(tok)
    costs = [cost(ids) for ids in seen]
    assert 100 < len(seen) == len({tuple(s) for s in seen})
    assert all(tok.canonical_ids(ids) == ids and ids[0] == base[0] for ids in seen)
    assert all(b >= a - 1e-5 for a, b in itertools.pairwise(costs))
    # Truncations are judged too, at their full cost (after cheaper substitutions).
    cuts = [i for i, ids in enumerate(seen) if len(tok.decode(ids)) < len("CC(C)CO")]
    assert cuts and cuts[0] > 0


def test_a_truncation_is_found_when_it_is_the_only_answer():
    tok = make_tokenizer()
    probs = runner_ups_of_ends(tok, "CCCO", 12)
    result = best_first(
        probs,
        torch.ones(12, dtype=torch.bool),
        lambda ids: len(tok.decode(ids)) <= 3,
        SearchSettings(max_nodes=2000),
        tok,
    )
    assert result.ids is not None and len(tok.decode(result.ids)) <= 3
    assert result.ids == tok.canonical_ids(result.ids)


def test_a_fixed_token_the_argmax_does_not_read_keeps_the_search_going():
    # A masked model may unmask an atom after the <eos> it will end on: its reading pads that
    # atom, which the search may not change, so such candidates are judged as they stand.
    tok = make_tokenizer()
    probs = one_hot_ish(tok, "CCO", 10, {2: ("N", 0.3)})
    probs[5] = 0.01
    probs[5, tok.index["C"]] = 0.9
    probs[5] /= probs[5].sum()
    movable = torch.ones(10, dtype=torch.bool)
    movable[5] = False
    result = best_first(
        probs, movable, lambda ids: "N" in tok.decode(ids), SearchSettings(max_nodes=2000), tok
    )
    assert tok.decode(result.ids) == "CNO" and result.nodes <= 3
    assert result.ids[5] == tok.index["C"]


def test_each_reading_is_judged_once():
    tok = make_tokenizer()
    probs = runner_ups_of_ends(tok, "CC(C)CO", 12)
    texts: list[str] = []

    def record(ids: list[int]) -> bool:
        texts.append(tok.decode(ids))
        return False

    result = best_first(
        probs, torch.ones(12, dtype=torch.bool), record, SearchSettings(max_nodes=500),
        tok,
    )  # fmt: skip
    assert result.nodes == len(texts) and len(texts) == len(set(texts)) > 100


def test_novel_generation_never_returns_a_known_molecule(
    shipped_vocab_model_dir: Path, monkeypatch
):
    readings = []

    def spy(*args, **kwargs):
        readings.append(args[4] if len(args) > 4 else kwargs.get("reader"))
        return best_first(*args, **kwargs)

    monkeypatch.setattr(flip_search_stage, "best_first", spy)
    loaded = registry.load(str(shipped_vocab_model_dir), "molecules")
    # The tiny random model mostly writes nonsense; declare everything valid it makes known.
    spec = Spec(method="cdd")
    spec.search.max_nodes = 300
    spec.repair.max_redraws = 1
    novelty = NoveltyConstraint(reference=model_reference(loaded.directory))
    draws = generation(spec, loaded, [novelty], 6).run(range(6))
    reported = [d for d in draws if d.satisfied]
    for d in draws:
        assert d.projection["search_nodes"] > 0 or d.satisfied
    texts = [d.text for d in reported]
    fresh = NoveltyConstraint(reference=model_reference(loaded.directory))
    assert fresh.judge(texts) == [1.0] * len(texts)  # valid, unknown and all different
    # The search read SMILES as the tokenizer does (a cut pays for what it removes).
    assert readings and all(r is loaded.tokenizer for r in readings)


def test_flips_past_the_end_of_the_text_are_not_read_again():
    tok = make_tokenizer()
    probs = peaked(tok, "CCO", length=16, sharpness=3.0)  # room for flips after the <eos>
    base = probs.argmax(-1).tolist()
    read: list[list[int]] = []

    class Spy:
        text_end = staticmethod(tok.text_end)

        @staticmethod
        def canonical_ids(ids: list[int]) -> list[int]:
            read.append(ids)
            return tok.canonical_ids(ids)

    movable = torch.ones(16, dtype=torch.bool)
    result = best_first(probs, movable, lambda ids: False, SearchSettings(max_nodes=300), Spy)
    assert result.ids is None and len(read) > 300
    flipped_past_end = [
        ids
        for ids in read
        if any(
            a != b and j > tok.text_end(ids) for j, (a, b) in enumerate(zip(ids, base, strict=True))
        )
    ]
    assert not flipped_past_end


def test_novelty_remembers_every_batch_and_redraw_of_a_run():
    """After each batch (and each redraw of it), the molecules that satisfied the constraints
    are known to novelty: a later batch repeating one is not novel. No run holds a canonical
    SMILES twice among its satisfied records."""
    loaded = registry.load("default-molecules", "molecules")
    novelty = NoveltyConstraint(reference=frozenset())
    drawing = generation(Spec(method="cdd"), loaded, [novelty], 4)
    draws = drawing.run(range(0, 12)) + drawing.run(range(12, 24))
    kept = [canonical(d.text) for d in draws if d.satisfied]
    assert len(kept) >= 12 and len(set(kept)) == len(kept)
    assert novelty.seen == set(kept)
    first = next(d.text for d in draws if d.satisfied)
    assert novelty.judge([first]) == [0.0]  # what a batch kept, a later one cannot repeat


def test_a_reference_that_is_a_fifo_or_a_device_is_refused_by_the_spec_check(tmp_path: Path):
    fifo = tmp_path / "ref.fifo"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a character device")):
        entry = ConstraintSpec("novelty", {"reference": str(path)}, "s.yaml: constraints[0]")
        with pytest.raises(InputError, match=f"constraints\\[0\\]: key 'reference': .* is {kind}"):
            check(entry)
