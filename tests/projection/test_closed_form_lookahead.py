"""The pattern layout's match mass, and the look-ahead that weighs a decision by the model's
next prediction (`projection.lookahead`), checked against brute force on tiny cases."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.constraints.structured import RegexConstraint, pattern_layout
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.models.tokenizers import Gpt2Tokenizer
from cdd_cli.projection.stages.closed_forms import ClosedFormLookAhead, ClosedForms, _draw
from cdd_cli.projection.step import Accounts, Step

TOKENIZER = Gpt2Tokenizer()
PATTERN = "(cat|dog)( (cat|dog))*"
runner = CliRunner()


def token(text: str) -> int:
    (i,) = TOKENIZER.encode(text)
    return i


SUPPORT = [token(t) for t in ("cat", "dog", " cat", " dog", ",")] + [TOKENIZER.eos_id]


def rows_on_support(length: int, seed: int) -> torch.Tensor:
    """[length, V] random rows with mass on SUPPORT only."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.zeros(length, len(TOKENIZER))
    weights = torch.rand(length, len(SUPPORT), generator=generator) + 0.2
    rows[:, SUPPORT] = weights / weights.sum(-1, keepdim=True)
    return rows


def matches(seq: tuple[int, ...]) -> bool:
    return bool(re.fullmatch(PATTERN, TOKENIZER.decode(list(seq))))


@pytest.mark.parametrize("decided", [None, (0, "dog"), (1, " cat")])
def test_log_weight_is_the_mass_the_rows_give_the_matches(decided):
    """log sum over matching x of prod_i p_i(x_i), positions after an end summed out (the
    rows' mass is all on SUPPORT, so summing a position over SUPPORT is summing it out); a
    decided position weighs 1 at its token."""
    length = 3
    layout = pattern_layout([RegexConstraint(pattern=PATTERN)], TOKENIZER, 0, length)
    rows = rows_on_support(length, seed=4)
    x = torch.full((1, length), TOKENIZER.mask_id)
    fixed = torch.zeros(1, length, dtype=torch.bool)
    if decided is not None:
        x[0, decided[0]] = token(decided[1])
        fixed[0, decided[0]] = True
    total = 0.0
    for seq in itertools.product(SUPPORT, repeat=length):
        if decided is not None and seq[decided[0]] != x[0, decided[0]]:
            continue
        weight = math.prod(float(rows[i, t]) for i, t in enumerate(seq) if not bool(fixed[0, i]))
        total += weight * matches(seq)
    assert total > 0
    got = float(layout.log_weight(rows[None], x, fixed)[0])
    assert got == pytest.approx(math.log(total), rel=1e-6)


def second_row(weights: dict[str, float]) -> torch.Tensor:
    row = torch.zeros(len(TOKENIZER))
    for text, w in weights.items():
        row[TOKENIZER.eos_id if text == "<eos>" else token(text)] = w
    return row


def lookahead_share(
    pattern: str, marginal: torch.Tensor, given: dict[int, torch.Tensor], count: int = 64
) -> tuple[float, Step, Accounts, torch.Tensor]:
    """Two positions; the step decides the first, "cat" or "dog" at even odds. The model's
    second row is `given[first token]`, the step's own prediction of it `marginal`. Runs
    ClosedForms then the look-ahead over 600 samples; returns the share that decided "cat",
    the step, the accounts, and each sample's seconds before the look-ahead ran."""
    length, samples = 2, 600
    layout = pattern_layout([RegexConstraint(pattern=pattern)], TOKENIZER, 0, length)
    first = torch.zeros(len(TOKENIZER))
    first[[token("cat"), token("dog")]] = 0.5

    def predict(x_s: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(len(x_s), length, len(TOKENIZER))
        for k, tokens in enumerate(x_s.tolist()):
            out[k, 0, tokens[0]] = 1.0
            out[k, 1] = given[tokens[0]]
        return out

    generators = [torch.Generator().manual_seed(1000 + i) for i in range(samples)]
    probs = torch.stack([first, marginal]).expand(samples, -1, -1).clone()
    x = torch.full((samples, length), TOKENIZER.mask_id)
    fixed = torch.zeros(samples, length, dtype=torch.bool)
    changing = torch.zeros(samples, length, dtype=torch.bool)
    changing[:, 0] = True
    info = StepInfo(0, 8, 1.0, 0.875, changing, lambda p: p.argmax(-1), None, predict)
    step = Step(probs, x, info, fixed, [False] * samples, torch.zeros(samples, dtype=torch.bool))
    accounts = Accounts(samples)
    closed_forms = ClosedForms([layout], generators)
    closed_forms.run(step, accounts)
    before = torch.tensor(accounts.seconds)
    projected_second = step.probs[:, 1].clone()
    lookahead = ClosedFormLookAhead(closed_forms, generators, count)
    assert lookahead.due(step)
    lookahead.run(step, accounts)
    decided = step.probs[:, 0]
    assert bool((decided.max(-1).values == 1.0).all())  # one-hot: the sampler draws it
    assert torch.equal(step.probs[:, 1], projected_second)  # left to the closed form's row
    share = float((decided.argmax(-1) == token("cat")).float().mean())
    return share, step, accounts, before


def close(share: float, expected: float) -> bool:
    """Within four standard errors of 600 draws, plus 0.02 for the bias of resampling from
    64 candidates toward their proposal."""
    return abs(share - expected) <= 4 * math.sqrt(expected * (1 - expected) / 600) + 0.02


@pytest.mark.slow
def test_the_lookahead_draws_a_decision_as_the_model_would_given_the_match():
    """After "cat" the model mostly goes on with a match, after "dog" mostly not, which the
    step's own prediction, one row per position apart, cannot show: the layout alone draws
    "cat" with probability 1/2 here, the model conditioned on a match with 0.9."""
    follows = {" cat": 0.3, " dog": 0.3, "<eos>": 0.3}  # what completes a match
    marginal = second_row({k: v * 0.5 / 0.9 for k, v in follows.items()} | {",": 0.5})
    given = {
        token("cat"): second_row(follows | {",": 0.1}),
        token("dog"): second_row({k: v / 9 for k, v in follows.items()} | {",": 0.9}),
    }
    share, step, accounts, before = lookahead_share(PATTERN, marginal, given)
    assert close(share, 0.9)
    assert not close(0.5, 0.9)  # the layout's own law would fail the same check
    assert all(step.touched)
    assert bool((torch.tensor(accounts.seconds) > before).all())  # each charged its share


@pytest.mark.slow
def test_the_lookahead_divides_out_what_its_candidates_proposal_already_weighed():
    """`cat|dog cat`: after "cat" only the end, after "dog" only " cat". The step's own
    prediction of position 2 favours " cat" (0.6 to the end's 0.2), so the layout proposes
    "cat" with 1/4; the model, given "cat", ends (0.9), given "dog", goes on with " cat" only
    0.3 of the time: conditioned on a match it says 0.45 / (0.45 + 0.15) = 0.75. Weighing a
    candidate by its next match mass alone, without dividing by the mass the proposal gave
    it, would say 0.5."""
    marginal = second_row({"<eos>": 0.2, " cat": 0.6, ",": 0.2})
    given = {
        token("cat"): second_row({"<eos>": 0.9, ",": 0.1}),
        token("dog"): second_row({" cat": 0.3, ",": 0.7}),
    }
    share, *_ = lookahead_share("cat|dog cat", marginal, given)
    assert close(share, 0.75)
    assert not close(0.5, 0.75) and not close(0.25, 0.75)


def test_a_candidate_is_drawn_in_proportion_to_its_weight():
    weights = torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64)  # not normalised
    assert [_draw(weights, u) for u in (0.0, 0.2, 0.3, 0.49, 0.6, 0.9, 0.999)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        2,
    ]
    assert _draw(torch.tensor([0.5, 0.5], dtype=torch.float64), 0.5) == 1  # ties go right
    assert _draw(torch.tensor([1.0, 0.0], dtype=torch.float64), 0.999) == 0


def test_the_lookahead_is_not_due_at_the_final_prediction_or_with_two_closed_forms():
    layout = pattern_layout([RegexConstraint(pattern=PATTERN)], TOKENIZER, 0, 2)
    probs = rows_on_support(2, seed=1)[None]
    x = torch.full((1, 2), TOKENIZER.mask_id)
    fixed = torch.zeros(1, 2, dtype=torch.bool)
    settled = torch.zeros(1, dtype=torch.bool)
    final = Step(probs, x, StepInfo(8, 8, 0.1, 0.0), fixed, [False], settled)
    generators = [torch.Generator().manual_seed(0)]
    one = ClosedFormLookAhead(ClosedForms([layout], generators), generators, 4)
    assert not one.due(final)
    info = StepInfo(0, 8, 1.0, 0.9, fixed.clone(), lambda p: p.argmax(-1), None, lambda s: s)
    regular = Step(probs, x, info, fixed, [False], settled)
    assert one.due(regular)
    two = ClosedFormLookAhead(ClosedForms([layout, layout], generators), generators, 4)
    assert not two.due(regular)


@pytest.mark.slow
def test_generate_with_the_lookahead_matches_and_keeps_its_records_at_any_batch_size(
    text_model_dir: Path, tmp_path: Path
):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "constraints:\n  - type: regex\n    pattern: ' (whale|ship|sea)( (whale|ship|sea))*'\n"
        "projection:\n  lookahead: 4\n"
    )
    args = ["generate", "-q", "--model", str(text_model_dir), "--prompt", "The"]
    args += ["-n", "5", "--length", "6", "--spec", str(spec)]
    outputs = []
    for batch in ("5", "2"):
        out = tmp_path / f"batch-{batch}.jsonl"
        result = runner.invoke(app, [*args, "--batch-size", batch, "-o", str(out)])
        assert result.exit_code == 0, result.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == 5
        for row in rows:
            assert re.fullmatch(" (whale|ship|sea)( (whale|ship|sea))*", row["text"])
            assert row["satisfied"]
        outputs.append(sorted((r["id"], r["text"]) for r in rows))
    assert outputs[0] == outputs[1]
    config = (tmp_path / "batch-5.jsonl.config.yaml").read_text()
    assert "lookahead: 4" in config


@pytest.mark.slow
def test_the_lookahead_draws_from_each_samples_own_generator():
    """Same generators, same decisions, whatever else drew random numbers in between: a
    sample's records do not depend on its batch-mates or on the process's global stream.
    Under PATTERN "cat" and "dog" share an edge (the tokens are drawn); under `cat|dog cat`
    they lead to different states (the candidates' paths are drawn)."""
    follows = {" cat": 0.3, " dog": 0.3, "<eos>": 0.3}
    cases = [
        (
            PATTERN,
            second_row({k: v * 0.5 / 0.9 for k, v in follows.items()} | {",": 0.5}),
            {
                token("cat"): second_row(follows | {",": 0.1}),
                token("dog"): second_row({k: v / 9 for k, v in follows.items()} | {",": 0.9}),
            },
        ),
        (
            "cat|dog cat",
            second_row({"<eos>": 0.2, " cat": 0.6, ",": 0.2}),
            {
                token("cat"): second_row({"<eos>": 0.9, ",": 0.1}),
                token("dog"): second_row({" cat": 0.3, ",": 0.7}),
            },
        ),
    ]
    for pattern, marginal, given in cases:
        _, first, *_ = lookahead_share(pattern, marginal, given, count=8)
        torch.rand(1000)  # the global stream moves on
        _, again, *_ = lookahead_share(pattern, marginal, given, count=8)
        assert torch.equal(first.probs[:, 0].argmax(-1), again.probs[:, 0].argmax(-1)), pattern


def test_rows_along_a_path_keep_each_row_to_its_set_and_an_empty_one_to_the_whole_set():
    layout = pattern_layout([RegexConstraint(pattern=PATTERN)], TOKENIZER, 0, 2)
    probs = torch.stack(
        [second_row({",": 1.0}), second_row({" cat": 0.5, ",": 0.5})]
    )  # position 1: nothing a match takes; position 2: " cat" half the time
    x = torch.full((2,), TOKENIZER.mask_id)
    fixed = torch.zeros(2, dtype=torch.bool)
    plans, _ = layout.candidates(probs, x, fixed, 3, torch.Generator().manual_seed(0))
    rows = layout.rows_along(probs, plans, torch.tensor([0, 1]))
    assert rows.shape == (3, 2, len(TOKENIZER))
    both = sorted([token("cat"), token("dog")])
    for k in range(3):
        # Position 1's row gives its set nothing: the set itself, uniform.
        assert rows[k, 0].nonzero().squeeze(-1).tolist() == both
        assert bool((rows[k, 0, both] == 1.0).all())
        # Position 2's path goes on with a word (the end weighs almost nothing): the row kept
        # to the word's set, unnormalised.
        assert rows[k, 1].nonzero().squeeze(-1).tolist() == [token(" cat")]
        assert float(rows[k, 1, token(" cat")]) == 0.5
