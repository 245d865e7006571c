"""The text path: GPT-2 tokenizer, tied models, prompts as fixed prefixes, `cdd generate`,
the toxicity constraint, `cdd train text` and `cdd train toxicity-surrogate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.diffusion.processes import MaskedProcess, UniformProcess
from cdd_cli.diffusion.sampler import Canvas, Sampler, StepInfo, sample_generator, sample_seed
from cdd_cli.errors import InputError
from cdd_cli.models.checkpoint import load_model
from cdd_cli.models.tokenizers import Gpt2Tokenizer, load_tokenizer
from tests.conftest import build_text_model
from tests.models.test_checkpoint import write_mdlm_owt

V = 50258
runner = CliRunner()


def generate(model: Path, *args: str, **kwargs):
    return runner.invoke(app, ["generate", "--model", str(model), "--quiet", *args], **kwargs)


def records(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_gpt2_ids_and_mask_convention(tmp_path: Path):
    tok = Gpt2Tokenizer()
    assert tok.encode("Hello world") == [15496, 995]  # OpenAI's GPT-2 ids
    assert (len(tok), tok.mask_id, tok.eos_id) == (50258, 50257, 50256)
    assert tok.decode([*tok.encode(" a cat"), tok.mask_id, tok.eos_id, 995]) == " a cat"
    # No tokenizer.json: GPT-2 when the vocabulary is GPT-2's (mdlm-owt), else a clear error.
    assert isinstance(load_tokenizer(tmp_path, V), Gpt2Tokenizer)
    with pytest.raises(InputError, match="its tokenizer is unknown"):
        load_tokenizer(tmp_path, 35)


def test_tied_model_round_trip_and_position_subset(text_model_dir: Path):
    model = load_model(text_model_dir)
    keys = set(model.state_dict())
    assert "backbone.output_layer.bias" in keys
    assert "backbone.output_layer.linear.weight" not in keys  # no tensor stored twice
    ids = torch.randint(V, (2, 10), generator=torch.Generator().manual_seed(0))
    sigma = torch.zeros(2)
    full = model(ids, sigma)
    where = torch.zeros(2, 10, dtype=torch.bool)
    where[0, 3] = where[1, 7] = True
    subset = model(ids, sigma, where=where)
    assert torch.allclose(subset, full[where], atol=1e-5)


@pytest.mark.parametrize("noise", ["masked", "uniform"])
def test_prefix_stays_fixed_and_conditions_the_rest(tmp_path: Path, noise: str):
    model = load_model(build_text_model(tmp_path, noise))
    process = MaskedProcess(V, 50257) if noise == "masked" else UniformProcess(V)
    sampler = Sampler(model, process, 4, noise == "uniform")
    prefix = torch.tensor([464, 3797, 3332])
    seen = {}

    def record(probs: torch.Tensor, x: torch.Tensor, info: StepInfo) -> torch.Tensor:
        seen.setdefault(tuple(x[0, :3].tolist()), probs[:, 3:].clone())
        return probs

    with torch.no_grad():
        out = sampler.sample(
            [sample_generator(0, 0, i) for i in range(3)], Canvas.prompt(prefix, 5), record
        )
        sampler.sample(
            [sample_generator(0, 0, i) for i in range(3)],
            Canvas.prompt(torch.tensor([40, 1, 2]), 5),
            record,
        )
    assert out.shape == (3, 8)
    assert (out[:, :3] == prefix).all()
    assert not (out == 50257).any()
    # Same noise, another prompt: the continuation's first prediction differs.
    first, second = seen.values()
    assert not torch.allclose(first, second)


def test_generate_records_ids_prompts_and_continuations(text_model_dir: Path, tmp_path: Path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "The cat", "id": "a"}\n\n{"prompt": "Once upon"}\n')
    result = generate(text_model_dir, "--prompts", str(prompts), "-n", "2", "--length", "6")
    assert result.exit_code == 0, result.output
    rows = records(result.stdout)
    assert [r["id"] for r in rows] == ["0-0", "0-1", "1-0", "1-1"]
    assert [r["prompt"] for r in rows] == ["The cat", "The cat", "Once upon", "Once upon"]
    assert rows[0]["prompt_id"] == "a" and rows[2]["prompt_id"] is None
    assert all(not r["text"].startswith("The cat") for r in rows)
    again = generate(
        text_model_dir, "--prompt", "Once upon", "-n", "2", "--length", "6", "--batch-size", "1"
    )
    # Same seed, same (prompt text, sample) -> the same text whatever the batch size; the
    # prompt index differs (0 here, 1 above), so compare with a run at the same index.
    first = generate(text_model_dir, "--prompt", "Once upon", "-n", "2", "--length", "6")
    assert [r["text"] for r in records(again.stdout)] == [r["text"] for r in records(first.stdout)]
    # Each record names the stream it was drawn from: the sample's own, not the batch's.
    streams = [r["sample_seed"] for r in records(first.stdout)]
    assert streams == [r["sample_seed"] for r in records(again.stdout)]
    assert streams == [str(sample_seed(0, 0, 0)), str(sample_seed(0, 0, 1))]
    assert len(set(streams)) == 2
    assert {r["sample_seed"] for r in rows} == {
        str(sample_seed(0, p, i)) for p in (0, 1) for i in (0, 1)
    }


def test_mdlm_owt_directory_generates_without_tokenizer_file(tmp_path: Path):
    write_mdlm_owt(tmp_path / "owt")
    assert not (tmp_path / "owt" / "tokenizer.json").exists()
    result = generate(
        tmp_path / "owt",
        "--prompt",
        "Hello",
        "-n",
        "1",
        "--length",
        "4",
        "--steps",
        "2",
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert result.exit_code == 0, result.output
    (row,) = records(result.stdout)
    assert row["prompt"] == "Hello" and isinstance(row["text"], str)


@pytest.mark.parametrize(
    ("args", "stdin", "expected"),
    [
        (["--prompt", "   "], None, "--prompt: the prompt is empty"),
        (["--prompt", "word " * 60], None, "exceed model"),
        (["--prompts", "-"], b"\xff\xfe bad\n", "not UTF-8"),
        (["--prompts", "-"], b'{"text": "x"}\n', "stdin:1: expected an object"),
        (["--prompts", "-"], b'{"prompt": "ok"}\n{"prompt": ""}\n', "stdin:2: the prompt"),
        (["--prompts", "-"], b"not json\n", "stdin:1: not a JSON object"),
        (["--prompt", "a", "--length", "0"], None, "--length must be positive"),
        (["-c", "toxicity", "--tau", "1.5"], None, "outside [0, 1]"),
    ],
)
def test_bad_text_input_is_one_line_exit_2(
    text_model_dir: Path, args: list[str], stdin: bytes | None, expected: str
):
    result = runner.invoke(
        app, ["generate", "--model", str(text_model_dir), "--length", "8", *args], input=stdin
    )
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_prompts_file_that_starts_with_a_byte_order_mark_is_read(tmp_path: Path):
    from cdd_cli.prompts import read_prompts

    path = tmp_path / "p.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "Hello", "id": 7}\n{"prompt": "Bye"}\n')
    assert [(p.text, p.id) for p in read_prompts(str(path))] == [("Hello", 7), ("Bye", None)]


def test_molecule_surrogate_refuses_a_text_model(text_model_dir: Path):
    result = runner.invoke(
        app, ["generate", "--model", str(text_model_dir), "-c", "sa", "--tau", "3"]
    )
    assert result.exit_code == 2
    assert "applies to molecules" in result.stderr


def toxicity_spec(tmp_path: Path, surrogate: Path, tau: float, scope: str) -> Path:
    spec = tmp_path / f"tox-{tau}-{scope}.yaml"
    spec.write_text(
        "constraints:\n  - type: toxicity\n"
        f"    tau: {tau}\n    surrogate: {surrogate}\n    scope: {scope}\n"
    )
    return spec


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["continuation", "full"])
def test_toxicity_cdd_satisfies_what_unconstrained_violates(
    text_model_dir: Path, toxicity_dir: Path, tmp_path: Path, scope: str
):
    common = ["generate", "--model", str(text_model_dir), "--prompt", "You are", "-n", "6"]
    common += ["--length", "8", "--quiet"]
    probe = runner.invoke(
        app,
        [*common, "--spec", str(toxicity_spec(tmp_path, toxicity_dir, 1.0, scope))],
        catch_exceptions=False,
    )
    free = sorted(r["constraints"]["toxicity"]["value"] for r in records(probe.stdout))
    tau = round(free[1], 4)  # most unconstrained samples violate this
    spec = toxicity_spec(tmp_path, toxicity_dir, tau, scope)
    unconstrained = runner.invoke(app, [*common, "--spec", str(spec), "--method", "unconstrained"])
    assert unconstrained.exit_code == 3  # written, but some violate
    assert sum(not r["satisfied"] for r in records(unconstrained.stdout)) >= 4
    cdd = runner.invoke(app, [*common, "--spec", str(spec)])
    rows = records(cdd.stdout)
    assert cdd.exit_code == 0, cdd.stderr
    for r in rows:
        report = r["constraints"]["toxicity"]
        assert report["value"] <= tau and report["satisfied"] and r["satisfied"]
        assert report["judge"] == "cdd-toxicity-classifier"


def test_the_toxicity_judge_and_surrogate_read_what_their_scope_names(toxicity_dir: Path):
    from cdd_cli.constraints.toxicity import ToxicityConstraint
    from cdd_cli.models.surrogate import load_surrogate

    net, tokenizer = load_surrogate(toxicity_dir), Gpt2Tokenizer()
    prompt, texts = "The weather today", [" is calm", "", " word" * 100]
    prompt_ids = tokenizer.encode(prompt)

    def classifier(strings: list[str]) -> list[float]:  # the judge, written out
        ids, mask = tokenizer.encode_padded(strings, net.config.max_length)
        return [round(v, 4) for v in torch.sigmoid(net(ids, mask)).tolist()]

    continuation, full = (
        ToxicityConstraint(tau=0.5, net=net, tokenizer=tokenizer, scope=scope).with_prompt(
            prompt, len(prompt_ids)
        )
        for scope in ("continuation", "full")
    )
    assert continuation.judge(texts) == classifier(texts)  # the third cut to 64 tokens
    assert full.judge(texts) == classifier([prompt + t for t in texts])
    assert continuation.judge(texts)[0] != full.judge(texts)[0]
    # The surrogate on the one-hot tokens of the prompt and a continuation scores what the
    # judge's classifier scores on those tokens: past the prompt, or all of them.
    ids = prompt_ids + tokenizer.encode(" is calm")
    soft = torch.nn.functional.one_hot(torch.tensor([ids]), V).float()
    with torch.no_grad():
        past_prompt = torch.sigmoid(net(torch.tensor([ids[len(prompt_ids) :]])))
        everything = torch.sigmoid(net(torch.tensor([ids])))
        assert torch.allclose(continuation.surrogate(soft), past_prompt, atol=1e-5)
        assert torch.allclose(full.surrogate(soft), everything, atol=1e-5)
    assert not torch.allclose(past_prompt, everything, atol=1e-3)


@pytest.mark.slow
def test_train_text_and_resume_from_weights_alone(tmp_path: Path):
    data = tmp_path / "corpus"
    data.mkdir()
    (data / "a.txt").write_text("Call me Ishmael.\n\nSome years ago, never mind how long.\n" * 40)
    out = tmp_path / "run"
    args = ["train", "text", "--out", str(out), "--data", str(data), "--hidden-dim", "16"]
    args += ["--n-heads", "2", "--n-blocks", "1", "--length", "16", "--batch-size", "4"]
    args += ["--eval-every", "2", "--save-every", "2", "--sample-steps", "2", "--quiet"]
    first = runner.invoke(app, [*args, "--max-steps", "2"])
    assert first.exit_code == 0, first.output
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] and config["tokenizer"] == "gpt2-bpe"
    assert config["torch_dtype"] == "float16"
    # A fresh machine has only the committed float16 export: training goes on from it.
    (out / "train_state.safetensors").unlink()
    second = runner.invoke(app, [*args, "--max-steps", "4"])
    assert second.exit_code == 0, second.output
    assert "step 2 (from weights state)" in second.stderr
    assert json.loads((out / "config.json").read_text())["training_steps"] == 4
    loaded = load_model(out)
    assert loaded.config.vocab_size == V


def test_molecules_refuses_a_text_model(text_model_dir: Path):
    result = runner.invoke(app, ["molecules", "--model", str(text_model_dir), "-n", "1"])
    assert result.exit_code == 2
    assert "is a text model: use `cdd generate`" in result.stderr


def test_review_fixes_for_text_input(text_model_dir: Path, tmp_path: Path):
    # A lone surrogate (valid JSON escape, not text) is bad input, not a crash.
    result = generate(text_model_dir, "--prompts", "-", input=b'{"prompt": "hi \\ud800"}\n')
    assert result.exit_code == 2 and "not valid Unicode" in result.stderr
    # The resolved config beside -o names the model and validates as a spec again.
    out = tmp_path / "o.jsonl"
    made = generate(text_model_dir, "--prompt", "A", "-n", "1", "--length", "4", "-o", str(out))
    assert made.exit_code == 0, made.stderr  # no constraint: nothing can be violated
    config = tmp_path / "o.jsonl.config.yaml"
    assert f"model: {text_model_dir}" in config.read_text()
    assert "support: 256\n" in config.read_text()  # a text model's defaults
    assert "inner_iters: 5\n" in config.read_text() and "mu_init: 64.0\n" in config.read_text()
    assert runner.invoke(app, ["validate", str(config)]).exit_code == 0
    # Lexical types take their options from a spec file only: the flag says so.
    spec = tmp_path / "t.yaml"
    spec.write_text("constraints:\n  - type: word_count\n    max: 3\n")
    result = generate(
        text_model_dir, "--spec", str(spec), "-c", "word_count", "--length", "4", "-n", "1"
    )
    assert (
        result.exit_code == 2
        and "word_count: its options (min, max, equals) are given in a spec file" in result.stderr
    )


@pytest.mark.slow
def test_few_steps_still_project(text_model_dir: Path, toxicity_dir: Path, tmp_path: Path):
    spec = toxicity_spec(tmp_path, toxicity_dir, 0.0, "continuation")
    result = generate(
        text_model_dir, "--spec", str(spec), "--steps", "3", "--length", "4", "-n", "1",
        "--prompt", "A",
    )  # fmt: skip
    (row,) = records(result.stdout)
    assert row["projection"]["steps"] >= 1 and row["projection"]["outer_iters"] >= 1


@pytest.mark.slow
def test_usage_errors_are_one_line_exit_2():
    import subprocess
    import sys

    from tests.limits import HANG_S

    command = [sys.executable, "-m", "cdd_cli", "generate", "-n", "abc"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 2
    assert (
        done.stderr.strip().count("\n") == 0
        and "Invalid value for '--num-samples' / '-n'" in done.stderr
    )


class Interrupted(Exception):
    pass


@pytest.mark.slow
def test_toxicity_surrogate_training_resumes_to_the_same_weights(tmp_path: Path):
    from safetensors.torch import load_file

    from cdd_cli.train.toxicity import train_toxicity_surrogate

    data = tmp_path / "labeled_data.csv"
    rows = ["count,class,tweet"] + [
        f"3,{i % 3},tweet number {i} about {'rain' if i % 2 else 'sun'} today" for i in range(200)
    ]
    data.write_text("\n".join(rows) + "\n")

    def train(out: Path, stop_at: int | None = None) -> dict:
        def on_step(step: int, loss: float) -> None:
            if step == stop_at:
                raise Interrupted

        return train_toxicity_surrogate(
            data, out, None, 0, 2, 16, 2e-3, 0, lambda _: None, on_step, save_every=5
        )

    whole = train(tmp_path / "whole")
    with pytest.raises(Interrupted):
        train(tmp_path / "parts", stop_at=17)  # saved at 15, inside the second epoch
    assert json.loads((tmp_path / "parts" / "train_state.json").read_text())["step"] == 15
    parts = train(tmp_path / "parts")
    assert parts["roc_auc"] == whole["roc_auc"]
    a = load_file(str(tmp_path / "whole" / "model.safetensors"))
    b = load_file(str(tmp_path / "parts" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_hub_id_without_network_is_one_line_and_no_download(monkeypatch):
    # Only a hub id given explicitly is ever fetched; offline, the refusal is one line.
    import cdd_cli.models.registry as registry_module

    def no_download(repo_id):  # the test must fail rather than reach for a network
        raise AssertionError(f"tried to download {repo_id}")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = generate("hf://someone/some-model", "--prompt", "Hello", "-n", "1")
    assert result.exit_code == 2
    assert (
        result.stderr
        == "cdd: error: --model hf://someone/some-model: HF_HUB_OFFLINE=1 and it is not in "
        "the local Hugging Face cache, so no download\n"
    )
    monkeypatch.setattr(registry_module, "download_from_hub", no_download)
    # A missing local path with one slash is a missing path, never a hub id.
    typo = generate("runs/qm9", "--prompt", "Hello", "-n", "1")
    assert typo.exit_code == 2 and "no such directory" in typo.stderr
    assert "for a model on the Hugging Face hub, write hf://runs/qm9" in typo.stderr
    default = generate("default-text", "--prompt", "Hello", "-n", "1", "--length", "2")
    assert default.exit_code == 0, default.stderr  # the default path never downloads
