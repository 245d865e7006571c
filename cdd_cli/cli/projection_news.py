"""What the projection did in the pass at hand, in a user's words: the words of a progress
display's projection row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdd_cli.projection import stages

if TYPE_CHECKING:
    from cdd_cli.projection.alm import ALMProgress
    from cdd_cli.projection.engine import StageProgress


# The engine's stages a display names, in a user's words (the closed forms act at every step
# and at once: no news).
STAGE_WORDS = {
    stages.FinalJudges.name: "judges",
    stages.LinearisedLadder.name: "linearised ladder",
    stages.LookAhead.name: "look-ahead",
    stages.ALM.name: "ALM",
    stages.RedrawAfterALM.name: "redraw after the ALM",
    stages.FlipSearch.name: "flip search",
}


class ProjectionNews:
    """What the projection did in the pass at hand, as a display tells it: the stage at work
    now, the ALM's latest round, and what the other stages did so far."""

    def __init__(self) -> None:
        self.active: StageProgress | None = None  # the stage running now
        self.redrawn = 0  # look-ahead: decisions redrawn given acceptability
        self.after_alm = 0  # samples whose decision was redrawn after the ALM
        self.accepted: tuple[int, int] | None = None  # final prediction: judges accept a of b
        self.laddered = 0  # samples the linearised ladder tried
        self.searched = 0  # samples the flip search worked on
        self.alm: ALMProgress | None = None  # the ALM's latest outer iteration

    def heard(self, p: StageProgress) -> None:
        if not p.ended:
            self.active = p
            return
        self.active = None
        if p.stage == stages.LookAhead.name:
            self.redrawn += p.touched
        elif p.stage == stages.RedrawAfterALM.name:
            self.after_alm += p.touched
        elif p.stage == stages.FinalJudges.name:
            self.accepted = (p.settled, p.samples)
        elif p.stage == stages.LinearisedLadder.name:
            self.laddered += p.touched
        elif p.stage == stages.FlipSearch.name:
            self.searched += p.touched

    def text(self, verbose: bool) -> str:
        # Most telling first: a narrow terminal cuts the end off.
        parts, alm = [], None
        if self.alm is not None:
            p = self.alm
            alm = (
                f"round {p.outer}/{p.max_outer} × {p.inner} inner steps, "
                f"{p.violating} of {p.samples} still outside"
            )
            if verbose:
                alm += (
                    f", λ [{p.lam_range[0]:.3g}, {p.lam_range[1]:.3g}]"
                    f", μ [{p.mu_range[0]:.3g}, {p.mu_range[1]:.3g}]"
                )
        active = self.active
        if active is not None:
            final = active.step >= active.steps
            where = "the final step" if final else f"step {active.step + 1}"
            parts.append(f"{STAGE_WORDS[active.stage]} at {where}")
            if active.stage == stages.ALM.name and alm is not None:
                parts[-1] += f": {alm}"
                alm = None
        if self.accepted is not None:
            parts.append(f"judges accept {self.accepted[0]}/{self.accepted[1]}")
        if self.redrawn:
            parts.append(f"look-ahead redrew {self.redrawn}")
        if alm is not None:
            parts.append(f"ALM {alm}")
        if self.after_alm:
            parts.append(f"{self.after_alm} redrawn after the ALM")
        if self.laddered:
            parts.append(f"ladder tried {self.laddered}")
        if self.searched:
            parts.append(f"flip search on {self.searched}")
        return "; ".join(parts)
