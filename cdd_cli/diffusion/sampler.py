"""The sampling loop: drives any model through a reverse process, with a per-step hook.

A prompt is a prefix of fixed tokens: unmasked from the start (DESIGN §2) and restored after
every step, so the model conditions on it and no process can change it.

The hook receives the predicted clean-token distribution p(x_0 | x_t) [B, L, V] before each
ancestral step and may return a replacement (the CDD projection plugs in there). It may edit
the prediction in place, but must copy what it keeps: the next prediction overwrites it.
Randomness is per sample: each row has its own generator, derived from (seed, prompt index,
sample index), so the same seed gives the same sequences whatever the batch size or device.

Given a `Syntax` (the tokenizer's: well-formed SMILES), the final decoding reads the most
probable sequence the syntax accepts instead of the position-by-position argmax.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from cdd_cli.diffusion.processes import MaskedProcess, UniformProcess, make_argmax
from cdd_cli.models.rows import floor_rows


def sample_seed(seed: int, prompt_index: int, sample_index: int, attempt: int = 0) -> int:
    """The seed of one draw's own random stream (63 bits): the run's seed, the prompt's and
    the sample's index, and for a redraw (attempt > 0) its number; never the batch."""
    key = f"{seed}/{prompt_index}/{sample_index}" + (f"/{attempt}" if attempt else "")
    digest = hashlib.blake2b(key.encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") >> 1


def sample_generator(
    seed: int, prompt_index: int, sample_index: int, attempt: int = 0
) -> torch.Generator:
    """The generator of one draw; a redraw (attempt > 0) gets a fresh, equally fixed stream."""
    return torch.Generator().manual_seed(sample_seed(seed, prompt_index, sample_index, attempt))


@dataclass
class StepInfo:
    index: int  # 0-based step number
    steps: int
    t: float
    s: float
    # [B, L] positions this step's draw may change (None: any). A masked model decides few
    # tokens per step; a hook need not touch samples the step leaves as they are. A hook may
    # edit it in place to reorder which masked positions the step decides (the step's draw,
    # `decide` included, follows it).
    changing: torch.Tensor | None = None
    # Where the process keeps what it decides (masked), the step's draw x_s [B, L] from given
    # probabilities, so a hook can see what the step would decide before it does; None where
    # every token may still change.
    decide: Callable[[torch.Tensor], torch.Tensor] | None = None
    # This step for rows a:b of the batch alone (views: a hook's edits of their `changing`
    # are the batch's), so that parts of a batch can be projected apart; None: nothing
    # row-wise to cut (the final prediction).
    cut: Callable[[int, int], StepInfo] | None = None
    # The model's prediction p(x_0 | x_s) [N, L, V] for any tokens x_s [N, L] at the next
    # step's time (a forward of N rows), for a hook that weighs what a decision leads to;
    # None at the final prediction.
    predict: Callable[[torch.Tensor], torch.Tensor] | None = None

    def rows(self, a: int, b: int) -> StepInfo:
        """This step as rows a:b of the batch see it."""
        return self.cut(a, b) if self.cut is not None else self


StepHook = Callable[[torch.Tensor, torch.Tensor, StepInfo], torch.Tensor]


class Syntax(Protocol):
    """The language's well-formed sequences (e.g. `SmilesSyntax`)."""

    def best(self, probs: torch.Tensor) -> torch.Tensor | None:
        """The most probable well-formed ids [B, L] under `probs` [B, L, V]; None when that is
        the argmax already."""
        ...


def well_formed(probs: torch.Tensor, syntax: Syntax | None) -> torch.Tensor:
    """`probs` [B, L, V] with its most probable well-formed sequence made the argmax (a
    factorised argmax ignores syntax: it may open a branch that it never closes)."""
    ids = syntax.best(probs) if syntax is not None else None
    return probs if ids is None else make_argmax(probs, ids)


class Remembered:
    """A step's draw that is computed once per probability tensor: a hook that looks at the
    step's draw and then hands the prediction back as it was (most steps) does not pay for
    the draw twice. A tensor edited in place since (its version moved on) is drawn again."""

    def __init__(self, draw: Callable[[torch.Tensor], torch.Tensor]):
        self.draw = draw
        self.last: tuple[torch.Tensor, int, torch.Tensor] | None = None

    def __call__(self, probs: torch.Tensor) -> torch.Tensor:
        if probs.is_inference():  # no version to tell an edit by (and no hook to edit it)
            return self.draw(probs)
        if self.last is not None and self.last[0] is probs and self.last[1] == probs._version:
            return self.last[2].clone()
        x_s = self.draw(probs)
        self.last = (probs, probs._version, x_s)
        return x_s.clone()


class Sampler:
    def __init__(
        self,
        model: torch.nn.Module,
        process: MaskedProcess | UniformProcess,
        steps: int,
        time_conditioning: bool,
        syntax: Syntax | None = None,
    ):
        self.model = floor_rows(model)  # a sample's prediction whoever shares its batch
        self.process = process
        self.steps = steps
        self.syntax = syntax
        # A model that ignores t gives the same p(x_0 | x_t) while x_t is unchanged (MDLM's cache).
        self.cacheable = isinstance(process, MaskedProcess) and not time_conditioning

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def predict(self, x: torch.Tensor, t: float, out: torch.Tensor | None = None) -> torch.Tensor:
        """p(x_0 | x_t) [B, L, V]; written into `out` (an earlier prediction) where given."""
        sigma = self.process.schedule.sigma(torch.full((x.shape[0],), t, device=x.device))
        logits = self.model(x, sigma, where=self.process.predicted(x))
        return self.process.x0_probs(logits, x, out)

    def well_formed(self, probs: torch.Tensor) -> torch.Tensor:
        return well_formed(probs, self.syntax)

    def sample(
        self,
        generators: list[torch.Generator],
        length: int,
        hook: StepHook | None = None,
        on_step: Callable[[StepInfo], None] | None = None,
        prefix: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Draw one sequence per generator: `length` new tokens after the fixed `prefix` ids
        (a prompt, shared by the batch); returns ids [B, len(prefix) + length] on the model's
        device, prefix included."""
        denoised = self.denoise(generators, length, hook, on_step, prefix)
        ids = self.finish(denoised, hook)
        if on_step is not None:
            on_step(denoised.last)
        return ids

    def denoise(
        self,
        generators: list[torch.Generator],
        length: int,
        hook: StepHook | None = None,
        on_step: Callable[[StepInfo], None] | None = None,
        prefix: torch.Tensor | None = None,
    ) -> Denoised:
        """`sample` up to its last step: every regular step, then the final prediction (of
        the best well-formed sequence, given a syntax), which `finish` projects and decides."""
        device = self.device
        x = torch.stack([self.process.prior(length, g) for g in generators]).to(device)
        keep = 0
        if prefix is not None and len(prefix):
            keep = len(prefix)
            prefix = prefix.to(device).expand(len(generators), -1)
            x = torch.cat([prefix, x], dim=1)
        length = x.shape[1]
        times = self.process.timesteps(self.steps).tolist()
        cached = probs = None
        # The last step is the noise removal (below): its prediction, projected by the hook,
        # decides the output instead of being diluted by one more random draw.
        last = self.steps - 1
        for i in range(last):
            t, s = times[i], times[i + 1]
            uniforms = torch.stack([torch.rand(length, generator=g) for g in generators])
            uniforms = uniforms.to(device)
            # Each prediction overwrites the one before (a hook must copy what it keeps): a
            # fresh [B, L, V] tensor per step cost a GPT-2-vocabulary model on a CPU a quarter
            # of its sampling time, in page faults on memory the allocator hands back at once.
            probs = cached if cached is not None else self.predict(x, t, probs)
            changing = self.process.changing(x, t, s, uniforms, probs, keep)
            if keep:
                changing[:, :keep] = False

            def draw(
                probs: torch.Tensor,
                a: int = 0,
                b: int = len(generators),
                x=x,
                t=t,
                s=s,
                uniforms=uniforms,
                changing=changing,
            ) -> torch.Tensor:
                """The step's draw of rows a:b from their `probs` (each row its own)."""
                x_s = self.process.step(probs, x[a:b], t, s, uniforms[a:b], changing[a:b])
                if keep:  # prompt tokens never change (uniform noise would resample them)
                    x_s[:, :keep] = prefix[a:b]
                return x_s

            def ahead(x_s: torch.Tensor, s=s) -> torch.Tensor:
                return self.predict(x_s, s)

            def cut(
                a: int, b: int, i=i, t=t, s=s, changing=changing, draw=draw, ahead=ahead
            ) -> StepInfo:
                part = Remembered(lambda p: draw(p, a, b)) if self.process.keeps_decided else None
                return StepInfo(i, self.steps, t, s, changing[a:b], part, cut, ahead)

            decide = Remembered(draw) if self.process.keeps_decided else None
            info = StepInfo(i, self.steps, t, s, changing, decide, cut, ahead)
            projected = hook(probs, x, info) if hook is not None else probs
            x_next = (decide or draw)(projected)
            cached = probs if self.cacheable and torch.equal(x_next, x) else None
            x = x_next
            if on_step is not None:
                on_step(info)
        final = StepInfo(last, self.steps, times[last], 0.0)
        if self.process.is_final(x):
            return Denoised(x, None, final, prefix if keep else None)
        t = times[last]
        probs = cached if cached is not None else self.predict(x, t, probs)
        probs = self.well_formed(probs)
        for _ in range(self.process.removal_passes - 1):
            # Uniform noise: read x as still noisy at the last step's level and replace it by
            # the argmax of its prediction (the best well-formed sequence, given a syntax)
            # until that stops changing it; each pass lets the model correct tokens the
            # previous one left inconsistent (the QM9 model's validity went from 50% to 64%,
            # and to 86.5% with the SMILES syntax, bench/README.md).
            cleaned = probs.argmax(-1)
            if keep:
                cleaned[:, :keep] = prefix
            if torch.equal(cleaned, x):
                break
            x = cleaned
            probs = self.well_formed(self.predict(x, t))
        return Denoised(x, probs, final, prefix if keep else None)

    def finish(self, denoised: Denoised, hook: StepHook | None = None) -> torch.Tensor:
        """The last step of `denoise`'s pass: its final prediction projected by the hook
        (index `steps`: the noise removal is always projected) and decided; ids [B, L]."""
        x, probs = denoised.x, denoised.probs
        if probs is None:
            return x
        if hook is not None:
            probs = hook(probs, x, StepInfo(self.steps, self.steps, denoised.last.t, 0.0))
        x = self.process.finish(probs, x)
        if denoised.prefix is not None:
            x[:, : denoised.prefix.shape[1]] = denoised.prefix
        return x


@dataclass
class Denoised:
    """A pass after its regular steps: its sequences x [B, L] and the final prediction
    [B, L, V] that `Sampler.finish` projects and decides (None: x is final already)."""

    x: torch.Tensor
    probs: torch.Tensor | None
    last: StepInfo  # the last step, as the step hook reports it once the pass is decided
    prefix: torch.Tensor | None  # [B, P]: the prompt's tokens, restored after deciding
