"""A run, written once for molecules and text: spec -> constraints -> sampler(model,
projection) -> records -> JSONL.

- `compile_spec`: the model loaded (or one already loaded), the spec's constraints built for it
  and its settings filled in: what a `cdd.Generator` holds and every run of it reuses;
- `plan`: one run of a compiled spec: prompts tokenized, lengths and layouts checked, before
  any sampling;
- `Run.records`: the records, each as soon as it is final (a domain object says what differs
  between molecules and text);
- `write`: those records appended to an output (resume, shards and the resolved configuration
  in `output/`), with the closing summary.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from statistics import median

import torch

from cdd_cli.constraints.base import Constraint, DifferentiableConstraint, closed_forms
from cdd_cli.errors import InputError
from cdd_cli.methods import METHODS
from cdd_cli.models import registry
from cdd_cli.models.registry import LoadedModel
from cdd_cli.output.config import (
    INPUTS,
    check_model_revision,
    check_resolved_config,
    earlier_config,
    files_digest,
    holds_records,
)
from cdd_cli.output.resume import Share, resume_from, written_records
from cdd_cli.projection.alm import project
from cdd_cli.prompts import PromptInput
from cdd_cli.reporting import Display, ProjectionPlan, Reporter, Tally
from cdd_cli.run.defaults import (
    check_batch_fits,
    check_blocks,
    check_lookahead_fits,
    fill_defaults,
)
from cdd_cli.run.domains import Domain, Shape
from cdd_cli.run.drawing import BatchDrawer, Prompt, exact_design
from cdd_cli.run.record import record
from cdd_cli.run.templated import TEMPLATE_OWN_DRAWS, bind, build_scoped, run_prompts
from cdd_cli.spec.model import Spec
from cdd_cli.spec.overlay import overlay

EXIT_OK, EXIT_VIOLATIONS = 0, 3


# Settings whose default came to depend on the model's kind after files were written without
# them: the value such a file was drawn under, and the values a file may hold.
FILE_DEFAULTS: dict[str, tuple[object, Callable[[object], bool]]] = {
    # Text drew from the full mass before the nucleus became its default.
    "sampling.top_p": (1.0, lambda v: isinstance(v, (int, float)) and 0 < v <= 1),
    # The surrogates moved every draw's final prediction before the exact search came first.
    "repair.surrogates_from": (1, lambda v: isinstance(v, int) and v >= 1),
    # Every draw was steered before a template's first draws became the model's own.
    "repair.own_draws": (0, lambda v: isinstance(v, int) and v >= 0),
}


def setting(spec: Spec, key: str) -> object:
    section, name = key.split(".")
    return getattr(getattr(spec, section), name)


@dataclass
class Compiled:
    """A spec made ready to sample: its model loaded, constraints built, settings filled."""

    spec: Spec
    loaded: LoadedModel
    constraints: list[Constraint]
    domain: Domain
    device: str
    # The `FILE_DEFAULTS` settings the spec named (the rest the model's kind chose, and a file
    # written under another default keeps its own: see `keep_file_defaults`).
    given: frozenset[str] = frozenset(FILE_DEFAULTS)


def compile_spec(
    spec: Spec, domain: Domain, device: str, loaded: LoadedModel | None = None
) -> Compiled:
    """Load the spec's model (unless `loaded` is given) and build its constraints, filling the
    settings it leaves to the method and model in place (InputError for what does not fit)."""
    if loaded is None:
        device = registry.resolve_device(device)
        loaded = registry.load(spec.model, domain.name, device, spec.sampling.dtype)
    spec.model = spec.model or loaded.name
    domain.check(loaded)
    constraints = build_scoped(spec.constraints, loaded, device, spec.words)
    if not constraints:
        spec.method = "unconstrained"  # nothing to project or reject against
    given = frozenset(key for key in FILE_DEFAULTS if setting(spec, key) is not None)
    fill_defaults(spec, loaded)
    if METHODS[spec.method].weighs:
        exact_design(spec, loaded, constraints)  # refused here, before any output
    return Compiled(spec, loaded, constraints, domain, device, given)


@dataclass
class Run:
    """One run of a compiled spec: `n` samples of each prompt, `length` tokens after it."""

    spec: Spec  # this run's own copy: its n and seed
    compiled: Compiled
    constraints: list[Constraint]  # the compiled ones, with this run's own memory (novelty)
    prompts: list[Prompt]
    length: int
    n: int
    tally: Tally | None = None  # what the records written so far add up to
    resumed: int = 0  # the records of this share the output held already

    def records(
        self, reporter: Reporter | None = None, share: Share | None = None
    ) -> Iterator[dict]:
        """The run's records, each as soon as it is final; with `share`, this process's shard
        of them not already written (an interrupted run resumed)."""
        spec, loaded, constraints = self.spec, self.compiled.loaded, self.constraints
        domain, n = self.compiled.domain, self.n
        reporter = reporter or Reporter()
        drawer = BatchDrawer(spec, loaded, constraints, self.length, reporter)
        share = share or Share()
        for c in constraints:  # novelty: the satisfied texts already written count as seen
            c.remember(share.satisfied)
        total = share.count(0, n * len(self.prompts))
        reporter.run_started(domain.label, total, spec.sampling.batch_size)
        reporter.draws_allowed(drawer.method.attempts(spec.repair, spec.reject))
        if drawer.method.projects and self.surrogates():
            # The paper's method projects every draw's every step; cdd a draw's final
            # prediction from its `surrogates_from`th steered draw on.
            from_draw = (spec.repair.surrogates_from or 1) if spec.method == "cdd" else 1
            first = drawer.method.own_draws(spec.repair) + from_draw
            settings = spec.projection
            plan = ProjectionPlan(first, settings.max_outer_iters or 1, settings.inner_iters or 1,
                                  settings.project_from or 0.0)  # fmt: skip
            reporter.projection_planned(plan, self.alm_round_seconds)
        self.resumed = written = len(share.ids)
        if written:
            reporter.resumed(written, share.draws)
        fields = domain.record_fields(loaded, spec.sampling.decode)
        own = drawer.method.own_draws(spec.repair)
        self.tally = tally = domain.tally(constraints, spec.method, own)
        for prompt in self.prompts:
            told = [c.with_prompt(prompt.text or "", len(prompt.ids)) for c in constraints]
            first = prompt.index * n  # the prompt's first sample, counted over the run
            for draw in drawer.finished(share.samples(first, n, str(prompt.index)), prompt):
                row = record(draw, told, spec, loaded, prompt, fields(draw))
                tally.add(row)
                written += 1
                yield row
                reporter.records_done(written, tally.progress())  # resumed ones counted

    def surrogates(self) -> list[DifferentiableConstraint]:
        return [c for c in self.constraints if isinstance(c, DifferentiableConstraint)]

    def alm_round_seconds(self, rounds: int = 3) -> float | None:
        """Seconds of one ALM round of the run's own surrogates and settings on one sample of
        its first prompt, measured: `rounds` rounds on a random prediction, their aims put
        far out of reach so that every round runs, the median of those after the first (which
        also sets the ALM up). Its own generator: the run's draws are the same with it."""
        prompt, generator = self.prompts[0], torch.Generator().manual_seed(0)
        kept = len(prompt.ids)
        told = [c.with_prompt(prompt.text or "", kept) for c in self.surrogates()]
        unreachable = [c.tightened(1e6) for c in told]
        shape = (1, kept + self.length, self.compiled.loaded.config.vocab_size)
        probs = torch.rand(shape, generator=generator).softmax(-1).to(self.compiled.device)
        fixed = torch.zeros(shape[:2], dtype=torch.bool, device=probs.device)
        fixed[:, :kept] = True
        settings = replace(self.spec.projection, max_outer_iters=rounds, patience=rounds)
        ended: list[float] = []
        with torch.enable_grad():
            project(probs, unreachable, settings, fixed, [generator],
                    lambda _: ended.append(time.perf_counter()))  # fmt: skip
        spans = [b - a for a, b in itertools.pairwise(ended)]
        return median(spans) if spans else None

    def summary(self, elapsed: float) -> str:
        """The closing line on what the records written add up to."""
        compiled = self.compiled
        if self.resumed and not (self.tally and self.tally.count):
            # Rates over no records would read as a run that failed.
            label = compiled.domain.label
            return f"nothing left to draw: all {self.resumed:,} {label} were already written"
        shape = Shape(len(self.prompts), self.n, self.length, self.spec.sampling.steps,
                      compiled.device)  # fmt: skip
        return compiled.domain.summary(self.tally or Tally([], ""), elapsed, shape)


def plan(
    compiled: Compiled,
    n: int | None = None,
    prompts: list[PromptInput | None] | None = None,
    length: int | None = None,
    seed: int | None = None,
) -> Run:
    """One run of `compiled`: `n` samples (default: the spec's, else the domain's) of each of
    `prompts` ([None] or None: unconditional), checked before any sampling: every prompt
    fits the model with `length` tokens after it, and every prompt's layouts fit."""
    domain, loaded = compiled.domain, compiled.loaded
    asked = overlay(Spec(), [], sampling={"n": n, "seed": seed})  # checked as a spec's are
    spec = copy.deepcopy(compiled.spec)
    spec.sampling.n = asked.sampling.n or spec.sampling.n or domain.default_n  # resolved names it
    spec.sampling.seed = seed if seed is not None else spec.sampling.seed
    check_length(length)
    tokenized, length = run_prompts(domain, prompts or [None], length, loaded, spec)
    if spec.repair.own_draws is None:  # (only cdd reads it)
        template = tokenized[0].layout is not None and spec.method == "cdd"
        spec.repair.own_draws = TEMPLATE_OWN_DRAWS if template else 0
    check_blocks(spec, length)
    check_batch_fits(min(spec.sampling.batch_size, spec.sampling.n), loaded)
    check_lookahead_fits(spec, loaded, length + max(len(p.ids) for p in tokenized))
    constraints = bind([c.for_run() for c in compiled.constraints], tokenized[0].layout)
    for prompt in tokenized:  # every prompt's lexical constraints must fit
        told = [c.with_prompt(prompt.text or "", len(prompt.ids)) for c in constraints]
        closed_forms(told, loaded.tokenizer, len(prompt.ids), length)
    return Run(spec, compiled, constraints, tokenized, length, spec.sampling.n)


def check_length(length: int | None) -> None:
    """A continuation length asked for (None: the domain's default) is a positive integer."""
    if length is None:
        return
    if isinstance(length, bool) or not isinstance(length, int):
        problem = f"must be an integer, got {length!r}"
    elif length <= 0:
        problem = f"must be positive, got {length}"
    else:
        return
    raise InputError(f"length {problem}", cli=f"--length {problem}")


@dataclass
class Output:
    """Where a run's records go and which of them this process writes."""

    path: str = "-"
    resume: bool = False  # write only the records `path` lacks
    shard: tuple[int, int] = (0, 1)  # (I, N): this process writes samples k with k % N == I
    # Another file whose records of this run count as written (torchrun: the file the ranks'
    # parts are gathered into).
    written: str | None = None
    # How an interrupted run is finished, in the caller's words (the CLI: its command line
    # with --resume); None: the API's call.
    resume_hint: str | None = None

    def finish_hint(self) -> str:
        """What an interrupted run's message tells its user to do to finish it."""
        if self.resume_hint is not None:
            return self.resume_hint
        return (
            f"the same Generator.write() call with Output({self.path!r}, resume=True) "
            "(Output: cdd_cli.run.runner)"
        )


def keep_file_defaults(run: Run, output: str) -> None:
    """A run appended to a file whose records were drawn under another default of a
    `FILE_DEFAULTS` setting than today's keeps the file's, unless the spec names one: such a
    file resumes as it began."""
    earlier = earlier_config(output) if holds_records(output) else None
    for key, (before, valid) in FILE_DEFAULTS.items():
        section_name, name = key.split(".")
        section = (earlier or {}).get(section_name)
        value = section.get(name, before) if isinstance(section, dict) else None
        if key in run.compiled.given or isinstance(value, bool) or not valid(value):
            continue
        setattr(getattr(run.spec, section_name), name, value)


def inputs(run: Run) -> dict:
    """What shapes the run's records besides its settings: its length and its prompts in
    their order (a digest of each one's id, the text the model reads and the text given)."""
    prompts = [[p.id, p.text, p.given] for p in run.prompts]
    text = json.dumps(prompts, ensure_ascii=False, default=str)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return {"length": run.length, "prompts": len(run.prompts), "prompts_sha256": digest}


def write(
    run: Run, output: Output, display: Display | None = None, say: Callable[[str], None] = print
) -> int:
    """Append the run's records to `output` (refused where it holds another configuration's
    records); `say`: where lines about resuming go. The exit code: 3 where some record
    violates its constraints, else 0."""
    display = display or Display()
    for path in (output.path, output.written):  # (torchrun: the file parts gather into)
        if path is not None:
            keep_file_defaults(run, path)
    _, files = files_digest(c.options for c in run.spec.constraints)  # their contents
    named = {} if files is None else {"files_sha256": files}
    group = {"seeds": [run.spec.sampling.seed], **inputs(run), **named}
    resolved = {**run.spec.resolved(), INPUTS: [group]}
    check_resolved_config(resolved, output.path, output.written)
    for path in (output.path, output.written):
        if path is not None:
            check_model_revision(path, run.compiled.loaded.revision)
    shape = (len(run.prompts), run.n)
    share = resume_from(
        output.path, run.spec.sampling.seed, shape, output.resume, say, output.shard,
        output.written,
    )  # fmt: skip
    total = share.count(0, run.n * len(run.prompts))  # this process's records of the run
    records = run.records(display, share)
    hint = output.finish_hint()
    for _ in written_records(resolved, records, output.path, total, display, len(share.ids), hint):
        pass
    return EXIT_VIOLATIONS if run.tally and run.tally.violating else EXIT_OK
