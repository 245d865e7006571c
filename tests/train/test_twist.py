"""`cdd train twist` and the twisted proposal: rollouts judged and reused, the twist's bounds
monotone, its tilt of strength 0 the model itself, and exact records batch-independent under
it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.methods import EXACT_BY_SETTING, shipped_twist
from cdd_cli.models import registry
from cdd_cli.models.twist import Twist, TwistConfig, grid_position, load_twist, save_twist
from cdd_cli.projection.exact import ExactSetting, twist_tilt
from cdd_cli.spec.model import Spec
from tests.generation import generation

TRAIN = ["train", "twist", "-c", "sa", "--taus", "3,3.5,4", "--rollouts", "64",
         "--kept-steps", "3", "--steps", "12", "--batch-size", "16", "-q"]  # fmt: skip


def test_train_twist_judges_rollouts_saves_a_loadable_twist_and_reuses_them(tmp_path: Path):
    out = tmp_path / "twist"
    runner = CliRunner()
    result = runner.invoke(app, [*TRAIN, "--out", str(out)])
    assert result.exit_code == 0, result.output
    twist = load_twist(out)
    assert twist.config.taus == [3.0, 3.5, 4.0] and twist.config.constraint == "sa"
    assert twist.config.revision == registry.load("default-molecules", "molecules").revision
    held = json.loads((out / "config.json").read_text())["held_out"]
    assert set(held["bounds"]) == {"3", "3.5", "4"}
    (chunk,) = sorted((out / "rollouts").glob("*.safetensors"))
    tensors = load_file(str(chunk))
    assert tensors["probs"].shape == (64 * 3, 24, 35) and tensors["score"].shape == (64,)
    texts = chunk.with_suffix(".txt").read_text().splitlines()
    # The scores are the judge's on the texts (NaN where no molecule was written).
    assert len(texts) == 64 and int(tensors["score"].isnan().sum()) < 32
    # A rerun reads the recorded rollouts (not drawn again) and fits the same twist.
    recorded = chunk.stat().st_mtime_ns
    weights = load_file(str(out / "model.safetensors"))
    assert runner.invoke(app, [*TRAIN, "--out", str(out)]).exit_code == 0
    assert chunk.stat().st_mtime_ns == recorded
    again = load_file(str(out / "model.safetensors"))
    assert all(torch.equal(weights[k], again[k]) for k in weights)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--taus", "3"], "at least two distinct"),
        (["--taus", "3,x"], "numbers separated by commas"),
        (["-c", "toxicity", "--taus", "0.2,0.5"], "molecule models only"),
    ],
)
def test_train_twist_refuses_bad_input_in_one_line(tmp_path: Path, args, message):
    base = ["train", "twist", "--out", str(tmp_path / "t"), "-c", "sa", "--taus", "3,4"]
    result = CliRunner().invoke(app, [*base, *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def small_twist(taus: list[float]) -> Twist:
    torch.manual_seed(0)
    config = TwistConfig(vocab_size=35, max_length=24, constraint="sa", upper_bound=True,
                         taus=taus)  # fmt: skip
    return Twist(config).eval()


def test_the_twists_estimate_never_falls_along_its_grid():
    twist = small_twist([2.0, 3.0, 4.0, 5.0])
    with torch.no_grad():
        for p in twist.head.parameters():
            p.normal_(std=3.0)  # large weights: a free head would cross its outputs
        probs = torch.rand(32, 24, 35).softmax(-1)
        logits = twist(probs, torch.rand(32))
    assert (logits.diff(dim=-1) >= 0).all()
    assert grid_position([2.0, 3.0, 4.0], 3.5) == 1.5
    assert grid_position([2.0, 3.0, 4.0], 9.0) == 2.0 and grid_position([4.0, 3.0], 3.25) == 0.75


def test_a_twist_tilt_of_strength_zero_is_the_models_own_prediction():
    twist = small_twist([3.0, 4.0])
    probs = torch.rand(4, 24, 35).softmax(-1)
    movable = torch.ones(4, 24, dtype=torch.bool)
    same = twist_tilt(probs, twist, [3.5], 0.5, 0.0, movable)
    assert torch.allclose(same, probs, atol=1e-6)
    moved = twist_tilt(probs, twist, [3.5], 0.5, 200.0, movable)
    assert (moved - probs).abs().max() > 1e-3


def test_exact_records_under_a_twist_are_the_same_at_batch_sizes_1_and_7(tmp_path, monkeypatch):
    loaded = registry.load("default-molecules", "molecules")
    twist = small_twist([3.0, 4.0])
    twist.config.revision = loaded.revision
    save_twist(twist, tmp_path / "twist")
    constraints = build_constraints([ConstraintSpec("sa", {"tau": 3.5}, "t")], loaded, "cpu")
    key = (loaded.revision, constraints[0].label())
    # An absolute folder stands where a shipped twist's name would (ASSETS / name).
    setting = ExactSetting(200.0, 0.0, math.log(0.5), "twist", str(tmp_path / "twist"))
    monkeypatch.setitem(EXACT_BY_SETTING, key, setting)
    shipped_twist.cache_clear()
    seen = {}
    for batch in (1, 7):
        spec = Spec(method="exact")
        spec.sampling.seed, spec.sampling.batch_size, spec.reject.max_attempts = 4, batch, 2
        draws = generation(spec, loaded, constraints, 6).run(range(7))
        seen[batch] = [(d.text, d.attempts, d.log_weight, d.accepted) for d in draws]
    shipped_twist.cache_clear()
    assert seen[1] == seen[7]
    assert any(abs(log_weight) > 1e-3 for _, _, log_weight, _ in seen[1])
