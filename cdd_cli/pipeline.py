"""From a job to JSONL records: spec -> constraints -> sampler(model, projection) -> records.

Methods:
- `unconstrained`: one draw per sample, judged and reported;
- `reject`: best-of-N rejection sampling, redrawing a sample until every judge accepts it or
  `reject.max_attempts` draws are spent (the record says how many);
- `cdd`: the projection engine (`projection/engine.py`); a sample the exact judges still
  reject is redrawn with surrogate bounds tightened by `repair.margin_step` per redraw, at
  most `repair.max_redraws` times;
- `paper`: the paper's algorithm (`projection/engine.py`, `paper`), one draw per sample.
A record is `satisfied` only when every judge accepts it.

Each draw of sample i of prompt p uses a generator derived from (seed, p, i, attempt), so
records do not depend on the batch size. Text jobs draw `-n` samples per prompt; the prompt's
tokens stay fixed while `length` continuation tokens are denoised, and constraints judge the
continuation (the record's `text`), told the prompt for scopes that include it.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from rich.console import Console
from rich.progress import Progress

from cdd_cli.constraints.base import Constraint, DifferentiableConstraint, closed_forms
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.diffusion.processes import make_process
from cdd_cli.diffusion.sampler import Sampler, StepInfo, sample_generator
from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import CANONICALIZER, MoleculeReport, describe, summarise
from cdd_cli.models import registry
from cdd_cli.models.tokenizers import Gpt2Tokenizer, SmilesTokenizer
from cdd_cli.projection.alm import ALMProgress
from cdd_cli.projection.engine import PRESETS, Job
from cdd_cli.projection.presets import fill_model_defaults
from cdd_cli.prompts import PromptInput
from cdd_cli.records import JsonlWriter
from cdd_cli.spec import Spec, dump

EXIT_OK, EXIT_VIOLATIONS = 0, 3


@dataclass
class MoleculeJob:
    n: int
    spec: Spec
    device: str
    output: str


@dataclass
class TextJob:
    n: int  # samples per prompt
    spec: Spec
    device: str
    output: str
    prompts: list[PromptInput | None]  # [None]: unconditional
    length: int | None  # None: DEFAULT_LENGTH, or what the model's length leaves room for


@dataclass(frozen=True)
class Prompt:
    """A prompt as the sampler sees it: its index in the job, text and token ids."""

    index: int = 0
    text: str | None = None
    ids: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    id: str | int | None = None


@dataclass
class Draw:
    """What one sample became after all its draws."""

    index: int
    text: str = ""
    attempts: int = 0
    values: dict[str, float | None] = field(default_factory=dict)
    surrogates: dict[str, float] = field(default_factory=dict)
    satisfied: bool = False
    projection: dict = field(
        default_factory=lambda: {
            "steps": 0,
            "outer_iters": 0,
            "inner_iters": 0,
            "search_nodes": 0,
            "seconds": 0.0,
        }
    )
    seconds: float = 0.0


def judge(constraints: list[Constraint], texts: list[str]) -> list[dict[str, float | None]]:
    values: list[dict[str, float | None]] = [{} for _ in texts]
    for c in constraints:
        for row, value in zip(values, c.judge(texts), strict=True):
            row[c.name] = value
    return values


class Generation:
    """Draws batches of samples with the job's method and certifies them with the judges."""

    def __init__(
        self,
        spec: Spec,
        loaded: registry.LoadedModel,
        constraints: list[Constraint],
        steps: int,
        progress: Progress,
        length: int | None = None,
    ):
        fill_model_defaults(spec, loaded)  # (run_* did already, to write the resolved config)
        self.spec, self.loaded, self.constraints, self.progress = (
            spec,
            loaded,
            constraints,
            progress,
        )
        self.process = make_process(
            loaded.config.noise, loaded.config.vocab_size, loaded.tokenizer.mask_id
        )
        self.sampler = Sampler(
            loaded.model,
            self.process,
            steps,
            loaded.config.time_conditioning,
            loaded.tokenizer.syntax(),
        )
        self.length = length or loaded.config.model_length  # tokens after the prompt
        self.denoise = progress.add_task("  denoising", total=steps, info="")
        self.alm = progress.add_task("  projection", total=None, info="", visible=False)

    def on_step(self, info: StepInfo) -> None:
        self.progress.update(self.denoise, completed=min(info.index + 1, info.steps))

    def on_alm(self, p: ALMProgress) -> None:
        self.progress.update(
            self.alm,
            visible=True,
            completed=p.outer,
            info=(
                f"outer {p.outer} x inner {p.inner}, violating {p.violating}, "
                f"λ [{p.lam_range[0]:.3g}, {p.lam_range[1]:.3g}], "
                f"μ [{p.mu_range[0]:.3g}, {p.mu_range[1]:.3g}]"
            ),
        )

    def draw(self, draws: list[Draw], prompt: Prompt) -> None:
        """One more draw for each of `draws` (in one batch), judged; updates them in place."""
        spec = self.spec
        generators = [
            sample_generator(spec.sampling.seed, prompt.index, d.index, d.attempts) for d in draws
        ]
        keep = len(prompt.ids)
        told = [c.with_prompt(prompt.text or "", keep) for c in self.constraints]
        tokenizer = self.loaded.tokenizer
        decode = tokenizer.decode

        def continuation(ids: list[int]) -> str:
            return decode(ids[keep:])

        def fixed_positions(x: torch.Tensor) -> torch.Tensor:
            fixed = self.process.fixed_positions(x)
            fixed[:, :keep] = True
            return fixed

        hook = None
        if spec.method in PRESETS and self.constraints:
            # All draws of one pass share their attempt count; redraws aim further inside.
            margin = spec.repair.margin_step * draws[0].attempts
            constraints = [c.tightened(margin * c.repair_unit) for c in told]
            job = Job(
                constraints,
                closed_forms(constraints, tokenizer, keep, self.length),
                fixed_positions,
                generators,
                continuation,
                tokenizer if isinstance(tokenizer, SmilesTokenizer) else None,
                # Without a syntax there is nothing to decode (and a text model's V-wide copy
                # of the prediction would cost more than the projection).
                self.sampler.well_formed if self.sampler.syntax is not None else None,
                self.on_alm,
            )
            hook = PRESETS[spec.method](job, spec.projection, spec.search)
        self.progress.reset(self.denoise, total=self.sampler.steps)
        started = time.perf_counter()
        with torch.inference_mode(hook is None):
            ids = self.sampler.sample(generators, self.length, hook, self.on_step, prompt.ids)
        elapsed = time.perf_counter() - started
        # Each sample pays an equal share of the batch's sampling and its own projection time.
        projecting = [hook.seconds[i] if hook else 0.0 for i in range(len(draws))]
        base = (elapsed - sum(projecting)) / len(draws)
        texts = [continuation(row) for row in ids.tolist()]
        values = judge(told, texts)
        surrogates = self.surrogate_scores(ids, told)
        for i, d in enumerate(draws):
            d.text, d.values, d.surrogates = texts[i], values[i], surrogates[i]
            d.attempts += 1
            d.seconds += base + projecting[i]
            d.satisfied = all(c.satisfied(values[i][c.name]) for c in self.constraints)
            if hook is not None:
                for key, value in hook.report(i).items():
                    d.projection[key] += value
        for c in self.constraints:  # e.g. novelty: later samples must differ from these
            c.remember([d.text for d in draws if d.satisfied])

    def surrogate_scores(
        self, ids: torch.Tensor, constraints: list[Constraint]
    ) -> list[dict[str, float | None]]:
        """Each differentiable constraint's surrogate on the output (None for exact ones)."""
        scores: dict[str, list[float | None]] = {}
        with torch.no_grad():
            for c in constraints:
                if isinstance(c, DifferentiableConstraint):
                    scores[c.name] = [round(v, 4) for v in c.surrogate(ids).tolist()]
                else:
                    scores[c.name] = [None] * len(ids)
        return [{k: v[i] for k, v in scores.items()} for i in range(len(ids))]

    def run(self, indices: range, prompt: Prompt | None = None) -> list[Draw]:
        prompt = prompt or Prompt()
        draws = [Draw(i) for i in indices]
        pending = draws
        cap = {
            "unconstrained": 1,
            "reject": self.spec.reject.max_attempts,
            "cdd": 1 + self.spec.repair.max_redraws,
            "paper": 1,  # what the paper's algorithm leaves violating is reported so
        }[self.spec.method]
        while pending:
            self.draw(pending, prompt)
            pending = [d for d in pending if not d.satisfied and d.attempts < cap]
        return draws


def record(
    draw: Draw,
    constraints: list[Constraint],
    spec: Spec,
    model_name: str,
    prompt: Prompt,
    extra: dict | None = None,
) -> dict:
    return {
        "id": f"{prompt.index}-{draw.index}",
        "prompt_id": prompt.id,  # the prompts file's `id` (null without one): a fixed schema
        "prompt": prompt.text,
        "text": draw.text,
        "seed": spec.sampling.seed,
        "model": model_name,
        "method": spec.method,
        "satisfied": draw.satisfied,
        "constraints": {
            c.name: {
                "value": draw.values[c.name],
                "tau": c.tau,
                "satisfied": c.satisfied(draw.values[c.name]),
                "surrogate": draw.surrogates[c.name],
                "judge": c.judge_name,
                **({"detail": d} if (d := c.explain(draw.text)) is not None else {}),
            }
            for c in constraints
        },
        "projection": {k: round(v, 4) for k, v in draw.projection.items()}
        if spec.method in PRESETS and constraints
        else None,
        "attempts": draw.attempts,
        **(extra or {}),
        "seconds": round(draw.seconds, 4),
    }


def satisfaction_note(
    constraints: list[Constraint], total: int, violating: int, method: str
) -> str:
    """The summary's clause on constraints ("" without any)."""
    if not constraints:
        return ""
    labels = ", ".join(c.label() for c in constraints)
    judges = ", ".join(sorted({c.judge_name for c in constraints}))
    return f"; {total - violating}/{total} satisfy {labels} ({method}, judged by {judges})"


def write_resolved_config(spec: Spec, output: str) -> None:
    """`OUT.config.yaml` beside a regular output file (not /dev/null and the like): the
    settings of the runs in OUT, headed by the latest command line (prompts, length and device
    are not settings). Records of other settings are not appended to OUT: one file, one
    configuration, so its records can be told apart and reproduced. Call before writing."""
    out, beside = Path(output), Path(f"{output}.config.yaml")
    if output == "-" or not out.is_file():
        return
    resolved = spec.resolved()
    if out.stat().st_size and beside.is_file():
        try:
            earlier = yaml.safe_load(beside.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            earlier = None

        def setup(config: dict) -> dict:
            # Sampling (n, seed, batch size) may differ: more samples, other seeds, same setup.
            return {k: v for k, v in config.items() if k != "sampling"}

        if not isinstance(earlier, dict) or setup(earlier) != setup(resolved):
            raise InputError(
                f"-o {output}: holds records made with other settings ({beside}); write to "
                "another file, or remove both to start over"
            )
    command = shlex.join(["cdd", *sys.argv[1:]]).replace("\n", " ")
    beside.write_text(f"# latest run: {command}\n" + dump(resolved))


def run_molecules(
    job: MoleculeJob,
    console: Console,
    progress: Progress,
    on_record: Callable[[dict], None] | None = None,
) -> int:
    spec = job.spec
    loaded = registry.load(spec.model, "molecules", job.device)
    spec.model = spec.model or loaded.name
    if isinstance(loaded.tokenizer, Gpt2Tokenizer):
        raise InputError(f"model {loaded.name} is a text model: use `cdd generate`")
    constraints = build_constraints(spec.constraints, loaded, job.device)
    if not constraints:
        spec.method = "unconstrained"  # nothing to project or reject against
    fill_model_defaults(spec, loaded)
    steps = spec.sampling.steps
    reference = loaded.reference
    reports: list[MoleculeReport] = []
    violating = 0
    started = time.perf_counter()
    with JsonlWriter(job.output) as writer, progress:
        write_resolved_config(spec, job.output)
        overall = progress.add_task("molecules", total=job.n, info="")
        generation = Generation(spec, loaded, constraints, steps, progress)
        for start in range(0, job.n, spec.sampling.batch_size):
            indices = range(start, min(start + spec.sampling.batch_size, job.n))
            for draw in generation.run(indices):
                report = describe(draw.text, reference)
                reports.append(report)
                violating += not draw.satisfied
                row = record(draw, constraints, spec, loaded.name, Prompt(), report.fields())
                writer.write(row)
                if on_record:
                    on_record(row)
            progress.update(
                overall,
                completed=indices.stop,
                info=f"valid {sum(r.valid for r in reports)}/{len(reports)}"
                + (f", violating {violating}" if constraints else ""),
            )
    elapsed = time.perf_counter() - started
    summary = summarise(reports)
    novelty = "n/a" if summary.novelty is None else f"{summary.novelty:.1%}"
    unique = f"{summary.uniqueness:.1%}" if summary.valid else "n/a"  # as `cdd eval` says null
    constraint_note = satisfaction_note(constraints, summary.total, violating, spec.method)
    console.print(
        f"{summary.total} molecules in {elapsed:.1f}s ({summary.total / elapsed:.1f}/s, "
        f"{steps} steps, {job.device}): valid {summary.validity:.1%}, unique "
        f"{unique} of valid, novel {novelty} of unique valid; mean QED "
        f"{summary.mean_qed or 'n/a'}, mean SA {summary.mean_sa or 'n/a'} [{CANONICALIZER}]"
        f"{constraint_note}",
        markup=False,
        soft_wrap=True,
    )
    return EXIT_VIOLATIONS if violating else EXIT_OK


DEFAULT_LENGTH = 64


def tokenize_prompts(job: TextJob, loaded: registry.LoadedModel) -> tuple[list[Prompt], int]:
    """Token ids of each prompt and the continuation length; a prompt that leaves no room for
    `--length` tokens in the model's length is refused."""
    limit = loaded.config.model_length
    prompts = []
    for index, given in enumerate(job.prompts):
        if given is None:
            prompts.append(Prompt(index))
            continue
        ids = torch.tensor(loaded.tokenizer.encode(given.text), dtype=torch.long)
        prompts.append(Prompt(index, given.text, ids, given.id))
    index = max(range(len(prompts)), key=lambda i: len(prompts[i].ids))
    longest = len(prompts[index].ids)
    length = job.length or min(DEFAULT_LENGTH, limit - longest)
    if length <= 0 or longest + length > limit:
        need = "leaves no room in" if job.length is None else f"+ --length {length} exceed"
        raise InputError(
            f"prompt {index} ({longest} tokens) {need} model {loaded.name}'s "
            f"length of {limit} tokens"
        )
    return prompts, length


def run_text(
    job: TextJob,
    console: Console,
    progress: Progress,
    on_record: Callable[[dict], None] | None = None,
) -> int:
    spec = job.spec
    loaded = registry.load(spec.model, "text", job.device)
    spec.model = spec.model or loaded.name
    if not isinstance(loaded.tokenizer, Gpt2Tokenizer):
        raise InputError(f"model {loaded.name} is not a text model (its tokenizer reads SMILES)")
    prompts, length = tokenize_prompts(job, loaded)
    constraints = build_constraints(spec.constraints, loaded, job.device)
    if not constraints:
        spec.method = "unconstrained"
    fill_model_defaults(spec, loaded)
    steps = spec.sampling.steps
    told_of = {}  # each prompt's constraints, told the prompt
    for prompt in prompts:  # every prompt's lexical constraints must fit: check before sampling
        told = told_of[prompt.index] = [
            c.with_prompt(prompt.text or "", len(prompt.ids)) for c in constraints
        ]
        closed_forms(told, loaded.tokenizer, len(prompt.ids), length)
    total = job.n * len(prompts)
    violating = written = 0
    seconds = 0.0
    started = time.perf_counter()
    with JsonlWriter(job.output) as writer, progress:
        write_resolved_config(spec, job.output)
        overall = progress.add_task("samples", total=total, info="")
        generation = Generation(spec, loaded, constraints, steps, progress, length)
        for prompt in prompts:
            for start in range(0, job.n, spec.sampling.batch_size):
                indices = range(start, min(start + spec.sampling.batch_size, job.n))
                for draw in generation.run(indices, prompt):
                    violating += not draw.satisfied
                    written += 1
                    seconds += draw.seconds
                    row = record(draw, told_of[prompt.index], spec, loaded.name, prompt)
                    writer.write(row)
                    if on_record:
                        on_record(row)
                progress.update(
                    overall,
                    completed=written,
                    info=f"violating {violating}" if constraints else "",
                )
    elapsed = time.perf_counter() - started
    note = satisfaction_note(constraints, written, violating, spec.method)
    console.print(
        f"{written} samples ({len(prompts)} prompt(s) x {job.n}, {length} tokens, "
        f"{steps} steps, {job.device}) in {elapsed:.1f}s, {seconds / max(written, 1):.2f}s "
        f"per sample{note}",
        markup=False,
        soft_wrap=True,
    )
    return EXIT_VIOLATIONS if violating else EXIT_OK
