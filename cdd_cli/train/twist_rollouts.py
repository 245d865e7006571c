"""The twist's data: the model's own rollouts, each step's prediction kept with the verdict
of the exact judge on where the rollout ended.

A twist estimates P(C | x_t), the probability that the model, continued from x_t, ends in a
sequence the constraint accepts (`projection/exact.py` steers by it). Its labels must come
from the model's own continuations, not from a dataset: the verdict of a rollout is a draw of
exactly that probability. Each rollout is drawn by the run's own sampler (the same steps,
decoding and layout as `cdd molecules --method unconstrained`) from its own generator, so the
rollouts of draws 0..N-1 are the same in any number of shards or batches; a few of its steps,
chosen from the draw's own stream, keep their prediction p(x_0 | x_t) (float16) and time t.
The final text is judged once by the constraint's exact judge; its score is kept, so one set
of rollouts labels any bound tau afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from cdd_cli.constraints.base import Constraint
from cdd_cli.diffusion.sampler import StepInfo, sample_generator
from cdd_cli.evaluate.molecules import canonical
from cdd_cli.run.drawing import BatchDrawer


@dataclass
class Rollouts:
    """Kept steps of N rollouts: `probs` [N * K, L, V] (float16), `times` [N * K], `draw`
    [N * K] (which rollout), and per rollout its judged `score` [N] (NaN: the judge could not
    score it, or it is no molecule) and its `text`."""

    probs: torch.Tensor
    times: torch.Tensor
    draw: torch.Tensor
    score: torch.Tensor
    texts: list[str]


class StepRecorder:
    """A hook that keeps the prediction at each sample's chosen steps and changes nothing."""

    def __init__(self, chosen: torch.Tensor):
        self.chosen = chosen  # [B, K] step indices per sample
        self.kept: dict[tuple[int, int], torch.Tensor] = {}
        self.times: dict[tuple[int, int], float] = {}

    def __call__(self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        if info.draw is None:
            return probs
        rows, slots = (self.chosen == info.index).nonzero(as_tuple=True)
        for row, slot in zip(rows.tolist(), slots.tolist(), strict=True):
            self.kept[(row, slot)] = probs[row].to(torch.float16).cpu()
            self.times[(row, slot)] = info.t
        return probs


def chosen_steps(index: int, seed: int, steps: int, per_draw: int) -> torch.Tensor:
    """`per_draw` distinct regular steps of draw `index`, from a stream of its own (not the
    sampling stream, which the recording must leave as it is)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)
    return torch.randperm(steps - 1, generator=g)[:per_draw].sort().values


def record_rollouts(
    drawer: BatchDrawer,
    constraint: Constraint,
    indices: Iterable[int],
    per_draw: int,
    on_batch: Callable[[int], None] | None = None,
) -> Rollouts:
    """Rollouts `indices` of the drawer's model (its seed and batch size), `per_draw` kept
    steps each, judged by `constraint`'s exact judge."""
    spec = drawer.spec
    steps, seed, size = spec.sampling.steps, spec.sampling.seed, spec.sampling.batch_size
    indices = list(indices)
    probs, times, draws, scores, texts = [], [], [], [], []
    tokenizer = drawer.loaded.tokenizer
    for start in range(0, len(indices), size):
        batch = indices[start : start + size]
        generators = [sample_generator(seed, 0, i) for i in batch]
        chosen = torch.stack([chosen_steps(i, seed, steps, per_draw) for i in batch])
        recorder = StepRecorder(chosen)
        with torch.inference_mode():
            ids = drawer.sampler.sample(generators, drawer.length, recorder)
        batch_texts = [tokenizer.decode(row) for row in ids.tolist()]
        judged = constraint.judge(batch_texts)
        for row, (i, text, value) in enumerate(zip(batch, batch_texts, judged, strict=True)):
            ok = value is not None and math.isfinite(value) and canonical(text) is not None
            scores.append(value if ok else math.nan)
            texts.append(text)
            for slot in range(per_draw):
                probs.append(recorder.kept[(row, slot)])
                times.append(recorder.times[(row, slot)])
                draws.append(i)
        if on_batch is not None:
            on_batch(len(batch))
    return Rollouts(
        torch.stack(probs),
        torch.tensor(times, dtype=torch.float32),
        torch.tensor(draws),
        torch.tensor(scores, dtype=torch.float64),
        texts,
    )
