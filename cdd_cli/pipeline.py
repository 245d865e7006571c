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

import itertools
import math
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path

import torch
import yaml
from rich.console import Console

from cdd_cli import __version__
from cdd_cli.constraints.base import Constraint, DifferentiableConstraint, closed_forms
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.diffusion.processes import Shape, block_count, make_process
from cdd_cli.diffusion.sampler import Sampler, sample_generator, sample_seed
from cdd_cli.errors import InputError, Interrupted, Terminated
from cdd_cli.evaluate.molecules import (
    CANONICALIZER,
    MoleculeReport,
    canonical,
    describe,
    summarise,
)
from cdd_cli.evaluate.reference import model_reference
from cdd_cli.models import registry
from cdd_cli.models.chat import apply_template, read_template
from cdd_cli.models.tokenizers import SmilesTokenizer, TextTokenizer
from cdd_cli.projection.engine import PRESETS, Job
from cdd_cli.projection.presets import fill_model_defaults
from cdd_cli.prompts import PromptInput
from cdd_cli.records import JsonlWriter, cut_torn_tail, existing_records
from cdd_cli.reporting import Display, Reporter
from cdd_cli.spec import Spec, dump

EXIT_OK, EXIT_VIOLATIONS = 0, 3


@dataclass
class MoleculeJob:
    n: int
    spec: Spec
    device: str
    output: str
    resume: bool = False  # write only the records `output` lacks
    shard: tuple[int, int] = (0, 1)  # (I, N): this process writes samples k with k % N == I
    # Another file whose records of this run count as written (torchrun: the file the ranks'
    # parts are gathered into).
    written: str | None = None


@dataclass
class TextJob:
    n: int  # samples per prompt
    spec: Spec
    device: str
    output: str
    prompts: list[PromptInput | None]  # [None]: unconditional
    length: int | None  # None: DEFAULT_LENGTH, or what the model's length leaves room for
    resume: bool = False  # write only the records `output` lacks
    shard: tuple[int, int] = (0, 1)  # (I, N): this process writes samples k with k % N == I
    # Another file whose records of this run count as written (torchrun: the file the ranks'
    # parts are gathered into).
    written: str | None = None


@dataclass(frozen=True)
class Prompt:
    """A prompt as the sampler sees it: its index in the job, text and token ids."""

    index: int = 0
    text: str | None = None  # what the model conditions on (with --chat, the template's text)
    ids: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    id: str | int | None = None
    given: str | None = None  # the prompt as the user gave it, which records show

    @property
    def shown(self) -> str | None:
        return self.given if self.given is not None else self.text


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


def check_blocks(spec: Spec, length: int) -> None:
    """Every block of a semi-autoregressive sampler gets at least one step."""
    block = spec.sampling.block_length or 0
    blocks = block_count(length, block)
    if spec.sampling.steps is not None and spec.sampling.steps < blocks:
        raise InputError(
            f"{spec.sampling.steps} steps cannot decide {blocks} blocks of {block} tokens "
            f"({length} tokens): give --steps >= {blocks} or a longer --block-length"
        )


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
        reporter: Reporter | None = None,
        length: int | None = None,
    ):
        fill_model_defaults(spec, loaded)  # (prepare_* did already, for the resolved config)
        self.spec, self.loaded, self.constraints = spec, loaded, constraints
        self.reporter = reporter or Reporter()
        sampling = spec.sampling
        self.process = make_process(
            loaded.config.noise,
            loaded.config.vocab_size,
            loaded.tokenizer.mask_id,
            sampling.sampler or "ancestral",
            sampling.block_length or 0,
            Shape(sampling.temperature, sampling.top_p),
        )
        self.sampler = Sampler(
            loaded.model,
            self.process,
            steps,
            loaded.config.time_conditioning,
            loaded.tokenizer.syntax() if spec.sampling.decode == "well-formed" else None,
        )
        self.length = length or loaded.config.model_length  # tokens after the prompt
        self.molecules = isinstance(loaded.tokenizer, SmilesTokenizer)
        # Where the time went, summed over batches: each engine stage's wall seconds, and
        # "redraws": the whole passes that redrew samples the judges rejected.
        self.stage_seconds: dict[str, float] = {}

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
                self.reporter.alm,
            )
            hook = PRESETS[spec.method](job, spec.projection, spec.search)
        started = time.perf_counter()
        with torch.inference_mode(hook is None):
            ids = self.sampler.sample(generators, self.length, hook, self.reporter.step, prompt.ids)
        elapsed = time.perf_counter() - started
        for name, seconds in hook.stage_seconds.items() if hook else ():
            self.stage_seconds[name] = self.stage_seconds.get(name, 0.0) + seconds
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
            # A molecule that does not parse satisfies nothing, whatever a judge says of it.
            d.satisfied = all(c.satisfied(values[i][c.name]) for c in self.constraints) and (
                not (self.molecules and self.constraints) or canonical(texts[i]) is not None
            )
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
                    # A surrogate is a hint beside the judge: one that is not finite is null.
                    values = c.surrogate(ids).tolist()
                    scores[c.name] = [round(v, 4) if math.isfinite(v) else None for v in values]
                else:
                    scores[c.name] = [None] * len(ids)
        return [{k: v[i] for k, v in scores.items()} for i in range(len(ids))]

    def run(self, indices: Sequence[int], prompt: Prompt | None = None) -> list[Draw]:
        """Samples `indices` (one batch), final, in index order."""
        return sorted(self.finished(indices, prompt), key=lambda d: d.index)

    def finished(self, indices: Sequence[int], prompt: Prompt | None = None) -> Iterator[Draw]:
        """Samples `indices` (one batch), each once it is final: drawn, judged, and redrawn
        while it violates, up to the method's cap. The samples a pass finishes come out after
        that pass, in index order: the batch's redraws never hold back its finished samples
        (an interrupted run keeps them)."""
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
            started = time.perf_counter()
            self.draw(pending, prompt)
            if pending is not draws:
                seconds = time.perf_counter() - started
                self.stage_seconds["redraws"] = self.stage_seconds.get("redraws", 0.0) + seconds
            redraw = [d for d in pending if not d.satisfied and d.attempts < cap]
            again = {id(d) for d in redraw}
            yield from (d for d in pending if id(d) not in again)
            pending = redraw


def record(
    draw: Draw,
    constraints: list[Constraint],
    spec: Spec,
    loaded: registry.LoadedModel,
    prompt: Prompt,
    extra: dict | None = None,
) -> dict:
    """A sample's record: what it is, what the judges say, how it was made and by what
    (`model_revision`: the first 12 hex digits of the weights file's SHA-256)."""
    return {
        "id": f"{prompt.index}-{draw.index}",
        "prompt_id": prompt.id,  # the prompts file's `id` (null without one): a fixed schema
        "prompt": prompt.shown,
        "text": draw.text,
        "seed": spec.sampling.seed,
        # The kept draw's own stream: what made this sample, whatever the batch or shard.
        "sample_seed": sample_seed(
            spec.sampling.seed, prompt.index, draw.index, max(draw.attempts - 1, 0)
        ),
        "model": loaded.name,
        "model_revision": loaded.revision,
        "method": spec.method,
        # null without constraints: nothing was asked, so nothing was satisfied or violated.
        "satisfied": draw.satisfied if constraints else None,
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
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cdd_version": __version__,
    }


def satisfaction_note(
    constraints: list[Constraint],
    total: int,
    violating: int,
    method: str,
    held: dict[str, int] | None = None,
) -> str:
    """The summary's clause on constraints ("" without any). `held`: per constraint name, how
    many records satisfy it; one no record satisfies is named as looking infeasible."""
    if not constraints:
        return ""
    labels = ", ".join(c.label() for c in constraints)
    judges = ", ".join(sorted({c.judge_name for c in constraints}))
    note = f"; {total - violating}/{total} satisfy {labels} ({method}, judged by {judges})"
    never = [c.label() for c in constraints if held is not None and not held.get(c.name)]
    if never and total and method == "unconstrained":
        # Nothing steered the samples toward it: no sign that it cannot be met.
        note += f"; no sample satisfies {', '.join(never)} (unconstrained: nothing steered to it)"
    elif never and total:
        note += (
            f"; no sample satisfies {', '.join(never)}: it looks infeasible for this model "
            "(check its bounds against what the model makes)"
        )
    return note


def tally_held(held: dict[str, int], row: dict) -> None:
    """Count, per constraint name, the records that satisfy it."""
    for name, verdict in (row.get("constraints") or {}).items():
        held[name] = held.get(name, 0) + bool(verdict["satisfied"])


@dataclass
class Share:
    """What this process writes of a run: its shard of the samples (`--shard I/N`: sample k
    of the run, counted over prompts, when k % N == I; interleaved, so cheap and costly
    samples spread evenly), less the records its output file already holds (`--resume`),
    with the texts of those that satisfied the constraints (novelty's memory of the run)."""

    ids: set[str] = field(default_factory=set)
    satisfied: list[str] = field(default_factory=list)
    shard: tuple[int, int] = (0, 1)

    def restore(self, constraints: list[Constraint]) -> None:
        for c in constraints:
            c.remember(self.satisfied)

    def holds(self, k: int) -> bool:
        """Whether sample k of the run is in this process's shard."""
        return k % self.shard[1] == self.shard[0]

    def count(self, first: int, stop: int) -> int:
        """How many of samples first .. stop - 1 of the run are in this shard."""
        index, shards = self.shard
        return len(range(first + (index - first) % shards, stop, shards))

    def batches(self, first: int, n: int, prompt: str, size: int) -> Iterator[list[int]]:
        """The prompt's samples this process writes (the run's samples first .. first +
        n - 1, record ids PROMPT-i), `size` at a time, never all held at once."""
        index, shards = self.shard
        start = (index - first) % shards
        wanted = (i for i in range(start, n, shards) if f"{prompt}-{i}" not in self.ids)
        while batch := list(itertools.islice(wanted, size)):
            yield batch


def say(console: Console) -> Callable[[str], None]:
    """One plain line on `console` (stderr) per message."""

    def line(message: str) -> None:
        console.print(message, markup=False, soft_wrap=True)

    return line


def resume_from(
    output: str,
    seed: int,
    shape: tuple[int, int],
    resume: bool,
    say: Callable[[str], None],
    shard: tuple[int, int] = (0, 1),
    also: str | None = None,
) -> Share:
    """The share of a run of `shape` (prompts, samples per prompt) and `seed` that this
    process writes: the samples of its `shard`, less the records already in `output` (and
    in `also`, torchrun's gathered file): refused without `--resume`, skipped with it. A torn
    last line (a kill or a full disk mid-write) is dropped with `--resume` (and said),
    refused without."""
    prompts, n = shape
    share = Share(shard=shard)
    total = share.count(0, prompts * n)

    def ours(record_id: str) -> bool:
        prompt, _, sample = record_id.partition("-")
        if not (prompt.isdigit() and sample.isdigit()):
            return False
        p, i = int(prompt), int(sample)
        return p < prompts and i < n and share.holds(p * n + i)

    existing = existing_records(output)
    if existing.torn_bytes:
        if not resume:
            raise InputError(
                f"-o {output}: ends with an incomplete record (a run stopped mid-write); add "
                "--resume to drop it and finish the run"
            )
        cut_torn_tail(output, existing.torn_bytes)
        say(f"-o {output}: dropped an incomplete last line ({existing.torn_bytes} bytes)")
    satisfied = existing.satisfied.get(seed, [])
    done = {i for s, i in existing.keys if s == seed and ours(i)}
    if also is not None:
        gathered = existing_records(also)
        done |= {i for s, i in gathered.keys if s == seed and ours(i)}
        satisfied = satisfied + gathered.satisfied.get(seed, [])
    named = also or output
    if done and not resume:
        raise InputError(
            f"-o {named}: already holds {len(done)} of this run's {total} records (seed "
            f"{seed}); add --resume to write only the missing ones, or choose another file"
        )
    if done:
        say(f"-o {named}: resuming: {len(done)} of {total} records already there")
    share.ids, share.satisfied = done, satisfied
    return share


def first_difference(ours: object, theirs: object, where: str = "") -> str | None:
    """The dotted key of the first value that differs between two plain-data configurations
    (None where they are equal)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in [*ours, *(k for k in theirs if k not in ours)]:
            found = first_difference(ours.get(key), theirs.get(key), f"{where}{key}.")
            if found:
                return found
        return None
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            found = first_difference(a, b, f"{where.rstrip('.')}[{index}].")
            if found:
                return found
        return None
    return None if ours == theirs else where.rstrip(".") or "the configuration"


def check_resolved_config(spec: Spec, output: str, also: str | None = None) -> None:
    """An output file that holds records must hold records of this configuration (sampling
    aside but for its steps: more samples, other seeds, another batch size): refused before
    any sampling otherwise, naming the first setting that differs. `also`: another file the
    run's records count in (torchrun's gathered output), checked the same way."""
    if also is not None:
        check_resolved_config(spec, also)
    out, beside = Path(output), Path(f"{output}.config.yaml")
    if output == "-" or not out.is_file() or not out.stat().st_size or not beside.is_file():
        return
    try:
        earlier = yaml.safe_load(beside.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        earlier = None

    def setup(config: dict) -> dict:
        sampling = config.get("sampling")
        sampling = sampling if isinstance(sampling, dict) else {}
        # (A file written before a setting existed was made with its default: the spec's.)
        return {
            **{k: v for k, v in config.items() if k != "sampling"},
            "words": config.get("words", spec.words),
            "sampling.steps": sampling.get("steps"),
            **{
                f"sampling.{name}": sampling.get(name, getattr(spec.sampling, name))
                for name in ("decode", "sampler", "block_length", "dtype", "temperature", "top_p")
            },
        }

    differs = (
        "the configuration"
        if not isinstance(earlier, dict)
        else first_difference(setup(spec.resolved()), setup(earlier))
    )
    if differs:
        raise InputError(
            f"-o {output}: holds records made with other settings ({differs} differs, see "
            f"{beside}); write to another file, or remove both to start over"
        )


def write_resolved_config(spec: Spec, output: str) -> None:
    """`OUT.config.yaml` beside a regular output file (not /dev/null and the like): the
    configuration, so its records can be told apart and reproduced."""
    if output == "-" or (Path(output).exists() and not Path(output).is_file()):
        return
    command = shlex.join(["cdd", *sys.argv[1:]]).replace("\n", " ")
    Path(f"{output}.config.yaml").write_text(
        f"# latest run: {command}\n" + dump(spec.resolved()), encoding="utf-8"
    )


@dataclass
class MoleculeRun:
    """A molecule job ready to sample: the model loaded, constraints built, settings filled."""

    spec: Spec
    loaded: registry.LoadedModel
    constraints: list[Constraint]
    device: str

    def records(
        self, n: int, reporter: Reporter | None = None, share: Share | None = None
    ) -> Iterator[dict]:
        """The records of molecules 0 .. n - 1, each as soon as it is final; with `share`,
        this process's shard of them not already written (an interrupted run resumed)."""
        check_batch_fits(min(self.spec.sampling.batch_size, n), self.loaded)
        reporter = reporter or Reporter()
        spec, reference = self.spec, model_reference(self.loaded.directory)
        generation = Generation(spec, self.loaded, self.constraints, spec.sampling.steps, reporter)
        share = share or Share()
        share.restore(self.constraints)
        total = share.count(0, n)
        reporter.run_started("molecules", total)
        valid = violating = made = 0
        for indices in share.batches(0, n, "0", spec.sampling.batch_size):
            for draw in generation.finished(indices):
                report = describe(draw.text, reference)
                valid += report.valid
                violating += not draw.satisfied
                fields = {**report.fields(), "decode": spec.sampling.decode}
                yield record(draw, self.constraints, spec, self.loaded, Prompt(), fields)
                made += 1
                tally = f"valid {valid}/{made}"
                reporter.records_done(  # counting the records a resumed run found written
                    len(share.ids) + made,
                    tally + (f", violating {violating}" if self.constraints else ""),
                )


def prepare_molecules(spec: Spec, device: str) -> MoleculeRun:
    """Load the spec's model and build its constraints (InputError for what does not fit)."""
    device = registry.resolve_device(device)
    loaded = registry.load(spec.model, "molecules", device, spec.sampling.dtype)
    spec.model = spec.model or loaded.name
    if isinstance(loaded.tokenizer, TextTokenizer):
        raise InputError(f"model {loaded.name} is a text model: use `cdd generate`")
    constraints = build_constraints(spec.constraints, loaded, device, spec.words)
    if not constraints:
        spec.method = "unconstrained"  # nothing to project or reject against
    fill_model_defaults(spec, loaded)
    check_blocks(spec, loaded.config.model_length)
    return MoleculeRun(spec, loaded, constraints, device)


def check_batch_fits(batch_size: int, loaded: registry.LoadedModel) -> None:
    """Refuse a batch whose probability tensors alone ([B, L, V] floats, two copies: logits
    and probabilities) exceed this machine's memory, before allocating any."""
    length = loaded.config.model_length
    need = 2 * batch_size * length * loaded.config.vocab_size * 4
    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: no cheap answer
        return
    if need > have:
        raise InputError(
            f"--batch-size {batch_size}: its [batch, {length}, {loaded.config.vocab_size}] "
            f"probabilities need about {need / 2**30:,.1f} GiB, more than this machine's "
            f"{have / 2**30:,.1f} GiB; use a smaller batch"
        )


def written_records(
    spec: Spec, records: Iterator[dict], output: str, total: int, display: Display
) -> Iterator[dict]:
    """Each of `records` once it is written to `output` (its configuration beside it, which
    the caller checked against the file's first), inside the live display; Ctrl-C becomes
    `Interrupted`, saying what was kept of `total`."""
    writer = JsonlWriter(output, partial(write_resolved_config, spec, output))
    try:
        with writer, display:
            for row in records:
                writer.write(row)
                yield row
    except KeyboardInterrupt as exc:
        finish = "" if output == "-" else f"; finish it with: {resume_command()}"
        how, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        raise Interrupted(f"{how}: {writer.kept(total)}{finish}", code) from None


def resume_command() -> str:
    """This command line with --resume (the command that finishes an interrupted run)."""
    args = [a for a in sys.argv[1:] if a != "--resume"]
    return shlex.join(["cdd", *args, "--resume"]).replace("\n", " ")


def run_molecules(job: MoleculeJob, console: Console, display: Display | None = None) -> int:
    """Write the job's records to its output and summarise them on `console`."""
    run = prepare_molecules(job.spec, job.device)
    display = display or Display()
    check_resolved_config(run.spec, job.output, job.written)
    seed = run.spec.sampling.seed
    share = resume_from(
        job.output, seed, (1, job.n), job.resume, say(console), job.shard, job.written
    )
    reports: list[MoleculeReport] = []
    violating = 0
    started = time.perf_counter()
    held: dict[str, int] = {}
    rows = run.records(job.n, display, share)
    for row in written_records(run.spec, rows, job.output, job.n, display):
        reports.append(MoleculeReport(**{f.name: row[f.name] for f in fields(MoleculeReport)}))
        violating += row["satisfied"] is False
        tally_held(held, row)
    elapsed = time.perf_counter() - started
    summary = summarise(reports)
    novelty = "n/a" if summary.novelty is None else f"{summary.novelty:.1%}"
    unique = f"{summary.uniqueness:.1%}" if summary.valid else "n/a"  # as `cdd eval` says null
    note = satisfaction_note(run.constraints, summary.total, violating, run.spec.method, held)
    console.print(
        f"{summary.total} molecules in {elapsed:.1f}s ({summary.total / elapsed:.1f}/s, "
        f"{run.spec.sampling.steps} steps, {run.device}): valid {summary.validity:.1%}, unique "
        f"{unique} of valid, novel {novelty} of unique valid; mean QED "
        f"{summary.mean_qed or 'n/a'}, mean SA {summary.mean_sa or 'n/a'} [{CANONICALIZER}]"
        f"{note}",
        markup=False,
        soft_wrap=True,
    )
    return EXIT_VIOLATIONS if violating else EXIT_OK


DEFAULT_LENGTH = 64


def tokenize_prompts(
    given: list[PromptInput | None],
    asked: int | None,
    loaded: registry.LoadedModel,
    chat: bool = False,
) -> tuple[list[Prompt], int]:
    """Token ids of each prompt (with `chat`, wrapped in the model's chat template) and the
    continuation length; a prompt that leaves no room for `--length` tokens in the model's
    length is refused."""
    limit = loaded.config.model_length
    template = read_template(loaded.directory) if chat else None
    prompts = []
    for index, one in enumerate(given):
        if one is None:
            if template is not None:
                raise InputError("--chat needs a prompt (--prompt or --prompts)")
            prompts.append(Prompt(index))
            continue
        text = one.text if template is None else apply_template(*template, one.text)
        size = len(text.encode("utf-8"))
        if size > loaded.tokenizer.longest_token_bytes * limit:  # refused before tokenizing
            raise InputError(
                f"prompt {index} ({size:,} bytes) cannot fit model {loaded.name}'s length of "
                f"{limit} tokens"
            )
        ids = torch.tensor(loaded.tokenizer.encode(text), dtype=torch.long)
        prompts.append(Prompt(index, text, ids, one.id, one.text if template else None))
    index = max(range(len(prompts)), key=lambda i: len(prompts[i].ids))
    longest = len(prompts[index].ids)
    length = asked or min(DEFAULT_LENGTH, limit - longest)
    if length <= 0 or longest + length > limit:
        need = "leaves no room in" if asked is None else f"+ --length {length} exceed"
        raise InputError(
            f"prompt {index} ({longest} tokens) {need} model {loaded.name}'s "
            f"length of {limit} tokens"
        )
    return prompts, length


@dataclass
class TextRun:
    """A text job ready to sample: the model loaded, prompts tokenized, constraints built and
    checked against every prompt (a lexical layout must fit)."""

    spec: Spec
    loaded: registry.LoadedModel
    constraints: list[Constraint]
    device: str
    prompts: list[Prompt]
    length: int  # continuation tokens

    def records(
        self, n: int, reporter: Reporter | None = None, share: Share | None = None
    ) -> Iterator[dict]:
        """`n` records per prompt, each as soon as it is final; with `share`, this
        process's shard of them not already written (an interrupted run resumed)."""
        check_batch_fits(min(self.spec.sampling.batch_size, n), self.loaded)
        reporter = reporter or Reporter()
        spec = self.spec
        generation = Generation(
            spec, self.loaded, self.constraints, spec.sampling.steps, reporter, self.length
        )
        share = share or Share()
        share.restore(self.constraints)
        reporter.run_started("samples", share.count(0, n * len(self.prompts)))
        violating = 0
        written = len(share.ids)
        for prompt in self.prompts:
            told = [c.with_prompt(prompt.text or "", len(prompt.ids)) for c in self.constraints]
            first = prompt.index * n  # the prompt's first sample, counted over the run
            for indices in share.batches(first, n, str(prompt.index), spec.sampling.batch_size):
                for draw in generation.finished(indices, prompt):
                    violating += not draw.satisfied
                    written += 1
                    yield record(draw, told, spec, self.loaded, prompt)
                    tally = f"violating {violating}" if self.constraints else ""
                    reporter.records_done(written, tally)


def prepare_text(
    spec: Spec, device: str, prompts: list[PromptInput | None], length: int | None
) -> TextRun:
    """Load the spec's text model, tokenize `prompts` ([None]: unconditional) and build the
    constraints (InputError for what does not fit, before any sampling)."""
    device = registry.resolve_device(device)
    loaded = registry.load(spec.model, "text", device, spec.sampling.dtype)
    spec.model = spec.model or loaded.name
    if not isinstance(loaded.tokenizer, TextTokenizer):
        raise InputError(f"model {loaded.name} is not a text model (its tokenizer reads SMILES)")
    tokenized, length = tokenize_prompts(prompts, length, loaded, spec.sampling.chat)
    constraints = build_constraints(spec.constraints, loaded, device, spec.words)
    if not constraints:
        spec.method = "unconstrained"
    fill_model_defaults(spec, loaded)
    check_blocks(spec, length)
    for prompt in tokenized:  # every prompt's lexical constraints must fit
        told = [c.with_prompt(prompt.text or "", len(prompt.ids)) for c in constraints]
        closed_forms(told, loaded.tokenizer, len(prompt.ids), length)
    return TextRun(spec, loaded, constraints, device, tokenized, length)


def run_text(job: TextJob, console: Console, display: Display | None = None) -> int:
    """Write the job's records to its output and summarise them on `console`."""
    run = prepare_text(job.spec, job.device, job.prompts, job.length)
    display = display or Display()
    check_resolved_config(run.spec, job.output, job.written)
    seed = run.spec.sampling.seed
    shape = (len(run.prompts), job.n)
    share = resume_from(job.output, seed, shape, job.resume, say(console), job.shard, job.written)
    violating = count = 0
    seconds = 0.0
    started = time.perf_counter()
    total = job.n * len(run.prompts)
    held: dict[str, int] = {}
    for row in written_records(
        run.spec, run.records(job.n, display, share), job.output, total, display
    ):
        violating += row["satisfied"] is False
        tally_held(held, row)
        count += 1
        seconds += row["seconds"]
    elapsed = time.perf_counter() - started
    note = satisfaction_note(run.constraints, count, violating, run.spec.method, held)
    console.print(
        f"{count} samples ({len(run.prompts)} prompt(s) x {job.n}, {run.length} tokens, "
        f"{run.spec.sampling.steps} steps, {run.device}) in {elapsed:.1f}s, "
        f"{seconds / max(count, 1):.2f}s per sample{note}",
        markup=False,
        soft_wrap=True,
    )
    return EXIT_VIOLATIONS if violating else EXIT_OK
