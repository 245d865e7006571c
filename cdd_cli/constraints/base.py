"""What every constraint is: a threshold and an exact judge, plus a way to be projected.

Constraint i holds when its exact score g_i(text) is on the right side of tau_i; records are
certified by the *judge*, which reads decoded text. Two kinds, by how they are projected:

- `DifferentiableConstraint`: a *surrogate* reads soft tokens [B, L, V]; the ALM projection
  optimises its violation max(0, g - tau) (or max(0, tau - g) for a lower bound).
- `ExactConstraint`: not differentiable (novelty, lexical); projected by a search that asks
  the judge directly.

A family may also bring a *closed-form* projection (`closed_form()`: the lexical family's word
layout): one object built for all of a job's constraints that name the same builder, which the
engine applies to the prediction at every step (`ClosedFormProjection`).

Neither the sampler nor the projection knows which constraint it serves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from cdd_cli.errors import InputError

if TYPE_CHECKING:
    from cdd_cli.models.surrogate import Tokens


class ClosedFormProjection(Protocol):
    """A family's closed-form projection of the prediction p(x_0 | x_t) [B, L, V]."""

    def plan(
        self,
        probs: torch.Tensor,
        x: torch.Tensor,
        fixed: torch.Tensor,
        generators: Sequence[torch.Generator],
    ) -> list:
        """Per sample, what this step's projection is (drawn with the sample's generator)."""

    def apply(self, probs: torch.Tensor, plans: list, fixed: torch.Tensor) -> torch.Tensor:
        """`probs` projected by `plans`; positions `fixed` [B, L] are left as they are."""

    def order(self, plans: list, changing: torch.Tensor, fixed: torch.Tensor) -> None:
        """May edit `changing` [B, L] in place: which masked positions this step decides."""


@runtime_checkable
class WeighedClosedForm(ClosedFormProjection, Protocol):
    """A closed form that can weigh the matches that follow a decision (a pattern's layout):
    what `projection.lookahead` needs to draw a masked step's decision in proportion to the
    matches under the model's next prediction. Its continuation is positions
    `start` .. `start + length`."""

    start: int
    length: int

    def candidates(
        self,
        probs: torch.Tensor,
        x: torch.Tensor,
        fixed: torch.Tensor,
        count: int,
        generator: torch.Generator,
    ) -> tuple[list, torch.Tensor]:
        """`count` plans for one sample (`probs` [L, V]) and the masses they were drawn by."""

    def rows_along(self, probs: torch.Tensor, plans: list, positions: torch.Tensor) -> torch.Tensor:
        """[K, N, V] one sample's rows at `positions` [N], kept to each of the K plans."""

    def log_weight(self, probs: torch.Tensor, x: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        """[B] the log mass `probs` [B, L, V] gives the matches that fit the decided tokens."""

    def log_weight_of(
        self, mass: torch.Tensor, x: torch.Tensor, decided: torch.Tensor
    ) -> torch.Tensor:
        """[K] `log_weight` of K sequences `x` [K, L] under the masses of `candidates`."""


# Called with the constraints that share it, the tokenizer, the first continuation position and
# the continuation's length; raises InputError where no output can satisfy them. A builder may
# also be a `ServingBuilder` and a `FullLayoutBuilder` (a plugin's builder need be neither).
ClosedFormBuilder = Callable[[list, Any, int, int], ClosedFormProjection]


@runtime_checkable
class ServingBuilder(Protocol):
    """A builder whose projection also serves constraints of other families (a pattern's path
    bans the tokens that spell an excluded word): it takes those it `serves` into its group."""

    def serves(self, constraint: Constraint) -> bool: ...


@runtime_checkable
class FullLayoutBuilder(Protocol):
    """A builder whose projection gives every position of the continuation a role when
    `lays_out_every_position` is true: two such projections would undo each other."""

    lays_out_every_position: bool


@dataclass(frozen=True)
class Constraint(ABC):
    tau: float
    # The surrogate aims `margin` inside the bound (tau - margin for an upper bound), so that
    # surrogate error is less likely to leave the judge unsatisfied; repairs tighten it.
    margin: float = 0.0

    name: str = "constraint"
    judge_name: str = "judge"
    upper_bound: bool = True  # satisfied when score <= tau (False: score >= tau)
    # The fixed prompt of the samples at hand: judges read the continuation text; soft tokens
    # [B, L, V] cover prompt and continuation, the prompt in the first `prompt_length` rows.
    prompt: str = ""
    prompt_length: int = 0

    @abstractmethod
    def judge(self, texts: list[str]) -> list[float | None]:
        """Exact score per decoded text; None when it cannot be scored (always a violation)."""

    def satisfied(self, value: float | None) -> bool:
        if value is None:
            return False
        return value <= self.tau if self.upper_bound else value >= self.tau

    # How far one repair redraw moves the surrogate's aim, per unit of `repair.margin_step`
    # (the score's natural scale: 1 SA unit; a class constant, not a field).
    repair_unit = 1.0

    def tightened(self, extra_margin: float) -> Constraint:
        return replace(self, margin=self.margin + extra_margin)

    def with_prompt(self, prompt: str, prompt_length: int) -> Constraint:
        return replace(self, prompt=prompt, prompt_length=prompt_length)

    def label(self) -> str:
        return f"{self.name} {'<=' if self.upper_bound else '>='} {self.tau:g}"

    def explain(self, text: str) -> str | None:
        """Why the judge says what it says, in words, where a number alone does not tell."""
        return None

    def remember(self, texts: list[str]) -> None:
        """Told the final, accepted outputs (novelty keeps them; most constraints need not)."""
        return None

    def for_run(self) -> Constraint:
        """This constraint with nothing remembered: one built once serves many runs (a
        `cdd.Generator`), each judged against its own outputs only."""
        return self

    def closed_form(self) -> ClosedFormBuilder | None:
        """The builder of this family's closed-form projection, if it has one."""
        return None


class DifferentiableConstraint(Constraint):
    @abstractmethod
    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        """Differentiable score per sample [B] from token ids [B, L] (a one-hot reading),
        probabilities [B, L, V] or probabilities over a support (`SparseTokens`)."""

    def surrogate_excess(self, score: torch.Tensor) -> torch.Tensor:
        """How far `score` is past the surrogate's aim (negative: that far inside)."""
        if self.upper_bound:
            return score - (self.tau - self.margin)
        return (self.tau + self.margin) - score

    def surrogate_violation(self, score: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.surrogate_excess(score))


class ExactConstraint(Constraint):
    """Projected by search over the decoded text: `accepts(text)` must be cheap."""

    def accepts(self, text: str) -> bool:
        return self.satisfied(self.judge([text])[0])


def closed_forms(
    constraints: Sequence[Constraint], tokenizer: Any, start: int, length: int
) -> list[ClosedFormProjection]:
    """One closed-form projection per builder that some of `constraints` name, built for all
    of them at once (InputError where no continuation of `length` tokens after `start` can
    satisfy them)."""
    groups: dict[ClosedFormBuilder, list[Constraint]] = {}
    for c in constraints:
        builder = c.closed_form()
        if builder is not None:
            groups.setdefault(builder, []).append(c)
    # A builder may serve another family's constraints in its own projection (`serves`: a
    # pattern's path bans the tokens that spell an excluded word) and then takes them.
    for builder in list(groups):
        if not isinstance(builder, ServingBuilder):
            continue
        for other in [o for o in groups if o is not builder]:
            groups[builder] += [c for c in groups[other] if builder.serves(c)]
            groups[other] = [c for c in groups[other] if not builder.serves(c)]
            if not groups[other]:
                del groups[other]
    # Two projections that each give every position its role would undo each other.
    laying = [
        g
        for b, g in groups.items()
        if isinstance(b, FullLayoutBuilder) and b.lays_out_every_position
    ]
    if len(laying) > 1:
        names = [", ".join(dict.fromkeys(c.name for c in g)) for g in laying]
        raise InputError(
            f"{' and '.join(names)} cannot be combined: each lays out every position of the "
            "continuation"
        )
    return [builder(group, tokenizer, start, length) for builder, group in groups.items()]
