"""The sampling loop on a stand-in model whose prediction at a position is a fixed function of
the token there: what the hook and `on_step` are told, when the model is asked, how a step is
cut to rows, and how `denoise` and `finish` share a pass."""

from __future__ import annotations

import hashlib

import pytest
import torch

from cdd_cli.diffusion.processes import MaskedProcess, OrderedProcess, UniformProcess, make_argmax
from cdd_cli.diffusion.sampler import (
    Canvas,
    Denoised,
    Remembered,
    Sampler,
    StepInfo,
    sample_generator,
    sample_seed,
    well_formed,
)

V, MASK = 6, 5


class Table(torch.nn.Module):
    """Logits at position l of a row: `weight[l, x[l]]` (V-wide); logs every call."""

    def __init__(self, length: int, seed: int = 0):
        super().__init__()
        weight = torch.randn(length, V, V, generator=torch.Generator().manual_seed(seed))
        self.weight = torch.nn.Parameter(weight * 3.0)
        self.calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []

    def forward(self, x: torch.Tensor, sigma: torch.Tensor, where=None) -> torch.Tensor:
        self.calls.append((x.clone(), sigma.clone(), None if where is None else where.clone()))
        logits = self.weight[torch.arange(x.shape[1]), x]
        return logits if where is None else logits[where]


class Next(torch.nn.Module):
    """Predicts token v + 1 (capped at `top`) wherever v stands: each noise-removal pass moves
    every token one up, until all stand at `top`."""

    def __init__(self, top: int):
        super().__init__()
        self.unused = torch.nn.Parameter(torch.zeros(1))
        self.top, self.calls = top, 0

    def forward(self, x: torch.Tensor, sigma: torch.Tensor, where=None) -> torch.Tensor:
        self.calls += 1
        return torch.nn.functional.one_hot((x + 1).clamp(max=self.top), V).float() * 10.0


def generators(n: int, seed: int = 1) -> list[torch.Generator]:
    return [sample_generator(seed, 0, i) for i in range(n)]


class Log:
    """A hook that logs what it is shown and hands the prediction back unchanged."""

    def __init__(self):
        self.seen: list[tuple[torch.Tensor, torch.Tensor, StepInfo]] = []

    def __call__(self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        self.seen.append((probs, x.clone(), info))
        return probs


def test_a_draws_seed_is_the_hash_of_its_names_and_its_generator_starts_there():
    def blake(key: str) -> int:
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") >> 1

    assert sample_seed(3, 1, 4) == blake("3/1/4") == sample_seed(3, 1, 4, 0)
    assert sample_seed(3, 1, 4, 2) == blake("3/1/4/2")
    assert 0 <= sample_seed(3, 1, 4, 2) < 2**63
    assert sample_generator(3, 1, 4).initial_seed() == sample_seed(3, 1, 4)
    assert sample_generator(3, 1, 4, 2).initial_seed() == sample_seed(3, 1, 4, 2)


def test_a_step_cut_to_rows_is_what_its_cut_makes_of_it():
    plain = StepInfo(1, 4, 0.5, 0.25)
    assert plain.rows(1, 3) is plain  # nothing row-wise to cut
    asked = []

    def cut(a: int, b: int) -> StepInfo:
        asked.append((a, b))
        return StepInfo(1, 4, 0.5, 0.25, changing=torch.ones(b - a, 2, dtype=torch.bool))

    part = StepInfo(1, 4, 0.5, 0.25, cut=cut).rows(1, 3)
    assert asked == [(1, 3)] and part.changing.shape == (2, 2)


class Fixed:
    """A syntax whose best sequence is `ids` (None: the argmax is well formed already)."""

    def __init__(self, ids):
        self.ids, self.read = ids, []

    def best(self, probs: torch.Tensor) -> torch.Tensor | None:
        self.read.append(probs)
        return self.ids


def test_well_formed_makes_the_syntaxs_best_sequence_the_argmax():
    probs = torch.rand(2, 3, V, generator=torch.Generator().manual_seed(0)).softmax(-1)
    assert well_formed(probs, None) is probs
    already = Fixed(None)
    assert well_formed(probs, already) is probs and already.read == [probs]
    ids = torch.tensor([[1, 2, 3], [0, 0, 4]])
    made = well_formed(probs, Fixed(ids))
    assert torch.equal(made, make_argmax(probs, ids)) and torch.equal(made.argmax(-1), ids)


def test_a_remembered_draw_is_drawn_once_per_tensor_and_version():
    drawn = []

    def draw(probs: torch.Tensor) -> torch.Tensor:
        drawn.append(probs)
        return probs.argmax(-1)

    decide = Remembered(draw)
    probs = torch.tensor([[0.2, 0.8], [0.9, 0.1]])
    first = decide(probs)
    assert first.tolist() == [1, 0] and len(drawn) == 1
    first[0] = 7  # a caller's edit is not the memory's
    again = decide(probs)
    assert again.tolist() == [1, 0] and len(drawn) == 1
    probs[0, 0] = 1.0  # edited in place: drawn again
    assert decide(probs).tolist() == [0, 0] and len(drawn) == 2
    assert decide(probs.clone()).tolist() == [0, 0] and len(drawn) == 3  # another tensor
    with torch.inference_mode():
        frozen = torch.tensor([[0.3, 0.7]])
    assert decide(frozen).tolist() == [1] and decide(frozen).tolist() == [1]
    assert len(drawn) == 5  # no version to tell an edit by: drawn each time


def masked(length: int, time_conditioning: bool = False, steps: int = 5, seed: int = 0):
    model = Table(length, seed)
    return Sampler(model, MaskedProcess(V, MASK), steps, time_conditioning), model


def test_the_hook_is_shown_each_regular_step_then_the_final_prediction():
    sampler, _ = masked(8)
    hook, told = Log(), []
    times = sampler.process.timesteps(5).tolist()
    ids = sampler.sample(generators(3), 8, hook, told.append)
    assert ids.shape == (3, 8) and not (ids == MASK).any()
    infos = [info for _, _, info in hook.seen]
    assert [(i.index, i.steps) for i in infos] == [(0, 5), (1, 5), (2, 5), (3, 5), (5, 5)]
    assert [(i.t, i.s) for i in infos[:4]] == [(times[k], times[k + 1]) for k in range(4)]
    assert (infos[4].t, infos[4].s) == (times[4], 0.0)
    assert infos[4].changing is None and infos[4].decide is None and infos[4].cut is None
    # on_step: each regular step as the hook saw it, then the last step once decided.
    assert told[:4] == infos[:4]
    assert (told[4].index, told[4].steps, told[4].t, told[4].s) == (4, 5, times[4], 0.0)
    assert len(told) == 5
    # The hook's x is the pass so far: each step's x is the step before's draw.
    assert (hook.seen[0][1] == MASK).all()
    for (_, before, info), (_, after, _) in zip(hook.seen, hook.seen[1:4], strict=False):
        moved = after != before
        assert torch.equal(moved, info.changing)
    # The final prediction, asked anew (the last step moved x), overwrites the steps' tensor.
    assert not torch.equal(hook.seen[4][1], hook.seen[3][1])
    assert len({probs.data_ptr() for probs, _, _ in hook.seen}) == 1
    # The output is the final prediction's argmax where masks were left.
    final_probs, final_x, _ = hook.seen[4]
    assert torch.equal(ids, torch.where(final_x == MASK, final_probs.argmax(-1), final_x))


def test_the_model_is_asked_with_the_steps_noise_and_only_where_x_moved():
    sampler, model = masked(3, steps=8)
    hook = Log()
    sampler.sample(generators(2, seed=6), 3, hook)
    times = sampler.process.timesteps(8).tolist()
    xs = [x for _, x, _ in hook.seen]  # x at steps 0 .. 6, then at the final prediction
    assert len(xs) == 8  # masks were left for the final prediction
    assert torch.equal(xs[7], xs[6])  # and the last step decided none: its prediction stands
    # A prediction is reused (not asked again) while x stays as it was: the model ignores t.
    asked_at = [0] + [k for k in range(1, 8) if not torch.equal(xs[k], xs[k - 1])]
    assert len(model.calls) == len(asked_at) < 8
    for (x, sigma, where), k in zip(model.calls, asked_at, strict=True):
        assert torch.equal(x, xs[k])
        expected = sampler.process.schedule.sigma(torch.full((2,), times[min(k, 7)]))
        assert torch.equal(sigma, expected)
        assert torch.equal(where, x == MASK)
    # Every prediction is written into the one before: one tensor for the whole pass.
    assert len({probs.data_ptr() for probs, _, _ in hook.seen}) == 1
    # A time-conditioned model is asked at every step, and so is one of uniform noise.
    timed, model = masked(8, time_conditioning=True)
    assert not timed.cacheable and sampler.cacheable
    timed.sample(generators(2), 8)
    assert len(model.calls) == 5
    assert not Sampler(Table(8), UniformProcess(V), 5, False).cacheable


def test_a_step_cut_to_rows_draws_those_rows_as_the_batch_does():
    sampler, _ = masked(8, steps=4)
    parts = []

    def hook(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        if info.cut is None:
            return probs
        part = info.rows(1, 3)
        assert (part.index, part.steps, part.t, part.s) == (info.index, 4, info.t, info.s)
        assert torch.equal(part.changing, info.changing[1:3])
        assert part.changing.data_ptr() == info.changing[1:3].data_ptr()  # a view
        assert torch.equal(part.decide(probs[1:3]), info.decide(probs)[1:3])
        again = part.rows(1, 2)  # a part's own cut is the batch's, named in batch rows
        assert torch.equal(again.changing, info.changing[1:2])
        parts.append(part)
        return probs

    sampler.sample(generators(4), 8, hook)
    assert len(parts) == 3
    uniform = Sampler(Table(8), UniformProcess(V), 3, True)
    cuts = []

    def uniform_hook(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        if info.cut is not None:
            cuts.append(info.rows(0, 1))
            assert info.decide is None
        return probs

    uniform.sample(generators(2), 8, uniform_hook)
    assert len(cuts) == 2 and all(c.decide is None and c.changing.shape == (1, 8) for c in cuts)


def test_a_hook_that_reorders_the_positions_a_step_decides_is_followed():
    sampler, _ = masked(6, steps=3)

    def first_only(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        if info.changing is not None:
            info.changing[:] = False
            info.changing[:, info.index] = True  # decide position `index` alone
        return probs

    seen = Log()

    def both(probs, x, info):
        return seen(first_only(probs, x, info), x, info)

    ids = sampler.sample(generators(2), 6, both)
    assert (seen.seen[2][1][:, 2:] == MASK).all()  # positions 0 and 1 decided, no other
    assert not (seen.seen[2][1][:, :2] == MASK).any() and not (ids == MASK).any()


def test_a_prompt_stays_as_given_and_no_step_may_change_it():
    prefix = torch.tensor([1, 0, 3])
    sampler, _ = masked(8, steps=4)
    hook = Log()
    ids = sampler.sample(generators(2), Canvas.prompt(prefix, 5), hook)
    assert ids.shape == (2, 8) and torch.equal(ids[:, :3], prefix.expand(2, -1))
    for _, x, info in hook.seen:
        assert torch.equal(x[:, :3], prefix.expand(2, -1))
        if info.changing is not None:
            assert not info.changing[:, :3].any()
    # Uniform noise would resample the prompt's tokens: each draw and the decision put it back.
    uniform = Sampler(Table(8, seed=2), UniformProcess(V), 4, True)
    forced = Log()

    def to_four(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        forced(probs, x, info)
        out = torch.zeros_like(probs)
        out[..., 4] = 1.0
        return out

    ids = uniform.sample(generators(3), Canvas.prompt(prefix, 5), to_four)
    assert torch.equal(ids[:, :3], prefix.expand(3, -1)) and (ids[:, 3:] == 4).all()
    for _, x, _ in forced.seen[1:]:
        assert torch.equal(x[:, :3], prefix.expand(3, -1))
    # An empty prompt is no prompt.
    none = sampler.denoise(generators(1), Canvas.prompt(torch.tensor([], dtype=torch.long), 5))
    assert none.canvas is None and none.x.shape == (1, 5)


def test_denoise_stops_before_the_final_projection_which_finish_makes():
    sampler, _ = masked(8, steps=4)
    hook = Log()
    denoised = sampler.denoise(generators(2), Canvas.prompt(torch.tensor([1, 0, 3]), 5), hook)
    assert isinstance(denoised, Denoised) and len(hook.seen) == 3
    assert torch.equal(denoised.canvas.ids[:, :3], torch.tensor([[1, 0, 3]] * 2))
    assert (denoised.last.index, denoised.last.steps, denoised.last.s) == (3, 4, 0.0)
    assert denoised.last.t == sampler.process.timesteps(4)[3].item()
    assert denoised.probs.shape == (2, 8, V) and (denoised.x == MASK).any()

    def to_two(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        assert (info.index, info.steps, info.t, info.s) == (4, 4, denoised.last.t, 0.0)
        out = torch.zeros_like(probs)
        out[..., 2] = 1.0
        return out

    ids = sampler.finish(denoised, to_two)
    decided = denoised.x != MASK
    assert torch.equal(ids[decided], denoised.x[decided]) and (ids[~decided] == 2).all()
    plain = sampler.finish(denoised)
    assert torch.equal(plain, torch.where(decided, denoised.x, denoised.probs.argmax(-1)))


class AllAtOnce(MaskedProcess):
    """A masked process whose every step unmasks every masked position."""

    def unmask_probability(self, t: float, s: float) -> float:
        return 1.0


def test_a_pass_that_ends_without_masks_is_decided_as_it_stands():
    sampler = Sampler(Table(6), AllAtOnce(V, MASK), 3, False)
    hook = Log()
    denoised = sampler.denoise(generators(2), Canvas.prompt(torch.tensor([4, 4]), 4), hook)
    assert denoised.probs is None and not (denoised.x == MASK).any()
    assert torch.equal(denoised.canvas.ids[:, :2], torch.tensor([[4, 4]] * 2))
    assert (denoised.last.index, denoised.last.steps, denoised.last.s) == (2, 3, 0.0)
    assert denoised.last.t == sampler.process.timesteps(3)[2].item()
    ids = sampler.finish(denoised, hook)
    assert ids is denoised.x and [info.index for _, _, info in hook.seen] == [0, 1]
    alone = sampler.denoise(generators(1), 4)
    assert alone.canvas is None and alone.probs is None
    empty = sampler.denoise(generators(1), Canvas.prompt(torch.tensor([], dtype=torch.long), 4))
    assert empty.canvas is None and empty.probs is None  # an empty prompt is no prompt


def test_the_uniform_noise_removal_reads_x_again_until_it_stops_moving():
    model = Next(top=4)
    sampler = Sampler(model, UniformProcess(V), 2, True)

    def denoised(passes: int) -> Denoised:
        sampler.process.removal_passes = passes
        model.calls = 0
        return sampler.denoise(generators(1), 3, lambda p, x, i: p)

    # The regular step draws some x; its prediction moves each token one up per pass.
    capped = denoised(8)
    assert (capped.x == 4).all() and torch.equal(capped.probs.argmax(-1), capped.x)
    # With one pass the prediction of the regular step's x is read as it is.
    once = denoised(1)
    assert model.calls == 2  # the regular step's prediction and the removal's
    assert torch.equal(once.probs.argmax(-1), (once.x + 1).clamp(max=4))
    two = denoised(2)
    assert model.calls == 3 and torch.equal(two.x, once.probs.argmax(-1))
    # It stops once the argmax no longer moves x: a pass that would change nothing is not run.
    steps_to_top = int((4 - once.x.min()).item())
    assert 2 <= steps_to_top < 7
    denoised(8)
    assert model.calls == 2 + steps_to_top


def test_the_noise_removal_keeps_the_prompt_and_reads_the_well_formed_sequence():
    model = Next(top=4)
    syntax = Fixed(torch.tensor([[1, 3, 3, 3]]))
    sampler = Sampler(model, UniformProcess(V), 2, True, syntax=syntax)
    out = sampler.denoise(generators(1), Canvas.prompt(torch.tensor([1, 3]), 2))
    # The syntax's best sequence is a fixed point: the prompt kept, one pass and it is x.
    assert torch.equal(out.x, torch.tensor([[1, 3, 3, 3]]))
    assert torch.equal(out.probs.argmax(-1), out.x)
    assert len(syntax.read) == 2 and model.calls == 3
    ids = sampler.sample(generators(1), Canvas.prompt(torch.tensor([1, 3]), 2))
    assert ids.tolist() == [[1, 3, 3, 3]]
    # Without a syntax the passes climb to the cap, the prompt put back after each.
    plain = Sampler(Next(top=4), UniformProcess(V), 2, True)
    out = plain.denoise(generators(1), Canvas.prompt(torch.tensor([1, 3]), 2))
    assert out.x.tolist() == [[1, 3, 4, 4]]


def test_the_device_is_the_models():
    sampler, model = masked(4)
    assert sampler.device == model.weight.device == torch.device("cpu")


@pytest.mark.parametrize("n", [1, 3])
def test_sample_is_denoise_then_finish(n: int):
    sampler, _ = masked(8, steps=4)
    whole = sampler.sample(generators(n), Canvas.prompt(torch.tensor([2, 2]), 6))
    halves = sampler.finish(sampler.denoise(generators(n), Canvas.prompt(torch.tensor([2, 2]), 6)))
    assert torch.equal(whole, halves) and whole.shape == (n, 8)


def test_an_ordered_step_ranks_the_prediction_within_the_continuations_block():
    # Blocks of 2 after a prompt of 3: the first two steps decide positions 3 and 4 alone,
    # one a step, the one whose draw the prediction gives more mass first.
    process = OrderedProcess(V, MASK, "confidence", block_length=2)
    sampler = Sampler(Table(7, seed=0), process, 4, False)
    hook = Log()
    ids = sampler.sample(generators(8), Canvas.prompt(torch.tensor([0, 1, 2]), 4), hook)
    assert torch.equal(ids[:, :3], torch.tensor([[0, 1, 2]] * 8)) and not (ids == MASK).any()
    first, second = hook.seen[0][2].changing, hook.seen[1][2].changing
    assert (first.sum(1) == 1).all() and (second.sum(1) == 1).all()
    assert (first | second)[:, 3:5].all()
    assert set(first.nonzero()[:, 1].tolist()) == {3, 4}  # by row, either comes first


def test_a_regular_step_offers_the_models_prediction_at_the_next_steps_time():
    sampler, model = masked(6, steps=5, time_conditioning=True)
    times = sampler.process.timesteps(5).tolist()
    asked = []

    def hook(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        if info.predict is None:
            asked.append(None)
            return probs
        other = x.clone()
        other[:, 0] = 1  # any tokens, not the pass's own
        calls = len(model.calls)
        got = info.predict(other)
        assert len(model.calls) == calls + 1
        sent, sigma, _ = model.calls[-1]
        assert torch.equal(sent, other)
        assert torch.equal(sigma, sampler.process.schedule.sigma(torch.full((2,), info.s)))
        assert torch.equal(got, sampler.predict(other, info.s))
        part = info.rows(1, 2)
        assert part.predict is not None and torch.equal(part.predict(other[1:]), got[1:])
        asked.append(info.s)
        return probs

    sampler.sample(generators(2), 6, hook)
    assert asked == [times[1], times[2], times[3], times[4], None]  # none at the final one
