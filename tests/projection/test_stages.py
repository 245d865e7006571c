"""The engine's stages one at a time, on hand-built steps: a five-token language ("abcd" and a
mask "_"), a judge that counts a letter (with a surrogate) and one that bans a word (exact), a
clock that moves only when a judge or a test says so."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from cdd_cli.constraints.base import DifferentiableConstraint, ExactConstraint
from cdd_cli.diffusion.processes import make_argmax
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.models.surrogate import Tokens, token_mass
from cdd_cli.projection import linearized
from cdd_cli.projection import step as step_module
from cdd_cli.projection.alm import ProjectionResult
from cdd_cli.projection.judges import Judges
from cdd_cli.projection.stages import alm as alm_stage
from cdd_cli.projection.stages import closed_forms as closed_form_stages
from cdd_cli.projection.stages import final as final_stages
from cdd_cli.projection.stages import flip_search as flip_search_stage
from cdd_cli.projection.stages import redraws as redraw_stages
from cdd_cli.projection.stages.alm import ALM
from cdd_cli.projection.stages.closed_forms import ClosedForms, KeepClosedForms
from cdd_cli.projection.stages.final import FinalJudges, LinearisedLadder
from cdd_cli.projection.stages.flip_search import FlipSearch
from cdd_cli.projection.stages.redraws import LookAhead, RedrawAfterALM, Redraws
from cdd_cli.projection.step import Accounts, Step
from cdd_cli.settings import SearchSettings
from tests.projection.test_projection import explicit

LETTERS = "abcd_"
A, B, C, D, MASK = range(5)
V = len(LETTERS)


def decode(ids: list[int]) -> str:
    return "".join(LETTERS[i] for i in ids)


def decided(x: torch.Tensor) -> torch.Tensor:
    return x != MASK


class Clock:
    """Stands in for `time`: it reads `now`, which moves only when a judge or a test says."""

    def __init__(self, start: float = 1000.0):
        self.now = start

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    # Every module of the stages that reads the time, the accounts' among them.
    for module in (step_module, closed_form_stages, final_stages, redraw_stages, flip_search_stage):
        monkeypatch.setattr(module, "time", fake)
    monkeypatch.setattr(linearized, "time", fake)
    return fake


@dataclass(frozen=True)
class AtMost(DifferentiableConstraint):
    """At most tau of `letter`; the surrogate counts its token's mass. Each call of the judge
    takes `seconds` on `clock` and is logged in `texts`."""

    letter: str = "a"
    clock: Clock | None = field(default=None, compare=False)
    seconds: float = 1.0
    texts: list = field(default_factory=list, compare=False)

    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        return token_mass(soft_tokens, LETTERS.index(self.letter)).sum(-1)

    def judge(self, texts: list[str]) -> list[float | None]:
        self.texts.append(list(texts))
        if self.clock is not None:
            self.clock.now += self.seconds
        return [float(t.count(self.letter)) for t in texts]


@dataclass(frozen=True)
class Lacks(ExactConstraint):
    """Text without `word` (satisfied at 1, the judge's score of a text without it). Each
    call takes `seconds` on `clock` and is logged in `texts`."""

    tau: float = 1.0
    upper_bound: bool = False
    word: str = "bb"
    clock: Clock | None = field(default=None, compare=False)
    seconds: float = 1.0
    texts: list = field(default_factory=list, compare=False)

    def judge(self, texts: list[str]) -> list[float | None]:
        self.texts.append(list(texts))
        if self.clock is not None:
            self.clock.now += self.seconds
        return [0.0 if self.word in t else 1.0 for t in texts]


def judges(*constraints) -> Judges:
    return Judges(list(constraints), decode, decided)


def rows(*texts: str, sharp: float = 0.6) -> torch.Tensor:
    """Probabilities [B, L, V] whose argmax spells each text (a mask letter: uniform)."""
    out = torch.full((len(texts), len(texts[0]), V), (1 - sharp) / (V - 1))
    for i, text in enumerate(texts):
        for j, letter in enumerate(text):
            if letter == "_":
                out[i, j] = 1 / V
            else:
                out[i, j, LETTERS.index(letter)] = sharp
    return out


def ids(*texts: str) -> torch.Tensor:
    return torch.tensor([[LETTERS.index(c) for c in t] for t in texts])


def make_step(probs, x, *, final=False, changing=None, decide=None, settled=None) -> Step:
    info = StepInfo(4 if final else 2, 4, 0.5, 0.25, changing, decide)
    n = len(probs)
    settled = torch.zeros(n, dtype=torch.bool) if settled is None else torch.tensor(settled)
    return Step(probs, x, info, decided(x), [False] * n, settled)


def test_a_text_any_judge_rejects_is_unacceptable():
    check = judges(AtMost(tau=0.0, letter="a"), AtMost(tau=0.0, letter="b"), Lacks(word="cc"))
    assert check.unacceptable(["a", "b", "c", "ab", "cc"]).tolist() == [
        True,
        True,
        False,
        True,
        False,  # only the exact judge rejects it: not the differentiable constraints' call
    ]


class Layout:
    """A closed form that logs its calls: its plans are ("plan", n), its projection adds 1 to
    the probabilities, its order marks position 0 as changing. Planning takes 3 s."""

    def __init__(self, clock: Clock):
        self.clock, self.calls, self.n = clock, [], 0

    def plan(self, probs, x, fixed, generators):
        self.clock.now += 3.0
        self.n += 1
        plans = ["plan", self.n]
        self.calls.append(("plan", probs, x, fixed, generators, plans))
        return plans

    def apply(self, probs, plans, fixed):
        self.calls.append(("apply", probs, plans, fixed))
        return probs + 1.0

    def order(self, plans, changing, fixed):
        self.calls.append(("order", plans, changing, fixed))
        changing[:, 0] = True


def test_closed_forms_plan_apply_and_order_in_turn(clock: Clock):
    first, second = Layout(clock), Layout(clock)
    stage = ClosedForms([first, second], generators=["g0", "g1"])
    probs, x = rows("ab", "cd"), ids("a_", "__")
    changing = torch.tensor([[False, True], [False, False]])
    step = make_step(probs, x, changing=changing)
    accounts = Accounts(2)
    assert stage.due(step) and not ClosedForms([], []).due(step)
    stage.run(step, accounts)
    plan, apply, order = first.calls
    assert plan[1] is probs and plan[2] is x and plan[3] is step.fixed
    assert plan[4] == ["g0", "g1"] and plan[5] == ["plan", 1]
    assert apply[1] is probs and apply[2] is plan[5] and apply[3] is step.fixed
    assert order[1] is plan[5] and order[2] is changing and order[3] is step.fixed
    assert second.calls[0][1] is not probs  # the second plans on what the first projected
    assert torch.equal(second.calls[0][1], probs + 1)
    assert torch.equal(step.probs, probs + 2)
    assert step.plans == {0: ["plan", 1], 1: ["plan", 1]}
    assert changing[:, 0].all()
    assert step.touched == [True, True]
    assert accounts.seconds == [3.0, 3.0]  # two plans of 3 s, shared by both samples


def test_closed_forms_leave_the_order_alone_where_every_token_may_change(clock: Clock):
    layout = Layout(clock)
    step = make_step(rows("ab"), ids("ab"), final=True)
    ClosedForms([layout], generators=[]).run(step, Accounts(1))
    assert [call[0] for call in layout.calls] == ["plan", "apply"]


def test_closed_forms_kept_after_the_alm_on_what_it_was_free_to_move(clock: Clock):
    layout = Layout(clock)
    closed = ClosedForms([layout], generators=[])
    keep = KeepClosedForms(closed)
    probs, x = rows("ab", "cd"), ids("a_", "__")
    step = make_step(probs, x, settled=[False, True])
    assert not keep.due(step)  # nothing projected yet
    step.projected = torch.tensor([True, False])
    step.plans = {0: ["kept"]}
    assert keep.due(step) and not KeepClosedForms(ClosedForms([], [])).due(step)
    keep.run(step, Accounts(2))
    ((_, seen, plans, frozen),) = layout.calls
    assert seen is probs and plans == ["kept"]
    assert frozen.tolist() == [[True, False], [True, True]]
    assert torch.equal(step.probs, probs + 1)


def test_final_judges_read_decided_tokens_as_they_are_and_settle_what_they_accept(
    clock: Clock,
):
    # Sample 0 decided an "a" at position 0, which its prediction no longer favours; sample
    # 1's prediction reads "ab" and it was settled earlier; sample 2 reads "cb".
    count = AtMost(tau=0.0, clock=clock, seconds=6.0)
    stage = FinalJudges(judges(count))
    step = make_step(rows("cb", "ab", "cb"), ids("a_", "__", "__"), final=True)
    step.settled[1] = True
    accounts = Accounts(3)
    assert stage.due(step)
    assert not stage.due(make_step(rows("cb"), ids("__")))
    stage.run(step, accounts)
    assert step.argmax.tolist() == ids("ab", "ab", "cb").tolist()
    assert count.texts == [["ab", "ab", "cb"]]
    assert step.accepted.tolist() == [False, False, True]
    assert step.settled.tolist() == [False, True, True]
    assert accounts.seconds == [2.0, 2.0, 2.0]


def test_the_ladder_is_due_at_the_final_prediction_for_surrogates_only():
    ladder = LinearisedLadder(judges(AtMost(tau=0.0)), 0, None)
    exact_only = LinearisedLadder(judges(Lacks()), 0, None)
    final = make_step(rows("ab"), ids("ab"), final=True)
    assert not ladder.due(final)  # the final judges have not spoken
    final.accepted = torch.tensor([False])
    assert ladder.due(final)
    assert not exact_only.due(final)
    earlier = make_step(rows("ab"), ids("ab"))
    earlier.accepted = torch.tensor([False])
    assert not ladder.due(earlier)


def test_the_ladder_settles_what_a_surrogates_judge_rejects(clock: Clock):
    # Sample 0 is accepted; sample 1 only the exact judge rejects ("bbc"); sample 2 has two
    # "a" where one is allowed: its first flips to "c" (the runner-up, nearer than at 1).
    probs = rows("cab", "bbc", "aab")
    probs[2, 0] = torch.tensor([0.5, 0.05, 0.3, 0.1, 0.05])
    probs[2, 1] = torch.tensor([0.6, 0.05, 0.2, 0.1, 0.05])
    count = AtMost(tau=1.0, clock=clock, seconds=1.0)
    check = judges(Lacks(), count)
    spreads: list[torch.Tensor] = []

    def well_formed(spread: torch.Tensor) -> torch.Tensor:
        spreads.append(spread)
        return spread

    ladder = LinearisedLadder(check, 0, well_formed)
    step = make_step(probs, ids("___", "___", "___"), final=True)
    step.argmax = probs.argmax(-1)
    step.accepted = torch.tensor([True, False, False])
    accounts = Accounts(3)
    accounts.seconds = [100.0, 200.0, 300.0]
    accounts.nodes = [1, 2, 3]
    started = clock.now
    ladder.run(step, accounts)
    assert count.texts[0] == ["bbc", "aab"]  # which rejected ones a surrogate's judge rejects
    assert [t for texts in count.texts[1:] for t in texts] == ["cab"]
    assert len(spreads) == 1
    assert step.probs[2].argmax(-1).tolist() == ids("cab")[0].tolist()
    assert step.accepted.tolist() == [True, False, True]
    assert step.settled.tolist() == [False, False, True]
    assert step.touched == [False, False, True]
    assert accounts.nodes == [1, 2, 4]
    # The first verdicts (1 s) are shared by the two rejected samples; the rest is sample 2's.
    assert accounts.seconds == pytest.approx([100.0, 200.5, 300 + clock.now - started - 0.5])
    assert clock.now - started == 2.0


def test_the_ladder_leaves_samples_no_surrogates_judge_rejects(clock: Clock):
    ladder = LinearisedLadder(judges(Lacks(), AtMost(tau=1.0)), 0, None)
    probs = rows("ab", "bb")
    step = make_step(probs, ids("__", "__"), final=True)
    step.argmax = probs.argmax(-1)
    step.accepted = torch.tensor([True, False])
    ladder.run(step, Accounts(2))
    assert step.probs is probs and step.touched == [False, False]
    step.accepted = torch.tensor([True, True])
    ladder.run(step, Accounts(2))
    assert step.touched == [False, False]


def test_accounts_charge_shares_and_report_rounds(clock: Clock):
    accounts = Accounts(3)
    accounts.seconds = [1.0, 2.0, 3.0]
    started = clock.now
    clock.now += 6.0
    accounts.charge([0, 2], started)
    accounts.charge([], started)  # nobody to charge: nothing happens
    assert accounts.seconds == [4.0, 2.0, 6.0]
    accounts.seconds[1] = 1.23456789
    accounts.nodes[1], accounts.settled_by[1] = 7, "search"
    assert accounts.report(1) == {
        "steps": 0,
        "outer_iters": 0,
        "inner_iters": 0,
        "search_nodes": 7,
        "seconds": 1.2346,
        "settled_by": "search",
    }


def test_a_sequence_the_syntax_cannot_read_is_never_decoded_nor_judged():
    def strict_decode(sequence: list[int]) -> str:
        assert MASK not in sequence, "decoded an unreadable sequence"
        return decode(sequence)

    count = AtMost(tau=0.0)
    check = Judges([count], strict_decode, decided, readable=lambda s: MASK not in s)
    assert check.accept_all([[B, MASK], [B, C], [A, C]]) == [False, True, False]
    assert count.texts == [["bc", "ac"]]


def test_a_judge_answering_for_another_number_of_texts_is_an_error():
    @dataclass(frozen=True)
    class OneTooMany(AtMost):
        def judge(self, texts: list[str]) -> list[float | None]:
            return [*super().judge(texts), 0.0]

    with pytest.raises(ValueError):
        judges(OneTooMany(tau=0.0)).accept_all([[B, C], [C, C]])


def dist(**mass: float) -> torch.Tensor:
    """A position's distribution [V] from letters' masses (the rest spread evenly)."""
    out = torch.zeros(V)
    for letter, m in mass.items():
        out[LETTERS.index(letter)] = m
    rest = [t for t in range(V) if LETTERS[t] not in mass]
    out[rest] = (1.0 - sum(mass.values())) / len(rest)
    return out


def argmax_decide(probs: torch.Tensor, x: torch.Tensor, changing: torch.Tensor):
    """A masked step's draw, made deterministic: the argmax where the step decides."""

    def decide(p: torch.Tensor) -> torch.Tensor:
        return torch.where(changing, p.argmax(-1), x)

    return decide


def generators(n: int, seed: int = 7) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed + i) for i in range(n)]


def test_redraws_are_acceptable_draws_of_each_samples_own_generator():
    # Sample 0 decides positions 0 and 1 (each "a" half the time); sample 1 decides position
    # 0, where "a" is all there is: no draw of it is acceptable.
    probs = torch.stack(
        [
            torch.stack([dist(a=0.5, b=0.3), dist(a=0.5, c=0.3), dist(d=0.9)]),
            torch.stack([dist(a=1.0), dist(b=0.9), dist(c=0.9)]),
        ]
    )
    changing = torch.tensor([[True, True, False], [True, False, False]])
    x = ids("__d", "_bc")
    info = StepInfo(2, 4, 0.5, 0.25, changing, None)
    drawn = []
    for global_seed in (0, 1):  # the global generator has nothing to do with the draws
        torch.manual_seed(global_seed)
        count = AtMost(tau=0.0)
        redraws = Redraws(judges(count), generators(2))
        found = redraws.acceptable(probs, info, x, [0, 1])
        ((texts),) = count.texts
        assert len(texts) == 16  # 8 draws a sample, judged in one call
        assert texts[8:] == ["abc"] * 8
        assert found[1] is None
        assert found[0].shape == (2,) and A not in found[0].tolist()
        assert decode(found[0].tolist()) + "d" in texts[:8]
        assert texts[:8].index(decode(found[0].tolist()) + "d") == min(
            k for k, t in enumerate(texts[:8]) if "a" not in t
        )
        drawn.append((texts, found[0].tolist()))
    assert drawn[0] == drawn[1]


def masked_step(probs, x, changing, settled=None) -> Step:
    return make_step(
        probs, x, changing=changing, decide=argmax_decide(probs, x, changing), settled=settled
    )


def test_look_ahead_settles_good_draws_and_redraws_bad_ones(clock: Clock):
    # 0: idle; 1: settled before; 2: draws "a" where nothing else can be drawn; 3: draws "a"
    # at position 1, which may be redrawn; 4: draws "b", acceptable.
    probs = torch.stack(
        [
            torch.stack([dist(a=0.9), dist(a=0.9), dist(a=0.9)]),
            torch.stack([dist(a=0.9), dist(a=0.9), dist(a=0.9)]),
            torch.stack([dist(a=1.0), dist(b=0.9), dist(b=0.9)]),
            torch.stack([dist(b=0.9), dist(a=0.4, c=0.3), dist(a=0.9)]),
            torch.stack([dist(b=0.9), dist(b=0.9), dist(b=0.9)]),
        ]
    )
    x = ids("__b", "___", "_cc", "b__", "___")
    changing = torch.tensor(
        [[False] * 3, [True] * 3, [True, False, False], [False, True, False], [True] * 3]
    )
    step = masked_step(probs, x, changing, settled=[False, True, False, False, False])
    before = probs.clone()
    count = AtMost(tau=0.0, clock=clock, seconds=1.0)
    stage = LookAhead(Redraws(judges(count), generators(5)), project_from=0.5)
    assert stage.due(step)
    assert not LookAhead(Redraws(judges(Lacks()), []), 0.5).due(step)
    assert not LookAhead(Redraws(judges(count), []), 0.75).due(step)
    accounts = Accounts(5)
    stage.run(step, accounts)
    assert count.texts[0] == ["acc", "ba", "bbb"]  # what samples 2, 3, 4 would decide
    assert step.settled.tolist() == [True, True, False, True, True]
    assert step.touched == [False, False, False, True, False]
    assert torch.equal(step.ahead, ids("__b", "aaa", "acc", "ba_", "bbb"))
    redrawn = step.probs[3, 1]
    assert redrawn.max() == 1.0 and redrawn.argmax() != A  # one-hot on an acceptable token
    unchanged = torch.ones(5, 3, dtype=torch.bool)
    unchanged[3, 1] = False
    assert torch.equal(step.probs[unchanged], before[unchanged])
    # The look (1 s) shared by samples 2-4, the redraws (1 s) by samples 2 and 3.
    assert accounts.seconds == pytest.approx([0, 0, 1 / 3 + 0.5, 1 / 3 + 0.5, 1 / 3])


def test_look_ahead_has_nothing_to_look_at_in_the_final_prediction(clock: Clock):
    count = AtMost(tau=0.0)
    stage = LookAhead(Redraws(judges(count), generators(1)), project_from=0.5)
    step = make_step(rows("aa"), ids("__"), final=True)
    stage.run(step, Accounts(1))
    assert count.texts == [] and step.ahead is None and not step.settled.any()


def alm_result(probs: torch.Tensor, projected: list[bool], multipliers: str) -> ProjectionResult:
    n = len(probs)
    return ProjectionResult(
        probs=probs + 1.0,
        projected=torch.tensor(projected),
        outer_iters=torch.tensor([3] * n),
        inner_iters=torch.tensor([30] * n),
        feasible=torch.ones(n, dtype=torch.bool),
        seconds=torch.tensor([0.5] * n, dtype=torch.float64),
        multipliers=multipliers,
    )


def test_the_alm_stage_passes_its_state_through_and_keeps_the_accounts(monkeypatch):
    calls: list[dict] = []
    results = iter(["first", "second"])

    def fake_project(probs, constraints, settings, fixed, gens, on_progress, multipliers, x):
        calls.append({"fixed": fixed, "gens": gens, "progress": on_progress, "x": x})
        calls[-1]["multipliers"] = multipliers
        return alm_result(probs, [True, False, True], next(results))

    monkeypatch.setattr(alm_stage, "project", fake_project)
    gens, progress = generators(3), lambda report: None
    count = AtMost(tau=0.0)
    stage = ALM([count], explicit(project_from=0.5), gens, progress)
    probs, x = rows("ab", "ab", "ab"), ids("a_", "__", "_b")
    step = masked_step(probs, x, torch.ones(3, 2, dtype=torch.bool), [False, True, False])
    accounts = Accounts(3)
    accounts.seconds, accounts.outer, accounts.inner = [10.0] * 3, [1] * 3, [2] * 3
    assert stage.due(step)
    stage.run(step, accounts)
    stage.run(step, accounts)
    first, second = calls
    assert first["fixed"].tolist() == [[True, False], [True, True], [False, True]]
    assert first["gens"] is gens and first["progress"] is progress and first["x"] is x
    assert first["multipliers"] is None and second["multipliers"] == "first"
    assert stage.multipliers == "second"
    assert torch.equal(step.probs, probs + 2.0)
    assert step.projected.tolist() == [True, False, True]
    assert step.touched == [True, False, True]
    assert accounts.seconds == [11.0, 11.0, 11.0]
    assert accounts.outer == [7, 1, 7] and accounts.inner == [62, 2, 62]


def test_after_the_alm_bad_draws_are_redrawn_or_left_to_the_sampler(clock: Clock):
    # 0: settled; 1: projected, now draws "bb" (acceptable); 2: projected, still draws "a"
    # (redrawn); 3: not projected, draws "ac", where nothing but "a" can be drawn at position
    # 0: no draw is acceptable, so its prediction is left to the sampler's own draw (an
    # argmax would write the same token at every such step).
    probs = torch.stack(
        [
            torch.stack([dist(a=0.9), dist(a=0.9), dist(a=0.9)]),
            torch.stack([dist(b=0.9), dist(b=0.9), dist(a=0.9)]),
            torch.stack([dist(a=0.5, b=0.3), dist(c=0.9), dist(a=0.9)]),
            torch.stack([dist(a=1.0), dist(c=0.9), dist(b=0.9)]),
        ]
    )
    x = ids("___", "___", "___", "___")
    changing = torch.tensor([[True, True, False]] * 4)
    step = masked_step(probs, x, changing, settled=[True, False, False, False])
    step.projected = torch.tensor([False, True, True, False])
    before = probs.clone()
    count = AtMost(tau=0.0, clock=clock, seconds=1.0)
    stage = RedrawAfterALM(Redraws(judges(count), generators(4)))
    assert stage.due(step)
    accounts = Accounts(4)
    accounts.seconds = [10.0] * 4
    stage.run(step, accounts)
    assert count.texts[0] == ["bb", "ac"]  # the moved samples' draws
    assert len(count.texts[1]) == 16  # then 8 draws each of samples 2 and 3
    assert step.probs is probs  # the ALM's own output, edited in place
    assert step.touched == [False, False, True, False]
    assert torch.equal(probs[:2], before[:2]) and torch.equal(probs[:, 2], before[:, 2])
    assert probs[2, :2].max(-1).values.tolist() == [1.0, 1.0] and A not in probs[2, :2].argmax(-1)
    assert torch.equal(probs[3], before[3])
    assert accounts.seconds == pytest.approx([10.0, 10.5, 11.0, 10.5])


def test_after_the_alm_a_prediction_it_did_not_move_is_copied_before_it_is_decided(
    clock: Clock,
):
    probs = torch.stack([torch.stack([dist(a=1.0), dist(b=0.9)])])
    changing = torch.tensor([[True, False]])
    step = masked_step(probs, ids("__"), changing)
    step.projected = torch.tensor([False])
    before = probs.clone()
    RedrawAfterALM(Redraws(judges(AtMost(tau=0.0)), generators(1))).run(
        step, Accounts(1)
    )
    assert torch.equal(probs, before)  # maybe the sampler's cache: not touched
    assert step.probs is not probs and step.probs[0, 0, A] == 1.0


def test_after_the_alm_nothing_is_redrawn_where_the_stage_has_no_draw_to_look_at():
    stage = RedrawAfterALM(Redraws(judges(AtMost(tau=0.0)), generators(1)))
    probs = rows("aa")
    step = make_step(probs, ids("__"), final=True, decide=lambda p: p.argmax(-1))
    assert not stage.due(step)  # the ALM has not run
    step.projected = torch.tensor([True])
    stage.run(step, Accounts(1))
    assert step.probs is probs and step.touched == [False]
    no_draw = make_step(probs, ids("__"))
    no_draw.projected = torch.tensor([True])
    assert not stage.due(no_draw)


def flip_search(check: Judges, well_formed=None, repair: bool = True) -> FlipSearch:
    return FlipSearch(check, SearchSettings(2, 100, 0.5), None, well_formed, repair)


def test_the_flip_search_is_due_for_exact_constraints_or_the_final_repair():
    earlier, final = make_step(rows("ab"), ids("__")), make_step(rows("ab"), ids("__"), final=True)
    surrogates_only = flip_search(judges(AtMost(tau=0.0)), repair=False)
    assert not surrogates_only.due(earlier) and not surrogates_only.due(final)
    assert flip_search(judges(AtMost(tau=0.0))).due(final)
    both = flip_search(judges(AtMost(tau=0.0), Lacks()), repair=False)
    assert both.due(earlier) and both.due(final)
    late = FlipSearch(judges(Lacks()), SearchSettings(2, 100, 0.75), None, None, False)
    assert not late.due(earlier)


def test_before_the_final_prediction_the_flip_search_serves_exact_constraints(clock: Clock):
    # 0: idle, "bb" (not judged); 1: decided "b" at position 0 where its prediction reads
    # "c": "bb", rejected, searched; 2: "ab", which only the surrogate's judge rejects.
    probs = rows("bb", "cb", "ab")
    x = ids("__", "b_", "__")
    changing = torch.tensor([[False, False], [False, True], [True, True]])
    step = masked_step(probs, x, changing)
    banned = Lacks(clock=clock, seconds=1.0)
    stage = flip_search(judges(AtMost(tau=0.0), banned))
    accounts = Accounts(3)
    accounts.seconds, accounts.nodes = [10.0] * 3, [5] * 3
    stage.run(step, accounts)
    # One text a call (an exact judge's `accepts`); the search starts from its own argmax,
    # "cb" (position 0 fixed), which it accepts.
    assert banned.texts == [["bb"], ["ab"], ["cb"]]
    assert step.touched == [False, True, False]
    assert accounts.nodes == [5, 6, 5]
    assert accounts.seconds == [10.0, 11.0, 10.0]
    assert step.probs is not probs and torch.equal(step.probs, probs)


def test_under_uniform_noise_every_sample_is_judged_before_the_final_prediction():
    banned = Lacks()
    step = make_step(rows("bb", "cb"), ids("__", "__"))
    flip_search(judges(banned)).run(step, Accounts(2))
    assert banned.texts[:2] == [["bb"], ["cb"]]
    assert step.touched == [True, False]


def test_the_final_repair_tries_the_syntax_first_then_searches(clock: Clock):
    # 0: accepted (not judged); 1: its well-formed reading "cb" is accepted; 2: reads as its
    # own argmax, "ba": searched; 3: "aa" reads as "bb", rejected too: searched.
    probs = rows("cc", "ab", "ba", "aa")
    banned, count = Lacks(clock=clock, seconds=0.0), AtMost(tau=0.0)
    seen: list[torch.Tensor] = []

    def well_formed(p: torch.Tensor) -> torch.Tensor:
        seen.append(p)
        clock.now += 3.0
        out = p.clone()
        out[0] = make_argmax(p[0], [C, B])
        out[2] = make_argmax(p[2], [B, B])
        return out

    stage = flip_search(judges(banned, count), well_formed)
    step = make_step(probs, ids("__", "__", "__", "__"), final=True)
    step.accepted = torch.tensor([True, False, False, False])
    accounts = Accounts(4)
    stage.run(step, accounts)
    assert count.texts[0] == ["ab", "ba", "aa"]
    assert len(seen) == 1 and torch.equal(seen[0], probs[1:])
    assert step.touched == [False, True, True, True]
    out = step.probs.argmax(-1).tolist()
    assert out[0] == [C, C] and out[1] == [C, B]
    for sequence in out[2:]:
        assert A not in sequence and sequence != [B, B]
    assert accounts.seconds == pytest.approx([0.0, 1.0, 1.0, 1.0])  # the syntax's 3 s
    assert accounts.nodes[1] == 0 and min(accounts.nodes[2:]) >= 1


def test_a_syntax_answering_for_another_number_of_samples_is_an_error():
    stage = flip_search(judges(AtMost(tau=0.0)), lambda p: torch.cat([p, p]))
    step = make_step(rows("ab", "ba"), ids("__", "__"), final=True)
    step.accepted = torch.tensor([False, False])
    with pytest.raises(ValueError):
        stage.run(step, Accounts(2))


def test_before_the_final_prediction_what_the_syntax_cannot_read_is_searched_unjudged():
    banned = Lacks()
    check = Judges([banned, AtMost(tau=0.0)], decode, decided, readable=lambda s: D not in s)
    step = make_step(rows("dc", "cc"), ids("__", "__"))
    flip_search(check).run(step, Accounts(2))
    assert banned.texts[0] == ["cc"]  # "dc" is rejected unread
    assert step.touched == [True, False]
    assert D not in step.probs[0].argmax(-1).tolist()
