"""The sampling loop: drives any model through a reverse process, with a per-step hook.

Kept tokens (a `Canvas`: a prompt's prefix, a template's fixed text, a scaffold) are unmasked
from the start (DESIGN §2) and restored after every step and after the final decoding, so the
model conditions on them and no process can change them.

The hook receives the predicted clean-token distribution p(x_0 | x_t) [B, L, V] before each
ancestral step and may return a replacement (the CDD projection plugs in there). It may edit
the prediction in place, but must copy what it keeps: the next prediction overwrites it.
Randomness is per sample: each row has its own generator, derived from (seed, prompt index,
sample index), so the same seed gives the same sequences whatever the batch size or device.

Given a `Syntax` (the tokenizer's: well-formed SMILES), the final decoding reads the most
probable sequence the syntax accepts instead of the position-by-position argmax.
"""

from __future__ import annotations

import functools
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


@dataclass(frozen=True)
class Canvas:
    """What a draw starts from: ids [N, L] and which of them are kept [N, L] (bool), with N
    one (shared by the batch) or the batch's size. Kept positions start as their ids and stay
    so to the end; the others start from the process's prior, drawn over them in order."""

    ids: torch.Tensor
    kept: torch.Tensor

    @classmethod
    def blank(cls, length: int) -> Canvas:
        """`length` positions, none kept."""
        return cls(torch.zeros(1, length, dtype=torch.long), torch.zeros(1, length, dtype=bool))

    @classmethod
    def prompt(cls, prefix: torch.Tensor, length: int) -> Canvas:
        """A prompt's ids [P] kept, then `length` positions to draw."""
        ids = torch.cat([prefix.long().reshape(-1), torch.zeros(length, dtype=torch.long)])
        kept = torch.arange(len(ids)) < prefix.numel()
        return cls(ids[None], kept[None])

    @classmethod
    def stacked(cls, rows: list[Canvas]) -> Canvas:
        """One canvas of the rows of `rows`, in order."""
        return cls(torch.cat([r.ids for r in rows]), torch.cat([r.kept for r in rows]))

    @property
    def length(self) -> int:
        return self.ids.shape[1]

    @property
    def prefix(self) -> int:
        """How many leading positions every row keeps (a prompt's length)."""
        free = (~self.kept.all(0)).nonzero()
        return int(free[0]) if len(free) else self.length

    def select(self, rows: list[int]) -> Canvas:
        """The canvas of the samples whose indices are `rows` (a shared one: every row's);
        one per sample index otherwise."""
        if len(self.ids) == 1:
            return self
        index = torch.tensor(rows, dtype=torch.long)
        return Canvas(self.ids[index], self.kept[index])

    def opened(self, rows: torch.Tensor) -> Canvas:
        """One row per sample, those where `rows` [N] (bool) is true keeping nothing: drawn
        whole, as the model writes without a canvas."""
        kept = self.kept.expand(len(rows), -1) & ~rows[:, None]
        return Canvas(self.ids.expand(len(rows), -1), kept)

    def rows(self, a: int, b: int | None = None) -> Canvas:
        """Rows a:b of the batch (a shared canvas is every row's)."""
        if len(self.ids) == 1:
            return self
        return Canvas(self.ids[a:b], self.kept[a:b])

    def to(self, device: torch.device | str, rows: int) -> Canvas:
        """On `device`, one row per sample of a batch of `rows`."""
        ids, kept = self.ids.to(device), self.kept.to(device)
        return Canvas(ids.expand(rows, -1), kept.expand(rows, -1))

    def restore(self, x: torch.Tensor, a: int = 0, b: int | None = None) -> torch.Tensor:
        """`x` [b - a, L] (rows a:b of a batch canvas) with the kept ids put back, in place
        (by `where`, not a masked write: on a GPU that would wait for the device each step)."""
        return x.copy_(torch.where(self.kept[a:b], self.ids[a:b], x))

    def pin(self, probs: torch.Tensor) -> torch.Tensor:
        """`probs` [B, L, V] (B: this canvas's rows, or any where it is shared) one-hot on the
        kept ids, a copy: what a search over whole sequences must keep."""
        shape = probs.shape[:2]
        kept = self.kept.to(probs.device).expand(shape)
        ids = self.ids.to(probs.device).expand(shape)
        probs = probs.clone()
        probs[kept] = 0.0
        probs[kept, ids[kept]] = 1.0
        return probs


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
    # The step's draw x_s [B, L] from given probabilities, under any process (`decide` is
    # the masked processes' remembered one): a hook that weighs the step it proposes
    # (`projection/exact.py`) reads the token the sampler will draw. None at the final
    # prediction.
    draw: Callable[[torch.Tensor], torch.Tensor] | None = None

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


@dataclass
class ReverseStep:
    """One regular step of a batch from time t to s, everything its draw reads fixed before
    the hook sees the prediction: the hook can look at the step's draw (`StepInfo.decide`),
    and the sampler then draws the same x_s from what the hook hands back. Rows a:b of the
    batch can be drawn and described apart (`StepInfo.rows`)."""

    process: MaskedProcess | UniformProcess
    predict: Callable[[torch.Tensor, float], torch.Tensor]  # p(x_0 | x) at a time, [N, L, V]
    index: int
    steps: int
    t: float
    s: float
    x: torch.Tensor  # [B, L] x_t
    uniforms: torch.Tensor  # [B, L] the step's uniforms, one per position
    changing: torch.Tensor  # [B, L] positions the draw changes; a hook may edit it in place
    canvas: Canvas | None  # [B, L] the kept tokens, restored after the draw (None: none)

    def draw(self, probs: torch.Tensor, a: int = 0, b: int | None = None) -> torch.Tensor:
        """x_s [b - a, L] of rows a:b (all rows by default) from their `probs`."""
        rows = slice(a, b)
        x_s = self.process.step(
            probs, self.x[rows], self.t, self.s, self.uniforms[rows], self.changing[rows]
        )
        if self.canvas is not None:  # kept tokens never change (uniform noise would)
            self.canvas.restore(x_s, a, b)
        return x_s

    def predict_at_s(self, x_s: torch.Tensor) -> torch.Tensor:
        """The model's next prediction p(x_0 | x_s) for any tokens x_s [N, L]."""
        return self.predict(x_s, self.s)

    def info(self) -> StepInfo:
        """The step as the hook sees it."""
        return self.described(self.changing, self.draw)

    def rows(self, a: int, b: int) -> StepInfo:
        """The step as rows a:b of the batch see it (`StepInfo.rows`)."""
        return self.described(self.changing[a:b], functools.partial(self.draw, a=a, b=b))

    def described(
        self, changing: torch.Tensor, draw: Callable[[torch.Tensor], torch.Tensor]
    ) -> StepInfo:
        # A masked step remembers its draw (`Remembered`): a hook that looks at it and hands
        # the prediction back unchanged does not pay for it twice.
        decide = Remembered(draw) if self.process.keeps_decided else None
        return StepInfo(
            index=self.index,
            steps=self.steps,
            t=self.t,
            s=self.s,
            changing=changing,
            decide=decide,
            cut=self.rows,
            predict=self.predict_at_s,
            draw=draw,
        )


@dataclass(frozen=True)
class Layout:
    """Where a model's special tokens may stand, as its training rows place them: `start`
    (`<bos>`) at position 0 alone, `never` (e.g. `<unk>`) nowhere. A prediction's mass on a
    special out of its place is removed and the rest renormalised: drawn there, the special
    would make the sequence unreadable, and no step after could take it back (a masked
    process keeps what it decides)."""

    start: int
    never: tuple[int, ...] = ()

    def restrict(self, probs: torch.Tensor) -> torch.Tensor:
        """`probs` [B, L, V] restricted in place (a row with no other mass kept as it was)."""
        given = probs.clone()
        probs[:, 1:, self.start] = 0.0
        if self.never:
            probs[..., list(self.never)] = 0.0
        total = probs.sum(-1, keepdim=True)
        probs.copy_(torch.where(total > 0, probs / total.clamp_min(1e-30), given))
        return probs


class Sampler:
    def __init__(
        self,
        model: torch.nn.Module,
        process: MaskedProcess | UniformProcess,
        steps: int,
        time_conditioning: bool,
        syntax: Syntax | None = None,
        layout: Layout | None = None,
    ):
        self.model = floor_rows(model)  # a sample's prediction whoever shares its batch
        self.process = process
        self.steps = steps
        self.syntax = syntax
        self.layout = layout
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
        probs = self.process.x0_probs(logits, x, out)
        return probs if self.layout is None else self.layout.restrict(probs)

    def well_formed(self, probs: torch.Tensor, canvas: Canvas | None = None) -> torch.Tensor:
        """`well_formed` under the sampler's syntax; with a `canvas` (rows as `probs`), the
        best well-formed sequence that keeps its kept ids."""
        if canvas is not None and self.syntax is not None:
            probs = canvas.pin(probs)
        return well_formed(probs, self.syntax)

    def sample(
        self,
        generators: list[torch.Generator],
        canvas: Canvas | int,
        hook: StepHook | None = None,
        on_step: Callable[[StepInfo], None] | None = None,
    ) -> torch.Tensor:
        """Draw one sequence per generator on `canvas` (an int L: L positions, none kept);
        returns ids [B, L] on the model's device, the kept ids in their places."""
        denoised = self.denoise(generators, canvas, hook, on_step)
        ids = self.finish(denoised, hook)
        if on_step is not None:
            on_step(denoised.last)
        return ids

    def denoise(
        self,
        generators: list[torch.Generator],
        canvas: Canvas | int,
        hook: StepHook | None = None,
        on_step: Callable[[StepInfo], None] | None = None,
    ) -> Denoised:
        """`sample` up to its last step: every regular step, then the final prediction (of
        the best well-formed sequence, given a syntax), which `finish` projects and decides."""
        device = self.device
        if isinstance(canvas, int):
            canvas = Canvas.blank(canvas)
        rows = len(generators)
        kept = canvas.kept.expand(rows, -1)
        # Each sample's prior covers its free positions only, in order: a prompt's draws are
        # those of its continuation alone, whatever it keeps. (The canvas is on the host.)
        free = (~kept).sum(1)
        priors = [self.process.prior(int(n), g) for n, g in zip(free, generators, strict=True)]
        x = canvas.ids.expand(rows, -1).clone()
        x[~kept] = torch.cat(priors)
        x = x.to(device)
        keep = canvas.prefix  # where an ordered sampler's blocks begin
        # Nothing kept: nothing to restore.
        canvas = canvas.to(device, rows) if canvas.kept.any() else None
        length = x.shape[1]
        times = self.process.timesteps(self.steps).tolist()
        cached = probs = None
        # The last step is the noise removal (below): its prediction, projected by the hook,
        # decides the output instead of being diluted by one more random draw.
        last = self.steps - 1
        for i in range(last):
            t, s = times[i], times[i + 1]
            # The step, in order: the model's prediction p(x_0 | x_t); the positions the
            # step's uniforms unmask; the hook's projection of the prediction (CDD's engine,
            # `projection/engine.py`); the draw of x_s from what the hook hands back
            # (`ReverseStep` fixes the uniforms before the hook sees them, so the draw it can
            # look ahead at is the draw the sampler makes).
            uniforms = torch.stack([torch.rand(length, generator=g) for g in generators])
            uniforms = uniforms.to(device)
            # Each prediction overwrites the one before (a hook must copy what it keeps): a
            # fresh [B, L, V] tensor per step cost a GPT-2-vocabulary model on a CPU a quarter
            # of its sampling time, in page faults on memory the allocator hands back at once.
            probs = cached if cached is not None else self.predict(x, t, probs)
            changing = self.process.changing(x, t, s, uniforms, probs, keep)
            if canvas is not None:
                changing &= ~canvas.kept
            step = ReverseStep(
                process=self.process,
                predict=self.predict,
                index=i,
                steps=self.steps,
                t=t,
                s=s,
                x=x,
                uniforms=uniforms,
                changing=changing,
                canvas=canvas,
            )
            info = step.info()
            projected = hook(probs, x, info) if hook is not None else probs
            x_next = (info.decide or step.draw)(projected)
            cached = probs if self.cacheable and torch.equal(x_next, x) else None
            x = x_next
            if on_step is not None:
                on_step(info)
        final = StepInfo(last, self.steps, times[last], 0.0)
        if self.process.is_final(x):
            return Denoised(x, None, final, canvas)
        t = times[last]
        probs = cached if cached is not None else self.predict(x, t, probs)
        probs = self.well_formed(probs, canvas)
        for _ in range(self.process.removal_passes - 1):
            # Uniform noise: read x as still noisy at the last step's level and replace it by
            # the argmax of its prediction (the best well-formed sequence, given a syntax)
            # until that stops changing it; each pass lets the model correct tokens the
            # previous one left inconsistent (the QM9 model's validity went from 50% to 64%,
            # and to 86.5% with the SMILES syntax, bench/README.md).
            cleaned = probs.argmax(-1)
            if canvas is not None:
                canvas.restore(cleaned)
            if torch.equal(cleaned, x):
                break
            x = cleaned
            probs = self.well_formed(self.predict(x, t), canvas)
        return Denoised(x, probs, final, canvas)

    def finish(self, denoised: Denoised, hook: StepHook | None = None) -> torch.Tensor:
        """The last step of `denoise`'s pass: its final prediction projected by the hook
        (index `steps`: the noise removal is always projected) and decided; ids [B, L]."""
        x, probs = denoised.x, denoised.probs
        if probs is None:
            return x
        if hook is not None:
            probs = hook(probs, x, StepInfo(self.steps, self.steps, denoised.last.t, 0.0))
        x = self.process.finish(probs, x)
        if denoised.canvas is not None:
            denoised.canvas.restore(x)
        return x


@dataclass
class Denoised:
    """A pass after its regular steps: its sequences x [B, L] and the final prediction
    [B, L, V] that `Sampler.finish` projects and decides (None: x is final already)."""

    x: torch.Tensor
    probs: torch.Tensor | None
    last: StepInfo  # the last step, as the step hook reports it once the pass is decided
    canvas: Canvas | None  # [B, L]: the kept tokens, restored after deciding (None: none)
