"""QM9 reading and the resumable training loop."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
import typer
from safetensors.torch import load_file
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.cli.config_options import field_metadata
from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import canonical
from cdd_cli.evaluate.reference import read_smiles, write_smiles
from cdd_cli.train.configs import MoleculesConfig, SurrogateFit, TextConfig
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


@pytest.mark.slow
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


def test_sa_surrogate_training_reads_the_first_n_molecules_only(
    tmp_path: Path, uniform_model_dir: Path
):
    # A drug-sized training set (MOSES: 1.5M molecules) takes RDKit most of an hour to label.
    model = tmp_path / "model"
    shutil.copytree(uniform_model_dir, model)
    write_smiles(model / "heldout.smi.gz", QM9_SAMPLE[::2], "tests")
    said: list[str] = []
    out = tmp_path / "sa"
    train_sa_surrogate(model, out, 4, 8, 2e-3, 16, 1, 0, said.append, lambda *_: None, limit=3)
    assert "labelling 6 sequences (molecules and corrupted copies) with RDKit ..." in said
    assert (out / "model.safetensors").is_file()


TRAIN_COMMANDS = ["molecules", "text", "adapt", "toxicity-surrogate", "sa-surrogate"]
TRAIN_COMMANDS += ["property-surrogate", "surrogate"]


def train_command_params(name: str) -> dict:
    """The click parameters of `cdd train NAME`, by name, as Typer built them."""
    group = typer.main.get_command(app).commands["train"]
    return {p.name: p for p in group.commands[name].params}


@pytest.mark.parametrize("command", TRAIN_COMMANDS)
def test_every_train_option_has_help(command: str):
    params = train_command_params(command)
    assert [name for name, p in params.items() if not (p.help or "").strip()] == []


@pytest.mark.parametrize(
    ("command", "config", "name"),
    [
        ("molecules", MoleculesConfig, "hidden_dim"),
        ("molecules", MoleculesConfig, "length"),
        ("text", TextConfig, "sample_steps"),
        ("sa-surrogate", SurrogateFit, "steps"),
    ],
)
def test_a_generated_option_carries_its_fields_default_and_help(command, config, name):
    param = train_command_params(command)[name]
    (field,) = [f for f in dataclasses.fields(config) if f.name == name]
    assert param.opts == ["--" + name.replace("_", "-")]
    assert param.default == field.default
    assert param.help == field_metadata(config, name)["help"]


def test_a_subclass_keeps_its_bases_help_and_fixes_what_it_hides():
    # Text models are always masked: no --noise there; molecules choose.
    assert "noise" not in train_command_params("text")
    assert train_command_params("molecules")["noise"].default == "uniform"
    tie = train_command_params("text")["tie_embeddings"]
    assert tie.opts == ["--tie-embeddings"] and tie.secondary_opts == ["--untied"]
    assert tie.default is True and "tie_embeddings" not in train_command_params("molecules")
    assert field_metadata(MoleculesConfig, "lr") == field_metadata(TrainConfig, "lr")


def test_the_train_commands_build_the_configs_they_always_did(tmp_path: Path, monkeypatch):
    import cdd_cli.train.molecules
    import cdd_cli.train.text

    seen = []
    monkeypatch.setattr(cdd_cli.train.text, "train_text", lambda cfg, *_: seen.append(cfg))
    monkeypatch.setattr(
        cdd_cli.train.molecules, "train_molecules", lambda cfg, *_: seen.append(cfg)
    )
    monkeypatch.setattr("cdd_cli.train.qm9.locate_qm9", lambda path: tmp_path)
    out = str(tmp_path / "run")
    runner = CliRunner()
    assert runner.invoke(app, ["train", "text", "--out", out, "--data", out]).exit_code == 0
    assert runner.invoke(app, ["train", "molecules", "--out", out, "--untied"]).exit_code == 2
    args = ["train", "molecules", "--out", out, "--noise", "masked", "--lr", "0.01"]
    assert runner.invoke(app, args).exit_code == 0
    shared = dict(hidden_dim=128, n_blocks=4, n_heads=4, cond_dim=128, lr=2e-3, max_steps=20000)
    shared |= dict(cooldown_steps=0, eval_every=500, save_every=100, weight_decay=0.0)
    shared |= dict(grad_clip=1.0, ema_decay=0.999, eval_samples=256, seed=0)
    text = dict(noise="masked", length=128, batch_size=32, warmup_steps=100, sample_steps=64)
    assert dataclasses.asdict(seen[0]) == {**shared, **text, "tie_embeddings": True}
    # A molecule model's length comes from its data unless --length is given.
    molecules = dict(noise="masked", length=None, batch_size=512, warmup_steps=200, sample_steps=32)
    assert dataclasses.asdict(seen[1]) == {
        **shared,
        **molecules,
        "tie_embeddings": False,
        "lr": 0.01,
        "representation": "smiles",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["text", "--data", "x", "--n-blocks", "0"], "--n-blocks must be at least 1, got 0"),
        (["molecules", "--length", "3"], "--length must be at least 4 (<bos>, an atom, <eos>)"),
        (["molecules", "--noise", "gaussian"], "--noise must be uniform or masked, got 'gaussian'"),
        (["adapt", "--data", "x", "--lr", "-1"], "--lr must be a positive number, got -1.0"),
        (["adapt", "--data", "x", "--max-minutes", "0"], "--max-minutes must be a positive number"),
        (["sa-surrogate", "--steps", "3"], "--steps must be at least 4, got 3"),
        (["property-surrogate", "--molecules", "0"], "--molecules must be at least 1, got 0"),
        (["surrogate", "--examples", "0"], "--examples must be at least 1, got 0"),
        (["surrogate", "--hidden-dim", "6"], "must split into the surrogate's 4 heads: 6"),
        (["toxicity-surrogate", "--data", "x", "--corpus", "x", "--corpus-spans", "0"],
         "--corpus-spans must be at least 1, got 0"),
        (["text", "--data", "x", "--threads", "0"], "--threads must be at least 1, got 0"),
    ],
)  # fmt: skip
def test_a_bad_generated_option_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
):
    result = CliRunner().invoke(app, ["train", args[0], "--out", str(tmp_path / "o"), *args[1:]])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("cdd: error: ") and message in line
    assert not (tmp_path / "o").exists()
