"""Kept positions anywhere (`Canvas`): they start as given, no step, hook or decision changes
them, each row may keep its own, and a prompt's canvas draws what a prompt always drew."""

from __future__ import annotations

import torch

from cdd_cli.diffusion.processes import KeptFixed, MaskedProcess, UniformProcess
from cdd_cli.diffusion.sampler import Canvas, Sampler, StepInfo, sample_generator
from tests.diffusion.test_sampler import MASK, Table, V  # the same toy model


def generators(n: int, seed: int = 1) -> list[torch.Generator]:
    return [sample_generator(seed, 0, i) for i in range(n)]


def middle() -> Canvas:
    """Positions 2, 3 and 6 of 8 kept."""
    ids = torch.tensor([[0, 0, 1, 3, 0, 0, 2, 0]])
    kept = torch.zeros(1, 8, dtype=torch.bool)
    kept[0, [2, 3, 6]] = True
    return Canvas(ids, kept)


def test_a_prompts_canvas_keeps_its_prefix_and_says_so():
    canvas = Canvas.prompt(torch.tensor([4, 1]), 3)
    assert canvas.ids.tolist() == [[4, 1, 0, 0, 0]] and canvas.length == 5
    assert canvas.kept.tolist() == [[True, True, False, False, False]] and canvas.prefix == 2
    assert Canvas.blank(4).prefix == 0 and not Canvas.blank(4).kept.any()
    assert middle().prefix == 0


def test_kept_positions_anywhere_stay_through_every_step_and_the_decision():
    canvas = middle()
    for process in (MaskedProcess(V, MASK), UniformProcess(V)):
        sampler = Sampler(Table(8), process, 4, isinstance(process, UniformProcess))
        seen: list = []

        def to_four(probs: torch.Tensor, x: torch.Tensor, info: StepInfo, seen=seen):
            seen.append((x.clone(), info.changing))
            out = torch.zeros_like(probs)
            out[..., 4] = 1.0  # the hook wants 4 everywhere, the kept positions included
            return out

        ids = sampler.sample(generators(3), canvas, to_four)
        kept = canvas.kept[0]
        assert torch.equal(ids[:, kept], canvas.ids[:, kept].expand(3, -1))
        assert (ids[:, ~kept] == 4).all()
        for x, changing in seen:
            assert torch.equal(x[:, kept], canvas.ids[:, kept].expand(3, -1))
            if changing is not None:
                assert not changing[:, kept].any()


def test_a_prompts_canvas_draws_what_the_same_free_positions_draw_after_it():
    # The prior covers the free positions only: under uniform noise the continuation's
    # tokens come from the same stream whether or not a prompt precedes them.
    process = UniformProcess(V)
    canvas = Canvas.prompt(torch.tensor([1, 2]), 4)
    first = []

    def log(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        first.append(x.clone())
        return probs

    Sampler(Table(6), process, 3, True).sample(generators(2), canvas, log)
    priors = torch.stack([process.prior(4, g) for g in generators(2)])
    assert first[0][:, 2:].tolist() == priors.tolist()
    assert first[0][:, :2].tolist() == [[1, 2], [1, 2]]


def test_each_row_may_keep_its_own_positions():
    ids = torch.tensor([[3, 0, 0, 0], [0, 0, 0, 1]])
    kept = torch.tensor([[True, False, False, False], [False, False, False, True]])
    canvas = Canvas(ids, kept)
    sampler = Sampler(Table(4), UniformProcess(V), 3, True)
    out = sampler.sample(generators(2), canvas)
    assert out[0, 0] == 3 and out[1, 3] == 1
    picked = canvas.select([1, 1, 0])
    assert picked.kept.tolist() == [kept[1].tolist(), kept[1].tolist(), kept[0].tolist()]
    assert canvas.rows(1, 2).ids.tolist() == [[0, 0, 0, 1]]
    assert middle().select([5, 9]) is not None and middle().rows(0, 1).length == 8


class Recorder:
    """A syntax that reports what it read and finds the argmax well formed already."""

    def __init__(self):
        self.read: list[torch.Tensor] = []

    def best(self, probs: torch.Tensor) -> None:
        self.read.append(probs.clone())
        return None


def test_the_well_formed_search_reads_the_kept_ids_as_certain():
    syntax = Recorder()
    canvas = middle()
    sampler = Sampler(Table(8), UniformProcess(V), 3, True, syntax)
    sampler.sample(generators(2), canvas)
    kept = canvas.kept[0]
    for probs in syntax.read:
        assert (probs[:, kept].argmax(-1) == canvas.ids[:, kept]).all()
        assert (probs[:, kept].max(-1).values == 1.0).all()
    plain = torch.rand(2, 8, V).softmax(-1)
    assert torch.equal(sampler.well_formed(plain), plain)  # no canvas: as it was


def test_kept_positions_are_fixed_for_the_projection():
    fixed = KeptFixed(UniformProcess(V), middle().kept)
    assert fixed(torch.zeros(3, 8, dtype=torch.long)).tolist() == [middle().kept[0].tolist()] * 3
    none = KeptFixed(MaskedProcess(V, MASK), torch.zeros(1, 8, dtype=torch.bool))
    x = torch.tensor([[MASK, 1, MASK, 2, MASK, MASK, MASK, MASK]])
    assert none(x).tolist() == (x != MASK).tolist()


def test_rows_asked_apart_from_a_per_row_canvas_are_fixed_where_every_row_keeps():
    kept = torch.tensor([[True, True, False], [True, False, False]])
    fixed = KeptFixed(UniformProcess(V), kept)
    assert fixed(torch.zeros(2, 3, dtype=torch.long)).tolist() == kept.tolist()
    assert fixed(torch.zeros(1, 3, dtype=torch.long)).tolist() == [[True, False, False]]
