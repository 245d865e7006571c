"""The exact method: its step weights are the model's step law over the proposal's, read at
the tokens the process draws (exactly 1 when the proposal is the model), and its records do
not depend on the batch."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.diffusion.processes import MaskedProcess, TemperatureTopP, UniformProcess
from cdd_cli.diffusion.sampler import StepInfo
from cdd_cli.errors import InputError
from cdd_cli.methods import EXACT_BY_SETTING
from cdd_cli.models import registry
from cdd_cli.projection.exact import ExactSetting, step_log_ratio, tempered
from cdd_cli.spec.model import Spec
from tests.generation import generation

V, L = 6, 5


def processes() -> list:
    shaped = TemperatureTopP(temperature=0.7)
    return [UniformProcess(V, temperature_top_p=shaped), MaskedProcess(V, V - 1, None, shaped)]


def prediction(process, rows: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(rows, L, V, generator=g).pow(3)
    if isinstance(process, MaskedProcess):
        probs[..., process.mask_id] = 0.0  # SUBS: no mass on the mask
    return probs / probs.sum(-1, keepdim=True)


def state(process, rows: int) -> torch.Tensor:
    if isinstance(process, MaskedProcess):
        return torch.full((rows, L), process.mask_id)
    return torch.randint(V, (rows, L), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("process", processes(), ids=lambda p: p.name)
def test_the_weight_is_exactly_one_when_the_proposal_is_the_model(process):
    rows = 4
    x_t = state(process, rows)
    model = prediction(process, rows, 0)
    uniforms = torch.rand(rows, L, generator=torch.Generator().manual_seed(1))
    changing = process.changing(x_t, 0.6, 0.5, uniforms)
    info = StepInfo(3, 8, 0.6, 0.5, changing=changing)
    x_s = process.step(model, x_t, 0.6, 0.5, uniforms, changing)
    # The same numbers in another tensor: every log-ratio is log a - log a, exactly 0.
    assert torch.equal(step_log_ratio(process, model, model.clone(), x_t, x_s, info),
                       torch.zeros(rows, dtype=torch.float64))  # fmt: skip
    # And a proposal tempered not at all toward anything is the model's own step.
    steered = prediction(process, rows, 9)
    proposal = tempered(model, steered, 0.0)
    ratio = step_log_ratio(process, model, proposal, x_t, x_s, info)
    assert ratio.abs().max() < 1e-5


@pytest.mark.parametrize("process", processes(), ids=lambda p: p.name)
def test_the_mean_weight_of_the_proposals_draws_is_one(process):
    """E_q[p / q] = 1: the law the weight divides by is the one the process draws from
    (its temperature shaping included); a weight of the wrong law drifts away from 1."""
    rows = 4000
    x_t = state(process, 1).expand(rows, -1)
    model = prediction(process, 1, 0).expand(rows, -1, -1)
    proposal = tempered(model, prediction(process, 1, 5).expand(rows, -1, -1), 0.6)
    uniforms = torch.rand(rows, L, generator=torch.Generator().manual_seed(2))
    changing = process.changing(x_t, 0.6, 0.3, uniforms)
    x_s = process.step(proposal, x_t, 0.6, 0.3, uniforms, changing)
    info = StepInfo(3, 8, 0.6, 0.3, changing=changing)
    weights = step_log_ratio(process, model, proposal, x_t, x_s, info).exp()
    error = weights.std().item() / math.sqrt(rows)
    assert abs(weights.mean().item() - 1.0) < 4 * error
    assert weights.std().item() > 0.05  # the proposal does differ from the model


def test_tempering_keeps_every_token_the_model_may_draw():
    model = torch.tensor([[[0.5, 0.5, 0.0]]])
    steered = torch.tensor([[[1.0, 0.0, 0.0]]])
    proposal = tempered(model, steered, 1.0)
    assert proposal[0, 0, 1] > 0 and proposal[0, 0, 2] == 0
    assert torch.allclose(proposal.sum(-1), torch.ones(1, 1))


@pytest.fixture(scope="module")
def loaded():
    # The shipped model: its products give a sample the same bits in any batch (`rows.py`,
    # tests/models/test_rows.py), which the ALM's iterations would amplify otherwise.
    return registry.load("default-molecules", "molecules")


def sa(loaded, tau: float = 3.5):
    return build_constraints([ConstraintSpec("sa", {"tau": tau}, "test")], loaded, "cpu")


def exact_spec(batch_size: int) -> Spec:
    spec = Spec(method="exact")
    spec.sampling.seed = 4
    spec.sampling.batch_size = batch_size
    spec.reject.max_attempts = 3
    return spec


def test_exact_records_are_the_same_at_batch_sizes_1_and_7(loaded, monkeypatch):
    constraints = sa(loaded)
    key = (loaded.revision, constraints[0].label())
    monkeypatch.setitem(EXACT_BY_SETTING, key, ExactSetting(0.5, 0.0, math.log(0.5)))
    seen = {}
    for batch in (1, 7):
        drawer = generation(exact_spec(batch), loaded, constraints, 6)
        draws = drawer.run(range(7))
        seen[batch] = [(d.text, d.attempts, d.log_weight, d.accepted, d.weights) for d in draws]
    assert seen[1] == seen[7]
    # The proposal was steered (else the check would read the model's own draws only).
    assert any(abs(log_weight) > 1e-3 for _, _, log_weight, _, _ in seen[1])


def test_a_setting_without_a_stored_design_is_rejection_with_its_weights(loaded):
    """No steering stored: the model's own steps, every weight 1 x 1[C], and the very draws
    `reject` keeps (the same streams, kept where the judges accept), under a nucleus too."""
    kept = {}
    for method in ("exact", "reject"):
        spec = exact_spec(4)
        spec.method, spec.sampling.top_p = method, 0.9
        draws = generation(spec, loaded, sa(loaded, 3.3), 6).run(range(6))
        kept[method] = [(d.text, d.attempts) for d in draws]
        if method == "exact":
            assert all(d.log_weight == 0.0 for d in draws)
            assert {w for d in draws for w in d.weights} <= {0.0, 1.0}
            assert any(d.weights[-1] == 1.0 for d in draws if d.accepted)
    assert kept["exact"] == kept["reject"]
    assert any(attempts > 1 for _, attempts in kept["reject"])  # rejection did reject


def test_a_nucleus_is_refused(loaded, monkeypatch):
    constraints = sa(loaded)
    key = (loaded.revision, constraints[0].label())
    monkeypatch.setitem(EXACT_BY_SETTING, key, ExactSetting(0.5, 0.0, 0.0))
    spec = exact_spec(4)
    spec.sampling.top_p = 0.9
    with pytest.raises(InputError, match=r"top_p 0\.9 would cut tokens"):
        generation(spec, loaded, constraints, 6)


@pytest.mark.slow
def test_exact_records_are_the_same_resumed_or_in_two_shards(tmp_path, loaded, monkeypatch):
    from typer.testing import CliRunner

    from cdd_cli.cli.app import app
    from tests.test_runs import same_records

    # A steered design (none is stored): the weights differ from 1 and must resume exactly.
    steered = ExactSetting(0.5, 0.85, math.log(1.0866), "gradient")
    monkeypatch.setitem(EXACT_BY_SETTING, (loaded.revision, sa(loaded, 4)[0].label()), steered)
    runner = CliRunner()
    args = ["molecules", "-q", "-n", "6", "--method", "exact", "-c", "sa", "--tau", "4",
            "--seed", "9", "--batch-size", "4"]  # fmt: skip
    whole, part, shards = tmp_path / "w.jsonl", tmp_path / "p.jsonl", tmp_path / "s.jsonl"
    assert runner.invoke(app, [*args, "-o", str(whole)]).exit_code == 0
    assert runner.invoke(app, [*args[:3], "3", *args[4:], "-o", str(part)]).exit_code == 0
    assert runner.invoke(app, [*args, "-o", str(part), "--resume"]).exit_code == 0
    assert same_records(whole, part)
    for index in range(2):
        shard = ["--shard", f"{index}/2", "-o", f"{shards}.{index}"]
        assert runner.invoke(app, [*args, *shard]).exit_code == 0
    shards.write_text("".join(Path(f"{shards}.{i}").read_text() for i in range(2)))
    assert same_records(whole, shards)
    assert all('"exact": {"log_weight"' in line for line in whole.read_text().splitlines())
    weights = [json.loads(line)["exact"]["log_weight"] for line in whole.read_text().splitlines()]
    assert any(w != 0.0 for w in weights)
