"""Published diffusion LM families (LLaDA, Dream, dllm's A2D) read natively: logits against
transformers' own modules with the same weights, sampling under constraints with every
sampler, and the checkpoints refused with one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import cdd_cli as cdd
from cdd_cli.cli.app import app
from cdd_cli.constraints.lexical import split_words
from cdd_cli.constraints.lexical.judges import word_count
from cdd_cli.diffusion.processes import OrderedProcess
from cdd_cli.models import registry
from tests import family_dirs

runner = CliRunner()
FAMILIES = ("llada", "Dream", "a2d-qwen3", "a2d-llama")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    root = tmp_path_factory.mktemp("families")
    return {f: family_dirs.build(root / f, f, seed=k) for k, f in enumerate(FAMILIES)}


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_transformers_modules_with_bidirectional_attention(built, family):
    folder, state = built[family]
    model = cdd.load_model(str(folder), device="cpu")
    assert model.family == family
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, family_dirs.SMOLLM2_TOKENS, (2, 11), generator=generator)
    ids[0, 3] = ids[1, 7] = family_dirs.MASK_ID
    ours = model.logits(ids)
    theirs = family_dirs.bidirectional_logits(family_dirs.reference(family, state), ids)
    if family == "Dream":  # its generation code reads position j from the output at j - 1
        theirs = torch.cat([theirs[:, :1], theirs[:, :-1]], dim=1)
    # Only the tokenizer's columns: the embedding's padded rows are never output.
    assert ours.shape == (2, 11, family_dirs.MASK_ID + 1)
    theirs = theirs[..., : ours.shape[-1]].clone()
    theirs[..., family_dirs.MASK_ID] = -torch.inf  # no sampler draws the mask
    assert theirs[..., :-1].abs().max() > 1.0  # logits far apart enough to tell layouts apart
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=0), (ours - theirs)[..., :-1].abs().max()


@pytest.mark.slow
def test_weights_keep_their_dtype_when_asked_and_are_float32_on_a_cpu_by_default(built):
    folder, _ = built["Dream"]
    kept = registry.load(str(folder), "text", "cpu", "bfloat16").model
    assert {p.dtype for p in kept.parameters()} == {torch.bfloat16}
    default = registry.load(str(folder), "text", "cpu").model
    assert {p.dtype for p in default.parameters()} == {torch.float32}
    # Tied embeddings stay tied after loading (one tensor, not a copy).
    qwen3 = registry.load(str(built["a2d-qwen3"][0]), "text", "cpu").model
    assert qwen3.lm_head.weight is qwen3.model.embed_tokens.weight


def judged(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


LEXICAL = """constraints:
  - type: word_count
    min: 4
    max: 7
  - type: include
    words: [harbor]
  - type: exclude
    words: [the]
  - type: count
    letter: r
    word: harbor
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "sampler"),
    [
        ("llada", None),  # the family's own: confidence in blocks of 32
        ("Dream", None),  # entropy
        ("a2d-qwen3", None),  # ancestral
        ("llada", "ancestral"),
        ("Dream", "margin"),
        ("a2d-llama", "confidence"),
    ],
)
def test_generate_under_lexical_and_counting_constraints_has_no_violations(
    built, tmp_path, family, sampler
):
    spec = tmp_path / "lexical.yaml"
    spec.write_text(LEXICAL)
    args = ["generate", "--model", str(built[family][0]), "--spec", str(spec), "-n", "4"]
    args += ["--length", "14", "--steps", "7", "-q", "--seed", "3"]
    args += ["--sampler", sampler] if sampler else []
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    records = judged(result.output)
    assert len(records) == 4
    for record in records:
        assert record["satisfied"] is True, record
        text = record["text"]  # judged again here, by the plain word rules
        assert word_count(text, min=4, max=7), text
        words = [w.lower() for w in split_words(text)]
        assert "harbor" in words and "the" not in words, text


@pytest.mark.slow
def test_the_family_sampler_and_precision_are_in_the_resolved_configuration(built, tmp_path):
    out = tmp_path / "out.jsonl"
    args = ["generate", "--model", str(built["llada"][0]), "-n", "1", "--length", "8"]
    args += ["--steps", "2", "--block-length", "4", "-q", "-o", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    config = (tmp_path / "out.jsonl.config.yaml").read_text()
    assert "sampler: confidence" in config and "block_length: 4" in config
    assert "dtype: float32" in config
    # The same output with another sampler is refused before any sampling.
    again = runner.invoke(app, [*args, "--sampler", "entropy"])
    assert again.exit_code == 2 and "sampling.sampler differs" in again.output


@pytest.mark.slow
def test_same_seed_same_records_at_any_batch_size_with_an_ordered_sampler(built):
    common = dict(model=str(built["Dream"][0]), length=12, steps=6, device="cpu", seed=5)
    common |= dict(constraints=[cdd.WordCount(max=5)], sampler="confidence", block_length=4)
    one = [r["text"] for r in cdd.generate("A harbor", n=3, batch_size=1, **common)]
    three = [r["text"] for r in cdd.generate("A harbor", n=3, batch_size=3, **common)]
    assert one == three and len(set(one)) > 1


def test_ordered_steps_split_a_block_as_llada_does_and_never_look_past_it():
    process = OrderedProcess(vocab_size=6, mask_id=5, order="confidence", block_length=10)
    generator = torch.Generator().manual_seed(0)
    probs = torch.rand(1, 20, 6, generator=generator)
    probs[..., 5] = 0
    probs /= probs.sum(-1, keepdim=True)
    x = torch.full((1, 20), 5)
    times = process.timesteps(8).tolist()  # 2 blocks of 10 positions, 4 steps each
    decided = []
    for i in range(8):
        uniforms = torch.rand(1, 20, generator=generator)
        changing = process.changing(x, times[i], times[i + 1], uniforms, probs)
        first_block = i < 4
        assert not changing[0, 10:].any() if first_block else not changing[0, :10].any()
        decided.append(int(changing.sum()))
        x = process.step(probs, x, times[i], times[i + 1], uniforms, changing)
    assert decided == [3, 3, 2, 2, 3, 3, 2, 2]  # LLaDA: 10 masks over 4 steps, remainder first
    assert not (x == 5).any()


@pytest.mark.parametrize(("order", "chosen"), [("confidence", 0), ("margin", 3), ("entropy", 2)])
def test_each_order_decides_the_position_its_measure_ranks_first(order, chosen):
    """Four positions the three measures rank differently (each decides one of four)."""
    process = OrderedProcess(vocab_size=7, mask_id=6, order=order)
    rows = [
        [0.6, 0.4, 0, 0, 0, 0, 0],  # drawn (u 0.1): 0.6, the surest draw; margin 0.2
        [0.5, 0.1, 0.1, 0.1, 0.1, 0.1, 0],  # drawn 0.5; margin 0.4; the flattest
        [0.8, 0.2, 0, 0, 0, 0, 0],  # drawn (u 0.9): 0.2; margin 0.6; the least entropy
        [0.85, 0.05, 0.05, 0.05, 0, 0, 0],  # drawn (u 0.97): 0.05; margin 0.8, the widest
    ]
    probs = torch.tensor(rows).unsqueeze(0)
    uniforms = torch.tensor([[0.1, 0.1, 0.9, 0.97]])
    x = torch.full((1, 4), 6)
    changing = process.changing(x, 1.0, 0.75, uniforms, probs)  # ceil(4 * 0.25) = 1
    assert changing[0].nonzero().flatten().tolist() == [chosen]
    # Without a `changing`, a step decides the same position, with the token it ranked.
    step = process.step(probs, x, 1.0, 0.75, uniforms)
    assert (step != 6).nonzero()[:, 1].tolist() == [chosen]
    assert int(step[0, chosen]) == {0: 0, 3: 3, 2: 1}[chosen]


def test_ties_are_decided_left_to_right_and_an_unknown_order_is_refused():
    process = OrderedProcess(vocab_size=3, mask_id=2, order="margin")
    probs = torch.tensor([0.7, 0.3, 0.0]).expand(1, 6, 3)
    changing = process.changing(torch.full((1, 6), 2), 1.0, 0.5, torch.zeros(1, 6), probs)
    assert changing[0].tolist() == [True, True, True, False, False, False]
    with pytest.raises(ValueError, match="'fastest' is not one of confidence, margin, entropy"):
        OrderedProcess(vocab_size=3, mask_id=2, order="fastest")


def block_of_two(masked_in_first: int, masked_in_second: int) -> tuple:
    """Two blocks of 10: the first `masked_in_first` positions of each block masked."""
    process = OrderedProcess(vocab_size=4, mask_id=3, order="confidence", block_length=10)
    x = torch.zeros(1, 20, dtype=torch.long)
    x[0, :masked_in_first] = 3
    x[0, 10 : 10 + masked_in_second] = 3
    probs = torch.tensor([0.5, 0.3, 0.2, 0.0]).expand(1, 20, 4)
    return process, x, probs, torch.full((1, 20), 0.5)


def test_a_block_decides_its_share_of_its_own_time_whatever_the_clock_says():
    # The first block done early: the second's time is [0, 0.5]. At t 0.6 -> 0.4 it is
    # 0.2 of the way, so 2 of its 10 masks (not a share of the clock past its start).
    process, x, probs, u = block_of_two(0, 10)
    assert process.changing(x, 0.6, 0.4, u, probs)[0].nonzero().flatten().tolist() == [10, 11]
    # Before its time no share is due, yet every step decides one while the block has any.
    process, x, probs, u = block_of_two(0, 1)
    assert process.changing(x, 1.0, 0.75, u, probs)[0].nonzero().flatten().tolist() == [10]
    # Past its time (a first block still masked at t 0.4, its time [0.5, 1]) a block decides
    # all it has left, and nothing of the next.
    process, x, probs, u = block_of_two(4, 10)
    assert process.changing(x, 0.4, 0.2, u, probs)[0].nonzero().flatten().tolist() == [0, 1, 2, 3]
    # Nothing masked: nothing to decide.
    process, x, probs, u = block_of_two(0, 0)
    assert not process.changing(x, 0.6, 0.4, u, probs).any()


def test_an_ordered_step_needs_the_prediction_and_scores_each_row_by_its_own_draw():
    from cdd_cli.diffusion.schedule import LogLinearSchedule

    process = OrderedProcess(vocab_size=3, mask_id=2)
    assert process.order == "confidence" and process.block_length == 0
    schedule = LogLinearSchedule()
    assert OrderedProcess(3, 2, schedule=schedule).schedule is schedule
    with pytest.raises(ValueError) as refused:
        process.changing(torch.full((1, 2), 2), 1.0, 0.5, torch.zeros(1, 2))
    assert str(refused.value) == "an ordered sampler ranks positions by the prediction"
    rows = torch.tensor([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.6, 0.4, 0.0]])
    drawn = process.scores(rows, torch.tensor([0.5, 0.5, 0.95]))  # tokens 0, 1 and 1
    assert drawn.tolist() == pytest.approx([0.9, 0.8, 0.4])


@pytest.mark.parametrize("steps", [4, 5, 7])
def test_blocks_start_after_the_prompt_and_every_step_decides_in_its_own_block(steps):
    """A 3-token prompt, then 2 blocks of 4: steps (a multiple of the blocks or not) decide
    the first block's positions before any of the second's, each step at least one."""
    process = OrderedProcess(vocab_size=5, mask_id=4, order="confidence", block_length=4)
    generator = torch.Generator().manual_seed(steps)
    probs = torch.rand(1, 11, 5, generator=generator)
    probs[..., 4] = 0
    x = torch.cat([torch.tensor([[0, 1, 2]]), torch.full((1, 8), 4)], dim=1)
    times = process.timesteps(steps).tolist()
    order = []
    for i in range(steps - 1):  # the last step is the noise removal (finish)
        uniforms = torch.rand(1, 11, generator=generator)
        changing = process.changing(x, times[i], times[i + 1], uniforms, probs, start=3)
        assert not changing[0, :3].any() and changing.any()
        order.append(changing[0].nonzero().flatten().tolist())
        x = process.step(probs, x, times[i], times[i + 1], uniforms, changing)
    decided = [p for positions in order for p in positions]
    first = [p for p in decided if p < 7]
    assert sorted(first) == [3, 4, 5, 6] and decided[: len(first)] == first
    assert x[0, :3].tolist() == [0, 1, 2]


@pytest.mark.slow
def test_ancestral_blocks_and_too_few_steps_are_refused_with_one_line(built):
    base = ["generate", "--model", str(built["llada"][0]), "-n", "1", "--length", "16"]
    blocks = runner.invoke(app, [*base, "--sampler", "ancestral", "--block-length", "4"])
    assert blocks.exit_code == 2 and "not in blocks" in blocks.output
    few = runner.invoke(app, [*base, "--block-length", "4", "--steps", "3"])
    assert few.exit_code == 2 and "give --steps >= 4" in few.output
    mdlm = runner.invoke(app, ["generate", "-n", "1", "--length", "4", "--dtype", "bfloat16"])
    assert mdlm.exit_code == 2 and "only published families" in mdlm.output


def copy_of(built, family: str, tmp_path: Path) -> Path:
    folder = tmp_path / family
    shutil.copytree(built[family][0], folder)
    return folder


def refused(folder: Path) -> str:
    result = runner.invoke(app, ["generate", "--model", str(folder), "-n", "1", "--length", "4"])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output
    return result.output


@pytest.mark.slow
def test_truncated_shard_is_refused_with_one_line(built, tmp_path):
    folder = copy_of(built, "llada", tmp_path)
    shard = folder / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    assert "model-00002-of-00002.safetensors" in refused(folder)


def test_shard_the_index_misplaces_is_refused_with_one_line(built, tmp_path):
    folder = copy_of(built, "Dream", tmp_path)
    index_file = folder / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    name = "model.norm.weight"
    other = {v for v in index["weight_map"].values() if v != index["weight_map"][name]}
    index["weight_map"][name] = other.pop()
    index_file.write_text(json.dumps(index))
    assert f"does not hold {name}" in refused(folder)


@pytest.mark.slow
def test_missing_shard_and_mismatched_shapes_are_refused_before_loading(built, tmp_path):
    folder = copy_of(built, "a2d-qwen3", tmp_path)
    (folder / "model-00001-of-00002.safetensors").unlink()
    assert "shard(s) missing: model-00001-of-00002.safetensors" in refused(folder)
    folder = copy_of(built, "llada", tmp_path / "b")
    config = json.loads((folder / "config.json").read_text())
    config["mlp_hidden_size"] = 96
    (folder / "config.json").write_text(json.dumps(config))
    message = refused(folder)
    assert "mis-shaped" in message and "ff_proj" in message


@pytest.mark.slow
def test_unknown_families_and_causal_checkpoints_name_what_cdd_reads(built, tmp_path):
    folder = copy_of(built, "Dream", tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "sdar"}))
    message = refused(folder)
    assert "auto_map names modeling code" in message and "llada, Dream" in message
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "qwen2"}))
    assert "causal language model" in refused(folder)
    # An A2D conversion whose tokenizer has no mask token and whose config names none.
    folder = copy_of(built, "a2d-llama", tmp_path / "b")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"] if t["content"] != "<|mask|>"]
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert "no <|mask|> in tokenizer.json" in refused(folder)


@pytest.mark.slow
def test_load_model_reads_every_family_through_one_entry_point(built):
    for name in ("default-text", "default-molecules", str(built["llada"][0])):
        model = cdd.load_model(name, device="cpu")
        ids = torch.zeros(2, 5, dtype=torch.long)
        logits = model.logits(ids)
        assert logits.shape == (2, 5, len(model.tokenizer)) and logits.dtype == torch.float32
        if model.family != "udlm":  # a masked model never draws its mask
            assert torch.isneginf(logits[..., model.mask_id]).all()
    with pytest.raises(cdd.InputError, match="LongTensor"):
        model.logits(torch.zeros(2, 5))
    with pytest.raises(cdd.InputError, match="no such directory"):
        cdd.load_model("/no/such/model")


def metaspace_tokenizer(path: Path) -> Path:
    """A SentencePiece-style BPE ("▁" marks a word's space) trained on README.md: the
    vocabulary layout of LLaMA-2-era models, whose decoder drops a text's first space."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<|endoftext|>", "<unk>"])
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    tokenizer.train_from_iterator(text.splitlines(), trainer)
    tokenizer.save(str(path))
    return path


@pytest.mark.slow
def test_word_constraints_read_word_boundaries_from_a_sentencepiece_vocabulary(tmp_path):
    vocabulary = metaspace_tokenizer(tmp_path / "metaspace.json")
    folder, _ = family_dirs.build(tmp_path / "model", "a2d-llama", tokenizer_file=vocabulary)
    loaded = registry.load(str(folder), "text", "cpu")
    texts = loaded.tokenizer.token_texts()
    the = loaded.tokenizer.encode(" the model")[0]
    assert texts[the] == " the" and loaded.tokenizer.token_text(the) == "the"  # decode drops it
    spec = tmp_path / "lexical.yaml"
    spec.write_text(LEXICAL.replace("harbor", "model"))
    args = ["generate", "--model", str(folder), "--spec", str(spec), "-n", "3", "-q"]
    result = runner.invoke(app, [*args, "--length", "14", "--steps", "7"])
    assert result.exit_code == 0, result.output
    for record in judged(result.output):
        words = [w.lower() for w in split_words(record["text"])]
        assert record["satisfied"] and 4 <= len(words) <= 7 and "model" in words, record


LLADA_STYLE_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>\n\n{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


@pytest.mark.slow
def test_chat_wraps_each_prompt_in_the_models_template_and_records_show_the_prompt(built, tmp_path):
    from cdd_cli.api import Generator
    from cdd_cli.prompts import PromptInput
    from cdd_cli.run.runner import plan

    folder = copy_of(built, "llada", tmp_path)
    base = ["generate", "--model", str(folder), "--prompt", "Name a port.", "-n", "1", "-q"]
    base += ["--length", "8", "--steps", "2"]
    without = runner.invoke(app, [*base, "--chat"])
    assert without.exit_code == 2 and "has no chat template" in without.output
    config = {"chat_template": LLADA_STYLE_TEMPLATE, "bos_token": {"content": "<|endoftext|>"}}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    result = runner.invoke(app, [*base, "--chat"])
    assert result.exit_code == 0, result.output
    assert judged(result.output)[0]["prompt"] == "Name a port."
    generator = Generator(str(folder), chat=True, device="cpu")
    run = plan(generator.compiled, 1, [PromptInput("Name a port.")], 8)
    wrapped = run.prompts[0].text
    assert wrapped.startswith("<|endoftext|><|start_header_id|>user<|end_header_id|>\n\nName")
    assert wrapped.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    ids = run.prompts[0].ids.tolist()
    assert ids[0] == family_dirs.EOS_ID and ids == run.compiled.loaded.tokenizer.encode(wrapped)


@pytest.mark.slow
def test_toxicity_needs_a_surrogate_for_the_familys_vocabulary_and_works_with_one(built, tmp_path):
    folder = str(built["Dream"][0])
    base = ["generate", "--model", folder, "-n", "2", "--length", "10", "--steps", "5", "-q"]
    mismatch = runner.invoke(app, [*base, "-c", "toxicity", "--tau", "0.5"])
    assert mismatch.exit_code == 2 and mismatch.output.count("\n") == 1
    assert f"cdd train toxicity-surrogate --model {folder}" in mismatch.output
    data = tmp_path / "labeled_data.csv"
    rows = [f"3,{i % 3},tweet {i} about {'rain' if i % 2 else 'sun'}" for i in range(120)]
    data.write_text("count,class,tweet\n" + "\n".join(rows) + "\n")
    train = ["train", "toxicity-surrogate", "--data", str(data), "--out", str(tmp_path / "s")]
    train += ["--model", folder, "--epochs", "1", "--batch-size", "16", "--corpus-spans", "0"]
    assert runner.invoke(app, [*train, "-q"]).exit_code == 0
    spec = tmp_path / "toxicity.yaml"
    spec.write_text(
        f"constraints:\n  - type: toxicity\n    tau: 0.5\n    surrogate: {tmp_path / 's'}\n"
    )
    result = runner.invoke(app, [*base, "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    records = judged(result.output)
    assert len(records) == 2 and all(
        r["constraints"]["toxicity"]["surrogate"] is not None for r in records
    )


@pytest.mark.slow
def test_a_hub_id_offline_is_read_from_the_local_cache_only(built, tmp_path, monkeypatch):
    # The Hugging Face cache layout: models--owner--name/{refs/main, snapshots/REVISION/...}.
    cache = tmp_path / "hub"
    repo = cache / "models--someone--tiny-dream"
    revision = "0" * 40
    shutil.copytree(built["Dream"][0], repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    args = ["generate", "--model", "hf://someone/tiny-dream", "-n", "1", "--length", "6", "-q"]
    result = runner.invoke(app, [*args, "--steps", "3"])
    assert result.exit_code == 0, result.output
    assert judged(result.output)[0]["model"] == "hf://someone/tiny-dream"
    missing = runner.invoke(app, ["generate", "--model", "hf://someone/absent", "-n", "1"])
    assert missing.exit_code == 2 and "not in the local Hugging Face cache" in missing.output


@pytest.mark.slow
def test_temperature_and_top_p_are_settings_and_keep_constraints_certified(built, tmp_path):
    spec = tmp_path / "lexical.yaml"
    spec.write_text(LEXICAL)
    out = tmp_path / "out.jsonl"
    args = ["generate", "--model", str(built["Dream"][0]), "--spec", str(spec), "-n", "3"]
    args += ["--length", "14", "--steps", "7", "-q", "-o", str(out)]
    result = runner.invoke(app, [*args, "--top-p", "0.3", "--temperature", "0.7"])
    assert result.exit_code == 0, result.output
    assert all(r["satisfied"] for r in judged(result.output))
    config = (tmp_path / "out.jsonl.config.yaml").read_text()
    assert "temperature: 0.7" in config and "top_p: 0.3" in config
    for flag, value in (("--top-p", "0"), ("--top-p", "1.5"), ("--temperature", "0")):
        bad = runner.invoke(app, [*args, flag, value])
        assert bad.exit_code == 2 and bad.output.count("\n") == 1, bad.output


@pytest.mark.slow
def test_validate_checks_a_familys_weights_from_their_headers_without_reading_them(built, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = copy_of(built, "Dream", tmp_path)
    shard = folder / "model-00001-of-00002.safetensors"
    tensors = load_file(str(shard))
    name = sorted(tensors)[0]
    tensors[name] = torch.full_like(tensors[name], float("nan"))  # only reading shows this
    save_file(tensors, str(shard))
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"model: {folder}\nconstraints:\n  - {{type: word_count, max: 5}}\n")
    checked = runner.invoke(app, ["validate", str(spec)])
    assert checked.exit_code == 0, checked.output
    assert "sampler: entropy" in checked.output and "dtype: float32" in checked.output
    loaded = runner.invoke(app, ["generate", "--spec", str(spec), "-n", "1", "--length", "4"])
    assert loaded.exit_code == 2 and "NaN or infinite values" in loaded.output
    (folder / "model-00002-of-00002.safetensors").unlink()  # what the headers show, it shows
    missing = runner.invoke(app, ["validate", str(spec)])
    assert missing.exit_code == 2 and "shard(s) missing" in missing.output
