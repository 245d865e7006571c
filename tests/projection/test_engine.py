"""The engine's shape: its methods (cdd, paper), the settings tables, closed forms reached
through the constraint contract."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.constraints.base import DifferentiableConstraint, ExactConstraint
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.diffusion.processes import UniformProcess, make_process
from cdd_cli.diffusion.sampler import Sampler, StepInfo, sample_generator
from cdd_cli.errors import InputError
from cdd_cli.methods import METHODS, PAPER_BY_FAMILY
from cdd_cli.models import registry
from cdd_cli.models.surrogate import Tokens, token_mass
from cdd_cli.projection import engine
from cdd_cli.projection.stages import alm as alm_stage
from cdd_cli.projection.stages.alm import ALM
from cdd_cli.projection.step import Step
from cdd_cli.reporting import Reporter
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.settings import SearchSettings
from cdd_cli.spec.model import Spec
from tests.generation import generation
from tests.projection.test_projection import CARBON, CarbonCount, explicit


def count_alm_calls(monkeypatch) -> list[int]:
    """Patches the ALM stage's `project`: the returned list gets each call's batch size."""
    calls: list[int] = []
    original = alm_stage.project

    def spy(probs, *args, **kwargs):
        calls.append(len(probs))
        return original(probs, *args, **kwargs)

    monkeypatch.setattr(alm_stage, "project", spy)
    return calls


def carbon_job(final_surrogates: bool = True) -> engine.Job:
    """A job of one carbon count, nothing fixed, no samples: enough to build an engine."""
    return engine.Job(
        constraints=[CarbonCount(tau=3.0)],
        closed_forms=[],
        fixed_positions=lambda x: x == -1,
        generators=[],
        decode=lambda ids: "",
        final_surrogates=final_surrogates,
    )


@pytest.mark.parametrize("preset", ["paper", "cdd"])
def test_paper_projects_every_step_and_cdd_only_the_last(
    uniform_model_dir: Path, monkeypatch, preset: str
):
    loaded = registry.load(str(uniform_model_dir), "molecules")
    process = UniformProcess(loaded.config.vocab_size)
    steps = 6
    sampler = Sampler(loaded.model, process, steps, True)
    gens = [sample_generator(2, 0, i) for i in range(3)]
    free = sampler.sample(gens, 12)
    common = int(free.flatten().mode().values)  # the random model's favourite token
    # tau 0 of the token its argmax favours: every step's argmax violates.
    constraint = CarbonCount(tau=0.0, token=common, symbol=loaded.tokenizer.vocab[common])
    settings = explicit(project_from=0.0 if preset == "paper" else 0.95, max_outer_iters=3)
    gens = [sample_generator(2, 0, i) for i in range(3)]
    job = engine.Job(
        constraints=[constraint],
        closed_forms=[],
        fixed_positions=process.fixed_positions,
        generators=gens,
        decode=loaded.tokenizer.decode,
    )
    hook = METHODS[preset].engine(job, settings, SearchSettings(project_from=0.9, max_nodes=2000))
    calls = count_alm_calls(monkeypatch)
    sampler.sample(gens, 12, hook)
    if preset == "paper":  # the 5 ancestral steps and the noise removal, whole batches
        assert calls == [3] * steps
        assert sum(hook.report(i)["steps"] for i in range(3)) > steps
    else:  # the final prediction alone: judged first, then only what the judges reject
        assert len(calls) <= 1


def test_paper_stages_are_the_papers_and_cdd_has_all_eight():
    job = carbon_job()
    search = SearchSettings(project_from=0.0, max_nodes=2000)
    paper = METHODS["paper"].engine(job, explicit(), search)
    cdd = METHODS["cdd"].engine(job, explicit(), SearchSettings(project_from=0.9, max_nodes=2000))
    names = [type(s).__name__ for s in paper.stages]
    assert names == ["ClosedForms", "ALM", "KeepClosedForms", "FlipSearch"]
    assert [type(s).__name__ for s in cdd.stages] == [
        "ClosedForms",
        "FinalJudges",
        "LinearisedLadder",
        "LookAhead",
        "ALM",
        "RedrawAfterALM",
        "KeepClosedForms",
        "FlipSearch",
    ]
    # The paper's search asks the exact judges only and repairs nothing at the end.
    search = paper.stages[-1]
    assert search.judges.order == [] and not search.repair


def test_before_surrogates_from_the_final_prediction_is_left_to_the_exact_search():
    """A draw before `repair.surrogates_from`: no ladder, and the ALM projects the regular
    steps from its `project_from` on but not the final prediction (the flip search repairs it,
    in the model's own probabilities)."""
    job = carbon_job(final_surrogates=False)
    search = SearchSettings(project_from=0.9, max_nodes=2000)
    cdd = METHODS["cdd"].engine(job, explicit(project_from=0.5), search)
    names = [type(s).__name__ for s in cdd.stages]
    assert "LinearisedLadder" not in names and names[-1] == "FlipSearch"
    alm = next(s for s in cdd.stages if isinstance(s, ALM))

    def step(index: int) -> Step:
        info = StepInfo(index, 10, 0.5, 0.4)
        x = torch.zeros(2, 3, dtype=torch.long)
        return Step(torch.ones(2, 3, 4), x, info, x == -1, [False] * 2, torch.zeros(2) > 0)

    assert alm.due(step(6)) and not alm.due(step(10)) and not alm.due(step(2))
    job.final_surrogates = True
    cdd = METHODS["cdd"].engine(job, explicit(project_from=0.5), search)
    assert "LinearisedLadder" in [type(s).__name__ for s in cdd.stages]
    assert next(s for s in cdd.stages if isinstance(s, ALM)).due(step(10))


def test_an_engine_refuses_a_stage_before_what_it_needs():
    job = carbon_job()
    cdd = METHODS["cdd"].engine(job, explicit(), SearchSettings(project_from=0.9, max_nodes=2000))
    ladder, judges = cdd.stages[2], cdd.stages[1]
    with pytest.raises(ValueError, match=r"^LinearisedLadder needs accepted, argmax, which no"):
        engine.Engine([ladder, judges], job.fixed_positions, 1)
    keep, alm = cdd.stages[6], cdd.stages[4]
    with pytest.raises(ValueError, match=r"^KeepClosedForms needs plans, which no stage before"):
        engine.Engine([alm, keep], job.fixed_positions, 1)
    engine.Engine([cdd.stages[0], alm, keep], job.fixed_positions, 1)  # in order: built


def test_each_method_says_how_often_a_sample_is_drawn_and_how_far_inside():
    spec = Spec()
    spec.repair.max_redraws, spec.repair.margin_step, spec.reject.max_attempts = 3, 0.5, 7
    draws = {name: m.attempts(spec.repair, spec.reject) for name, m in METHODS.items()}
    assert draws == {"cdd": 4, "paper": 1, "unconstrained": 1, "reject": 7, "exact": 7}
    assert METHODS["cdd"].margin(spec.repair, 2) == 1.0
    assert METHODS["reject"].margin(spec.repair, 2) == METHODS["paper"].margin(spec.repair, 2) == 0
    assert [m.projects for m in METHODS.values()] == [True, True, False, False, True]
    assert [m.weighs for m in METHODS.values()] == [False, False, False, False, True]


def test_paper_settings_fill_by_family_and_keep_what_the_spec_gives(uniform_model_dir: Path):
    loaded = registry.load(str(uniform_model_dir), "molecules")
    spec = Spec(method="paper", constraints=[ConstraintSpec("sa", {"tau": 3.0}, "test")])
    spec.projection.max_outer_iters = 7
    fill_defaults(spec, loaded)
    p = spec.projection
    assert (p.inner_iters, p.eta, p.mu_init, p.mu_max) == (100, 1.0, 1.0, 1000.0)
    assert (p.support, p.project_from, p.max_outer_iters) == (0, 0.0, 7)
    assert spec.search.project_from == 0.0
    text = Spec(method="paper", constraints=[ConstraintSpec("toxicity", {"tau": 0.5}, "t")])
    fill_defaults(text, loaded)
    assert text.projection.eta == PAPER_BY_FAMILY["toxicity"]["eta"] == 0.2
    assert text.projection.inner_iters == 10
    cdd = Spec()
    fill_defaults(cdd, loaded)  # a SMILES model: cdd's own table
    assert (cdd.projection.inner_iters, cdd.projection.support) == (3, 4)
    clash = Spec()
    clash.projection.mu_init = 5000.0  # above the filled-in mu_max
    with pytest.raises(InputError, match="mu_init <= mu_max"):
        fill_defaults(clash, loaded)


@dataclass(frozen=True)
class NoCarbonEver(DifferentiableConstraint):
    """A judge that rejects every text, and a surrogate with nothing to follow."""

    tau: float = 0.0
    name: str = "never"

    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        return token_mass(soft_tokens, CARBON).sum(-1) * 0.0 + 1.0

    def judge(self, texts: list[str]) -> list[float | None]:
        return [1.0] * len(texts)


@pytest.mark.parametrize("method", ["paper", "cdd"])
def test_paper_never_redraws_and_reports_what_it_leaves_violating(
    uniform_model_dir: Path, method: str
):
    loaded = registry.load(str(uniform_model_dir), "molecules")
    spec = Spec(method=method, projection=explicit(max_outer_iters=1, inner_iters=1))
    spec.repair.max_redraws = 2
    spec.search.max_nodes = 3
    draws = generation(spec, loaded, [NoCarbonEver()], 4).run(range(3))
    assert not any(d.satisfied for d in draws)
    # cdd redraws what the judges reject; the paper's algorithm reports it as it is.
    assert [d.attempts for d in draws] == [1 if method == "paper" else 3] * 3


class FirstCarbon:
    """A closed form that makes the first position a carbon wherever it may still change."""

    def __init__(self, constraints, tokenizer, start, length):
        self.start = start

    def plan(self, probs, x, fixed, generators):
        return [None] * len(x)

    def apply(self, probs, plans, fixed):
        out = probs.clone()
        free = ~fixed[:, self.start]
        out[free, self.start] = torch.nn.functional.one_hot(torch.tensor(CARBON), out.shape[-1]).to(
            out.dtype
        )
        return out

    def order(self, plans, changing, fixed):
        return None


@dataclass(frozen=True)
class StartsWithCarbon(ExactConstraint):
    """A family of its own that brings a closed form, as a plugin would."""

    tau: float = 1.0
    upper_bound: bool = False
    name: str = "starts_with_c"

    def judge(self, texts: list[str]) -> list[float | None]:
        return [float(t.startswith("C")) for t in texts]

    def closed_form(self):
        return FirstCarbon


def test_a_family_brings_its_closed_form_through_the_constraint(uniform_model_dir: Path):
    loaded = registry.load(str(uniform_model_dir), "molecules")
    spec = Spec(method="cdd", projection=explicit())
    spec.search.max_nodes = 1  # the flip search is no help: the closed form must do it
    spec.repair.max_redraws = 0
    draws = generation(spec, loaded, [StartsWithCarbon()], 4).run(range(6))
    assert all(d.text.startswith("C") for d in draws)
    # A molecule that does not parse satisfies nothing, whatever this family's judge says.
    from cdd_cli.evaluate.molecules import canonical

    assert [d.satisfied for d in draws] == [canonical(d.text) is not None for d in draws]
    spec = Spec(method="unconstrained")
    free = generation(spec, loaded, [StartsWithCarbon()], 4).run(range(6))
    assert not all(d.text.startswith("C") for d in free)  # the random model alone does not


runner = CliRunner()


def test_method_paper_from_the_command_line_and_a_spec(tmp_path: Path):
    spec = tmp_path / "paper.yaml"
    spec.write_text("method: paper\nconstraints:\n  - type: sa\n    tau: 3.0\n")
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 0, result.stderr
    assert "inner_iters: 100" in result.stdout and "support: 0" in result.stdout
    bad = runner.invoke(app, ["molecules", "-n", "1", "--method", "papers"])
    assert bad.exit_code == 2 and "paper" in bad.stderr


@pytest.mark.slow
def test_another_method_over_a_written_configuration_is_refused(tmp_path: Path):
    # A resolved configuration writes out the paper's values; cdd would run with them.
    out = tmp_path / "p.jsonl"
    args = ["molecules", "--method", "paper", "-c", "sa", "--tau", "4.5", "-n", "1"]
    first = runner.invoke(app, [*args, "--steps", "2", "-q", "-o", str(out)])
    assert first.exit_code in (0, 3), first.stderr
    again = runner.invoke(app, ["molecules", "--spec", f"{out}.config.yaml", "--method", "cdd"])
    assert again.exit_code == 2 and "'paper' spec that sets eta" in again.stderr
    # reject uses no projection setting: allowed, and so is a spec that writes none.
    spec = tmp_path / "s.yaml"
    spec.write_text("method: cdd\nprojection: {mu_max: 2}\n")
    loaded_free = runner.invoke(app, ["molecules", "--spec", str(spec), "--method", "reject"])
    assert loaded_free.exit_code == 0, loaded_free.stderr  # mu_init is checked only where used


class RejectsTheSecondOnce(NoCarbonEver):
    """A judge that rejects only the second text of its first call."""

    name: str = "second-once"
    calls: ClassVar[list[int]] = [0]  # shared by the copies a redraw makes

    def judge(self, texts: list[str]) -> list[float | None]:
        self.calls[0] += 1
        return [1.0 if (self.calls[0] == 1 and i == 1) else -1.0 for i in range(len(texts))]


def test_finished_samples_come_out_before_the_batch_redraws_the_rest(
    uniform_model_dir: Path, monkeypatch
):
    import cdd_cli.run.drawing as generation_module

    monkeypatch.setattr(generation_module, "canonical", lambda text: text)  # the toy model's SMILES
    loaded = registry.load(str(uniform_model_dir), "molecules")
    spec = Spec(method="reject")  # the judge is called once a pass (no search asks it)
    spec.reject.max_attempts = 3
    RejectsTheSecondOnce.calls[0] = 0  # a run before this one in the process counted too
    finished = generation(spec, loaded, [RejectsTheSecondOnce()], 4).finished(range(3))
    order = [(d.index, d.attempts, d.satisfied) for d in finished]
    assert order == [(0, 1, True), (2, 1, True), (1, 2, True)]


def test_a_redraw_rides_in_the_next_pass_with_samples_not_yet_begun(
    uniform_model_dir: Path, monkeypatch
):
    """A sample the judges reject is drawn again in the next pass beside fresh samples (not
    in a pass of its own), and its record comes out once final."""
    import cdd_cli.run.drawing as generation_module

    monkeypatch.setattr(generation_module, "canonical", lambda text: text)  # the toy model's SMILES
    loaded = registry.load(str(uniform_model_dir), "molecules")
    spec = Spec(method="reject")
    spec.reject.max_attempts = 3
    spec.sampling.batch_size = 3
    RejectsTheSecondOnce.calls[0] = 0

    class Passes(Reporter):
        seen: ClassVar[list[tuple[int, int]]] = []

        def pass_started(self, samples: int, redraws: int, steps: int) -> None:
            self.seen.append((samples, redraws))

    drawing = generation(spec, loaded, [RejectsTheSecondOnce()], 4)
    drawing.reporter = Passes()
    order = [(d.index, d.attempts, d.satisfied) for d in drawing.finished(range(5))]
    assert Passes.seen == [(3, 0), (3, 1)]  # not (3, 0), (1, 0), (2, 0): two passes, not three
    assert order == [(0, 1, True), (2, 1, True), (1, 2, True), (3, 1, True), (4, 1, True)]


class Sees:
    """An engine stand-in: records each step's rows and draw, and moves its rows' mass."""

    def __init__(self, token: int):
        self.token, self.seen = token, []

    def __call__(self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        if info.decide is not None:
            self.seen.append((x.clone(), info.changing.clone(), info.decide(probs)))
        moved = torch.zeros_like(probs)
        moved[..., self.token] = 1.0
        return moved  # a new tensor: Parts copies it into its rows


def test_parts_project_each_range_of_a_batch_as_a_batch_of_its_own(masked_model_dir: Path):
    loaded = registry.load(str(masked_model_dir), "molecules")
    process = make_process("masked", loaded.config.vocab_size, loaded.tokenizer.mask_id)
    sampler = Sampler(loaded.model, process, 4, False)
    first, second = Sees(5), Sees(6)
    hook = engine.Parts([(0, 2, first), (2, 3, second)])
    ids = sampler.sample([sample_generator(1, 0, i) for i in range(3)], 8, hook)
    assert (ids[:2] == 5).all() and (ids[2] == 6).all()  # each part's projection is its rows'
    # Each part saw its own rows, and its draw is the batch's draw of those rows.
    alone = Sees(6)
    sampler.sample([sample_generator(1, 0, 2)], 8, alone)
    assert len(second.seen) == len(alone.seen) == 3
    for (x, changing, drawn), (x1, changing1, drawn1) in zip(second.seen, alone.seen, strict=True):
        assert torch.equal(x, x1) and torch.equal(changing, changing1)
        assert torch.equal(drawn, drawn1)
    assert all(len(x) == 2 for x, _, _ in first.seen)
