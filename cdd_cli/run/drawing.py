"""Drawing samples: one batch through the sampler and the method's projection, judged by the
exact judges, and redrawn while the method allows (the repair of what the judges reject).

Each draw of sample i of prompt p uses a generator derived from (seed, p, i, attempt), so a
sample does not depend on the batch size, the shard or the samples drawn before it. The
prompt's tokens stay fixed while `length` continuation tokens are denoised, and constraints
judge the continuation, told the prompt for scopes that include it. A prompt may instead
bring a canvas (`Canvas`: a template's fixed text, kept anywhere): then constraints judge the
whole text. A sample is `satisfied` only when every judge accepts it.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from cdd_cli.constraints.base import Constraint, DifferentiableConstraint, closed_forms
from cdd_cli.diffusion.processes import KeptFixed, TemperatureTopP, make_process
from cdd_cli.diffusion.sampler import Canvas, Sampler, sample_generator
from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import canonical
from cdd_cli.methods import METHODS, exact_setting
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.tokenizers import Continuation, MoleculeTokenizer
from cdd_cli.projection.engine import Engine, Job, Parts
from cdd_cli.projection.exact import ExactHook, ExactSetting
from cdd_cli.reporting import Reporter
from cdd_cli.spec.model import Spec
from cdd_cli.templates import Layout, TemplateText


class Canvases(Protocol):
    """A canvas per draw: sample `index`'s at its draw `attempt` (0: its first), one row."""

    def __call__(self, index: int, attempt: int) -> Canvas: ...


@dataclass(frozen=True)
class Prompt:
    """A prompt as the sampler sees it: its index in the run, text and token ids."""

    index: int = 0
    text: str | None = None  # what the model conditions on (with --chat, the template's text)
    ids: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    id: str | int | None = None
    given: str | None = None  # the prompt as the user gave it, which records show
    # What the samples are drawn on, where not the prompt's ids then the run's length: one
    # row shared by every sample, one row per sample index (`Canvas.select`), or one per
    # draw (`Canvases`).
    canvas: Canvas | Canvases | None = None
    layout: Layout | None = None  # a template's, whose text the records show part by part
    # Each sample's first draws are drawn whole, on no canvas: the model's own, kept where
    # the judges accept them (a part kept anywhere that the model often writes by itself).
    own_draws: int = 0

    @property
    def shown(self) -> str | None:
        return self.given if self.given is not None else self.text


def drawn_on(canvas: Canvas | Canvases, draws: list[Draw], own_draws: int) -> Canvas:
    """The rows of `canvas` for `draws`, those still within their first `own_draws` opened:
    drawn whole, the model's own."""
    if isinstance(canvas, Canvas):
        rows = canvas.select([d.index for d in draws])
    else:
        rows = Canvas.stacked([canvas(d.index, d.attempts) for d in draws])
    own = torch.tensor([d.attempts < own_draws for d in draws])
    return rows.opened(own) if own.any() else rows


def projects(engine: Engine | ExactHook | None) -> bool:
    """Whether a part's engine does anything to the model's steps (one of no stages, for
    the model's own draws, does not)."""
    return engine is not None and not (isinstance(engine, Engine) and not engine.stages)


def no_projection() -> dict:
    return {
        "steps": 0,
        "outer_iters": 0,
        "inner_iters": 0,
        "search_nodes": 0,
        "seconds": 0.0,
        "settled_by": None,
    }


@dataclass
class Draw:
    """What one sample became after all its draws."""

    index: int
    text: str = ""
    attempts: int = 0
    values: dict[str, float | None] = field(default_factory=dict)
    surrogates: dict[str, float | None] = field(default_factory=dict)
    satisfied: bool = False
    projection: dict = field(default_factory=no_projection)
    seconds: float = 0.0
    # The exact method's (None under the others): the kept draw's log-weight log p/q of its
    # trajectory, whether it was kept by weight (False: the attempts ran out), and every
    # draw's importance weight w 1[satisfied], in order.
    log_weight: float | None = None
    accepted: bool | None = None
    weights: list[float] = field(default_factory=list)
    above_bound: float = 0.0  # the sum over its draws of max(0, w - M): the truncated mass

    @property
    def kept(self) -> bool:
        """Whether this draw is final: accepted by weight (exact), else satisfied."""
        return self.satisfied if self.accepted is None else self.accepted


def judge(constraints: list[Constraint], texts: list[str]) -> list[dict[str, float | None]]:
    values: list[dict[str, float | None]] = [{} for _ in texts]
    for c in constraints:
        for row, value in zip(values, c.judge(texts), strict=True):
            row[c.name] = value
    return values


def surrogate_scores(
    ids: torch.Tensor, constraints: list[Constraint]
) -> list[dict[str, float | None]]:
    """Each differentiable constraint's surrogate on the output (None for exact ones)."""
    scores: dict[str, list[float | None]] = {}
    with torch.no_grad():
        for c in constraints:
            if isinstance(c, DifferentiableConstraint):
                # A surrogate is a hint beside the judge: one that is not finite is null.
                values = c.surrogate(ids).tolist()
                scores[c.name] = [round(v, 4) if math.isfinite(v) else None for v in values]
            else:
                scores[c.name] = [None] * len(ids)
    return [{k: v[i] for k, v in scores.items()} for i in range(len(ids))]


def exact_design(
    spec: Spec, loaded: LoadedModel, constraints: list[Constraint]
) -> ExactSetting | None:
    """The exact method's design for this model and these constraints (None without
    constraints: the model's own draws); an input error where it steers a sampler whose law it
    cannot weigh."""
    if not constraints:
        return None
    setting = exact_setting(loaded.revision, [c.label() for c in constraints])
    if setting.tempering == 0:  # the model's own steps: rejection under the sampler's law
        return setting
    sampling = spec.sampling
    if sampling.sampler not in (None, "ancestral"):
        raise InputError(
            f"method exact: sampler {sampling.sampler} chooses positions by the prediction, so "
            "a proposal would change which positions a step decides (use the ancestral sampler)"
        )
    if sampling.top_p is not None and sampling.top_p < 1.0:
        raise InputError(
            f"method exact: top_p {sampling.top_p:g} would cut tokens the model may draw out of "
            "the proposal (use top_p 1, --top-p 1)"
        )
    return setting


def runs(items: Sequence[Draw], key: Callable[[Draw], int]) -> list[tuple[int, int]]:
    """The ranges a:b of neighbours in `items` with one `key`."""
    bounds = [0] + [i for i in range(1, len(items)) if key(items[i]) != key(items[i - 1])]
    return list(zip(bounds, [*bounds[1:], len(items)], strict=True))


class BatchDrawer:
    """Draws batches (the sampler's passes) of samples with the spec's method and certifies
    them with the judges, redrawing what they reject while the method allows.
    The spec's settings are already filled in (`run.defaults.fill_defaults`)."""

    def __init__(
        self,
        spec: Spec,
        loaded: LoadedModel,
        constraints: list[Constraint],
        length: int | None = None,
        reporter: Reporter | None = None,
    ):
        self.spec, self.loaded, self.constraints = spec, loaded, constraints
        self.method = METHODS[spec.method]
        self.reporter = reporter or Reporter()
        sampling = spec.sampling
        self.process = make_process(
            loaded.config.noise,
            loaded.config.vocab_size,
            loaded.tokenizer.mask_id,
            sampling.sampler,
            sampling.block_length,
            TemperatureTopP(sampling.temperature, sampling.top_p),
        )
        self.molecules = isinstance(loaded.tokenizer, MoleculeTokenizer)
        self.sampler = Sampler(
            loaded.model,
            self.process,
            sampling.steps,
            loaded.config.time_conditioning,
            loaded.tokenizer.syntax() if sampling.decode == "well-formed" else None,
            loaded.tokenizer.layout() if self.molecules else None,
        )
        self.length = length or loaded.config.model_length  # tokens after the prompt
        # Where the time went, summed over passes: each engine stage's wall seconds, and
        # "redraws": the redrawn samples' share of the passes (of their wall seconds).
        self.stage_seconds: dict[str, float] = {}
        self.proposal = exact_design(spec, loaded, constraints) if self.method.weighs else None

    def draw(self, draws: list[Draw], prompt: Prompt) -> None:
        """One more draw for each of `draws` (in one pass, ordered by their draws so far),
        judged; updates them in place."""
        spec = self.spec
        generators = [
            sample_generator(spec.sampling.seed, prompt.index, d.index, d.attempts) for d in draws
        ]
        keep = len(prompt.ids)
        told = [c.with_prompt(prompt.text or "", keep) for c in self.constraints]
        tokenizer = self.loaded.tokenizer
        canvas = self.canvas(prompt, draws)
        # Objects of the layers below, not closures of this one: the engine calls them every
        # step, and control need not come back up here to answer.
        continuation: Continuation | TemplateText = (
            Continuation(tokenizer, keep)
            if prompt.layout is None
            else TemplateText(prompt.layout, tokenizer.decode)
        )

        hook = None
        if self.constraints:
            parts = []
            # Exact: every draw is proposed alike (no margins), so one engine, and the
            # model's prediction left as it is for the weights (parts copy theirs into it).
            whole = [(0, len(draws))]
            ranges = whole if self.method.weighs else runs(draws, lambda d: d.attempts)
            for a, b in ranges:
                attempts = draws[a].attempts
                rows = canvas.rows(a, b)
                fixed = KeptFixed(self.process, rows.kept.to(self.sampler.device))
                steered = self.method.steered(spec.repair, attempts)
                if steered is None:  # the model's own draws, judged as they come
                    parts.append((a, b, Engine([], fixed, b - a)))
                    continue
                # A redraw's surrogates aim further inside than a first draw's.
                margin = self.method.margin(spec.repair, attempts)
                constraints = [c.tightened(margin * c.repair_unit) for c in told]
                job = Job(
                    constraints=constraints,
                    closed_forms=closed_forms(constraints, tokenizer, keep, canvas.length - keep),
                    fixed_positions=fixed,
                    generators=generators[a:b],
                    decode=continuation,
                    reader=tokenizer if self.molecules else None,
                    well_formed=self.well_formed(rows),
                    on_progress=self.reporter.alm,
                    on_stage=self.reporter.stage,
                    final_surrogates=steered + 1 >= (spec.repair.surrogates_from or 1),
                    readable=continuation.readable if continuation.check is not None else None,
                    process=self.process,
                    proposal=self.proposal,
                )
                parts.append((a, b, self.method.engine(job, spec.projection, spec.search)))
            # A pass of the model's own draws alone runs as one unconstrained.
            hook = Parts(parts) if any(map(projects, (e for *_, e in parts))) else None
        started = time.perf_counter()
        with torch.inference_mode(hook is None):
            ids = self.sampler.sample(generators, canvas, hook, self.reporter.step)
        elapsed = time.perf_counter() - started
        for name, seconds in hook.stage_seconds.items() if hook else ():
            self.stage_seconds[name] = self.stage_seconds.get(name, 0.0) + seconds
        # Each sample pays an equal share of the batch's sampling and its own projection time.
        projecting = list(hook.seconds) if hook else [0.0] * len(draws)
        accounts = hook.reports() if hook else []  # each sample's projection account
        base = (elapsed - sum(projecting)) / len(draws)
        texts = [continuation(row) for row in ids.tolist()]
        values = judge(told, texts)
        surrogates = surrogate_scores(ids, told)
        for i, d in enumerate(draws):
            d.text, d.values, d.surrogates = texts[i], values[i], surrogates[i]
            d.attempts += 1
            d.seconds += base + projecting[i]
            # A molecule that does not parse satisfies nothing, whatever a judge says of it.
            d.satisfied = all(c.satisfied(values[i][c.name]) for c in self.constraints) and (
                not (self.molecules and self.constraints) or canonical(texts[i]) is not None
            )
            if hook is not None:
                for key, value in accounts[i].items():
                    # Costs add up over a sample's draws; who did the work is the last draw's.
                    d.projection[key] = value if key == "settled_by" else d.projection[key] + value
        if self.proposal is not None and hook is not None:
            self.weigh(draws, hook.parts[0][2].log_weights.tolist(), generators)
        for c in self.constraints:  # e.g. novelty: later samples must differ from these
            c.remember([d.text for d in draws if d.kept])

    def weigh(
        self, draws: list[Draw], log_weights: list[float], generators: list[torch.Generator]
    ) -> None:
        """Exact: each draw kept with probability min(1, w / M), w = exp(log-weight) if the
        judges accept it, else 0; the uniform from the draw's own stream, after its sampling."""
        log_bound = self.proposal.log_bound
        for d, log_weight, g in zip(draws, log_weights, generators, strict=True):
            uniform = torch.rand((), generator=g, dtype=torch.float64).item()
            d.log_weight = log_weight
            weight = math.exp(log_weight) if d.satisfied else 0.0
            d.weights.append(weight)
            d.above_bound += max(0.0, weight - math.exp(log_bound))
            d.accepted = d.satisfied and math.log(max(uniform, 1e-300)) < log_weight - log_bound

    def canvas(self, prompt: Prompt, draws: list[Draw]) -> Canvas:
        """What `draws` of `prompt` are drawn on, a row each where the prompt's canvas has
        one per sample or some of them are still the model's own (`Prompt.own_draws`)."""
        if prompt.canvas is None:
            return Canvas.prompt(prompt.ids, self.length)
        # The last draw allowed is always on the canvas (under one draw, every draw is).
        own = min(prompt.own_draws, self.method.attempts(self.spec.repair, self.spec.reject) - 1)
        return drawn_on(prompt.canvas, draws, own)

    def well_formed(self, rows: Canvas) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The sampler's syntax for the projection, keeping the kept tokens of `rows`."""
        if self.sampler.syntax is None:
            # Nothing to decode (and a text model's V-wide copy of the prediction would
            # cost more than the projection).
            return None
        if not rows.kept.any() or len(rows.ids) > 1:
            # A canvas of a row per sample cannot pin the subsets of rows the stages decode
            # (the flip search decodes its rejected rows): the final prediction they read is
            # pinned by the sampler already, and the sampler restores the kept ids at the end.
            return self.sampler.well_formed
        return functools.partial(self.sampler.well_formed, canvas=rows)

    def finished(self, indices: Iterable[int], prompt: Prompt | None = None) -> Iterator[Draw]:
        """Samples `indices` of one prompt, each once it is final: drawn, judged, and drawn
        again while the judges reject it, up to the method's attempts. Each pass takes every
        sample the pass before left rejected, then samples not yet begun, up to the batch
        size: a redraw rides in a full pass instead of a pass of its own (a pass of a few
        samples costs nearly what a full one does, and most of a run's time went to them),
        and the passes stay alike, so the time a run has left can be told from the passes
        done. A sample's draws do not depend on its pass-mates (`draw`). The samples a pass
        finishes come out after it, in index order; a redrawn sample comes out after samples
        begun later (an interrupted run keeps every record written)."""
        prompt = prompt or Prompt()
        fresh = iter(indices)
        size = self.spec.sampling.batch_size
        cap = self.method.attempts(self.spec.repair, self.spec.reject)
        pending: list[Draw] = []  # rejected by the judges, to be drawn again
        while True:
            begun = [Draw(i) for i in itertools.islice(fresh, size - len(pending))]
            # By their draws so far, so that draws projected alike are neighbours (`draw`).
            batch = sorted(pending + begun, key=lambda d: -d.attempts)
            if not batch:
                return
            started = time.perf_counter()
            self.reporter.pass_started(len(batch), len(pending), self.spec.sampling.steps)
            self.draw(batch, prompt)
            if pending:  # the redraws' share of the pass (each sample pays an equal share)
                share = (time.perf_counter() - started) * len(pending) / len(batch)
                self.stage_seconds["redraws"] = self.stage_seconds.get("redraws", 0.0) + share
            pending = [d for d in batch if not d.kept and d.attempts < cap]
            again = {id(d) for d in pending}
            yield from sorted((d for d in batch if id(d) not in again), key=lambda d: d.index)

    def run(self, indices: Iterable[int], prompt: Prompt | None = None) -> list[Draw]:
        """Samples `indices` of one prompt, final, in index order."""
        return sorted(self.finished(indices, prompt), key=lambda d: d.index)
