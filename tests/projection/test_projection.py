"""The ALM projection on a toy differentiable constraint, and certification by the judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from rdkit import Chem

from cdd_cli.constraints.base import DifferentiableConstraint, ExactConstraint
from cdd_cli.diffusion.processes import UniformProcess
from cdd_cli.diffusion.sampler import Sampler, StepInfo, sample_generator, well_formed
from cdd_cli.evaluate.molecules import canonical
from cdd_cli.methods import CDD_SHARED, METHODS
from cdd_cli.models import registry
from cdd_cli.models.surrogate import Tokens, token_mass
from cdd_cli.projection import engine
from cdd_cli.projection.alm import project
from cdd_cli.projection.judges import Judges
from cdd_cli.projection.stages import final as final_stages
from cdd_cli.settings import ALMSettings, SearchSettings
from cdd_cli.spec.model import Spec
from cdd_cli.spec.reader import load_spec
from tests.conftest import make_tokenizer
from tests.generation import generation

CARBON = make_tokenizer().index["C"]


@dataclass(frozen=True)
class CarbonCount(DifferentiableConstraint):
    """At most tau 'C' tokens. The surrogate counts soft 'C' mass over every position, so on a
    one-hot row it is never below the judge's count (which stops at <eos>)."""

    name: str = "carbons"
    judge_name: str = "count-C"
    offset: float = 0.0  # a lying surrogate, for the disagreement test
    token: int = CARBON
    symbol: str = "C"  # the token's text, which the judge counts

    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        return token_mass(soft_tokens, self.token).sum(-1) + self.offset

    def judge(self, texts: list[str]) -> list[float | None]:
        return [float(t.count(self.symbol)) for t in texts]


def explicit(**changes: float) -> ALMSettings:
    """Settings with what a model would fill in given (the paper's values, all V tokens)."""
    values = {"eta": 0.5, "inner_iters": 10, "max_outer_iters": 50, "mu_init": 1.0, "support": 0}
    values["project_from"] = 0.9
    return ALMSettings(**{**CDD_SHARED, **values, **changes})


def cdd_engine(
    constraints,
    settings: ALMSettings,
    fixed_positions,
    generators,
    decode,
    layout=None,
    reader=None,
    well_formed=None,
) -> engine.Engine:
    """The `cdd` preset's engine for one batch (a `layout`: the closed-form projection)."""
    job = engine.Job(
        constraints=constraints,
        closed_forms=[layout] if layout else [],
        fixed_positions=fixed_positions,
        generators=generators,
        decode=decode,
        reader=reader,
        well_formed=well_formed,
    )
    return METHODS["cdd"].engine(job, settings, SearchSettings(project_from=0.9, max_nodes=2000))


def carbon_heavy(batch: int, length: int = 12, vocab: int = 35) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(batch, length, vocab, generator=gen)
    logits[..., CARBON] += 4.0  # 'C' is the argmax nearly everywhere
    return logits.softmax(-1)


def test_projection_reaches_feasibility_and_stays_a_distribution():
    probs = carbon_heavy(4)
    constraint = CarbonCount(tau=3.0)
    before = probs.argmax(-1).eq(CARBON).sum(-1)
    assert (before > 3).all()
    gens = [sample_generator(0, 0, i) for i in range(4)]  # deterministic relaxation noise
    result = project(
        probs,
        [constraint],
        explicit(),
        None,
        gens,
    )
    after = result.probs.argmax(-1)
    assert (after.eq(CARBON).sum(-1) <= 3).all()
    assert result.feasible.all() and result.projected.all()
    assert (result.outer_iters >= 1).all()
    # Not asserted: closeness to x'. On this toy the raw ALM moves y further (in KL) than the
    # uniform distribution is; the engine's other stages exist for that (engine.py).
    assert torch.allclose(result.probs.sum(-1), torch.ones(4, 12), atol=1e-5)


def test_integer_settings_from_a_spec_file_project(tmp_path: Path):
    # YAML reads `mu_init: 16` as an int; the multipliers were then integer tensors and the
    # first update raised a dtype error instead of projecting.
    path = tmp_path / "spec.yaml"
    path.write_text(
        "projection: {mu_init: 16, eta: 1, temperature: 1, inner_iters: 3, mu_max: 1000,"
        " alpha: 2, patience: 5, max_outer_iters: 20, support: 0, project_from: 0}\n"
    )
    settings = load_spec(path).projection
    assert isinstance(settings.mu_init, float) and isinstance(settings.eta, float)
    assert isinstance(settings.inner_iters, int)
    gens = [sample_generator(0, 0, i) for i in range(2)]
    result = project(carbon_heavy(2), [CarbonCount(tau=3.0)], settings, None, gens)
    assert result.feasible.all()
    assert (result.probs.argmax(-1).eq(CARBON).sum(-1) <= 3).all()


class TickingClock:
    """Stands in for the projection's `time.perf_counter`: the k-th reading is 1 + 2 + ... + k
    seconds, so every interval between two readings differs from every other, whatever the
    machine's speed or load (the time charged is then exactly what the readings say)."""

    def __init__(self):
        self.readings: list[float] = []

    def perf_counter(self) -> float:
        k = len(self.readings)
        self.readings.append(k * (k + 1) / 2)
        return self.readings[-1]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> TickingClock:
    import cdd_cli.projection.alm as alm

    ticking = TickingClock()
    monkeypatch.setattr(alm, "time", ticking)
    return ticking


def test_feasible_samples_are_untouched_bit_for_bit(clock: TickingClock):
    probs = carbon_heavy(3)
    probs[1] = torch.full((12, 35), 1 / 35)
    probs[1, :, 9] += 0.5  # sample 1: argmax is token 9 everywhere, zero carbons
    probs[1] /= probs[1].sum(-1, keepdim=True)
    constraint = CarbonCount(tau=3.0)
    gens = [sample_generator(1, 0, i) for i in range(3)]  # the same iterations in any test order
    result = project(
        probs.clone(),
        [constraint],
        explicit(),
        None,
        gens,
    )
    assert result.projected.tolist() == [True, False, True]
    assert torch.equal(result.probs[1], probs[1])
    assert result.outer_iters[1] == 0 and result.inner_iters[1] == 0

    # Time: the feasible sample pays only for being checked.
    seconds = result.seconds.tolist()
    assert seconds[1] < min(seconds[0], seconds[2])

    everyone_feasible = probs[1:2].clone()
    unchanged = project(everyone_feasible, [constraint], explicit(eta=1.0))
    assert unchanged.probs is everyone_feasible  # no work, no copy
    assert not unchanged.projected.any()


def test_a_sample_that_iterated_longer_was_charged_more(clock: TickingClock):
    """Each outer iteration's time is shared by the samples still iterating, so within a
    batch more iterations always cost more seconds (whatever the counts are: they depend on
    the relaxation noise, so several draws make sure some pair differs)."""
    probs = carbon_heavy(3)
    probs[2] = torch.full((12, 35), 1 / 35)
    probs[2, :, 9] += 0.5
    probs[2, :4, CARBON] += 0.6  # 4 carbons against 11: a nearer start
    probs[2] /= probs[2].sum(-1, keepdim=True)
    differed = 0
    for seed in range(3):
        gens = [sample_generator(seed, 0, i) for i in range(3)]
        result = project(probs.clone(), [CarbonCount(tau=3.0)], explicit(), None, gens)
        outer, seconds = result.outer_iters.tolist(), result.seconds.tolist()
        for a in range(3):
            for b in range(3):
                if outer[a] > outer[b]:
                    differed += 1
                    assert seconds[a] > seconds[b], (outer, seconds)
    assert differed


def test_fixed_positions_keep_their_distribution():
    probs = carbon_heavy(2)
    fixed = torch.zeros(2, 12, dtype=torch.bool)
    fixed[:, :2] = True  # e.g. already unmasked tokens of a masked process
    result = project(
        probs,
        [CarbonCount(tau=3.0)],
        explicit(),
        fixed,
    )
    assert torch.allclose(result.probs[:, :2], probs[:, :2], atol=1e-6)
    assert (result.probs.argmax(-1).eq(CARBON).sum(-1) <= 3).all()


def test_a_stuck_sample_stops_after_patience_not_at_the_cap():
    # Ten carbons fixed (as a masked model's decided tokens are) against tau 3: no movable
    # position can meet it. Sample 1 has every position movable and becomes feasible.
    probs = carbon_heavy(2)
    probs[0, :10] = torch.nn.functional.one_hot(torch.tensor(CARBON), 35).float()
    fixed = torch.zeros(2, 12, dtype=torch.bool)
    fixed[0, :10] = True
    settings = explicit(mu_init=1.0, alpha=2.0, mu_max=8.0, patience=3, max_outer_iters=50)
    gens = [sample_generator(2, 0, i) for i in range(2)]
    result = project(probs, [CarbonCount(tau=3.0)], settings, fixed, gens)
    assert result.feasible.tolist() == [False, True]
    # mu reaches mu_max at the 4th outer iteration; after that the best violation cannot fall
    # for long (at most the 2 movable positions change), so it stops well before 50.
    assert 4 + 3 - 1 <= result.outer_iters[0] <= 4 + 2 * 3 + 3
    assert (result.probs[0].argmax(-1).eq(CARBON).sum() >= 10).item()


def test_per_sample_generators_make_projection_batch_independent():
    probs = carbon_heavy(5)
    settings = explicit(inner_iters=5)
    gens = [sample_generator(0, 0, i) for i in range(5)]
    together = project(probs, [CarbonCount(tau=3.0)], settings, None, gens).probs
    alone = torch.cat(
        [
            project(
                probs[i : i + 1],
                [CarbonCount(tau=3.0)],
                settings,
                None,
                [sample_generator(0, 0, i)],
            ).probs
            for i in range(5)
        ]
    )
    assert torch.allclose(together, alone, atol=1e-5)


def test_projection_inside_the_sampler(uniform_model_dir: Path):
    loaded = registry.load(str(uniform_model_dir), "molecules")
    process = UniformProcess(loaded.config.vocab_size)
    sampler = Sampler(loaded.model, process, 6, True)
    free = sampler.sample([sample_generator(1, 0, i) for i in range(4)], 24)
    common = int(free.flatten().mode().values)  # the random model's favourite token
    constraint = CarbonCount(tau=2.0, token=common, symbol=loaded.tokenizer.vocab[common])
    assert len(constraint.symbol) == 1  # no other token's text contains it
    decode = loaded.tokenizer.decode
    assert not all(map(constraint.satisfied, constraint.judge([decode(r) for r in free.tolist()])))
    gens = [sample_generator(1, 0, i) for i in range(4)]
    hook = cdd_engine(
        [constraint],
        # Run to the cap: on this random model two samples stall at mu_max for more than the
        # default patience before the growing multiplier moves them.
        explicit(project_from=0.0, patience=50),
        process.fixed_positions,
        gens,
        loaded.tokenizer.decode,
    )
    ids = sampler.sample(gens, 24, hook)
    # The final noise removal was projected: the judge accepts every sample.
    assert all(map(constraint.satisfied, constraint.judge([decode(r) for r in ids.tolist()])))
    reports = [hook.report(i) for i in range(4)]
    assert any(r["steps"] >= 1 for r in reports)
    assert all((r["steps"] > 0) == (r["inner_iters"] > 0) for r in reports)


def test_judge_rejection_is_redrawn_and_never_reported_satisfied(uniform_model_dir: Path):
    loaded = registry.load(str(uniform_model_dir), "molecules")
    spec = Spec(
        method="cdd", projection=ALMSettings(support=0, eta=0.5, inner_iters=5, max_outer_iters=3)
    )
    spec.repair.max_redraws = 2
    spec.search.max_nodes = 40
    # The surrogate claims every sequence is fine (offset -100); the judge (a count can never
    # be below -1) rejects them all: each is redrawn twice, then reported as violating.
    liar = CarbonCount(tau=-1.0, offset=-100.0)
    draws = generation(spec, loaded, [liar], 4).run(range(6))
    assert [d.attempts for d in draws] == [3] * 6
    assert not any(d.satisfied for d in draws)
    # The surrogate never asked for the ALM; the final exact search tried and ran out of budget.
    assert all(d.projection["outer_iters"] == 0 for d in draws)
    assert all(d.projection["search_nodes"] == 3 * 40 for d in draws)


@dataclass(frozen=True)
class TextLength(DifferentiableConstraint):
    name: str = "length"
    judge_name: str = "len"

    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        return torch.zeros(len(soft_tokens))

    def judge(self, texts: list[str]) -> list[float | None]:
        return [float(len(t)) for t in texts]


def test_reject_redraws_until_the_judge_accepts(masked_model_dir: Path):
    loaded = registry.load(str(masked_model_dir), "molecules")
    free = generation(Spec(method="unconstrained"), loaded, [TextLength(tau=0.0)], 4)
    free = free.run(range(8))
    shortest = min(d.values["length"] for d in free)
    spec = Spec(method="reject")
    spec.reject.max_attempts = 5
    draws = generation(spec, loaded, [TextLength(tau=shortest)], 4).run(range(8))
    assert all(d.attempts == 1 for d in free)
    for d in draws:  # a molecule that does not parse satisfies nothing
        assert d.satisfied == (d.values["length"] <= shortest and canonical(d.text) is not None)
        assert d.satisfied or d.attempts == 5
    assert max(d.attempts for d in draws) > 1


def test_model_defaults_fill_only_what_the_spec_leaves(shipped_vocab_model_dir: Path):
    from cdd_cli.run.defaults import fill_defaults

    loaded = registry.load(str(shipped_vocab_model_dir), "molecules")
    spec = Spec()
    spec.projection.inner_iters = 7
    fill_defaults(spec, loaded)
    p = spec.projection
    assert (p.inner_iters, p.max_outer_iters, p.mu_init, p.support) == (7, 20, 4.0, 4)
    assert spec.sampling.steps == loaded.default_steps
    fresh = Spec()
    fill_defaults(fresh, loaded)
    assert fresh.projection.inner_iters == 3 and fresh.projection.project_from == 0.95
    # Left unfilled, the projection refuses to guess.
    with pytest.raises(ValueError) as refused:
        project(carbon_heavy(1), [CarbonCount(tau=3.0)], ALMSettings())
    assert str(refused.value) == "ALMSettings left to the model: see run.defaults.fill_defaults"


@dataclass(frozen=True)
class Parses(ExactConstraint):
    """Accepts what RDKit parses (syntax only): a judge the ALM's surrogates cannot see."""

    tau: float = 0.5
    name: str = "parses"
    judge_name: str = "rdkit-parse"

    def judge(self, texts: list[str]) -> list[float | None]:
        return [0.0 if t and Chem.MolFromSmiles(t, sanitize=False) else 1.0 for t in texts]


def test_the_final_repair_tries_the_well_formed_sequence_first():
    tokenizer = make_tokenizer()
    ids = torch.tensor([tokenizer.encode("CC(CO", 12)])  # a branch never closed
    probs = torch.nn.functional.one_hot(ids, len(tokenizer)).float() * 0.8 + 0.2 / len(tokenizer)
    syntax = tokenizer.syntax()
    best = tokenizer.decode(syntax.best(probs)[0].tolist())
    assert Chem.MolFromSmiles(best, sanitize=False) is not None
    assert Chem.MolFromSmiles(tokenizer.decode(ids[0].tolist())) is None
    final = StepInfo(8, 8, 1 / 8, 0.0)
    results = {}
    for name in ("syntax", "none"):
        hook = cdd_engine(
            [Parses()],
            explicit(),
            lambda x: torch.zeros_like(x, dtype=torch.bool),
            [sample_generator(0, 0, 0)],
            tokenizer.decode,
            well_formed=(lambda p: well_formed(p, syntax)) if name == "syntax" else None,
        )
        out = hook(probs, ids, final)
        results[name] = (tokenizer.decode(out.argmax(-1)[0].tolist()), hook.accounts.nodes[0])
    assert results["syntax"] == (best, 0)  # taken without a search
    text, nodes = results["none"]
    assert nodes > 0 and Chem.MolFromSmiles(text, sanitize=False) is not None


def test_sparse_and_integer_tokens_read_as_their_dense_tensors():
    # The ALM reads soft tokens over its support (K ids a position) and argmaxes as ids; the
    # surrogate must score them, and pass gradients, exactly as the V-wide tensors they stand for.
    from cdd_cli.models.surrogate import SoftTokenRegressor, SparseTokens, SurrogateConfig

    torch.manual_seed(0)
    config = SurrogateConfig(50, 6, "x", hidden_dim=16, n_layers=1, n_heads=2)
    net = SoftTokenRegressor(config).eval()
    support = torch.rand(2, 6, 50).topk(8, dim=-1).indices
    logits = torch.randn(2, 6, 8, requires_grad=True)
    sparse = net(SparseTokens(logits.softmax(-1), support))
    (sparse_grad,) = torch.autograd.grad(sparse.sum(), logits)
    dense_probs = torch.zeros(2, 6, 50).scatter(-1, support, logits.softmax(-1))
    dense = net(dense_probs)
    (dense_grad,) = torch.autograd.grad(dense.sum(), logits)
    assert torch.allclose(sparse, dense, atol=1e-5)
    assert torch.allclose(sparse_grad, dense_grad, atol=1e-6) and sparse_grad.abs().sum() > 0
    ids = torch.randint(50, (2, 6))
    one_hot = torch.nn.functional.one_hot(ids, 50).float()
    assert torch.allclose(net(ids), net(one_hot), atol=1e-5)
    assert torch.equal(SparseTokens(logits.softmax(-1), support)[:, 2:].ids, support[:, 2:])


def test_a_sample_with_nothing_movable_is_left_alone():
    # A masked model's last steps: every token decided. Iterating could change nothing.
    probs = carbon_heavy(2)
    fixed = torch.zeros(2, 12, dtype=torch.bool)
    fixed[0] = True
    gens = [sample_generator(3, 0, i) for i in range(2)]
    result = project(probs.clone(), [CarbonCount(tau=3.0)], explicit(), fixed, gens)
    assert result.projected.tolist() == [False, True]
    assert result.outer_iters[0] == 0 and torch.equal(result.probs[0], probs[0])
    assert not result.feasible[0]  # still violating: the judge and redraws deal with it


def test_a_masked_step_is_projected_only_where_its_draw_would_decide_badly():
    # Both samples' full argmax has 8 carbons (tau 3), but this step decides position 3 only:
    # sample 1 ("NNN" decided) may take a carbon and stays acceptable, so the ALM leaves it
    # alone; sample 0 ("CCC" decided) would reach 4, so its decision must become a non-carbon.
    from cdd_cli.diffusion.processes import MaskedProcess

    tokenizer = make_tokenizer()
    process = MaskedProcess(len(tokenizer), tokenizer.mask_id)
    n, o = tokenizer.index["N"], tokenizer.index["O"]
    x = torch.full((2, 8), tokenizer.mask_id)
    x[0, :3], x[1, :3] = CARBON, n
    probs = torch.zeros(2, 8, len(tokenizer))
    probs[:, 3:, CARBON], probs[:, 3:, n], probs[:, 3:, o] = 0.8, 0.1, 0.1
    probs[0, :3, CARBON] = probs[1, :3, n] = 1.0
    t, s = 0.5, 0.45
    uniforms = torch.full(x.shape, 0.99)
    uniforms[:, 3] = 0.3 * process.unmask_probability(t, s)  # position 3 unmasks, to a carbon
    changing = process.changing(x, t, s, uniforms)
    assert changing.sum(-1).tolist() == [1, 1]

    def decide(p: torch.Tensor) -> torch.Tensor:
        return process.step(p, x, t, s, uniforms)

    assert decide(probs)[:, 3].tolist() == [CARBON, CARBON]
    hook = cdd_engine(
        [CarbonCount(tau=3.0)],
        explicit(project_from=0.0),
        process.fixed_positions,
        [sample_generator(0, 0, i) for i in range(2)],
        tokenizer.decode,
    )
    original = probs.clone()
    out = hook(probs, x, StepInfo(0, 10, t, s, changing, decide))
    assert (
        torch.equal(out[1], original[1])
        and hook.accounts.steps[1] == 0
        and hook.accounts.outer[1] == 0
    )
    decided = decide(out)
    assert decided[1, 3] == CARBON
    assert decided[0, 3] != CARBON and hook.accounts.steps[0] == 1
    assert CarbonCount(tau=3.0).judge([tokenizer.decode(decided[0, :4].tolist())]) == [3.0]


def masked_step_deciding_position_3(p_carbon: float, p_nitrogen: float, samples: int):
    """`samples` rows with "CCC" decided and position 3 about to be decided, where the model
    puts `p_carbon` on a fourth carbon (tau 3 makes that unacceptable), `p_nitrogen` on N and
    the rest on O; the hook's arguments for that step."""
    from cdd_cli.diffusion.processes import MaskedProcess

    tokenizer = make_tokenizer()
    process = MaskedProcess(len(tokenizer), tokenizer.mask_id)
    n, o = tokenizer.index["N"], tokenizer.index["O"]
    x = torch.full((samples, 6), tokenizer.mask_id)
    x[:, :3] = CARBON
    probs = torch.zeros(samples, 6, len(tokenizer))
    probs[:, :3, CARBON] = 1.0
    probs[:, 3:, CARBON], probs[:, 3:, n] = p_carbon, p_nitrogen
    probs[:, 3:, o] = 1.0 - p_carbon - p_nitrogen
    t, s = 0.5, 0.45
    uniforms = torch.full(x.shape, 0.99)
    uniforms[:, 3] = 0.1 * process.unmask_probability(t, s)  # unmasks, to the first token: C

    def decide(p: torch.Tensor) -> torch.Tensor:
        return process.step(p, x, t, s, uniforms)

    info = StepInfo(0, 10, t, s, process.changing(x, t, s, uniforms), decide)
    hook = cdd_engine(
        [CarbonCount(tau=3.0)],
        explicit(project_from=0.0),
        process.fixed_positions,
        [sample_generator(1, 0, i) for i in range(samples)],
        tokenizer.decode,
    )
    return hook, probs, x, info, (n, o)


def test_a_bad_decision_is_first_redrawn_given_acceptability_without_the_alm():
    # Conditioning the step on acceptability is the cheapest projection of a decision: where
    # some of `redraws` draws is acceptable, the sample takes one and the ALM never runs. It
    # is a draw, not the best acceptable token: O (0.2) is chosen as well as N (0.3).
    hook, probs, x, info, (n, o) = masked_step_deciding_position_3(0.5, 0.3, samples=24)
    assert info.decide(probs)[:, 3].eq(CARBON).all()
    decided = info.decide(hook(probs, x, info))[:, 3]
    assert set(decided.tolist()) == {n, o}
    assert sum(hook.accounts.outer) == 0 and all(steps == 1 for steps in hook.accounts.steps)


def test_a_bad_decision_no_draw_mends_goes_to_the_alm():
    # With a fourth carbon at 0.999, 8 draws are all carbons (0.999^8): the ALM projects.
    hook, probs, x, info, _ = masked_step_deciding_position_3(0.999, 0.0005, samples=2)
    decided = info.decide(hook(probs, x, info))[:, 3]
    assert not decided.eq(CARBON).any()
    assert all(outer > 0 for outer in hook.accounts.outer)


def readable_sa(tokenizer) -> DifferentiableConstraint:
    """RDKit's SA at most 10, which every SMILES it can read meets: the judge's value is None
    exactly where the text does not parse (its surrogate, a random net, is never the point)."""
    from cdd_cli.constraints.sa import SAConstraint
    from cdd_cli.models.surrogate import SoftTokenRegressor, SurrogateConfig

    torch.manual_seed(0)
    net = SoftTokenRegressor(SurrogateConfig(len(tokenizer), 12, "sa", hidden_dim=8, n_layers=1))
    return SAConstraint(tau=10.0, net=net.eval())


def test_the_look_ahead_redraws_a_decision_that_leaves_the_judge_nothing_to_read():
    """A decided text the judge cannot score (value None, NaN to the engine) is unacceptable:
    "CC" decided and a branch "(" about to be, half the model's mass, the rest on "O"."""
    from cdd_cli.diffusion.processes import MaskedProcess

    tokenizer = make_tokenizer()
    sa = readable_sa(tokenizer)
    process = MaskedProcess(len(tokenizer), tokenizer.mask_id)
    branch, oxygen = tokenizer.index["("], tokenizer.index["O"]
    x = torch.full((4, 6), tokenizer.mask_id)
    x[:, :2] = CARBON
    probs = torch.zeros(4, 6, len(tokenizer))
    probs[:, :2, CARBON] = 1.0
    probs[:, 2:, branch] = probs[:, 2:, oxygen] = 0.5
    t, s = 0.5, 0.45
    uniforms = torch.full(x.shape, 0.99)
    uniforms[:, 2] = 0.9 * process.unmask_probability(t, s)  # unmasks, to the later token: (

    def decide(p: torch.Tensor) -> torch.Tensor:
        return process.step(p, x, t, s, uniforms)

    info = StepInfo(0, 10, t, s, process.changing(x, t, s, uniforms), decide)
    assert decide(probs)[:, 2].eq(branch).all()
    assert sa.judge(["CC("]) == [None] and sa.satisfied(sa.judge(["CCO"])[0])
    hook = cdd_engine(
        [sa],
        explicit(project_from=0.0),
        process.fixed_positions,
        [sample_generator(5, 0, i) for i in range(4)],
        tokenizer.decode,
    )
    decided = decide(hook(probs, x, info))
    assert decided[:, 2].eq(oxygen).all(), [tokenizer.decode(row.tolist()) for row in decided]
    assert hook.accounts.steps == [1] * 4 and sum(hook.accounts.outer) == 0  # redrawn, no ALM


def test_the_ladder_takes_on_a_final_prediction_the_judge_cannot_read(monkeypatch):
    """At the final prediction a sample whose argmax does not parse (judge value None) is the
    ladder's, as one its judge scores outside the bound would be; the parsed one is not."""

    tokenizer = make_tokenizer()
    ids = torch.tensor([tokenizer.encode("CCO", 12), tokenizer.encode("CC(C", 12)])
    probs = torch.nn.functional.one_hot(ids, len(tokenizer)).float() * 0.8 + 0.2 / len(tokenizer)
    sa = readable_sa(tokenizer)
    assert sa.judge(["CCO", "CC(C"])[1] is None
    handed: list[list[int]] = []
    original = final_stages.linearised_search

    def spy(probs, rows, *args, **kwargs):
        handed.append(list(rows))
        return original(probs, rows, *args, **kwargs)

    monkeypatch.setattr(final_stages, "linearised_search", spy)
    hook = cdd_engine(
        [sa],
        explicit(),
        lambda x: torch.zeros_like(x, dtype=torch.bool),
        [sample_generator(0, 0, i) for i in range(2)],
        tokenizer.decode,
    )
    out = hook(probs, ids, StepInfo(8, 8, 1 / 8, 0.0))
    assert handed == [[1]]
    assert torch.equal(out[0], probs[0]) and hook.accounts.steps[0] == 0


def test_tokens_outside_the_support_keep_their_mass():
    # The ALM floors x' to find gradients, but only inside the support does mass move: a token
    # x' never proposes must stay impossible (a floor leaking out would spread 35% of every
    # projected position over junk tokens).
    probs = carbon_heavy(2)
    probs[..., 20:] = 0.0
    probs = probs / probs.sum(-1, keepdim=True)
    gens = [sample_generator(4, 0, i) for i in range(2)]
    result = project(probs, [CarbonCount(tau=3.0)], explicit(support=4), None, gens)
    assert result.projected.all()
    assert (result.probs[..., 20:] == 0).all()
    assert (result.probs.argmax(-1).eq(CARBON).sum(-1) <= 3).all()


def test_the_linearised_projection_takes_the_smallest_multiplier_the_judge_accepts():
    from cdd_cli.projection.alm import floored
    from cdd_cli.projection.linearized import LADDER, linearised_search

    probs = carbon_heavy(3)
    tokens = probs.argmax(-1)
    assert (tokens.eq(CARBON).sum(-1) > 3).all()
    movable = torch.ones(3, 12, dtype=torch.bool)
    movable[2, :2] = False  # decided: whatever they hold stays

    def accept_all(sequences: list[list[int]]) -> list[bool]:
        return [s.count(CARBON) <= 3 for s in sequences]

    result = linearised_search(
        probs, [0, 1, 2], movable, tokens, [CarbonCount(tau=3.0)], 0, accept_all
    )
    assert sorted(result.found) == [0, 1, 2]
    assert all(result.judged[r] >= 1 and result.seconds[r] > 0 for r in range(3))
    # The surrogate's gradient is 1 on every carbon, so multiplier lam moves exactly the
    # movable carbons whose lead over their runner-up is under lam nats, to that runner-up.
    top2 = floored(probs, probs.shape[-1]).log().topk(2, dim=-1)
    lead = top2.values[..., 0] - top2.values[..., 1]
    partial = []
    for r in range(3):
        for lam in LADDER:
            moves = tokens[r].eq(CARBON) & movable[r] & (lead[r] < lam)
            expected = torch.where(moves, top2.indices[r, :, 1], tokens[r])
            if accept_all([expected.tolist()])[0]:
                break
        assert result.found[r] == expected.tolist()
        partial.append(0 < moves.sum() < tokens[r].eq(CARBON).sum())
    assert any(partial)  # some row keeps carbons it could have given up: the least was taken


def test_the_final_prediction_leaves_what_the_judge_accepts_and_settles_the_rest():
    # A surrogate that says every sequence violates (offset +100): at the final prediction the
    # judge is read first, so a sample it accepts is not touched, and a carbon-heavy one is
    # settled by the linearised projection without an ALM iteration.
    tokenizer = make_tokenizer()
    probs = carbon_heavy(2)
    probs[0] = torch.nn.functional.one_hot(
        torch.tensor(tokenizer.encode("CCO", 12)), len(tokenizer)
    ).float() * 0.9 + 0.1 / len(tokenizer)
    x = probs.argmax(-1)
    constraint = CarbonCount(tau=3.0, offset=100.0)
    assert constraint.judge([tokenizer.decode(x[1].tolist())])[0] > 3
    hook = cdd_engine(
        [constraint],
        explicit(),
        lambda x: torch.zeros_like(x, dtype=torch.bool),
        [sample_generator(0, 0, i) for i in range(2)],
        tokenizer.decode,
    )
    out = hook(probs.clone(), x, StepInfo(8, 8, 1 / 8, 0.0))
    assert torch.equal(out[0], probs[0])
    settled = tokenizer.decode(out[1].argmax(-1).tolist())
    assert constraint.satisfied(constraint.judge([settled])[0])
    reports = [hook.report(i) for i in range(2)]
    assert [r["outer_iters"] for r in reports] == [0, 0]
    assert reports[0]["search_nodes"] == 0 and reports[1]["search_nodes"] >= 1


def test_the_layout_does_not_undo_what_the_final_prediction_settled():
    # The ALM's output is put back on the word layout; a sample the linearised projection
    # settled (the judges accepted it) is left alone by the ALM and must stay as accepted.
    tokenizer = make_tokenizer()

    class PinFirstCarbon:  # a layout that puts a carbon first (no judge checks it)
        def plan(self, probs, x, fixed, generators):
            return [None] * len(x)

        def apply(self, probs, plans, fixed):
            out = probs.clone()
            for b in range(len(out)):
                if not fixed[b, 0]:
                    out[b, 0] = torch.nn.functional.one_hot(torch.tensor(CARBON), out.shape[-1])
            return out

    def fixed_positions(x: torch.Tensor) -> torch.Tensor:
        fixed = torch.zeros_like(x, dtype=torch.bool)
        fixed[1] = True  # nothing movable: the judge rejects it, the ALM is called
        return fixed

    constraint = CarbonCount(tau=0.0)
    probs = carbon_heavy(2)
    hook = cdd_engine(
        [constraint],
        explicit(),
        fixed_positions,
        [sample_generator(0, 0, i) for i in range(2)],
        tokenizer.decode,
        layout=PinFirstCarbon(),
    )
    out = hook(probs.clone(), probs.argmax(-1), StepInfo(8, 8, 1 / 8, 0.0))
    settled = tokenizer.decode(out[0].argmax(-1).tolist())
    assert constraint.satisfied(constraint.judge([settled])[0])
    assert hook.report(0)["search_nodes"] >= 1 and hook.report(0)["outer_iters"] == 0


def test_what_only_an_exact_judge_rejects_goes_to_the_flip_search(monkeypatch):
    calls = []
    original = final_stages.linearised_search
    monkeypatch.setattr(
        final_stages, "linearised_search", lambda *a, **k: calls.append(a[1]) or original(*a, **k)
    )
    tokenizer = make_tokenizer()
    ids = torch.tensor([tokenizer.encode("CC(CO", 12)] * 2)  # a branch never closed
    probs = torch.nn.functional.one_hot(ids, len(tokenizer)).float() * 0.8 + 0.2 / len(tokenizer)
    probs[1] = carbon_heavy(1)[0]  # many carbons, and no SMILES either
    ids = probs.argmax(-1)
    hook = cdd_engine(
        [CarbonCount(tau=6.0), Parses()],
        explicit(),
        lambda x: torch.zeros_like(x, dtype=torch.bool),
        [sample_generator(0, 0, i) for i in range(2)],
        tokenizer.decode,
    )
    out = hook(probs.clone(), ids, StepInfo(8, 8, 1 / 8, 0.0))
    # Row 0 has 3 carbons (the count's judge accepts it): only the parse judge objects, so only
    # row 1 tries the linearised projection; the flip search mends row 0.
    assert calls == [[1]]
    text = tokenizer.decode(out[0].argmax(-1).tolist())
    assert Chem.MolFromSmiles(text, sanitize=False) is not None
    assert hook.report(0)["search_nodes"] > 0


@pytest.mark.parametrize("patience", [1, 3])
def test_a_sample_that_cannot_improve_stops_after_exactly_patience_iterations(patience: int):
    """With the penalty at its cap from the start and no change able to lower the violation
    (ten carbons decided against tau 3, the movable positions already other tokens), every
    outer iteration is a stall: the sample stops after `patience` of them, not one more."""
    probs = carbon_heavy(1)
    probs[0, :10] = torch.nn.functional.one_hot(torch.tensor(CARBON), 35).float()
    probs[0, 10:] = torch.nn.functional.one_hot(torch.tensor(CARBON + 1), 35).float()
    fixed = torch.zeros(1, 12, dtype=torch.bool)
    fixed[0, :10] = True
    settings = explicit(mu_init=8.0, mu_max=8.0, patience=patience, max_outer_iters=50)
    result = project(probs, [CarbonCount(tau=3.0)], settings, fixed, [sample_generator(0, 0, 0)])
    assert not bool(result.feasible[0])
    assert int(result.outer_iters[0]) == patience


@pytest.mark.parametrize("upper", [True, False])
def test_the_surrogate_aims_margin_inside_the_bound(upper: bool):
    """An upper bound tau with margin m aims at tau - m (a lower bound at tau + m): a
    surrogate score exactly at tau is still m too far, and one m inside is on target."""
    c = CarbonCount(tau=3.0, margin=0.5, upper_bound=upper)
    inside = 2.5 if upper else 3.5
    scores = torch.tensor([3.0, inside])
    assert c.surrogate_excess(scores).tolist() == [0.5, 0.0]
    assert c.surrogate_violation(torch.tensor([1.0 if upper else 5.0])).tolist() == [0.0]


def carbons_of(probs: torch.Tensor) -> torch.Tensor:
    return probs.argmax(-1).eq(CARBON).sum(-1).float()


@pytest.mark.parametrize(("mu_max", "mu_after"), [(100.0, 3.0), (2.0, 2.0)])
def test_one_outer_iteration_updates_the_multipliers_by_the_argmax_violation(
    mu_max: float, mu_after: float
):
    """lam += mu * dg(argmax y) and mu = min(alpha mu, mu_max), per sample; a sample not
    projected keeps the multipliers it came with (here: none, so lam 0 and mu_init)."""
    probs = carbon_heavy(3)
    probs[1] = torch.nn.functional.one_hot(torch.tensor(CARBON + 1), 35).float()  # feasible
    settings = explicit(mu_init=1.5, alpha=2.0, mu_max=mu_max, max_outer_iters=1, eta=0.05)
    gens = [sample_generator(5, 0, i) for i in range(3)]
    result = project(probs, [CarbonCount(tau=3.0)], settings, None, gens)
    assert result.projected.tolist() == [True, False, True]
    assert result.outer_iters.tolist() == [1, 0, 1]
    assert result.inner_iters.tolist() == [10, 0, 10]  # outer x inner_iters
    violation = (carbons_of(result.probs) - 3.0).clamp_min(0)
    assert (violation[[0, 2]] > 0).all()  # one small step leaves them violating
    lam, mu = result.multipliers.lam[:, 0], result.multipliers.mu[:, 0]
    assert torch.allclose(lam, torch.tensor([1.5, 0.0, 1.5]) * violation)
    assert mu.tolist() == [mu_after, 1.5, mu_after]
    assert result.feasible.tolist() == [False, True, False]


def test_multipliers_passed_back_in_start_the_alm_where_it_ended():
    """The warm start: lam and mu begin at the larger of the passed values and the fresh
    ones (lam 0, mu_init), so a negative lam or a mu below mu_init is not taken over."""
    from cdd_cli.projection.alm import Multipliers

    probs = carbon_heavy(2)
    settings = explicit(mu_init=1.0, alpha=2.0, mu_max=100.0, max_outer_iters=1, eta=0.05)
    passed = Multipliers(torch.tensor([[4.0], [-3.0]]), torch.tensor([[5.0], [0.25]]))
    gens = [sample_generator(6, 0, i) for i in range(2)]
    result = project(probs, [CarbonCount(tau=3.0)], settings, None, gens, multipliers=passed)
    violation = (carbons_of(result.probs) - 3.0).clamp_min(0)
    start_lam, start_mu = torch.tensor([4.0, 0.0]), torch.tensor([5.0, 1.0])
    assert torch.allclose(result.multipliers.lam[:, 0], start_lam + start_mu * violation)
    assert result.multipliers.mu[:, 0].tolist() == [10.0, 2.0]
    assert passed.lam.tolist() == [[4.0], [-3.0]]  # the caller's tensors are not edited


def test_with_no_step_the_alm_returns_the_floored_prediction_and_reports_each_iteration():
    """eta 0: y stays at its start, x' floored at 0.35 / V and renormalised (the argmax
    unchanged, so the sample stays infeasible until the cap); progress is told per outer
    iteration with the counts a display shows."""
    from cdd_cli.projection.alm import floored

    probs = carbon_heavy(2)
    told = []
    settings = explicit(eta=0.0, max_outer_iters=3, mu_max=1000.0, inner_iters=2)
    result = project(probs, [CarbonCount(tau=3.0)], settings, None, None, told.append)
    assert torch.allclose(result.probs, floored(probs, 35), atol=1e-6)
    assert not result.feasible.any() and result.outer_iters.tolist() == [3, 3]
    assert [(p.outer, p.inner, p.violating, p.samples, p.max_outer) for p in told] == [
        (1, 2, 2, 2, 3),
        (2, 2, 2, 2, 3),
        (3, 2, 2, 2, 3),
    ]
    assert told[0].mu_range == (2.0, 2.0) and told[-1].mu_range == (8.0, 8.0)
    assert told[0].lam_range[0] > 0
    floor = floored(torch.tensor([[0.98, 0.02, 0.0, 0.0]]), 4)
    assert torch.allclose(floor, torch.tensor([[0.98, 0.0875, 0.0875, 0.0875]]) / 1.2425)


def test_what_every_constraint_is_its_bound_label_and_copies():
    upper, lower = CarbonCount(tau=3.0), CarbonCount(tau=2.5, upper_bound=False)
    assert [upper.satisfied(v) for v in (2.0, 3.0, 3.5, None)] == [True, True, False, False]
    assert [lower.satisfied(v) for v in (2.0, 2.5, 3.5, None)] == [False, True, True, False]
    assert (upper.label(), lower.label()) == ("carbons <= 3", "carbons >= 2.5")
    # A repair tightens the aim by adding to the margin; a prompt is told to the copy only.
    tighter = upper.tightened(0.25).tightened(0.5)
    assert (tighter.margin, upper.margin, tighter.tau) == (0.75, 0.0, 3.0)
    told = upper.with_prompt("CC", 2)
    assert (told.prompt, told.prompt_length) == ("CC", 2) and upper.prompt_length == 0
    assert told.tightened(0.25).prompt == "CC"  # a copy keeps every other field
    # An exact constraint accepts exactly what its judge says is within the bound.
    assert Parses().accepts("CCO") and not Parses().accepts("C1CC") and not Parses().accepts("")


def test_closed_forms_group_constraints_by_builder_and_refuse_two_full_layouts():
    from cdd_cli.constraints.base import closed_forms
    from cdd_cli.errors import InputError

    built: list[tuple[str, list[str], tuple]] = []

    def builder(label: str, **attributes):
        def build(group, tokenizer, start, length):
            built.append((label, [c.name for c in group], (tokenizer, start, length)))
            return label

        for key, value in attributes.items():
            setattr(build, key, value)
        return build

    def made(name: str, build) -> ExactConstraint:
        @dataclass(frozen=True)
        class Built(Parses):
            def closed_form(self):
                return build

        return Built(name=name)

    pattern = builder("pattern", serves=lambda c: c.name == "exclude", lays_out_every_position=True)
    words, plugin = builder("words", lays_out_every_position=True), builder("plugin")
    job = [made("regex", pattern), made("exclude", plugin), made("mine", plugin), Parses()]
    # The pattern takes the excluded word from the other builder's group; the rest stay there.
    assert closed_forms(job, "tok", 2, 8) == ["pattern", "plugin"]
    assert built == [
        ("pattern", ["regex", "exclude"], ("tok", 2, 8)),
        ("plugin", ["mine"], ("tok", 2, 8)),
    ]
    built.clear()
    # A group emptied by the taking is not built at all (the pattern with an excluded word
    # alone); a builder that does not lay out every position joins one that does.
    assert closed_forms([made("regex", pattern), made("exclude", words)], "tok", 0, 4) == [
        "pattern"
    ]
    assert built == [("pattern", ["regex", "exclude"], ("tok", 0, 4))]
    # ...two that do cannot, and the error names each one's constraints once.
    two = [made("regex", pattern), made("count", words), made("count", words), made("ends", words)]
    with pytest.raises(InputError) as refused:
        closed_forms(two, "tok", 0, 4)
    assert str(refused.value) == (
        "regex and count, ends cannot be combined: each lays out every position of the continuation"
    )


def test_gumbel_noise_is_standard_gumbel_per_row_and_finite_at_the_edges(monkeypatch):
    from cdd_cli.projection.alm import gumbel_noise

    cpu = torch.device("cpu")
    noise = gumbel_noise((400, 500), None, cpu)
    # Gumbel(0, 1): mean the Euler-Mascheroni constant, standard deviation pi / sqrt(6).
    assert abs(noise.mean().item() - 0.5772) < 0.02 and abs(noise.std().item() - 1.2825) < 0.02
    # With generators, row i is generator i's own draw, whatever the other rows are.
    rows = gumbel_noise((3, 4, 5), [sample_generator(7, 0, i) for i in range(3)], cpu)
    alone = gumbel_noise((1, 4, 5), [sample_generator(7, 0, 2)], cpu)
    assert torch.equal(rows[2:], alone)
    # The uniforms' ends (a draw of exactly 0) still give finite noise.
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.tensor([0.0, 1.0 - 2**-24]))
    assert torch.isfinite(gumbel_noise((2,), None, cpu)).all()


def test_any_violation_is_projected_and_decided_tokens_are_judged_as_they_are():
    """A violation below 1 is still a violation; where the sampler says what the fixed
    positions hold (`tokens`), the judging reads those tokens, not their rows' argmax."""
    from cdd_cli.projection.alm import argmax_ids

    probs = carbon_heavy(1)
    gens = [sample_generator(8, 0, 0)]
    half = project(probs, [CarbonCount(tau=carbons_of(probs).item() - 0.5)], explicit(), None, gens)
    assert half.projected.tolist() == [True] and half.outer_iters.tolist()[0] >= 1
    # Positions 0-5 decided as 'N' although their rows (say) favour carbons; six carbons at
    # most remain movable against tau 3: judged by the tokens, it needs projecting.
    tokens = probs.argmax(-1)
    fixed = torch.zeros(1, 12, dtype=torch.bool)
    fixed[0, :6] = True
    tokens[0, :6] = CARBON + 1
    free = probs.clone()
    free[0, 6:] = torch.nn.functional.one_hot(torch.tensor(CARBON + 1), 35).float()
    ids = argmax_ids(free, ~fixed, tokens)
    assert ids[0, :6].tolist() == [CARBON + 1] * 6 and ids[0, 6:].tolist() == [CARBON + 1] * 6
    judged = project(free, [CarbonCount(tau=3.0)], explicit(), fixed, gens, tokens=tokens)
    assert not judged.projected.any() and judged.feasible.all()  # the argmax alone says 6+
    assert project(free, [CarbonCount(tau=3.0)], explicit(), fixed, gens).projected.all()


def test_a_batch_needing_nothing_returns_zero_counts_and_the_multipliers_it_was_given():
    from cdd_cli.projection.alm import Multipliers

    feasible = torch.nn.functional.one_hot(torch.full((2, 12), CARBON + 1), 35).float()
    passed = Multipliers(torch.ones(2, 1), torch.full((2, 1), 4.0))
    result = project(feasible, [CarbonCount(tau=3.0)], explicit(), multipliers=passed)
    assert result.outer_iters.tolist() == [0, 0] and result.inner_iters.tolist() == [0, 0]
    assert result.multipliers is passed and result.feasible.tolist() == [True, True]
    assert result.seconds.dtype == torch.float64 and (result.seconds >= 0).all()


@pytest.mark.parametrize("support", [0, 4])
def test_one_outer_iteration_is_the_papers_update_on_the_floored_target(support: int):
    """From y = log x' (x' floored, and over the support restricted and renormalised), each
    inner step is y -= eta * grad[KL(x' || softmax y) + lam dg + mu / 2 dg^2], dg the
    violation of the Gumbel-softmax relaxation (two steps: the KL's gradient is 0 at the
    start); the result is softmax y put back with x''s mass inside the support, and lam
    grows by mu times the violation of y's argmax. Written out here apart from alm.py."""
    from cdd_cli.projection.alm import floored

    probs = carbon_heavy(2)
    eta, temperature, mu_init, vocab = 0.7, 0.5, 1.5, 35
    settings = explicit(support=support, inner_iters=2, max_outer_iters=1, eta=eta, mu_init=mu_init)
    settings.temperature = temperature
    gens = [sample_generator(9, 0, i) for i in range(2)]
    result = project(probs, [CarbonCount(tau=3.0)], settings, None, gens)

    # The support, or every token in vocabulary order (the order the noise is drawn in).
    ids = probs.topk(support, dim=-1).indices if support else torch.arange(vocab).expand_as(probs)
    inside = floored(probs, vocab).gather(-1, ids)
    mass = inside.sum(-1, keepdim=True)
    x = inside / mass
    y = x.log()
    gens = [sample_generator(9, 0, i) for i in range(2)]
    for _ in range(2):
        y = y.detach().requires_grad_(True)
        u = torch.stack([torch.rand(x.shape[1:], generator=g) for g in gens])
        soft = ((y - torch.log(-torch.log(u.clamp(1e-10, 1 - 1e-7)))) / temperature).softmax(-1)
        dg = torch.relu((soft * (ids == CARBON)).sum((-1, -2)) - 3.0)
        kl = (x * (x.log() - y.log_softmax(-1))).sum((-1, -2))
        (grad,) = torch.autograd.grad((kl + mu_init / 2 * dg.square()).sum(), y)  # lam is 0
        y = y - eta * grad
    stepped = y.softmax(-1) * mass
    expected = probs.clone().scatter(-1, ids, stepped.detach())
    expected = expected / expected.sum(-1, keepdim=True)
    assert result.projected.all() and torch.allclose(result.probs, expected, atol=1e-5)
    hard = ids.gather(-1, y.argmax(-1, keepdim=True)).squeeze(-1)
    violation = (hard.eq(CARBON).sum(-1) - 3.0).clamp_min(0)
    assert torch.equal(result.multipliers.lam[:, 0], mu_init * violation)


@dataclass(frozen=True)
class TenthCarbons(CarbonCount):
    """Carbons counted a tenth each: every flip lowers the violation by less than 1."""

    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        return 0.1 * super().surrogate(soft_tokens)

    def judge(self, texts: list[str]) -> list[float | None]:
        return [0.1 * v for v in super().judge(texts)]


def test_any_fall_of_a_samples_own_violation_is_progress():
    """At mu_max with patience 1, a sample whose violation falls (a tenth a carbon, judged on
    its own) keeps iterating, while a stuck sample beside it stops after one iteration.
    Sample 1 prefers carbon everywhere by margins 0.06 .. 0.72, so flips come a few at a
    time; sample 0 has ten carbons decided against tau 3."""
    probs = torch.full((2, 12, 35), 1e-4)
    margins = 0.03 * torch.arange(1, 13)
    probs[1, :, CARBON], probs[1, :, CARBON + 1] = 0.5 + margins, 0.5 - margins
    probs[0, :10, CARBON] = probs[0, 10:, CARBON + 1] = 1.0
    probs = probs / probs.sum(-1, keepdim=True)
    fixed = torch.zeros(2, 12, dtype=torch.bool)
    fixed[0, :10] = True
    settings = explicit(mu_init=16.0, mu_max=16.0, patience=1, eta=1.0, inner_iters=1)
    gens = [sample_generator(12, 0, i) for i in range(2)]
    result = project(probs, [TenthCarbons(tau=0.3)], settings, fixed, gens)
    assert result.outer_iters[0] == 1 and result.outer_iters[1] >= 3
    assert carbons_of(result.probs).tolist()[0] == 10 and carbons_of(result.probs)[1] < 12


def test_every_second_of_a_projection_is_charged_to_some_sample(clock: TickingClock):
    """The time between the projection's first clock reading and its last is charged, all of
    it and once: each interval is different, so neither a dropped nor a doubled one sums up."""
    probs = carbon_heavy(4)
    probs[1] = torch.nn.functional.one_hot(torch.tensor(CARBON + 1), 35).float()  # feasible
    gens = [sample_generator(10, 0, i) for i in range(4)]
    result = project(probs, [CarbonCount(tau=3.0)], explicit(max_outer_iters=8), None, gens)
    assert len(clock.readings) >= 4  # the check, the set-up, an outer iteration, the end
    charged = result.seconds.sum().item()
    assert charged == pytest.approx(clock.readings[-1] - clock.readings[0], rel=1e-12, abs=0)
    assert result.seconds[1] < result.seconds[[0, 2, 3]].min()


def test_two_constraints_have_their_own_multipliers_and_both_must_hold():
    """lam and mu are per constraint: one outer iteration adds mu_j * dg_j to lam_j, a sample
    is done only when every constraint holds, and it stalls only when every mu is at mu_max."""
    from cdd_cli.projection.alm import Multipliers

    nitrogen = make_tokenizer().index["N"]
    probs = carbon_heavy(2)
    probs[..., nitrogen] = probs[..., CARBON] * 0.9  # nitrogen second everywhere
    probs = probs / probs.sum(-1, keepdim=True)
    both = [
        CarbonCount(tau=3.0),
        CarbonCount(tau=8.0, name="nitrogens", token=nitrogen, symbol="N"),
    ]
    settings = explicit(mu_init=1.0, alpha=2.0, mu_max=100.0, max_outer_iters=1, eta=0.05)
    gens = [sample_generator(11, 0, i) for i in range(2)]
    result = project(probs, both, settings, None, gens)
    ids = result.probs.argmax(-1)
    dg = torch.stack(
        [
            (ids.eq(CARBON).sum(-1) - 3.0).clamp_min(0),
            (ids.eq(nitrogen).sum(-1) - 8.0).clamp_min(0),
        ],
        -1,
    )
    assert torch.allclose(result.multipliers.lam, dg) and (result.multipliers.mu == 2.0).all()
    assert result.feasible.tolist() == (dg == 0).all(-1).tolist()
    # Carbons can go only to nitrogen here: with nitrogen capped at 8 of 12 and carbon at 3,
    # both hold only together; the run ends with both held, not one.
    done = project(probs, both, explicit(max_outer_iters=50), None, gens)
    ids = done.probs.argmax(-1)
    assert done.feasible.all()
    assert (ids.eq(CARBON).sum(-1) <= 3).all() and (ids.eq(nitrogen).sum(-1) <= 8).all()
    # One mu at mu_max and the other below it is no stall: of two stuck samples, the one
    # with both at mu_max stops after `patience`, the other runs to the cap (alpha 1: its
    # second mu never grows).
    stuck = probs.clone()
    stuck[:, :10] = torch.nn.functional.one_hot(torch.tensor(CARBON), 35).float()
    stuck[:, 10:] = torch.nn.functional.one_hot(torch.tensor(CARBON + 1), 35).float()
    fixed = torch.zeros(2, 12, dtype=torch.bool)
    fixed[:, :10] = True
    mu = torch.tensor([[8.0, 8.0], [8.0, 1.0]])
    settings = explicit(mu_init=1.0, mu_max=8.0, alpha=1.0, patience=2, max_outer_iters=6)
    run = project(
        stuck, both, settings, fixed, gens, multipliers=Multipliers(torch.zeros(2, 2), mu)
    )
    assert run.outer_iters.tolist() == [2, 6]


@dataclass(frozen=True)
class CountedParses(Parses):
    """`Parses`, counting the texts it was asked to judge."""

    judged: list = field(default_factory=list, compare=False)

    def judge(self, texts: list[str]) -> list[float | None]:
        self.judged.extend(texts)
        return super().judge(texts)


def test_a_sequence_the_syntax_cannot_read_is_refused_unjudged():
    tokenizer = make_tokenizer()
    good, bad = (tokenizer.encode(s, 12) for s in ("CC(C)O", "CC(CO"))
    judge = CountedParses()
    plain = Judges([judge], tokenizer.decode, lambda x: x == -1)
    checked = Judges([judge], tokenizer.decode, lambda x: x == -1, tokenizer.readable)
    assert plain.accept_all([good, bad]) == [True, False] and len(judge.judged) == 2
    judge.judged.clear()
    assert checked.accept_all([good, bad]) == [True, False]
    assert judge.judged == ["CC(C)O"]  # the unreadable one never reached the judge
