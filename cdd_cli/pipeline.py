"""From a job description to JSONL records: model -> sampler -> records -> writer."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.progress import Progress

from cdd_cli.diffusion.processes import make_process
from cdd_cli.diffusion.sampler import Sampler, StepInfo, sample_generator
from cdd_cli.evaluate.molecules import CANONICALIZER, MoleculeReport, describe, summarise
from cdd_cli.models import registry
from cdd_cli.records import JsonlWriter

EXIT_OK, EXIT_VIOLATIONS = 0, 3


@dataclass
class MoleculeJob:
    n: int
    seed: int
    model: str | None
    steps: int | None
    batch_size: int
    device: str
    output: str


def run_molecules(job: MoleculeJob, console: Console, progress: Progress) -> int:
    loaded = registry.load(job.model, "molecules", job.device)
    steps = job.steps or loaded.default_steps
    process = make_process(loaded.config.noise, loaded.config.vocab_size, loaded.tokenizer.mask_id)
    sampler = Sampler(loaded.model, process, steps, loaded.config.time_conditioning)
    reference = loaded.reference
    reports: list[MoleculeReport] = []
    started = time.perf_counter()
    with JsonlWriter(job.output) as writer, progress:
        overall = progress.add_task("molecules", total=job.n, info="")
        denoise = progress.add_task("  denoising", total=steps, info="")

        def on_step(info: StepInfo) -> None:
            progress.update(denoise, completed=info.index + 1)

        for start in range(0, job.n, job.batch_size):
            indices = range(start, min(start + job.batch_size, job.n))
            progress.reset(denoise, total=steps)
            batch_started = time.perf_counter()
            generators = [sample_generator(job.seed, 0, i) for i in indices]
            with torch.inference_mode():
                ids = sampler.sample(generators, loaded.config.model_length, on_step=on_step)
            # Per-sample time is the batch's time shared equally (samples run together).
            seconds = (time.perf_counter() - batch_started) / len(indices)
            for i, smiles in zip(indices, loaded.tokenizer.decode_batch(ids), strict=True):
                report = describe(smiles, reference)
                reports.append(report)
                writer.write(
                    {
                        "id": f"0-{i}",
                        "prompt": None,
                        "text": smiles,
                        "seed": job.seed,
                        "model": loaded.name,
                        "satisfied": True,
                        "constraints": {},
                        "projection": None,
                        **report.fields(),
                        "seconds": round(seconds, 4),
                    }
                )
            progress.update(
                overall,
                completed=indices.stop,
                info=f"valid {sum(r.valid for r in reports)}/{len(reports)}",
            )
    elapsed = time.perf_counter() - started
    summary = summarise(reports)
    novelty = "n/a" if summary.novelty is None else f"{summary.novelty:.1%}"
    console.print(
        f"{summary.total} molecules in {elapsed:.1f}s ({summary.total / elapsed:.1f}/s, "
        f"{steps} steps, {job.device}): valid {summary.validity:.1%}, unique "
        f"{summary.uniqueness:.1%} of valid, novel {novelty} of unique valid; mean QED "
        f"{summary.mean_qed}, mean SA {summary.mean_sa} [{CANONICALIZER}]",
        markup=False,
        soft_wrap=True,
    )
    return EXIT_OK
