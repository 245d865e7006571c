"""generation.py's promises read in-process on the tiny random models of conftest.py: each
draw is its own generator's (seed, prompt, sample, attempt), the prompt stays fixed and the
judges read the continuation, a sample is satisfied only when every judge accepts it (and, for
molecules, it parses), the engine is built per run of equal draws with the redraw's margin,
and the passes pool redraws with fresh samples, each sample paying its share of the time."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

import cdd_cli.run.drawing as generation_module
from cdd_cli.constraints.base import DifferentiableConstraint, ExactConstraint
from cdd_cli.diffusion.processes import (
    KeptFixed,
    MaskedProcess,
    OrderedProcess,
    UniformProcess,
)
from cdd_cli.diffusion.sampler import Canvas, sample_generator, sample_seed
from cdd_cli.methods import METHODS
from cdd_cli.models import registry
from cdd_cli.models.checkpoint import ModelConfig, save_model
from cdd_cli.models.dit import DiffusionModel
from cdd_cli.reporting import Reporter
from cdd_cli.run.drawing import (
    BatchDrawer,
    Draw,
    Prompt,
    judge,
    no_projection,
    runs,
    surrogate_scores,
)
from cdd_cli.spec.model import Spec
from tests.conftest import make_tokenizer
from tests.generation import generation

SEED = 5


@pytest.fixture(scope="module")
def loaded(uniform_model_dir: Path):
    return registry.load(str(uniform_model_dir), "molecules")


@pytest.fixture(scope="module")
def masked(masked_model_dir: Path):
    return registry.load(str(masked_model_dir), "molecules")


def spec_of(method: str = "unconstrained", **sampling) -> Spec:
    spec = Spec(method=method)
    spec.sampling.seed = SEED
    for name, value in sampling.items():
        setattr(spec.sampling, name, value)
    return spec


@dataclass(frozen=True)
class Scripted(ExactConstraint):
    """A judge that answers each call from a script (0: accepted, 1: rejected; tau 0.5) and
    logs what it was asked: the texts, the prompt it was told, and its margin."""

    tau: float = 0.5
    name: str = "scripted"
    script: tuple = ()
    # A list shared by the copies a run makes (with_prompt, tightened).
    log: list = field(default=None, compare=False, hash=False)

    def judge(self, texts: list[str]) -> list[float | None]:
        call = len([entry for entry in self.log if entry[0] == "judge"])
        self.log.append(("judge", list(texts), self.prompt, self.prompt_length, self.margin))
        answers = self.script[call] if call < len(self.script) else [0.0] * len(texts)
        return list(answers)

    def remember(self, texts: list[str]) -> None:
        self.log.append(("remember", list(texts)))


def scripted(*script, name: str = "scripted") -> Scripted:
    return Scripted(name=name, script=tuple(script), log=[])


def judged(constraint: Scripted) -> list[list[str]]:
    return [entry[1] for entry in constraint.log if entry[0] == "judge"]


@dataclass(frozen=True)
class Weighed(DifferentiableConstraint):
    """A differentiable constraint whose surrogate gives fixed values; repair_unit 2."""

    tau: float = 1.0
    name: str = "weighed"
    values: tuple = (1.23456, float("inf"), float("nan"), -0.5)
    repair_unit = 2.0

    def surrogate(self, soft_tokens) -> torch.Tensor:
        return torch.tensor(self.values[: len(soft_tokens)])

    def judge(self, texts: list[str]) -> list[float | None]:
        return [0.0] * len(texts)


class Recorder:
    """A closed-form projection's builder that keeps what it was built for."""

    def __init__(self, constraints, tokenizer, start, length):
        self.built = (list(constraints), tokenizer, start, length)


@dataclass(frozen=True)
class Closed(Weighed):
    name: str = "closed"

    def closed_form(self):
        return Recorder


# ---------------------------------------------------------------------------------------------
# The small functions


def test_judge_gives_each_text_every_constraints_value():
    a = scripted([0.0, 1.0], name="a")
    b = scripted([2.0, None], name="b")
    assert judge([a, b], ["x", "y"]) == [{"a": 0.0, "b": 2.0}, {"a": 1.0, "b": None}]
    assert judge([], ["x"]) == [{}]


def test_surrogate_scores_round_and_null_what_is_not_finite():
    ids = torch.zeros(4, 3, dtype=torch.long)
    scores = surrogate_scores(ids, [Weighed(), scripted(name="exact")])
    assert scores == [
        {"weighed": 1.2346, "exact": None},
        {"weighed": None, "exact": None},
        {"weighed": None, "exact": None},
        {"weighed": -0.5, "exact": None},
    ]
    assert surrogate_scores(ids[:2], []) == [{}, {}]


def test_runs_are_the_ranges_of_neighbours_with_one_key():
    draws = [Draw(i, attempts=a) for i, a in enumerate([2, 2, 1, 0, 0, 0])]
    assert runs(draws, lambda d: d.attempts) == [(0, 2), (2, 3), (3, 6)]
    assert runs(draws[:1], lambda d: d.attempts) == [(0, 1)]
    assert runs([Draw(0), Draw(1)], lambda d: d.attempts) == [(0, 2)]
    assert runs(draws, lambda d: d.index) == [(i, i + 1) for i in range(6)]


def test_a_prompt_shows_what_the_user_gave():
    assert Prompt(text="templated", given="plain").shown == "plain"
    assert Prompt(text="templated").shown == "templated"
    assert Prompt().shown is None
    assert Prompt().ids.tolist() == [] and Prompt().index == 0


def test_a_draw_begins_with_no_projection():
    assert no_projection() == {
        "steps": 0,
        "outer_iters": 0,
        "inner_iters": 0,
        "search_nodes": 0,
        "seconds": 0.0,
        "settled_by": None,
    }
    draw = Draw(3)
    assert (draw.index, draw.text, draw.attempts, draw.satisfied, draw.seconds) == (
        3,
        "",
        0,
        False,
        0.0,
    )
    assert draw.projection == no_projection() and draw.projection is not Draw(4).projection


# ---------------------------------------------------------------------------------------------
# BatchDrawer: how it is built


def test_generation_builds_the_sampler_the_spec_says(loaded):
    drawing = generation(spec_of(decode="plain", temperature=0.7, top_p=0.9), loaded, [], 3)
    assert isinstance(drawing.process, UniformProcess)
    drawn_with = drawing.process.temperature_top_p
    assert (drawn_with.temperature, drawn_with.top_p) == (0.7, 0.9)
    assert drawing.sampler.steps == 3 and drawing.sampler.syntax is None
    assert drawing.sampler.process is drawing.process
    assert drawing.length == loaded.config.model_length == 24
    assert drawing.molecules is True
    assert drawing.stage_seconds == {}
    assert drawing.method is METHODS["unconstrained"]
    assert type(drawing.reporter) is Reporter
    well_formed = generation(spec_of(), loaded, [], 3)
    assert well_formed.spec.sampling.decode == "well-formed"
    assert well_formed.sampler.syntax is not None
    reporter = Reporter()
    assert BatchDrawer(well_formed.spec, loaded, [], 7, reporter).length == 7
    assert BatchDrawer(well_formed.spec, loaded, [], 7, reporter).reporter is reporter


def test_generation_of_a_masked_model_orders_its_steps_as_the_spec_says(masked):
    drawing = generation(spec_of(sampler="confidence", block_length=4), masked, [], 2)
    process = drawing.process
    assert isinstance(process, OrderedProcess)
    assert (process.order, process.block_length, process.mask_id) == (
        "confidence",
        4,
        masked.tokenizer.mask_id,
    )
    assert process.vocab_size == masked.config.vocab_size
    assert drawing.sampler.cacheable  # a masked model without time conditioning
    drawing = generation(spec_of(sampler="ancestral"), masked, [], 2)
    assert type(drawing.process) is MaskedProcess


# ---------------------------------------------------------------------------------------------
# draw: one pass


def expected_texts(drawing: BatchDrawer, prompt: Prompt, draws: list[tuple[int, int]], length):
    generators = [sample_generator(SEED, prompt.index, i, a) for i, a in draws]
    ids = drawing.sampler.sample(generators, Canvas.prompt(prompt.ids, length))
    keep = len(prompt.ids)
    return [drawing.loaded.tokenizer.decode(row[keep:]) for row in ids.tolist()]


def test_each_draw_is_its_own_generators(loaded):
    drawing = generation(spec_of(), loaded, [], 3)
    prompt = Prompt(index=2)
    draws = [Draw(0), Draw(1, attempts=2), Draw(4)]
    drawing.draw(draws, prompt)
    texts = expected_texts(drawing, prompt, [(0, 0), (1, 2), (4, 0)], 24)
    assert [d.text for d in draws] == texts
    assert len(set(texts)) == 3  # three streams, three molecules
    assert [d.attempts for d in draws] == [1, 3, 1]
    # No constraint: satisfied, whatever the text (a random model's may not parse).
    assert all(d.satisfied for d in draws)
    assert all(d.values == {} and d.surrogates == {} for d in draws)
    assert all(d.projection == no_projection() for d in draws)
    assert drawing.stage_seconds == {}


def test_a_draw_is_that_of_its_sample_alone(loaded):
    """Another seed, prompt, sample or attempt is another draw; the batch is not."""
    drawing = generation(spec_of(), loaded, [], 3)
    alone = [Draw(1, attempts=1)]
    drawing.draw(alone, Prompt(index=1))
    together = [Draw(0), Draw(1, attempts=1)]
    drawing.draw(together, Prompt(index=1))
    assert together[1].text == alone[0].text
    assert expected_texts(drawing, Prompt(index=1), [(1, 1)], 24) == [alone[0].text]
    assert expected_texts(drawing, Prompt(index=0), [(1, 1)], 24) != [alone[0].text]


def test_a_shorter_continuation_is_drawn_to_its_length(loaded):
    spec = spec_of()
    generation(spec, loaded, [], 3)
    drawing = BatchDrawer(spec, loaded, [], 5)
    draws = [Draw(0), Draw(1)]
    drawing.draw(draws, Prompt())
    assert [d.text for d in draws] == expected_texts(drawing, Prompt(), [(0, 0), (1, 0)], 5)


def test_the_prompt_stays_and_the_judges_read_the_continuation(loaded):
    check = scripted()
    drawing = generation(spec_of("reject", decode="plain"), loaded, [check], 3)
    tokenizer = loaded.tokenizer
    ids = torch.tensor([tokenizer.bos_id, tokenizer.index["C"], tokenizer.index["O"]])
    prompt = Prompt(index=3, text="CO", ids=ids)
    draws = [Draw(0), Draw(1)]
    drawing.draw(draws, prompt)
    texts = expected_texts(drawing, prompt, [(0, 0), (1, 0)], 24)
    assert [d.text for d in draws] == texts
    assert check.log[0] == ("judge", texts, "CO", 3, 0.0)
    drawing.draw([Draw(0)], Prompt(index=3, ids=ids))  # a prompt without text: told ""
    assert check.log[-2][2:4] == ("", 3)


def test_satisfied_needs_every_judge_and_a_molecule_that_parses(loaded, monkeypatch):
    a = scripted([0.0, 1.0, 0.0, None], name="a")
    b = scripted([0.0, 0.0, 1.0, 0.0], name="b")
    drawing = generation(spec_of("reject"), loaded, [a, b], 2)
    monkeypatch.setattr(generation_module, "canonical", lambda text: text)
    draws = [Draw(i) for i in range(4)]
    drawing.draw(draws, Prompt())
    assert [d.satisfied for d in draws] == [True, False, False, False]
    assert [d.values for d in draws] == [
        {"a": 0.0, "b": 0.0},
        {"a": 1.0, "b": 0.0},
        {"a": 0.0, "b": 1.0},
        {"a": None, "b": 0.0},
    ]
    assert [d.surrogates for d in draws] == [{"a": None, "b": None}] * 4
    # Every judge told only of the texts that satisfied them all.
    assert a.log[-1] == ("remember", [draws[0].text]) and b.log[-1] == a.log[-1]
    # A molecule that does not parse satisfies nothing, whatever the judges say of it.
    monkeypatch.setattr(generation_module, "canonical", lambda text: None)
    draws = [Draw(i) for i in range(2)]
    drawing.draw(draws, Prompt())
    assert [d.satisfied for d in draws] == [False, False]
    assert a.log[-1] == ("remember", [])


def test_surrogates_are_scored_on_the_output(loaded, monkeypatch):
    monkeypatch.setattr(generation_module, "canonical", lambda text: text)
    drawing = generation(spec_of("reject"), loaded, [Weighed(values=(0.5, 2.0))], 2)
    draws = [Draw(0), Draw(1)]
    drawing.draw(draws, Prompt())
    assert [d.surrogates for d in draws] == [{"weighed": 0.5}, {"weighed": 2.0}]
    assert [d.values for d in draws] == [{"weighed": 0.0}, {"weighed": 0.0}]


class Spy:
    """A method that logs the jobs its engine is built for, and builds `make(job)`."""

    def __init__(self, method, make=lambda job: None):
        self.method, self.make, self.jobs = method, make, []
        self.weighs = method.weighs

    def margin(self, repair, attempt):
        return self.method.margin(repair, attempt)

    def steered(self, repair, attempt):
        return self.method.steered(repair, attempt)

    def attempts(self, repair, reject):
        return self.method.attempts(repair, reject)

    def engine(self, job, projection, search):
        self.jobs.append((job, projection, search))
        return self.make(job)


class Engine:
    """An engine stand-in: leaves the prediction as it is, and reports fixed costs."""

    def __init__(self, rows: int, seconds: list[float], settled_by: str = "alm"):
        self.rows, self.seconds, self.settled_by = rows, seconds, settled_by
        self.stage_seconds = {"alm": 0.5, "search": 0.25}
        self.calls = 0

    def __call__(self, probs, x, info):
        self.calls += 1
        return probs

    def reports(self) -> list[dict]:
        return [
            {
                "steps": 1,
                "outer_iters": 2,
                "inner_iters": 3,
                "search_nodes": 4 + row,
                "seconds": 0.5,
                "settled_by": f"{self.settled_by}-{row}",
            }
            for row in range(self.rows)
        ]


def test_the_engine_is_built_per_run_of_equal_draws(loaded):
    spec = spec_of("cdd")
    spec.repair.margin_step = 0.25
    spec.repair.surrogates_from = 2
    reporter = Reporter()
    drawing = generation(spec, loaded, [Closed()], 2)
    drawing.reporter = reporter
    drawing.method = Spy(METHODS["cdd"])
    tokenizer = loaded.tokenizer
    ids = torch.tensor([tokenizer.bos_id, tokenizer.index["C"], tokenizer.index["O"]])
    prompt = Prompt(index=1, text="CO", ids=ids)
    draws = [Draw(3, attempts=2), Draw(5, attempts=2), Draw(4, attempts=1), Draw(0)]
    drawing.draw(draws, prompt)
    jobs = [job for job, _, _ in drawing.method.jobs]
    assert len(jobs) == 3
    assert [len(job.generators) for job in jobs] == [2, 1, 1]
    seeds = [[g.initial_seed() for g in job.generators] for job in jobs]
    assert seeds == [
        [sample_seed(SEED, 1, 3, 2), sample_seed(SEED, 1, 5, 2)],
        [sample_seed(SEED, 1, 4, 1)],
        [sample_seed(SEED, 1, 0, 0)],
    ]
    # A redraw's surrogates aim further inside: margin_step a redraw, in repair units (2).
    assert [job.constraints[0].margin for job in jobs] == [1.0, 0.5, 0.0]
    assert all(job.constraints[0].prompt_length == 3 for job in jobs)
    assert all(job.constraints[0].prompt == "CO" for job in jobs)
    # The surrogates move a final prediction from the second draw on.
    assert [job.final_surrogates for job in jobs] == [True, True, False]
    for job in jobs:
        [closed] = job.closed_forms
        assert closed.built == (list(job.constraints), loaded.tokenizer, 3, 24)
        assert isinstance(job.fixed_positions, KeptFixed)
        kept = job.fixed_positions.kept  # the prompt's 3 tokens
        assert kept[:, :3].all() and not kept[:, 3:].any()
        assert job.fixed_positions.process is drawing.process
        assert job.reader is loaded.tokenizer
        # SMILES: a syntax to decode, keeping the prompt's tokens.
        assert job.well_formed.func == drawing.sampler.well_formed
        assert torch.equal(job.well_formed.keywords["canvas"].kept, kept)
        assert job.on_progress == reporter.alm and job.on_stage == reporter.stage
        assert job.readable is not None
        carbon = tokenizer.index["C"]
        assert job.decode([*ids.tolist(), carbon]) == "C"  # the continuation's text
        assert job.readable([*ids.tolist(), carbon]) is True
        assert job.readable([*ids.tolist(), tokenizer.index["("]]) is False
    assert all(
        projection is spec.projection and search is spec.search
        for _, projection, search in drawing.method.jobs
    )
    # The engines built nothing: the model's own draws.
    assert [d.attempts for d in draws] == [3, 3, 2, 1]
    assert [d.projection for d in draws] == [no_projection()] * 4


def test_a_samples_own_draws_build_no_engine_and_the_projection_counts_from_after_them(loaded):
    spec = spec_of("cdd")
    spec.repair.margin_step, spec.repair.surrogates_from, spec.repair.own_draws = 0.25, 2, 2
    drawing = generation(spec, loaded, [Closed()], 2)
    drawing.method = Spy(METHODS["cdd"])
    assert drawing.method.attempts(spec.repair, spec.reject) == 2 + 1 + spec.repair.max_redraws
    draws = [Draw(3, attempts=3), Draw(5, attempts=2), Draw(4, attempts=1), Draw(0)]
    drawing.draw(draws, Prompt())
    jobs = [job for job, _, _ in drawing.method.jobs]
    # A 4th and a 3rd draw are the projection's 2nd and 1st; a 1st and a 2nd the model's own.
    assert [[g.initial_seed() for g in job.generators] for job in jobs] == [
        [sample_seed(SEED, 0, 3, 3)], [sample_seed(SEED, 0, 5, 2)]
    ]
    assert [job.constraints[0].margin for job in jobs] == [0.5, 0.0]
    assert [job.final_surrogates for job in jobs] == [True, False]
    # A pass of own draws alone builds nothing and projects nothing.
    drawing.method.jobs.clear()
    own = [Draw(1, attempts=1), Draw(2)]
    drawing.draw(own, Prompt())
    assert drawing.method.jobs == [] and [d.projection for d in own] == [no_projection()] * 2


def test_a_first_draw_may_use_the_surrogates_by_default(loaded):
    spec = spec_of("cdd", decode="plain")
    drawing = generation(spec, loaded, [Weighed()], 2)
    spec.repair.surrogates_from = None  # (a run's defaults name one)
    drawing.method = Spy(METHODS["cdd"])
    drawing.draw([Draw(0)], Prompt())
    [(job, _, _)] = drawing.method.jobs
    assert job.final_surrogates is True
    assert job.well_formed is None  # plain decoding: no syntax to decode by


def test_without_constraints_no_engine_is_built(loaded):
    drawing = generation(spec_of("cdd"), loaded, [], 2)
    drawing.method = Spy(METHODS["cdd"])
    drawing.draw([Draw(0)], Prompt())
    assert drawing.method.jobs == []


def test_a_text_model_has_no_reader_and_no_syntax(text_model_dir: Path):
    loaded = registry.load(str(text_model_dir), "text")
    drawing = generation(spec_of("cdd"), loaded, [Weighed()], 2)
    assert drawing.molecules is False
    drawing.method = Spy(METHODS["cdd"])
    draws = [Draw(0)]
    drawing.draw(draws, Prompt())
    [(job, _, _)] = drawing.method.jobs
    assert job.reader is None and job.well_formed is None and job.readable is None
    assert draws[0].satisfied is True  # text: no parse asked for


class Clock:
    """time.perf_counter's stand-in: each reading one second after the one before."""

    def __init__(self):
        self.now = -1.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


def test_each_sample_pays_its_share_of_the_pass_and_its_own_projection(loaded, monkeypatch):
    monkeypatch.setattr(generation_module, "time", Clock())
    steps = []

    class Steps(Reporter):
        def step(self, info):
            steps.append(info.index)

    engines = []

    def make(job):
        rows = len(job.generators)
        engines.append(Engine(rows, [0.125 * (len(engines) + 1)] * rows))
        return engines[-1]

    drawing = generation(spec_of("cdd"), loaded, [Weighed()], 2)
    drawing.reporter = Steps()
    drawing.method = Spy(METHODS["cdd"], make)
    draws = [Draw(0, attempts=1), Draw(1)]
    drawing.draw(draws, Prompt())
    assert steps and all(e.calls for e in engines)  # the hook and the reporter were called
    # The pass: 1 s; projections 0.125 and 0.25 s: each pays (1 - 0.375) / 2 and its own.
    assert [d.seconds for d in draws] == [0.3125 + 0.125, 0.3125 + 0.25]
    assert drawing.stage_seconds == {"alm": 1.0, "search": 0.5}
    assert [d.projection for d in draws] == [
        {
            "steps": 1,
            "outer_iters": 2,
            "inner_iters": 3,
            "search_nodes": 4,
            "seconds": 0.5,
            "settled_by": "alm-0",
        }
    ] * 2
    # A second draw: costs add up, who did the work is the last draw's.
    engines.clear()
    draws[0].projection["settled_by"] = "search"
    drawing.draw(draws, Prompt())
    assert [d.projection["steps"] for d in draws] == [2, 2]
    assert [d.projection["search_nodes"] for d in draws] == [8, 8]
    assert [d.projection["seconds"] for d in draws] == [1.0, 1.0]
    assert [d.projection["settled_by"] for d in draws] == ["alm-0", "alm-0"]
    assert drawing.stage_seconds == {"alm": 2.0, "search": 1.0}
    assert [d.seconds for d in draws] == [0.875, 1.125]  # attempts 2 and 1: two parts again


def test_an_engine_of_several_rows_reports_each(loaded, monkeypatch):
    monkeypatch.setattr(generation_module, "time", Clock())

    def make(job):
        return Engine(len(job.generators), [0.0, 0.5][: len(job.generators)], "x")

    drawing = generation(spec_of("cdd"), loaded, [Weighed()], 2)
    drawing.method = Spy(METHODS["cdd"], make)
    draws = [Draw(0), Draw(1)]
    drawing.draw(draws, Prompt())
    assert [d.projection["search_nodes"] for d in draws] == [4, 5]
    assert [d.projection["settled_by"] for d in draws] == ["x-0", "x-1"]
    assert [d.seconds for d in draws] == [0.25, 0.75]


# ---------------------------------------------------------------------------------------------
# finished: the passes


class Passes(Reporter):
    def __init__(self):
        self.seen: list[tuple[int, int, int]] = []

    def pass_started(self, samples: int, redraws: int, steps: int) -> None:
        self.seen.append((samples, redraws, steps))


def test_redraws_ride_first_in_the_next_pass_up_to_the_cap(loaded, monkeypatch):
    monkeypatch.setattr(generation_module, "canonical", lambda text: text)
    monkeypatch.setattr(generation_module, "time", Clock())
    # Pass 1: samples 0 1 2, 1 rejected. Pass 2: 1 (redrawn) 3 4, 1 and 4 rejected.
    # Pass 3: 1 (its third draw, the cap: final) 4, then 5: 4 rejected again. Pass 4: 4 6.
    check = scripted([0, 1, 0], [1, 0, 1], [1, 1, 0], [0, 0])
    spec = spec_of("reject", batch_size=3)
    spec.reject.max_attempts = 3
    drawing = generation(spec, loaded, [check], 2)
    drawing.reporter = Passes()
    out = [(d.index, d.attempts, d.satisfied) for d in drawing.finished(iter(range(7)))]
    assert drawing.reporter.seen == [(3, 0, 2), (3, 1, 2), (3, 2, 2), (2, 1, 2)]
    assert out == [
        (0, 1, True),
        (2, 1, True),
        (3, 1, True),
        (1, 3, False),  # the cap: written as it is
        (5, 1, True),
        (4, 3, True),
        (6, 1, True),
    ]
    # The redraws come first in a pass, the most drawn first.
    passes = judged(check)
    assert [len(p) for p in passes] == [3, 3, 3, 2]
    # Each pass: 3 readings of the clock from its start to after its draw; redraws' share.
    assert drawing.stage_seconds == {"redraws": 3 * 1 / 3 + 3 * 2 / 3 + 3 * 1 / 2}


def test_the_pass_orders_draws_by_their_draws_so_far(loaded, monkeypatch):
    monkeypatch.setattr(generation_module, "canonical", lambda text: text)
    order = []
    real = BatchDrawer.draw

    def draw(self, draws, prompt):
        order.append([(d.index, d.attempts) for d in draws])
        real(self, draws, prompt)

    monkeypatch.setattr(BatchDrawer, "draw", draw)
    check = scripted([1, 1, 0], [0, 1, 0])
    spec = spec_of("reject", batch_size=3)
    spec.reject.max_attempts = 5
    drawing = generation(spec, loaded, [check], 2)
    assert [d.index for d in drawing.finished(range(5))] == [2, 0, 3, 1, 4]
    assert order == [[(0, 0), (1, 0), (2, 0)], [(0, 1), (1, 1), (3, 0)], [(1, 2), (4, 0)]]


def test_a_run_is_final_samples_in_index_order(loaded, monkeypatch):
    monkeypatch.setattr(generation_module, "canonical", lambda text: text)
    check = scripted([1, 0, 0, 0])
    spec = spec_of("reject", batch_size=4)
    spec.reject.max_attempts = 2
    prompt = Prompt(index=4)
    drawing = generation(spec, loaded, [check], 2)
    draws = drawing.run([7, 3, 9, 1], prompt)
    assert [(d.index, d.attempts) for d in draws] == [(1, 1), (3, 1), (7, 2), (9, 1)]
    assert draws[2].text == expected_texts(drawing, prompt, [(7, 1)], 24)[0]
    assert drawing.run([], prompt) == []


def test_one_draw_each_where_the_method_does_not_redraw(loaded, monkeypatch):
    monkeypatch.setattr(generation_module, "canonical", lambda text: text)
    check = scripted([1, 1], [1])
    drawing = generation(spec_of("unconstrained", batch_size=2), loaded, [check], 2)
    drawing.reporter = Passes()
    draws = list(drawing.finished(range(3)))
    assert [(d.index, d.attempts, d.satisfied) for d in draws] == [
        (0, 1, False),
        (1, 1, False),
        (2, 1, False),
    ]
    assert drawing.reporter.seen == [(2, 0, 2), (1, 0, 2)]
    assert "redraws" not in drawing.stage_seconds
    assert [d.text for d in draws] == expected_texts(
        drawing, Prompt(), [(i, 0) for i in range(3)], 24
    )


def test_a_judge_that_answers_for_other_texts_is_an_error():
    """A judge (a plugin's, say) must give one value per text: a value short is a defect,
    never a value given to the wrong sample."""
    with pytest.raises(ValueError):
        judge([scripted([0.0])], ["x", "y"])
    with pytest.raises(ValueError):
        judge([scripted([0.0, 0.0, 0.0])], ["x", "y"])


def test_a_time_conditioned_masked_model_is_never_cached(tmp_path: Path):
    """The cache serves a masked model that ignores t; one that reads t is asked each step."""
    tokenizer = make_tokenizer()
    config = ModelConfig(
        vocab_size=len(tokenizer),
        model_length=8,
        hidden_dim=16,
        cond_dim=8,
        n_blocks=1,
        n_heads=2,
        dropout=0.0,
        time_conditioning=True,
        model_type="mdlm",
        noise="masked",
    )
    save_model(DiffusionModel(config), tmp_path, extra={"tokenizer": tokenizer.kind})
    tokenizer.save(tmp_path)
    loaded = registry.load(str(tmp_path), "molecules")
    drawing = generation(spec_of(sampler="ancestral"), loaded, [], 2)
    assert isinstance(drawing.process, MaskedProcess)
    assert drawing.sampler.cacheable is False
