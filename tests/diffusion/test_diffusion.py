"""Reverse processes and the sampling loop."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from cdd_cli.diffusion.processes import MaskedProcess, UniformProcess, sample_categorical
from cdd_cli.diffusion.sampler import Sampler, StepInfo, sample_generator
from cdd_cli.models import registry
from cdd_cli.models.checkpoint import load_model


def test_categorical_never_draws_zero_mass_tokens():
    probs = torch.zeros(4, 1000, 7)
    probs[..., 2] = 0.3
    probs[..., 5] = 0.7
    uniforms = torch.rand(4, 1000)
    ids = sample_categorical(probs, uniforms)
    assert set(ids.unique().tolist()) <= {2, 5}
    assert torch.equal(sample_categorical(probs * 4.0, uniforms), ids)  # need not sum to 1
    share = (ids == 5).float().mean().item()
    assert 0.65 < share < 0.75
    # Extreme uniforms still land on tokens with mass.
    edge = sample_categorical(probs[:, :2], torch.tensor([[0.0, 1 - 1e-7]] * 4))
    assert edge.tolist() == [[2, 5]] * 4
    # A uniform of exactly 1 (a rescaled one can round to it) takes the last token with mass,
    # not the zero-mass tokens after it; uniforms of any float type are read.
    ones = sample_categorical(probs[:, :2], torch.ones(4, 2, dtype=torch.float64))
    assert ones.tolist() == [[5, 5]] * 4
    # A row with no mass to draw from still gives a token id, not one past the vocabulary.
    empty = sample_categorical(torch.zeros(2, 7), torch.tensor([0.5, 1.0]))
    assert empty.tolist() == [6, 6]


def test_uniform_posterior_rows_sum_to_one_and_match_bayes():
    vocab = 6
    process = UniformProcess(vocab)
    gen = torch.Generator().manual_seed(0)
    x0 = torch.rand(2, 5, vocab, generator=gen).softmax(-1)
    x_t = torch.randint(vocab, (2, 5), generator=gen)
    for t, s in [(1.0, 0.9), (0.5, 0.25), (0.1, 0.0)]:
        post = process.posterior(x0, x_t, t, s)
        assert torch.allclose(post.sum(-1), torch.ones(2, 5), atol=1e-6)
        assert (post >= 0).all()
    # With a one-hot x0 the formula is Bayes' rule on the forward process:
    # q(x_s | x_t, x0) ∝ q(x_t | x_s) q(x_s | x0).
    t, s = 0.6, 0.3
    a_t = process.schedule.alpha(torch.tensor(t)).item()
    a_s = process.schedule.alpha(torch.tensor(s)).item()
    a_ts = a_t / a_s
    for clean in range(vocab):
        for noisy in range(vocab):
            onehot = torch.nn.functional.one_hot(torch.tensor([[clean]]), vocab).float()
            post = process.posterior(onehot, torch.tensor([[noisy]]), t, s)[0, 0]
            q_s = a_s * torch.eye(vocab)[clean] + (1 - a_s) / vocab
            q_t_given_s = a_ts * torch.eye(vocab)[:, noisy] + (1 - a_ts) / vocab
            bayes = q_s * q_t_given_s
            assert torch.allclose(post, bayes / bayes.sum(), atol=1e-6)


def test_masked_prediction_is_the_full_softmax_read_at_masked_positions_only(
    masked_model_dir: Path,
):
    model = load_model(masked_model_dir)
    process = MaskedProcess(model.config.vocab_size, mask_id=2)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(3, model.config.vocab_size, (3, 10), generator=gen)
    x[torch.rand(3, 10, generator=gen) < 0.5] = 2
    x[2] = 2  # a row still all masked
    sigma = torch.zeros(3)
    with torch.no_grad():
        probs = process.x0_probs(model(x, sigma, where=process.predicted(x)), x)
        full = model(x, sigma).float()
    full[..., 2] = -torch.inf
    masked = x == 2
    assert torch.allclose(probs[masked], full.softmax(-1)[masked], atol=1e-6)
    decided = ~masked
    assert torch.equal(probs[decided].argmax(-1), x[decided])
    assert torch.equal(probs[decided].sum(-1), torch.ones(int(decided.sum())))
    assert (probs[..., 2] == 0).all()


def test_a_masked_step_decides_the_positions_it_is_told_to():
    process = MaskedProcess(5, mask_id=4)
    x = torch.full((1, 4), 4)
    probs = torch.nn.functional.one_hot(torch.tensor([[0, 1, 2, 3]]), 5).float()
    t, s = 0.6, 0.5
    p = process.unmask_probability(t, s)
    uniforms = torch.tensor([[p / 2, p / 2, (1 + p) / 2, 0.999]])
    assert process.step(probs, x, t, s, uniforms).tolist() == [[0, 1, 4, 4]]
    told = torch.tensor([[True, False, True, True]])  # against the uniforms at 1, 2 and 3
    assert process.step(probs, x, t, s, uniforms, told).tolist() == [[0, 4, 2, 3]]
    # Told against its uniform, a position still draws in proportion to its probabilities.
    spread = torch.tensor([0.2, 0.8, 0.0, 0.0, 0.0]).expand(1, 2000, 5)
    above = p + (1 - p) * torch.rand(1, 2000, generator=torch.Generator().manual_seed(0))
    drawn = process.step(spread, torch.full((1, 2000), 4), t, s, above, torch.ones(1, 2000) > 0)
    assert 0.75 < (drawn == 1).float().mean().item() < 0.85 and (drawn < 2).all()


def test_masked_sampler_keeps_unmasked_tokens_and_ends_without_masks(masked_model_dir: Path):
    model = load_model(masked_model_dir)
    process = MaskedProcess(model.config.vocab_size, mask_id=2)
    sampler = Sampler(model, process, steps=12, time_conditioning=False)
    seen: list[torch.Tensor] = []

    def record(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        seen.append(x.clone())
        unmasked = x != 2
        # SUBS: all mass on the current token at unmasked positions, none on the mask.
        assert torch.all(probs[unmasked].argmax(-1) == x[unmasked])
        assert torch.all(probs[..., 2] == 0)
        return probs

    generators = [sample_generator(3, 0, i) for i in range(6)]
    final = sampler.sample(generators, 24, hook=record)
    seen.append(final)
    assert (seen[0] == 2).all()
    for before, after in itertools.pairwise(seen):
        fixed = before != 2
        assert torch.equal(after[fixed], before[fixed])
    assert not (final == 2).any()
    assert (seen[-2] == 2).sum() < (seen[0] == 2).sum()


def test_hook_can_replace_the_prediction(uniform_model_dir: Path):
    model = load_model(uniform_model_dir)
    sampler = Sampler(model, UniformProcess(model.config.vocab_size), 8, True)

    def force_carbon(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        forced = torch.zeros_like(probs)
        forced[..., 7] = 1.0
        return forced

    out = sampler.sample([sample_generator(0, 0, i) for i in range(3)], 10, hook=force_carbon)
    # The output is the argmax of the hooked noise-removal prediction.
    assert (out == 7).all()


@pytest.mark.slow
def test_uniform_noise_removal_ends_on_a_fixed_point_of_the_argmax():
    # The shipped QM9 model: a random one maps sequences into cycles, not fixed points.
    loaded = registry.load("default-molecules", "molecules")
    process = UniformProcess(loaded.config.vocab_size)
    sampler = Sampler(loaded.model, process, 8, True)
    out = sampler.sample([sample_generator(3, 0, i) for i in range(16)], 24)
    last_t = process.timesteps(8)[-2].item()
    # The passes stop when the argmax at the last step's noise level no longer changes x...
    assert torch.equal(sampler.predict(out, last_t).argmax(-1), out)
    # ...which a single pass (the plain argmax of the last prediction) does not reach here.
    process.removal_passes = 1
    once = sampler.sample([sample_generator(3, 0, i) for i in range(16)], 24)
    assert not torch.equal(sampler.predict(once, last_t).argmax(-1), once)


@pytest.mark.parametrize("fixture", ["uniform_model_dir", "masked_model_dir"])
def test_same_seed_same_samples_for_any_batch_size(fixture: str, request: pytest.FixtureRequest):
    model = load_model(request.getfixturevalue(fixture))
    process = (
        UniformProcess(model.config.vocab_size)
        if model.config.noise == "uniform"
        else MaskedProcess(model.config.vocab_size, 2)
    )
    sampler = Sampler(model, process, 10, model.config.time_conditioning)
    singles = torch.cat([sampler.sample([sample_generator(5, 0, i)], 24) for i in range(7)])
    batch = sampler.sample([sample_generator(5, 0, i) for i in range(7)], 24)
    assert torch.equal(singles, batch)
    other_seed = sampler.sample([sample_generator(6, 0, i) for i in range(7)], 24)
    assert not torch.equal(batch, other_seed)
    assert len({tuple(row) for row in batch.tolist()}) > 1  # rows differ from each other


def test_masked_step_decides_exactly_the_positions_it_announces():
    # A hook leaves alone samples whose step decides nothing, so `changing` must name every
    # position `step` fills, whatever the probabilities, and unmask at the schedule's rate.
    process = MaskedProcess(35, mask_id=2)
    gen = torch.Generator().manual_seed(0)
    x = torch.full((64, 40), 2)
    x[:, :10] = 7  # decided tokens stay
    t, s = 0.6, 0.5
    uniforms = torch.rand(x.shape, generator=gen)
    changing = process.changing(x, t, s, uniforms)
    for logits in (torch.randn(64, 40, 35, generator=gen), torch.zeros(64, 40, 35)):
        logits[..., 2] = -torch.inf
        x_s = process.step(logits.softmax(-1), x, t, s, uniforms)
        assert torch.equal(x_s != x, changing)
        assert not (x_s[changing] == 2).any()
    assert not changing[:, :10].any()
    rate = changing[:, 10:].float().mean().item()
    assert abs(rate - process.unmask_probability(t, s)) < 0.03


def test_the_masked_noise_removal_changes_only_masked_positions():
    """The last step fills the masks with the prediction's argmax and leaves every decided
    token as it is, even where the (projected) prediction's argmax there says otherwise."""
    process = MaskedProcess(vocab_size=6, mask_id=5)
    x = torch.tensor([[0, 5, 2, 5], [5, 1, 5, 3]])
    probs = torch.zeros(2, 4, 6)
    probs[..., 4] = 1.0  # the argmax is token 4 everywhere, decided positions included
    out = process.finish(probs, x)
    assert out.tolist() == [[0, 4, 2, 4], [4, 1, 4, 3]]


def test_temperature_and_top_p_shape_the_rows_a_step_draws_from():
    from cdd_cli.diffusion.processes import TemperatureTopP

    probs = torch.tensor([[0.5, 0.25, 0.15, 0.1], [0.97, 0.01, 0.01, 0.01]])
    assert TemperatureTopP()(probs) is probs  # 1 and 1: untouched
    kept = TemperatureTopP(top_p=0.7)(probs) > 0
    # The fewest most probable tokens holding 0.7: 0.5 + 0.25 in the first row; the top one,
    # which alone holds more, in the second.
    assert kept.tolist() == [[True, True, False, False], [True, False, False, False]]
    cooled = TemperatureTopP(temperature=0.5)(probs)
    assert torch.allclose(
        cooled / cooled.sum(-1, keepdim=True), (probs**2) / (probs**2).sum(-1, keepdim=True)
    )
    # A masked step draws only from the nucleus: 2,000 draws never leave it.
    process = MaskedProcess(4, 3, temperature_top_p=TemperatureTopP(top_p=0.7))
    spread = torch.tensor([0.5, 0.3, 0.2, 0.0]).expand(1, 2000, 4)
    x = torch.full((1, 2000), 3)
    drawn = process.step(spread, x, 1.0, 0.0, torch.rand(1, 2000), torch.ones(1, 2000) > 0)
    assert set(drawn.unique().tolist()) == {0, 1}


@pytest.mark.parametrize("branch", ["unmasks by its uniform", "told against its uniform"])
def test_a_masked_step_draws_tokens_in_proportion_on_either_branch(branch):
    """One uniform decides whether a position unmasks (u < p) and, rescaled to [0, 1), which
    token: u / p below p, (u - p) / (1 - p) above. Either way the token follows the
    prediction (a rescaling by the wrong factor shifts it far outside this band)."""
    process = MaskedProcess(3, mask_id=2)
    t, s = 0.6, 0.3
    p = process.unmask_probability(t, s)  # 0.5: neither branch nearly the whole interval
    generator = torch.Generator().manual_seed(1)
    u = torch.rand(1, 4000, generator=generator)
    uniforms = u * p if branch == "unmasks by its uniform" else p + (1 - p) * u
    even = torch.tensor([0.5, 0.5, 0.0]).expand(1, 4000, 3)
    drawn = process.step(even, torch.full((1, 4000), 2), t, s, uniforms, torch.ones(1, 4000) > 0)
    assert 0.46 < (drawn == 1).float().mean().item() < 0.54 and (drawn < 2).all()


def test_make_process_builds_the_sampler_asked_for():
    from cdd_cli.diffusion.processes import OrderedProcess, UniformProcess, make_process

    assert type(make_process("masked", 5, 4)) is MaskedProcess
    ordered = make_process("masked", 5, 4, "entropy", 8)
    assert isinstance(ordered, OrderedProcess) and (ordered.order, ordered.block_length) == (
        "entropy",
        8,
    )
    assert (ordered.vocab_size, ordered.mask_id) == (5, 4)
    assert type(make_process("uniform", 5, 4)) is UniformProcess
    assert make_process("masked", 5, 4).vocab_size == make_process("uniform", 5, 4).vocab_size == 5
    assert make_process("masked", 5, 4, "margin").block_length == 0  # one block by default
    # The draw's temperature and top_p reach every kind of step.
    from cdd_cli.diffusion.processes import TemperatureTopP

    shape = TemperatureTopP(0.5, 0.9)
    for noise, sampler in (("masked", "ancestral"), ("masked", "confidence"), ("uniform", "")):
        made = make_process(noise, 5, 4, sampler or "ancestral", temperature_top_p=shape)
        assert made.temperature_top_p is shape


def test_make_argmax_breaks_ties_toward_the_wanted_token():
    from cdd_cli.diffusion.processes import make_argmax

    tied = torch.tensor([[0.4, 0.4, 0.2]])
    out = make_argmax(tied, [1])
    assert out.argmax(-1).tolist() == [1] and torch.allclose(out.sum(-1), torch.ones(1))


def test_make_argmax_swaps_the_wanted_tokens_mass_with_the_argmaxs_at_every_position():
    from cdd_cli.diffusion.processes import make_argmax

    probs = torch.tensor(
        [
            [[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]],
            [[0.7, 0.1, 0.2], [0.25, 0.25, 0.5], [0.3, 0.3, 0.4]],
        ],
        dtype=torch.float64,
    )
    wanted = [[1, 1, 0], [2, 0, 2]]  # four positions change, two are already their argmax
    out = make_argmax(probs, wanted)
    assert out.argmax(-1).tolist() == wanted and out.dtype == torch.float64
    expected = probs.clone()
    for b, row in enumerate(wanted):
        for i, token in enumerate(row):
            top = int(probs[b, i].argmax())
            if top != token:
                expected[b, i, top], expected[b, i, token] = probs[b, i, token], probs[b, i, top]
                expected[b, i, token] += 1e-6
                expected[b, i] /= expected[b, i].sum()
    assert torch.allclose(out, expected, rtol=0, atol=1e-12)
    assert torch.allclose(out.sum(-1), torch.ones(2, 3, dtype=torch.float64), rtol=0, atol=1e-12)
    assert torch.equal(out[0, 1], probs[0, 1]) and torch.equal(out[1, 2], probs[1, 2])


def test_a_nucleus_is_cut_row_by_row_at_any_rank_and_scale():
    from cdd_cli.diffusion.processes import TemperatureTopP

    generator = torch.Generator().manual_seed(5)
    probs = torch.rand(2, 3, 6, generator=generator).softmax(-1)
    nucleus = TemperatureTopP(top_p=0.5)
    shaped = nucleus(probs)
    assert torch.equal(shaped.reshape(6, 6), nucleus(probs.reshape(6, 6)))
    # Probabilities to a power are not normalised: the nucleus is of their own total.
    assert torch.allclose(nucleus(probs * 3.0), shaped * 3.0)
    cooled = TemperatureTopP(temperature=0.5, top_p=0.5)(probs)
    assert torch.equal(cooled > 0, nucleus(probs**2) > 0)
    # The fewest tokens holding top_p: a token whose betters already hold exactly it is out.
    exact = torch.tensor([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]])
    assert (nucleus(exact) > 0).tolist() == [[True, False, False], [False, True, False]]


def test_a_uniform_step_draws_every_position_from_the_posterior_of_the_shaped_prediction():
    from cdd_cli.diffusion.processes import TemperatureTopP

    vocab = 5
    process = UniformProcess(vocab, temperature_top_p=TemperatureTopP(top_p=0.6))
    gen = torch.Generator().manual_seed(3)
    # Enough positions that a posterior off by the nucleus' missing mass draws differently.
    x0 = torch.rand(2, 400, vocab, generator=gen).softmax(-1)
    x_t = torch.randint(vocab, (2, 400), generator=gen)
    u = torch.rand(2, 400, generator=gen)
    # The nucleus, renormalised (the posterior mixes x0 with constants: a sum other than 1
    # would shift its mass), then the posterior, drawn with each position's own uniform.
    shaped = process.temperature_top_p(x0)
    expected = sample_categorical(
        process.posterior(shaped / shaped.sum(-1, keepdim=True), x_t, 0.7, 0.4), u
    )
    assert torch.equal(process.step(x0, x_t, 0.7, 0.4, u), expected)
    plain = UniformProcess(vocab)
    assert torch.equal(
        plain.step(x0, x_t, 0.7, 0.4, u), sample_categorical(plain.posterior(x0, x_t, 0.7, 0.4), u)
    )
    # Every position may change and none is fixed; the sequence is never final by itself, and
    # the noise removal is the prediction's argmax everywhere.
    assert plain.changing(x_t, 0.7, 0.4, u).all() and not plain.fixed_positions(x_t).any()
    assert plain.changing(x_t, 0.7, 0.4, u).dtype == plain.fixed_positions(x_t).dtype == torch.bool
    assert plain.predicted(x_t) is None and not plain.is_final(x_t) and not plain.keeps_decided
    assert torch.equal(plain.finish(x0, x_t), x0.argmax(-1))
    assert torch.allclose(plain.x0_probs(x0.log() + 2.0, x_t), x0, atol=1e-6)
    # Time runs from 1 to exactly 0 (MDLM's masked steps stop just short of it).
    assert plain.timesteps(4).tolist() == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert MaskedProcess(vocab, 4).timesteps(2).tolist() == pytest.approx([1.0, 0.500005, 1e-5])


def test_the_masked_prediction_is_written_into_the_tensor_given():
    process = MaskedProcess(4, 3)
    x_t = torch.tensor([[3, 1, 3]])
    out = torch.full((1, 3, 4), 7.0)  # the previous step's prediction, overwritten
    logits = torch.tensor([[0.0, 1.0, 2.0, 9.0], [2.0, 1.0, 0.0, 9.0]])
    probs = process.x0_probs(logits.clone(), x_t, out)
    assert probs is out
    assert torch.equal(probs[0, 1], torch.tensor([0.0, 1.0, 0.0, 0.0]))
    never_the_mask = torch.nn.functional.pad(logits[:, :3].softmax(-1), (0, 1))
    assert torch.allclose(probs[0, [0, 2]], never_the_mask)


def test_a_masked_step_unmasks_below_its_probability_and_rescales_at_it():
    process = MaskedProcess(3, mask_id=2)
    move = process.schedule.move
    expected = (move(torch.tensor(0.6)) - move(torch.tensor(0.3))) / move(torch.tensor(0.6))
    assert process.unmask_probability(0.6, 0.3) == pytest.approx(float(expected))
    assert process.unmask_probability(0.6, 0.3) == pytest.approx(0.5, abs=1e-3)
    # At a uniform equal to the probability the position stays masked (u < p unmasks: a
    # chance of exactly p); told to unmask it anyway, it rescales (u - p) / (1 - p) = 0 and
    # takes the first token with mass.
    process.unmask_probability = lambda t, s: 0.5
    x = torch.full((1, 3), 2)
    uniforms = torch.tensor([[0.25, 0.5, 0.75]])
    assert process.changing(x, 0.6, 0.3, uniforms).tolist() == [[True, False, False]]
    even = torch.tensor([0.5, 0.5, 0.0]).expand(1, 3, 3)
    told = process.step(even, x, 0.6, 0.3, uniforms, torch.ones(1, 3, dtype=torch.bool))
    assert told[0, 1] == 0  # u / p would be 1: the last token with mass
    assert not process.is_final(x) and not process.is_final(told.clone().fill_(2))
    assert process.is_final(torch.tensor([[0, 1, 0]])) and not process.is_final(
        torch.tensor([[0, 2, 1]])
    )


def test_the_uniform_prior_is_the_generators_draw_over_the_whole_vocabulary():
    process = UniformProcess(5)
    first = process.prior(2000, torch.Generator().manual_seed(9))
    again = process.prior(2000, torch.Generator().manual_seed(9))
    assert torch.equal(first, again) and first.shape == (2000,)
    assert sorted(first.unique().tolist()) == [0, 1, 2, 3, 4]  # the last token too
    masked = MaskedProcess(5, 4).prior(6, torch.Generator())
    assert masked.tolist() == [4] * 6
