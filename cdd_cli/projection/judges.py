"""The exact verdicts on decoded sequences that the stages ask for (`Judges`).

A judge reads decoded text, never a tensor: each verdict costs a trip to the host, and each
such place is listed with its reason in tests/projection/test_host_syncs.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from cdd_cli.constraints.base import Constraint, DifferentiableConstraint, ExactConstraint


class Judges:
    """The exact verdicts on decoded sequences that the stages ask for."""

    def __init__(
        self,
        constraints: Sequence[Constraint],
        decode: Callable[[list[int]], str],
        fixed_positions: Callable[[torch.Tensor], torch.Tensor],
        readable: Callable[[list[int]], bool] | None = None,
    ):
        exact = [c for c in constraints if isinstance(c, ExactConstraint)]
        # Cheap exact checks first; any other judge only sees what they accept.
        self.order = exact + [c for c in constraints if c not in exact]
        self.differentiable = [c for c in constraints if isinstance(c, DifferentiableConstraint)]
        self.decode = decode
        self.fixed_positions = fixed_positions
        # Where the language has a syntax: a sequence it cannot read is rejected unjudged
        # (no judge of a molecule accepts what RDKit cannot parse; the flip search's
        # candidates were 71% unreadable at SA tau 3.0-4.0, each 0.2 ms of RDKit to refuse).
        self.readable = readable

    def accept(self, ids: list[int]) -> bool:
        return self.accept_all([ids])[0]

    def accept_all(self, sequences: list[list[int]]) -> list[bool]:
        """Whether every judge accepts each sequence; each judge reads, in one call, only the
        texts the judges before it accepted."""
        ok = [True] * len(sequences)
        if self.readable is not None:
            ok = [self.readable(ids) for ids in sequences]
        texts = [self.decode(ids) if good else "" for ids, good in zip(sequences, ok, strict=True)]
        for c in self.order:
            pending = [k for k, good in enumerate(ok) if good]
            if not pending:
                break
            if isinstance(c, ExactConstraint):
                verdicts = [c.accepts(texts[k]) for k in pending]
            else:
                verdicts = [c.satisfied(v) for v in c.judge([texts[k] for k in pending])]
            for k, verdict in zip(pending, verdicts, strict=True):
                ok[k] = verdict
        return ok

    def unacceptable(self, texts: list[str]) -> torch.Tensor:
        """[len(texts)] texts some differentiable constraint's judge rejects, aiming as far
        inside as the surrogates do (a text a judge cannot read counts as rejected)."""
        bad = torch.zeros(len(texts), dtype=torch.bool)
        for c in self.differentiable:
            values = c.judge(texts)
            scores = torch.tensor([torch.nan if v is None else v for v in values])
            bad |= scores.isnan() | (c.surrogate_violation(scores) > 0)
        return bad

    def decided_text(self, ids: torch.Tensor) -> str:
        """The text of the decided tokens of one sequence [L], undecided positions left out."""
        return self.decode(ids[self.fixed_positions(ids[None])[0]].tolist())
