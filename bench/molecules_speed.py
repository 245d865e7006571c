"""Molecules per second and validity of a model at several batch sizes (CPU by default).

    python bench/molecules_speed.py [--model default-molecules] [--device cpu]
        [--batch-sizes 1,64,256] [--validity-samples 1000] [--decode well-formed|plain]

Speed: after one warm-up batch, the time to denoise `max(2 * B, 32)` molecules at batch size B
(wall clock, including decoding and RDKit checks). Validity, uniqueness and novelty: over
`--validity-samples` molecules (seed 0), which the seeding makes independent of batch size.
Sampling is `cdd molecules`'s, well-formed SMILES decoding included; `--decode plain` (as
`cdd molecules --decode plain`) reads the model's own argmax instead (the model's quality
alone, what published validity tables measure).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from cdd_cli.diffusion.processes import make_process
from cdd_cli.diffusion.sampler import Sampler, sample_generator
from cdd_cli.evaluate.molecules import CANONICALIZER, describe, summarise
from cdd_cli.evaluate.reference import model_reference
from cdd_cli.models import registry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default-molecules")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch-sizes", default="1,64,256")
    parser.add_argument("--validity-samples", type=int, default=1000)
    parser.add_argument("--decode", choices=("well-formed", "plain"), default="well-formed")
    args = parser.parse_args()

    loaded = registry.load(args.model, "molecules", args.device)
    reference = model_reference(loaded.directory)
    steps = args.steps or loaded.default_steps
    process = make_process(loaded.config.noise, loaded.config.vocab_size, loaded.tokenizer.mask_id)
    # plain: the model's own argmax, without the well-formed SMILES decoding.
    syntax = None if args.decode == "plain" else loaded.tokenizer.syntax()
    sampler = Sampler(loaded.model, process, steps, loaded.config.time_conditioning, syntax)
    length = loaded.config.model_length

    def draw(indices: range) -> list[str]:
        with torch.inference_mode():
            ids = sampler.sample([sample_generator(0, 0, i) for i in indices], length)
        return loaded.tokenizer.decode_batch(ids)

    rows = []
    for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
        draw(range(batch_size))  # warm-up
        total = max(2 * batch_size, 32)
        started = time.perf_counter()
        for start in range(0, total, batch_size):
            for smiles in draw(range(start, min(start + batch_size, total))):
                describe(smiles, reference)
        seconds = time.perf_counter() - started
        rows.append(
            {
                "batch_size": batch_size,
                "molecules": total,
                "seconds": round(seconds, 2),
                "molecules_per_second": round(total / seconds, 2),
            }
        )
        print(json.dumps(rows[-1]), flush=True)

    reports = []
    for start in range(0, args.validity_samples, 256):
        indices = range(start, min(start + 256, args.validity_samples))
        reports += [describe(s, reference) for s in draw(indices)]
    summary = summarise(reports)
    quality = {
        "samples": summary.total,
        "valid": summary.valid,
        "validity": round(summary.validity, 4),
        "uniqueness": round(summary.uniqueness, 4),
        "novelty": None if summary.novelty is None else round(summary.novelty, 4),
        "mean_qed": summary.mean_qed,
        "mean_sa": summary.mean_sa,
    }
    print(json.dumps(quality))
    print(
        f"\nmodel {args.model}, {steps} steps, decode {args.decode}, "
        f"device {args.device} "
        f"({platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads), {CANONICALIZER}\n"
    )
    print("| batch size | molecules | seconds | molecules/s |\n|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['batch_size']} | {r['molecules']} | {r['seconds']} | "
            f"{r['molecules_per_second']} |"
        )
    print(
        f"\nvalid {summary.valid}/{summary.total} ({summary.validity:.1%}), unique "
        f"{summary.uniqueness:.1%} of valid, novel {quality['novelty']} of unique valid, "
        f"mean QED {summary.mean_qed}, mean SA {summary.mean_sa}"
    )


if __name__ == "__main__":
    main()
