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

from cdd_cli.cli import app
from cdd_cli.constraints.structured import RegexConstraint, pattern_layout
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.models.tokenizers import Gpt2Tokenizer
from cdd_cli.projection.stages import Accounts, ClosedFormLookAhead, ClosedForms, Step

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
        weight = math.prod(
            float(rows[i, t]) for i, t in enumerate(seq) if not bool(fixed[0, i])
        )
        total += weight * matches(seq)
    assert total > 0
    got = float(layout.log_weight(rows[None], x, fixed)[0])
    assert got == pytest.approx(math.log(total), rel=1e-6)


def test_the_lookahead_draws_a_decision_as_the_model_would_given_the_match():
    """Two positions; the step decides the first. The model's second row depends on the
    first token (after "cat" it mostly goes on with a match, after "dog" mostly not), which
    the step's own prediction, one row per position apart, cannot show: the layout alone
    draws "cat" with probability 1/2 here, the model conditioned on a match with 0.9. The
    look-ahead's draws are checked against 0.9, and the layout's 1/2 is rejected by the same
    test."""
    length, count, samples = 2, 64, 400
    layout = pattern_layout([RegexConstraint(pattern=PATTERN)], TOKENIZER, 0, length)
    cat, dog = token("cat"), token("dog")
    follows = [token(" cat"), token(" dog"), TOKENIZER.eos_id]  # what completes a match
    first = torch.zeros(len(TOKENIZER))
    first[[cat, dog]] = 0.5

    def second_row(match_mass: float) -> torch.Tensor:
        row = torch.zeros(len(TOKENIZER))
        row[follows] = match_mass / len(follows)
        row[token(",")] = 1 - match_mass
        return row

    marginal = second_row(0.5)  # the step's own prediction of position 2
    given = {cat: second_row(0.9), dog: second_row(0.1)}

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
    projected_second = step.probs[:, 1].clone()
    lookahead = ClosedFormLookAhead(closed_forms, generators, count)
    assert lookahead.due(step)
    lookahead.run(step, accounts)

    decided = step.probs[:, 0]
    assert bool((decided.max(-1).values == 1.0).all())  # one-hot: the sampler draws it
    assert torch.equal(step.probs[:, 1], projected_second)  # left to the closed form's row
    share = float((decided.argmax(-1) == cat).float().mean())
    # Sampling-importance-resampling with 64 candidates: a bias of order 1/64 toward the
    # proposal (1/2), inside this tolerance.
    tolerance = 4 * math.sqrt(0.9 * 0.1 / samples) + 0.02
    assert abs(share - 0.9) <= tolerance
    assert abs(0.5 - 0.9) > 2 * tolerance  # the layout's own law would fail the same check
    assert all(step.touched) and all(s > 0 for s in accounts.seconds)


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
