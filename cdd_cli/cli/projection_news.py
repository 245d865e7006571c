"""What the projection did in the pass at hand, in a user's words: the words of a progress
display's projection row."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class Clause:
    """A piece of a row's words: in full, abbreviated (the same values, fewer words), how
    telling it is (0 most: where a row is narrow, the least telling go first) and what joins
    it to the piece before it."""

    full: str
    short: str
    rank: int
    joint: str = "; "


# Joints from the strongest: where clauses are left out, the kept ones beside the gap join
# with the strongest joint in it ("A: B, C; D" without B and C is "A; D").
JOINTS = ("; ", ": ", ", ", " ")


def joined(clauses: list[Clause]) -> str:
    """The clauses as one text, those with no words left out (see JOINTS)."""
    text, gap = "", []
    for clause in clauses:
        gap.append(clause.joint)
        if clause.full:
            joint = min(gap, key=lambda j: JOINTS.index(j) if j in JOINTS else len(JOINTS))
            text += (joint if text else "") + clause.full
            gap = []
    return text


def fittings(clauses: list[Clause]) -> list[str]:
    """A row's words from longest to shortest, each whole (a narrow terminal shows the
    longest that fits, never one cut mid-value): every clause in full, then abbreviated one
    by one from the least telling on, then the least telling left out one by one, down to
    the most telling one."""
    order = sorted(range(len(clauses)), key=lambda i: (clauses[i].rank, i), reverse=True)
    now = list(clauses)
    forms = [joined(now)]
    for index in order:
        now[index] = Clause(clauses[index].short, clauses[index].short, 0, clauses[index].joint)
        forms.append(joined(now))
    for index in order[:-1]:
        now[index] = Clause("", "", 0, clauses[index].joint)
        forms.append(joined(now))
    return [form for i, form in enumerate(forms) if form and form not in forms[:i]]


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
        return joined(self.clauses(verbose))

    def clauses(self, verbose: bool) -> list[Clause]:
        """What the row says, most telling first (the stage at work and the samples the ALM
        leaves outside; the ALM's round, which the row's count shows too, and its
        multipliers, least)."""
        parts: list[Clause] = []
        alm: list[Clause] = []
        if self.alm is not None:
            p = self.alm
            alm = [
                Clause(f"round {p.outer}/{p.max_outer} × {p.inner} inner steps",
                       f"round {p.outer}/{p.max_outer}", 4, " "),
                Clause(f"{p.violating} of {p.samples} still outside",
                       f"{p.violating}/{p.samples} outside", 1, ", "),
            ]  # fmt: skip
            if verbose:
                multipliers = (
                    f"λ [{p.lam_range[0]:.3g}, {p.lam_range[1]:.3g}]"
                    f", μ [{p.mu_range[0]:.3g}, {p.mu_range[1]:.3g}]"
                )
                alm.append(Clause(multipliers, multipliers, 5, ", "))
        active = self.active
        if active is not None:
            final = active.step >= active.steps
            word = STAGE_WORDS[active.stage]
            where = "the final step" if final else f"step {active.step + 1}"
            short = "final step" if final else f"step {active.step + 1}"
            # Where it works tells less than what it did: the denoising row's count says it.
            parts += [Clause(word, word, 0), Clause(where, short, 3, " at ")]
            if active.stage == stages.ALM.name and alm:
                parts += [Clause(alm[0].full, alm[0].short, alm[0].rank, ": "), *alm[1:]]
                alm = []
        if self.accepted is not None:
            accepted = f"{self.accepted[0]}/{self.accepted[1]}"
            parts.append(Clause(f"judges accept {accepted}", f"accept {accepted}", 2))
        if self.redrawn:
            parts.append(Clause(f"look-ahead redrew {self.redrawn}",
                                f"look-ahead {self.redrawn}", 3))  # fmt: skip
        if alm:  # the ALM ended (another stage works now): one clause, abbreviated to its news
            rounds, outside, *multipliers = alm
            news = f"ALM {rounds.full}, {outside.full}"
            parts += [Clause(news, f"ALM: {outside.short}", 2), *multipliers]
        if self.after_alm:
            parts.append(Clause(f"{self.after_alm} redrawn after the ALM",
                                f"{self.after_alm} redrawn after ALM", 3))  # fmt: skip
        if self.laddered:
            parts.append(Clause(f"ladder tried {self.laddered}", f"ladder {self.laddered}", 3))
        if self.searched:
            parts.append(Clause(f"flip search on {self.searched}",
                                f"flip search {self.searched}", 3))  # fmt: skip
        return parts
