"""Unconstrained text sampling: predicting masked positions only against every position.

    python bench/text_speed.py [--model default-text] [--device cpu] [--batch-sizes 1,4,16]
        [--length 32] [--prompt "The people of"] [--rounds 3]

A masked model copies decided tokens forward, so `MaskedProcess` asks the model for logits at
masked positions only (the output layer and the V-wide softmax are most of a small text
model's step). `EveryPosition` below is the same process asking for every position, as the
sampler did before: the same probabilities (to float rounding), the old cost. Both are timed
in one run, interleaved round by round (so a slow spell of a shared machine falls on both),
on the same model, prompt, batch and seeds.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from cdd_cli.diffusion.processes import MaskedProcess
from cdd_cli.diffusion.sampler import Canvas, Sampler, sample_generator
from cdd_cli.models import registry


class EveryPosition(MaskedProcess):
    """The sampler's prediction before: logits and softmax at every position."""

    def predicted(self, x_t: torch.Tensor) -> None:
        return None

    def x0_probs(self, logits: torch.Tensor, x_t: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        logits[..., self.mask_id] = -torch.inf
        probs = logits.softmax(-1)
        decided = x_t != self.mask_id
        probs[decided] = 0.0
        probs[decided, x_t[decided]] = 1.0
        return probs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default-text")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-sizes", default="1,4,16")
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--prompt", default="The people of")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    loaded = registry.load(args.model, "text", args.device)
    vocab, mask = loaded.config.vocab_size, loaded.tokenizer.mask_id
    prefix = torch.tensor(loaded.tokenizer.encode(args.prompt))
    arms = {"masked only": MaskedProcess(vocab, mask), "every position": EveryPosition(vocab, mask)}
    print(
        json.dumps(
            {
                "model": args.model,
                "machine": platform.processor() or platform.machine(),
                "threads": torch.get_num_threads(),
                "length": args.length,
                "prompt_tokens": len(prefix),
                "steps": loaded.default_steps,
            }
        )
    )
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        seconds: dict[str, list[float]] = {name: [] for name in arms}
        outputs: dict[str, torch.Tensor] = {}
        for round_ in range(args.rounds + 1):  # round 0 warms up
            for name, process in arms.items():
                sampler = Sampler(loaded.model, process, loaded.default_steps, False)
                generators = [sample_generator(0, round_, i) for i in range(batch)]
                started = time.perf_counter()
                with torch.inference_mode():
                    outputs[name] = sampler.sample(generators, Canvas.prompt(prefix, args.length))
                if round_:
                    seconds[name].append((time.perf_counter() - started) / batch)
        same = torch.equal(outputs["masked only"], outputs["every position"])
        row = {name: round(statistics.fmean(s), 4) for name, s in seconds.items()}
        speedup = row["every position"] / row["masked only"]
        print(
            json.dumps(
                {
                    "batch": batch,
                    "s_per_sample": row,
                    "speedup": round(speedup, 2),
                    "last_round_identical": same,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
