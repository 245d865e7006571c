"""QM9 reading and the resumable training loop."""

from __future__ import annotations

import csv
import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from cdd_cli.cli import app
from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import canonical
from cdd_cli.evaluate.reference import read_smiles, write_smiles
from cdd_cli.train.diffusion import TrainConfig, Trainer
from cdd_cli.train.qm9 import CSV_NAMES, read_qm9_smiles
from cdd_cli.train.surrogate import train_sa_surrogate
from tests.conftest import QM9_SAMPLE, make_tokenizer


def write_qm9_folder(root: Path, smiles: list[str]) -> Path:
    """Three CSVs in qm9pack's layout (only the columns we read, plus one more)."""
    data = root / "qm9pack" / "data"
    data.mkdir(parents=True)
    thirds = [smiles[i::3] for i in range(3)]
    for name, part in zip(CSV_NAMES, thirds, strict=True):
        with (data / name).open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["Index", "SMILES", "N_atoms"])
            writer.writerows([i, s, 0] for i, s in enumerate(part))
    return root


def test_read_qm9_canonicalises_strips_stereo_and_deduplicates(tmp_path: Path):
    raw = ["OCC", "CCO", "C[C@H](O)N", "C[C@@H](O)N", "c1ccoc1", "not-a-smiles"]
    folder = write_qm9_folder(tmp_path / "dir", raw)
    assert read_qm9_smiles(folder) == ["CCO", "CC(N)O", "c1ccoc1"]
    wheel = tmp_path / "qm9pack-1.0.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in CSV_NAMES:
            z.write(folder / "qm9pack" / "data" / name, f"qm9pack/data/{name}")
    assert read_qm9_smiles(wheel) == ["CCO", "CC(N)O", "c1ccoc1"]


def tiny_config(max_steps: int) -> TrainConfig:
    return TrainConfig(
        hidden_dim=32,
        n_blocks=1,
        n_heads=2,
        cond_dim=16,
        batch_size=16,
        length=24,
        max_steps=max_steps,
        warmup_steps=2,
        save_every=1000,
        eval_every=1000,
    )


def test_resumed_training_matches_uninterrupted(tmp_path: Path):
    tok = make_tokenizer()
    data = torch.tensor([tok.encode(s, 24) for s in QM9_SAMPLE])
    straight = Trainer(tiny_config(4), data, len(tok), tok.mask_id, tmp_path / "a")
    for _ in range(4):
        straight.train_step()
    first = Trainer(tiny_config(4), data, len(tok), tok.mask_id, tmp_path / "b")
    first.train_step()
    first.train_step()
    first.save_state()
    resumed = Trainer(tiny_config(4), data, len(tok), tok.mask_id, tmp_path / "b")
    assert resumed.load_state() and resumed.step == 2
    resumed.train_step()
    resumed.train_step()
    for (name, a), b in zip(
        straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.allclose(a, b, atol=1e-6), name
    for a, b in zip(straight.ema.parameters(), resumed.ema.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_learning_rate_warms_up_then_cools_down_to_zero(tmp_path: Path):
    tok = make_tokenizer()
    data = torch.tensor([tok.encode(s, 24) for s in QM9_SAMPLE])
    cfg = tiny_config(10)
    cfg.lr, cfg.warmup_steps, cfg.cooldown_steps = 1.0, 2, 4
    trainer = Trainer(cfg, data, len(tok), tok.mask_id, tmp_path)
    rates = []
    for _ in range(10):
        rates.append(trainer.learning_rate())
        trainer.train_step()
    assert rates == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.75, 0.5, 0.25]
    assert trainer.optimizer.param_groups[0]["lr"] == 0.25
    cfg.cooldown_steps = 0
    assert trainer.learning_rate() == 1.0


def test_loss_decreases_on_a_small_set(tmp_path: Path):
    tok = make_tokenizer()
    data = torch.tensor([tok.encode(s, 24) for s in QM9_SAMPLE])
    cfg = tiny_config(60)
    cfg.lr = 3e-3
    trainer = Trainer(cfg, data, len(tok), tok.mask_id, tmp_path)
    losses = [trainer.train_step() for _ in range(60)]
    assert sum(losses[-10:]) / 10 < 0.7 * sum(losses[:10]) / 10


def test_train_command_end_to_end_then_sample(tmp_path: Path):
    folder = write_qm9_folder(tmp_path / "qm9", QM9_SAMPLE * 2)
    out = tmp_path / "run"
    args = [
        "train",
        "molecules",
        "--out",
        str(out),
        "--qm9",
        str(folder),
        "--hidden-dim",
        "32",
        "--n-blocks",
        "1",
        "--n-heads",
        "2",
        "--cond-dim",
        "16",
        "--batch-size",
        "8",
        "--max-steps",
        "4",
        "--eval-every",
        "2",
        "--save-every",
        "2",
        "--sample-steps",
        "4",
        "--quiet",
    ]
    runner = CliRunner()
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert "final validity over 1,000 samples" in result.stderr
    state = json.loads((out / "train_state.json").read_text())
    assert state["step"] == 4 and [h["step"] for h in state["history"]] == [2, 4]
    _header, train = read_smiles(out / "reference.smi.gz")
    _, held_out = read_smiles(out / "heldout.smi.gz")
    assert not set(train) & set(held_out)
    assert set(train) | set(held_out) == {canonical(s) for s in QM9_SAMPLE}
    # A second invocation with a higher step count resumes rather than restarting.
    result = runner.invoke(
        app,
        [
            *args[:-9],
            "--max-steps",
            "6",
            "--eval-every",
            "2",
            "--save-every",
            "2",
            "--sample-steps",
            "4",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert "resuming" in result.stderr
    assert json.loads((out / "train_state.json").read_text())["step"] == 6
    sampled = runner.invoke(app, ["molecules", "--model", str(out), "-n", "3", "--quiet"])
    assert sampled.exit_code == 0, sampled.stderr
    assert len(sampled.stdout.splitlines()) == 3


class Interrupted(Exception):
    pass


def test_sa_surrogate_training_resumes_to_the_same_weights(tmp_path: Path, uniform_model_dir: Path):
    model = tmp_path / "model"
    shutil.copytree(uniform_model_dir, model)
    write_smiles(model / "heldout.smi.gz", QM9_SAMPLE[::2], "tests")

    def train(out: Path, stop_at: int | None = None) -> None:
        def on_step(step: int, loss: float) -> None:
            if step == stop_at:
                raise Interrupted

        train_sa_surrogate(model, out, 20, 16, 2e-3, 16, 1, 0, lambda _: None, on_step, 5)

    train(tmp_path / "whole")
    with pytest.raises(Interrupted):
        train(tmp_path / "parts", stop_at=12)  # the last save was at step 10
    assert json.loads((tmp_path / "parts" / "train_state.json").read_text())["step"] == 10
    assert not (tmp_path / "parts" / "model.safetensors").exists()
    # Other settings in the same folder are refused rather than mixed in.
    with pytest.raises(InputError, match="other settings \\(steps\\)"):
        train_sa_surrogate(model, tmp_path / "parts", 30, 16, 2e-3, 16, 1, 0, print, print, 5)
    train(tmp_path / "parts")
    whole = load_file(str(tmp_path / "whole" / "model.safetensors"))
    parts = load_file(str(tmp_path / "parts" / "model.safetensors"))
    assert whole.keys() == parts.keys()
    assert all(torch.equal(whole[k], parts[k]) for k in whole)
    assert not (tmp_path / "parts" / "train_state.json").exists()  # finished: state removed
