"""Reverse processes: the masked (MDLM, SUBS) and uniform (UDLM) ancestral steps.

A process is a small object: `prior()` draws x_1, `predicted()` says at which positions the
model must predict, `x0_probs()` turns its raw logits there into the predicted clean-token
distribution p(x_0 | x_t) [B, L, V], `changing()` says which positions the step decides, and
`step()` draws x_s from x_t given (possibly projected) p(x_0 | x_t). It knows nothing about
models or constraints.

Masked samplers differ in which positions a step decides: MDLM's ancestral step unmasks each
at random (`MaskedProcess`); LLaDA and Dream decide the ones the model is surest of, LLaDA
block by block from left to right (`OrderedProcess`). Every one hands its prediction to the
projection the same way, so every constraint works with every sampler.
"""

from __future__ import annotations

import torch

from cdd_cli.diffusion.schedule import LogLinearSchedule


def sample_categorical(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: one uniform per row instead of one per vocabulary entry.

    `probs` [..., V] need not be normalised; a token of zero mass is never chosen, because the
    search asks for the first index whose cumulative mass exceeds u * total, kept below the
    total: a uniform of 1 or more (a rescaled one can round to it) would find no such index.
    """
    cdf = probs.float().cumsum(-1)
    total = cdf[..., -1:]
    target = uniforms.to(cdf.device, cdf.dtype).unsqueeze(-1) * total
    target = torch.minimum(target, torch.nextafter(total, torch.zeros_like(total)))
    ids = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return ids.clamp_(max=probs.shape[-1] - 1)  # a row without mass (or NaN) has no answer


class TemperatureTopP:
    """How a step draws from a distribution: its probabilities to the power 1 / temperature
    (the logits divided by it), cut to the nucleus, the fewest most probable tokens holding
    `top_p` of the mass (Holtzman et al.). Applied where a token is drawn, to the rows being
    drawn (a few per step), after the projection: the projection reads the model's own
    distribution, and the draw keeps to the top of the projected one. 1 and 1: unchanged."""

    def __init__(self, temperature: float = 1.0, top_p: float = 1.0):
        self.temperature, self.top_p = temperature, top_p

    def __call__(self, probs: torch.Tensor) -> torch.Tensor:
        """Rows [..., V] of probabilities, shaped (not renormalised: draws need no sum)."""
        if self.temperature != 1.0:
            probs = probs.float().pow(1.0 / self.temperature)
        if self.top_p < 1.0:
            ranked, order = probs.float().sort(-1, descending=True)
            total = ranked.sum(-1, keepdim=True)
            above = (ranked.cumsum(-1) - ranked) / total  # the mass of more probable tokens
            ranked = ranked.masked_fill(above >= self.top_p, 0.0)  # the top one always stays
            probs = torch.zeros_like(ranked).scatter(-1, order, ranked)
        return probs


def make_argmax(probs: torch.Tensor, ids: torch.Tensor | list[int]) -> torch.Tensor:
    """`probs` [..., V] with `ids` [...] made the argmax: each wanted token's probability is
    swapped with its position's current argmax, so every row keeps its mass and its shape."""
    out = probs.clone()
    wanted = torch.as_tensor(ids, device=probs.device)
    current = probs.argmax(-1)
    where = torch.nonzero(current != wanted, as_tuple=True)
    at_current, at_wanted = (*where, current[where]), (*where, wanted[where])
    top = probs[at_current]
    out[at_current] = probs[at_wanted]
    out[at_wanted] = top + 1e-6  # strictly above the old argmax, even on ties
    out[where] /= out[where].sum(-1, keepdim=True)
    return out


class MaskedProcess:
    """Absorbing-state diffusion (MDLM: Sahoo et al. 2024, arXiv 2406.07524) with its SUBS
    parameterisation (no mass on the mask; decided tokens copied over) and its ancestral step.
    The formulas are named by what they say, not by equation number (not checked here
    against the paper's text); DESIGN.md §2 states them."""

    name = "masked"
    removal_passes = 1  # the noise removal only fills the masks left
    keeps_decided = True  # a token once drawn stays to the end

    def __init__(
        self,
        vocab_size: int,
        mask_id: int,
        schedule: LogLinearSchedule | None = None,
        temperature_top_p: TemperatureTopP | None = None,
    ):
        self.vocab_size = vocab_size
        self.mask_id = mask_id
        self.schedule = schedule or LogLinearSchedule()
        self.temperature_top_p = temperature_top_p or TemperatureTopP()

    def timesteps(self, steps: int) -> torch.Tensor:
        # MDLM stops just short of 0 and then replaces leftover masks by their argmax.
        return torch.linspace(1.0, 1e-5, steps + 1)

    def prior(self, length: int, generator: torch.Generator) -> torch.Tensor:
        return torch.full((length,), self.mask_id, dtype=torch.long)

    def predicted(self, x_t: torch.Tensor) -> torch.Tensor:
        """[B, L] the positions whose prediction matters: the masked ones. A decided token is
        copied over, so its V-wide logits and softmax (most of a text model's step late in
        sampling, and the prompt's positions from the start) would be thrown away."""
        return x_t == self.mask_id

    def x0_probs(
        self, logits: torch.Tensor, x_t: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """p(x_0 | x_t) [B, L, V] from the logits [N, V] of the `predicted` positions: the
        softmax there (never the mask), one-hot on the decided tokens; written into `out`
        (the previous prediction, overwritten) where given."""
        masked = self.predicted(x_t)
        rows = logits.float()
        rows[:, self.mask_id] = -torch.inf
        probs = rows.new_zeros((*x_t.shape, rows.shape[-1])) if out is None else out.zero_()
        probs[masked] = rows.softmax(-1)
        decided = ~masked
        probs[decided, x_t[decided]] = 1.0
        return probs

    def unmask_probability(self, t: float, s: float) -> float:
        """Chance that a masked position takes a token on the step from t to s:
        (move_t - move_s) / move_t, the token mass of MDLM's reverse step (`step`)."""
        move_t = self.schedule.move(torch.tensor(t)).item()
        move_s = self.schedule.move(torch.tensor(s)).item()
        return (move_t - move_s) / move_t

    def changing(
        self,
        x_t: torch.Tensor,
        t: float,
        s: float,
        uniforms: torch.Tensor,
        x0_probs: torch.Tensor | None = None,
        start: int = 0,
    ) -> torch.Tensor:
        """[B, L] positions that `step` with these uniforms gives a token: a masked position
        unmasks when its uniform falls below the unmasking probability, whatever x0_probs is,
        so a hook can leave alone samples whose step decides nothing. (`x0_probs` and the
        continuation's `start` are for samplers that order positions by the prediction.)"""
        below = uniforms.to(x_t.device) < self.unmask_probability(t, s)
        return (x_t == self.mask_id) & below

    def step(
        self,
        x0_probs: torch.Tensor,
        x_t: torch.Tensor,
        t: float,
        s: float,
        uniforms: torch.Tensor,
        changing: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x_s from x_t by MDLM's ancestral step under SUBS: a masked position draws from

            q(x_s | x_t, x_0) = x_0 (move_t - move_s) / move_t   for a token,
                                move_s / move_t                   for the mask,

        with x_0 the (projected) prediction and move(t) the masking probability; a decided
        position keeps its token. `changing` [B, L], where given, replaces the positions the
        uniforms would unmask (a hook may reorder which masked positions a step decides)."""
        # One uniform decides both whether a position unmasks (u < p) and, rescaled to u / p,
        # which token it takes: the same law as one draw over the tokens and the mask. A
        # position unmasked against its uniform (u >= p) draws with (u - p) / (1 - p).
        p = self.unmask_probability(t, s)
        uniforms = uniforms.to(x_t.device)
        if changing is None:
            changing = self.changing(x_t, t, s, uniforms)
        u = uniforms[changing]
        u = torch.where(u < p, u / p, (u - p) / max(1 - p, 1e-12))
        x_s = x_t.clone()
        # Only the positions that unmask are drawn: a V-wide inverse CDF over every position
        # would cost a sixth of a text model's step.
        x_s[changing] = sample_categorical(self.temperature_top_p(x0_probs[changing]), u)
        return x_s

    def finish(self, x0_probs: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x == self.mask_id, x0_probs.argmax(-1), x)

    def is_final(self, x: torch.Tensor) -> bool:
        return not bool((x == self.mask_id).any())

    def fixed_positions(self, x_t: torch.Tensor) -> torch.Tensor:
        """Positions the next step cannot change: unmasked tokens are copied forward."""
        return x_t != self.mask_id


ORDERS = ("confidence", "margin", "entropy")


def block_count(length: int, block_length: int) -> int:
    """How many blocks of `block_length` tokens (0: one block) a continuation takes."""
    return -(-length // block_length) if block_length else 1


class OrderedProcess(MaskedProcess):
    """Masked diffusion whose steps decide the masked positions the model is surest of.

    - `confidence` (LLaDA's low-confidence remasking, Dream's maskgit_plus): the probability
      of the token the position would draw;
    - `margin` (Dream's topk_margin): the top probability minus the second;
    - `entropy` (Dream's entropy): minus the entropy of the position's distribution.

    With `block_length` the continuation is decided in blocks from left to right (LLaDA's
    semi-autoregressive sampling): the steps are shared equally between blocks, and a step
    chooses among the masked positions up to its block's end. A step of block-local times
    t > s decides ceil(m (1 - s / t)) of the m masked positions there: the last of a block's
    steps decides all that are left (and every step at least one), and with steps a multiple
    of the blocks that is LLaDA's own count (masks split evenly over the block's steps, the
    remainder first).

    Tokens are drawn from the (projected) prediction with the position's uniform, the same
    draw whose probability ranked it, so an unconstrained step decides exactly the token it
    ranked; temperature 1 where LLaDA and Dream default to 0 (their argmax writes the same
    text for every sample of a prompt).
    """

    name = "ordered"

    def __init__(
        self,
        vocab_size: int,
        mask_id: int,
        order: str = "confidence",
        block_length: int = 0,
        schedule: LogLinearSchedule | None = None,
        temperature_top_p: TemperatureTopP | None = None,
    ):
        if order not in ORDERS:
            raise ValueError(f"order {order!r} is not one of {', '.join(ORDERS)}")
        super().__init__(vocab_size, mask_id, schedule, temperature_top_p)
        self.order = order
        self.block_length = block_length

    def timesteps(self, steps: int) -> torch.Tensor:
        return torch.linspace(1.0, 0.0, steps + 1)

    def scores(self, x0_probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        """[N] how sure the model is at N positions' distributions [N, V] (higher: surer)."""
        if self.order == "confidence":
            # As `step` draws.
            drawn = sample_categorical(self.temperature_top_p(x0_probs), uniforms)
            return x0_probs.gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
        if self.order == "margin":
            top = x0_probs.topk(2, dim=-1).values
            return top[:, 0] - top[:, 1]
        return (x0_probs * x0_probs.clamp_min(1e-30).log()).sum(-1)

    def changing(
        self,
        x_t: torch.Tensor,
        t: float,
        s: float,
        uniforms: torch.Tensor,
        x0_probs: torch.Tensor | None = None,
        start: int = 0,
    ) -> torch.Tensor:
        if x0_probs is None:
            raise ValueError("an ordered sampler ranks positions by the prediction")
        uniforms = uniforms.to(x_t.device)
        masked = x_t == self.mask_id
        length = x_t.shape[1] - start
        blocks = block_count(length, self.block_length)
        width = self.block_length or length
        # The block: the leftmost that still has a masked position (in any sample: blocks
        # advance together); its share of the time, [low, low + 1 / blocks], as [0, 1].
        left_of = masked[:, start:].any(0).nonzero()
        block = min(int(left_of[0]) // width, blocks - 1) if len(left_of) else blocks - 1
        low = 1.0 - (block + 1) / blocks
        t_in = min(max((t - low) * blocks, 0.0), 1.0)
        s_in = min(max((s - low) * blocks, 0.0), 1.0)
        end = start + min((block + 1) * width, length)
        candidates = masked.clone()
        candidates[:, end:] = False
        left = candidates.sum(1)
        # Past its time (t_in 0: the last of the block's steps) a block decides all it has
        # left; every step decides at least one position while the block has any.
        share = 1.0 if t_in <= 0 else 1.0 - s_in / t_in
        count = torch.maximum((left * share).ceil().long(), (left > 0).long())
        score = torch.full(x_t.shape, -torch.inf, device=x_t.device)
        score[candidates] = self.scores(x0_probs[candidates].float(), uniforms[candidates])
        order = score.argsort(dim=1, descending=True, stable=True)
        rank = torch.empty_like(order).scatter_(
            1, order, torch.arange(x_t.shape[1], device=x_t.device).expand_as(order)
        )
        return candidates & (rank < count.unsqueeze(1))

    def step(
        self,
        x0_probs: torch.Tensor,
        x_t: torch.Tensor,
        t: float,
        s: float,
        uniforms: torch.Tensor,
        changing: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if changing is None:
            changing = self.changing(x_t, t, s, uniforms, x0_probs)
        x_s = x_t.clone()
        u = uniforms.to(x_t.device)[changing]
        x_s[changing] = sample_categorical(self.temperature_top_p(x0_probs[changing]), u)
        return x_s


class UniformProcess:
    """Uniform-noise diffusion (UDLM: Schiff et al. 2025, arXiv 2412.10193): every token may
    change at every step. Its reverse step is the posterior of the uniform forward process
    given the prediction (`posterior`), named by what it says, not by equation number (not
    checked here against the paper's text); DESIGN.md §2 states it."""

    name = "uniform"
    keeps_decided = False  # every token may change at every step
    removal_passes = 8  # argmax passes of the noise removal, until the sequence stops changing

    def __init__(
        self,
        vocab_size: int,
        schedule: LogLinearSchedule | None = None,
        temperature_top_p: TemperatureTopP | None = None,
    ):
        self.vocab_size = vocab_size
        self.schedule = schedule or LogLinearSchedule()
        self.temperature_top_p = temperature_top_p or TemperatureTopP()

    def timesteps(self, steps: int) -> torch.Tensor:
        # The last interval is never drawn: the noise removal reads x at times[-2].
        return torch.linspace(1.0, 0.0, steps + 1)

    def prior(self, length: int, generator: torch.Generator) -> torch.Tensor:
        return torch.randint(self.vocab_size, (length,), generator=generator)

    def predicted(self, x_t: torch.Tensor) -> None:
        """Every position's prediction matters: any token may change."""
        return None

    def x0_probs(
        self, logits: torch.Tensor, x_t: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The softmax of every position's logits (a fresh tensor: `out` is not needed at
        the sizes of the vocabularies uniform noise is used with)."""
        return logits.float().softmax(-1)

    def posterior(
        self, x0_probs: torch.Tensor, x_t: torch.Tensor, t: float, s: float
    ) -> torch.Tensor:
        """UDLM's reverse step: q(x_s | x_t, x_0) with x_0 replaced by its predicted
        distribution x, a_t and a_s the signal levels and N the vocabulary size,

            q(x_s | x_t, x) = [a_t N x * e_xt + (a_t / a_s - a_t) e_xt + (a_s - a_t) x
                               + (1 - a_t / a_s)(1 - a_s) / N] / [a_t N x[x_t] + 1 - a_t]

        (e_xt: the one-hot of x_t); rows sum to 1."""
        a_t = self.schedule.alpha(torch.tensor(t)).item()
        a_s = self.schedule.alpha(torch.tensor(s)).item()
        n = self.vocab_size
        x = x0_probs
        x_at_xt = x.gather(-1, x_t.unsqueeze(-1))  # [B, L, 1]
        numerator = (a_s - a_t) * x + (1 - a_t / a_s) * (1 - a_s) / n
        at_xt = a_t * n * x_at_xt + (a_t / a_s - a_t)
        numerator = numerator.scatter_add(-1, x_t.unsqueeze(-1), at_xt)
        return numerator / (a_t * n * x_at_xt + 1 - a_t)

    def changing(
        self,
        x_t: torch.Tensor,
        t: float,
        s: float,
        uniforms: torch.Tensor,
        x0_probs: torch.Tensor | None = None,
        start: int = 0,
    ) -> torch.Tensor:
        """[B, L] positions a step may change: all of them, under uniform noise."""
        return torch.ones_like(x_t, dtype=torch.bool)

    def step(
        self,
        x0_probs: torch.Tensor,
        x_t: torch.Tensor,
        t: float,
        s: float,
        uniforms: torch.Tensor,
        changing: torch.Tensor | None = None,
    ) -> torch.Tensor:
        shaped = self.temperature_top_p(x0_probs)  # every position draws: the whole prediction
        if shaped is not x0_probs:
            shaped = shaped / shaped.sum(-1, keepdim=True)  # the posterior wants a distribution
        return sample_categorical(self.posterior(shaped, x_t, t, s), uniforms)

    def finish(self, x0_probs: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # Noise removal: the last prediction's argmax.
        return x0_probs.argmax(-1)

    def is_final(self, x: torch.Tensor) -> bool:
        return False

    def fixed_positions(self, x_t: torch.Tensor) -> torch.Tensor:
        """Positions the next step cannot change: none, under uniform noise."""
        return torch.zeros_like(x_t, dtype=torch.bool)


SAMPLERS = ("ancestral", *ORDERS)


class KeptFixed:
    """The positions a step of `process` cannot change, the `kept` ones [N, L] (a canvas's:
    N one, shared by the batch, or the rows it is asked about) among them: what the
    projection stages may not touch."""

    def __init__(self, process: MaskedProcess | UniformProcess, kept: torch.Tensor):
        self.process = process
        # On the batch's device (asked once here, not at every step).
        self.kept = kept if bool(kept.any()) else None

    def __call__(self, x_t: torch.Tensor) -> torch.Tensor:
        fixed = self.process.fixed_positions(x_t)
        if self.kept is not None:
            fixed |= self.kept
        return fixed


def make_process(
    noise: str,
    vocab_size: int,
    mask_id: int,
    sampler: str = "ancestral",
    block_length: int = 0,
    temperature_top_p: TemperatureTopP | None = None,
) -> MaskedProcess | UniformProcess:
    """The reverse process of a model's noise, with `sampler` (ancestral, or an order of
    OrderedProcess) choosing which masked positions each step decides, drawing with
    `temperature_top_p`."""
    if noise == "masked":
        if sampler != "ancestral":
            return OrderedProcess(
                vocab_size, mask_id, sampler, block_length, temperature_top_p=temperature_top_p
            )
        return MaskedProcess(vocab_size, mask_id, temperature_top_p=temperature_top_p)
    return UniformProcess(vocab_size, temperature_top_p=temperature_top_p)
