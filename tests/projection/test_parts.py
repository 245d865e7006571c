"""The engine's loop over its stages, and `Parts` (one batch projected in row ranges, each by
its own engine), on hand-built steps with stand-in stages and a clock that moves only when a
stage says so."""

from __future__ import annotations

import pytest
import torch

from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.projection import engine
from cdd_cli.projection.engine import Engine, Parts, StageProgress, check_order
from cdd_cli.projection.step import Accounts, Step


class Clock:
    """Stands in for `time`: `perf_counter` reads `now`, which the stages move."""

    def __init__(self) -> None:
        self.now = 500.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(engine, "time", fake)
    return fake


class Marks:
    """A stand-in stage: due where `when` says, it marks the rows `rows` as touched (and
    settles them), takes `seconds` on the clock, and logs what it saw of the step."""

    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()

    def __init__(self, clock: Clock, rows=(), seconds=1.0, when=lambda step: True, scale=None):
        self.clock, self.marks, self.seconds, self.when = clock, list(rows), seconds, when
        self.scale = scale
        self.seen: list[dict] = []

    def due(self, step: Step) -> bool:
        self.seen.append(
            {
                "touched": list(step.touched),
                "settled": step.settled.clone(),
                "fixed": step.fixed.clone(),
                "x": step.x,
                "info": step.info,
            }
        )
        return self.when(step)

    def run(self, step: Step, accounts: Accounts) -> None:
        assert step.touched == [False] * len(step.x)  # its own, fresh for the stage
        self.seen[-1]["accounts"] = accounts
        for i in self.marks:
            step.touched[i] = True
            step.settled[i] = True
        if self.scale is not None:
            step.probs = step.probs * self.scale
        self.clock.now += self.seconds


class First(Marks):
    name = "First"


class Second(Marks):
    name = "Second"


class Third(Marks):
    name = "Third"


def info(index: int = 0, steps: int = 4) -> StepInfo:
    return StepInfo(index, steps, 0.5, 0.25)


def fixed_first(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x, dtype=torch.bool)
    out[:, 0] = True
    return out


def test_the_stages_run_in_order_and_each_sample_counts_the_steps_a_stage_changed(clock: Clock):
    first = First(clock, rows=[0], seconds=2.0)
    second = Second(clock, rows=[0, 2], seconds=0.5, when=lambda step: step.info.index < 3)
    third = Third(clock, seconds=4.0, when=lambda step: False)
    progress: list[StageProgress] = []
    hook = Engine([first, second, third], fixed_first, 3, on_stage=progress.append)
    assert hook.stages == [first, second, third]
    assert hook.stage_seconds == {"First": 0.0, "Second": 0.0, "Third": 0.0}
    probs = torch.full((3, 2, 4), 0.25)
    x = torch.tensor([[1, 2], [3, 0], [2, 2]])
    out = hook(probs, x, info(1))
    assert out is probs  # no stage replaced it
    # Every stage is asked with the step as the engine built it, as far as stages before it
    # left it: nothing touched, nothing settled, the fixed positions of x.
    seen = first.seen[0]
    assert seen["touched"] == [False] * 3 and seen["x"] is x and seen["info"].index == 1
    assert seen["settled"].dtype == torch.bool and seen["settled"].tolist() == [False] * 3
    assert torch.equal(seen["fixed"], fixed_first(x))
    assert second.seen[0]["settled"].tolist() == [True, False, False]
    assert second.seen[0]["touched"] == [True, False, False]  # the stage before's, as it left
    assert second.seen[0]["accounts"] is hook.accounts
    assert hook.accounts.steps == [1, 0, 1]
    assert hook.accounts.settled_by == ["Second", None, "Second"]
    assert hook.stage_seconds == {"First": 2.0, "Second": 0.5, "Third": 0.0}
    # A second step: the third stage does not run, the second no longer either.
    hook(probs, x, info(3))
    assert hook.accounts.steps == [2, 0, 1]
    assert hook.accounts.settled_by == ["First", None, "Second"]
    assert hook.stage_seconds == {"First": 4.0, "Second": 0.5, "Third": 0.0}
    assert len(third.seen) == 2 and "accounts" not in third.seen[0]
    # Each stage that ran said so as it began (nothing touched yet) and as it ended.
    assert progress == [
        StageProgress("First", 1, 4, 3, 0, 0, False),
        StageProgress("First", 1, 4, 3, 1, 1, True),
        StageProgress("Second", 1, 4, 3, 1, 0, False),
        StageProgress("Second", 1, 4, 3, 2, 2, True),
        StageProgress("First", 3, 4, 3, 0, 0, False),
        StageProgress("First", 3, 4, 3, 1, 1, True),
    ]


def test_a_stage_that_is_not_due_still_counts_the_time_it_took_to_say_so(clock: Clock):
    class Slow(Marks):
        name = "Slow"

        def due(self, step: Step) -> bool:
            self.clock.now += 0.25
            return False

    hook = Engine([Slow(clock)], fixed_first, 1)
    hook(torch.full((1, 2, 4), 0.25), torch.zeros(1, 2, dtype=torch.long), info())
    assert hook.stage_seconds == {"Slow": 0.25}
    assert hook.accounts.steps == [0] and hook.accounts.settled_by == [None]


def test_the_engine_hands_back_what_its_stages_made_of_the_prediction(clock: Clock):
    hook = Engine([First(clock, scale=2.0), Second(clock, scale=3.0)], fixed_first, 2)
    probs = torch.full((2, 2, 4), 0.25)
    out = hook(probs, torch.zeros(2, 2, dtype=torch.long), info())
    assert torch.equal(out, torch.full((2, 2, 4), 1.5))
    assert hook.accounts.steps == [0, 0]  # a stage that changes mass but names no row


def test_without_a_display_the_engine_tells_no_one(clock: Clock):
    hook = Engine([First(clock, rows=[0])], fixed_first, 1)
    assert hook.on_stage is None
    hook(torch.full((1, 2, 4), 0.25), torch.zeros(1, 2, dtype=torch.long), info())
    assert hook.accounts.steps == [1]


def test_the_engine_reports_each_samples_accounts_in_order(clock: Clock):
    hook = Engine([First(clock, rows=[1])], fixed_first, 3)
    hook(torch.full((3, 2, 4), 0.25), torch.zeros(3, 2, dtype=torch.long), info())
    hook.accounts.seconds = [0.5, 1.25, 2.0]
    hook.accounts.nodes = [4, 5, 6]
    assert hook.seconds == [0.5, 1.25, 2.0]
    assert hook.report(1) == hook.accounts.report(1)
    assert hook.report(1)["settled_by"] == "First" and hook.report(1)["search_nodes"] == 5
    assert hook.reports() == [hook.accounts.report(i) for i in range(3)]
    assert [r["search_nodes"] for r in hook.reports()] == [4, 5, 6]


class Needs:
    name = "Needs"

    def __init__(self, needs: tuple[str, ...], provides: tuple[str, ...]):
        self.needs, self.provides = needs, provides


def test_each_stage_needs_only_what_a_stage_before_it_provides():
    check_order([Needs((), ("argmax", "accepted")), Needs(("argmax", "accepted"), ("ahead",))])
    check_order([Needs((), ("argmax",)), Needs((), ()), Needs(("argmax",), ())])
    with pytest.raises(ValueError) as refused:
        check_order([Needs((), ("argmax",)), Needs(("ahead", "argmax", "accepted"), ())])
    assert str(refused.value) == "Needs needs ahead, accepted, which no stage before it provides"
    with pytest.raises(ValueError, match=r"^Needs needs argmax, which"):
        check_order([Needs(("argmax",), ("argmax",))])  # not by itself
    with pytest.raises(ValueError, match=r"^Needs needs argmax, which"):
        Engine([Needs(("argmax",), ())], fixed_first, 1)


class Stub:
    """An engine stand-in for `Parts`: logs its rows and step, then hands back its rows
    scaled by `scale` (a new tensor), or edited in place (`scale` None: plus one)."""

    def __init__(self, scale: float | None = None, seconds=None, reports=()):
        self.scale, self.calls = scale, []
        self.stage_seconds = dict(seconds or {})
        self.seconds = [r["seconds"] for r in reports]
        self.made = list(reports)

    def __call__(self, probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        self.calls.append((probs, x.clone(), info))
        if self.scale is None:
            probs += 1.0
            return probs
        return probs * self.scale

    def reports(self) -> list[dict]:
        return list(self.made)


def cut_log(log: list) -> StepInfo:
    """A step whose `cut` logs the ranges asked for."""

    def cut(a: int, b: int) -> StepInfo:
        log.append((a, b))
        return StepInfo(7, 9, 0.5, 0.25, changing=torch.tensor([[a, b]]))

    return StepInfo(7, 9, 0.5, 0.25, cut=cut)


def test_parts_project_each_range_as_a_batch_of_its_own():
    log: list = []
    step = cut_log(log)
    copied, in_place, last = Stub(2.0), Stub(None), Stub(10.0)
    hook = Parts([(0, 2, copied), (2, 3, in_place), (3, 5, last)])
    probs = torch.arange(5 * 2 * 3, dtype=torch.float).reshape(5, 2, 3)
    before = probs.clone()
    x = torch.arange(10).reshape(5, 2)
    out = hook(probs, x, step)
    assert out is probs  # the batch's own tensor, each range written into it
    assert torch.equal(out[:2], before[:2] * 2.0)
    assert torch.equal(out[2], before[2] + 1.0)
    assert torch.equal(out[3:], before[3:] * 10.0)
    assert log == [(0, 2), (2, 3), (3, 5)]
    for stub, (a, b) in [(copied, (0, 2)), (in_place, (2, 3)), (last, (3, 5))]:
        [(rows, xs, seen)] = stub.calls
        assert torch.equal(xs, x[a:b]) and seen.changing.tolist() == [[a, b]]
        assert rows.data_ptr() == probs[a:b].data_ptr()  # a view, not a copy


def test_one_part_is_the_whole_batch_and_its_step_uncut():
    log: list = []
    step = cut_log(log)
    only = Stub(3.0)
    probs = torch.ones(2, 2, 3)
    out = Parts([(0, 2, only)])(probs, torch.zeros(2, 2, dtype=torch.long), step)
    assert torch.equal(out, torch.full((2, 2, 3), 3.0)) and out is not probs
    assert torch.equal(probs, torch.ones(2, 2, 3))  # what the engine hands back, as it is
    assert log == [] and only.calls[0][2] is step


def test_parts_add_their_engines_stage_seconds_and_list_their_samples_in_order():
    def report(seconds: float) -> dict:
        return {"seconds": seconds, "steps": int(seconds)}

    first = Stub(1.0, {"ALM": 1.5, "FlipSearch": 2.0}, [report(1.0), report(2.0)])
    second = Stub(1.0, {"ALM": 0.25, "LookAhead": 4.0}, [report(3.0)])
    third = Stub(1.0, {"FlipSearch": 0.5}, [report(4.0), report(5.0)])
    hook = Parts([(0, 2, first), (2, 3, second), (3, 5, third)])
    assert hook.stage_seconds == {"ALM": 1.75, "FlipSearch": 2.5, "LookAhead": 4.0}
    assert hook.seconds == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [r["steps"] for r in hook.reports()] == [1, 2, 3, 4, 5]
    assert Parts([(0, 1, Stub(1.0, {"ALM": 3.0}))]).stage_seconds == {"ALM": 3.0}
