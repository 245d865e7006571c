"""cdd_cli/models/families.py in-process, on tiny checkpoints written here (a vocabulary of
16, width 8, one layer): each family's config translated to A2DConfig, the sizes it may
have, its tensor names, and weights read from one file or an index of shards, with the
one line that refuses each broken piece."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from cdd_cli.errors import InputError
from cdd_cli.models import families, safetensors_file
from cdd_cli.models.a2d import A2DConfig, A2DModel
from cdd_cli.models.families import (
    _int,
    _names,
    _number,
    check_sizes,
    config_values,
    family_of,
    load_family,
    mask_in_tokenizer,
    our_name,
    parse_family_config,
    refuse_causal,
    shape_problems,
    weight_files,
)
from cdd_cli.models.safetensors_file import open_safetensors, read_headers
from tests.family_dirs import llada_name

W = "config.json"  # `where` in the messages


def raw_config(family: str, **changes) -> dict:
    """A tiny config.json of `family` in its own keys (None in `changes`: key removed)."""
    if family == "llada":
        raw = {
            "model_type": "llada",
            "d_model": 8,
            "n_heads": 2,
            "n_kv_heads": 1,
            "n_layers": 1,
            "mlp_hidden_size": 16,
            "vocab_size": 16,
            "rope_theta": 500.0,
            "rms_norm_eps": 1e-5,
            "weight_tying": False,
            "include_qkv_bias": False,
            "mask_token_id": 15,
            "eos_token_id": 1,
            "max_sequence_length": 64,
        }
    else:
        raw = {
            "model_type": family,
            "vocab_size": 16,
            "hidden_size": 8,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 16,
            "rope_theta": 500.0,
            "rms_norm_eps": 1e-5,
            "max_position_embeddings": 64,
            "mask_token_id": 15,
            "eos_token_id": 1,
            "tie_word_embeddings": family != "Dream",
        }
        if family == "a2d-qwen3":
            raw["head_dim"] = 6
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


def parsed(family: str, folder: Path | None = None, **changes) -> tuple[A2DConfig, dict]:
    return parse_family_config(raw_config(family, **changes), family, folder or Path("."), W)


def refusal(call, *args, **kwargs) -> str:
    with pytest.raises(InputError) as info:
        call(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def checkpoint(
    folder: Path,
    family: str,
    config: A2DConfig,
    dtype: torch.dtype = torch.bfloat16,
    shards: int = 1,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """The weights of `config` under the family's names, in `model.safetensors` or (shards
    > 1) split over shard files with an index; the tensors written (the checkpoint's names)."""
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in A2DModel(config).state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        value = torch.randn(tensor.shape, generator=generator).to(dtype)
        state[llada_name(name) if family == "llada" else name] = value
    if shards == 1:
        save_file(state, str(folder / "model.safetensors"))
        return state
    names = sorted(state)
    weight_map = {}
    for k in range(shards):
        shard = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: state[n] for n in names[k::shards]}, str(folder / shard))
        weight_map.update(dict.fromkeys(names[k::shards], shard))
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return state


def tokenizer(folder: Path, added: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps({"added_tokens": added}))


# ------------------------------------------------------------------------------------------
# family_of, refuse_causal, mask_in_tokenizer


def test_family_of_names_the_published_families_only():
    for name in ("llada", "Dream", "a2d-llama", "a2d-qwen2", "a2d-qwen3"):
        assert family_of({"model_type": name}) == name
    for raw in ({"model_type": "dream"}, {"model_type": "llama"}, {"model_type": "mdlm"}, {}):
        assert family_of(raw) is None


@pytest.mark.parametrize("causal", ["llama", "qwen2", "qwen3"])
def test_a_causal_config_is_refused_naming_its_a2d_conversion(causal):
    message = refusal(refuse_causal, {"model_type": causal}, "m/config.json")
    assert message == (
        f"m/config.json: model_type {causal!r} is a causal language model, not a diffusion "
        f"model; cdd reads its A2D conversion (model_type a2d-{causal})"
    )


def test_a_diffusion_config_is_not_refused_as_causal():
    for raw in ({"model_type": "a2d-llama"}, {"model_type": "llada"}, {}):
        assert refuse_causal(raw, W) is None


def test_the_mask_is_the_tokenizers_added_mask_token(tmp_path):
    added = [{"id": 3, "content": "<s>"}, {"id": 0, "content": "<|mask|>"}]
    tokenizer(tmp_path, added)
    assert mask_in_tokenizer(tmp_path) == 0
    tokenizer(tmp_path, [{"id": 9, "content": "<|mask|>"}, {"id": 10, "content": "<|mask|>"}])
    assert mask_in_tokenizer(tmp_path) == 9


@pytest.mark.parametrize(
    "content",
    [
        None,  # no tokenizer.json
        "{",  # not JSON
        "[1, 2]",  # not an object
        '{"added_tokens": null}',
        '{"added_tokens": []}',
        '{"added_tokens": [{"id": 4, "content": "<|mdm_mask|>"}]}',
        '{"model": {}}',
    ],
)
def test_no_mask_where_the_tokenizer_adds_none(tmp_path, content):
    if content is not None:
        (tmp_path / "tokenizer.json").write_text(content)
    assert mask_in_tokenizer(tmp_path) is None


# ------------------------------------------------------------------------------------------
# _int, _number, config_values


def test_an_integer_field_is_read_as_given_or_its_default():
    assert _int({"k": 7}, "k", W) == 7
    assert _int({"k": -3}, "k", W) == -3
    assert _int({}, "k", W, 5) == 5
    assert _int({"k": 0}, "k", W, 5) == 0
    assert _int({"k": [4, 2]}, "k", W) == 4  # eos_token_id may list several: the first


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ({}, "None"),
        ({"k": None}, "None"),
        ({"k": True}, "True"),
        ({"k": 2.0}, "2.0"),
        ({"k": "3"}, "'3'"),
        ({"k": []}, "[]"),
        ({"k": [1, "2"]}, "[1, '2']"),
        ({"k": [1.5]}, "[1.5]"),
    ],
)
def test_an_integer_field_refuses_anything_else(raw, shown):
    message = refusal(_int, raw, "k", W)
    assert message == f"{W}: field k should be an integer, got {shown}"


def test_a_number_field_is_a_positive_float():
    assert _number({"k": 3}, "k", W, 1.0) == 3.0 and isinstance(
        _number({"k": 3}, "k", W, 1.0), float
    )
    assert _number({"k": 1e-6}, "k", W, 1.0) == 1e-6
    assert _number({}, "k", W, 2.5) == 2.5


@pytest.mark.parametrize(
    ("value", "shown"), [(0, "0"), (-1.0, "-1.0"), (True, "True"), ("1", "'1'")]
)
def test_a_number_field_refuses_anything_else(value, shown):
    message = refusal(_number, {"k": value}, "k", W, 1.0)
    assert message == f"{W}: field k should be a positive number, got {shown}"
    assert "got 0.0" in refusal(_number, {}, "k", W, 0.0)


def test_config_values_translate_each_field_as_its_kind():
    raw = raw_config("llada", weight_tying=1, include_qkv_bias=0, rope_theta=10000, n_kv_heads=None)
    values = config_values(raw, families.LLADA_CONFIG_NAMES, W)
    assert values == {
        "vocab_size": 16,
        "hidden_dim": 8,
        "n_layers": 1,
        "n_heads": 2,
        "ffn_dim": 16,
        "rope_theta": 10000.0,
        "rms_eps": 1e-5,
        "tie_word_embeddings": True,
        "attention_bias": False,
    }
    assert values["tie_word_embeddings"] is True and values["attention_bias"] is False
    assert isinstance(values["rope_theta"], float)
    # embedding_size (the padded rows) wins over vocab_size.
    padded = config_values({**raw, "embedding_size": 24}, families.LLADA_CONFIG_NAMES, W)
    assert padded["vocab_size"] == 24


def test_config_values_check_each_field():
    raw = raw_config("llada", n_layers="2")
    assert refusal(config_values, raw, families.LLADA_CONFIG_NAMES, W) == (
        f"{W}: field n_layers should be an integer, got '2'"
    )
    raw = raw_config("llada", rms_norm_eps=-1)
    assert refusal(config_values, raw, families.LLADA_CONFIG_NAMES, W) == (
        f"{W}: field rms_norm_eps should be a positive number, got -1"
    )


def test_config_values_name_the_missing_required_fields_in_the_configs_words():
    raw = raw_config("llada", d_model=None, n_layers=None, vocab_size=None)
    assert refusal(config_values, raw, families.LLADA_CONFIG_NAMES, W) == (
        f"{W}: missing field(s) vocab_size, embedding_size, d_model, n_layers"
    )
    raw = raw_config("Dream", intermediate_size=None)
    assert refusal(config_values, raw, families.HF_CONFIG_NAMES, W) == (
        f"{W}: missing field(s) intermediate_size"
    )


# ------------------------------------------------------------------------------------------
# parse_family_config


def test_a_llada_config_becomes_a2d_without_a_logit_shift():
    config, meta = parsed("llada")
    assert config == A2DConfig(
        vocab_size=16, hidden_dim=8, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=16,
        rope_theta=500.0, rms_eps=1e-5, tie_word_embeddings=False, attention_bias=False,
        mask_id=15, logit_shift=False, prefix_id=-1, model_length=64, head_size=0,
        qk_norm=False, mask_embedding=False,
    )  # fmt: skip
    assert meta == {"prefix_id": 1, "mask_id": 15, "family": "llada"}


def test_llada_defaults_are_llada_8bs_tokens_and_4096_positions():
    raw = raw_config(
        "llada", vocab_size=126464, mask_token_id=None, eos_token_id=None, max_sequence_length=None
    )
    config, meta = parse_family_config(raw, "llada", Path("."), W)
    assert config.mask_id == 126336 and meta == {
        "prefix_id": 126081, "mask_id": 126336, "family": "llada",
    }  # fmt: skip
    assert config.model_length == 4096
    assert config.n_kv_heads == 1
    # No n_kv_heads: every head its own.
    assert parsed("llada", n_kv_heads=None)[0].n_kv_heads == 2


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"block_type": "sequential"}, "only LLaDA's llama blocks with rotary positions are read"),
        ({"alibi": True}, "only LLaDA's llama blocks with rotary positions are read"),
        ({"rope": False}, "only LLaDA's llama blocks with rotary positions are read"),
        ({"activation_type": "gelu"}, "activation_type 'gelu' not supported"),
        ({"include_bias": True}, "include_bias is not supported (LLaDA-8B has none)"),
        ({"rope_scaling": {"type": "linear"}}, "rope_scaling {'type': 'linear'} is not supported"),
    ],
)
def test_llada_layouts_cdd_does_not_run_are_refused(changes, problem):
    assert refusal(parsed, "llada", **changes) == f"{W}: {problem}"


def test_llada_layouts_cdd_runs_are_read():
    for changes in (
        {"block_type": "llama", "alibi": False, "rope": True, "activation_type": "swiglu"},
        {"activation_type": "silu", "include_bias": False, "rope_scaling": None},
        {"rope_scaling": {}},
    ):
        assert parsed("llada", **changes)[0].hidden_dim == 8


@pytest.mark.parametrize(
    ("family", "bias", "qk_norm", "shift"),
    [
        ("Dream", True, False, True),
        ("a2d-qwen2", True, False, False),
        ("a2d-llama", False, False, False),
        ("a2d-qwen3", False, True, False),
    ],
)
def test_each_hf_layout_has_its_biases_norms_and_shift(family, bias, qk_norm, shift):
    config, meta = parsed(family, rms_norm_eps=None)
    assert (config.attention_bias, config.qk_norm, config.logit_shift) == (bias, qk_norm, shift)
    assert config.rms_eps == 1e-6  # the default where the config gives none
    assert config.head_size == (6 if family == "a2d-qwen3" else 0)
    assert config.tie_word_embeddings is (family != "Dream")
    assert (config.mask_id, config.prefix_id, config.mask_embedding) == (15, -1, False)
    assert config.model_length == 64 and config.rope_theta == 500.0
    assert meta == {"prefix_id": 1, "mask_id": 15, "family": family}
    # The config's own attention_bias and rms_norm_eps win.
    config, _ = parsed(family, attention_bias=not bias, rms_norm_eps=1e-5)
    assert config.attention_bias is (not bias) and config.rms_eps == 1e-5


def test_a_head_dim_is_read_for_qwen3_only():
    assert parsed("a2d-llama", head_dim=6)[0].head_size == 0


def test_an_a2d_mask_comes_from_the_tokenizer_where_the_config_names_none(tmp_path):
    tokenizer(tmp_path, [{"id": 14, "content": "<|mask|>"}])
    config, meta = parsed("a2d-llama", tmp_path, mask_token_id=None)
    assert config.mask_id == 14 and meta["mask_id"] == 14
    # The config's wins.
    assert parsed("a2d-qwen2", tmp_path, mask_token_id=13)[0].mask_id == 13


def test_dream_needs_its_mask_in_the_config(tmp_path):
    tokenizer(tmp_path, [{"id": 14, "content": "<|mask|>"}])
    assert refusal(parsed, "Dream", tmp_path, mask_token_id=None) == (
        f"{W}: no mask_token_id, and no <|mask|> in tokenizer.json"
    )


def test_an_a2d_conversion_without_a_mask_anywhere_is_refused(tmp_path):
    assert refusal(parsed, "a2d-llama", tmp_path, mask_token_id=None) == (
        f"{W}: no mask_token_id, and no <|mask|> in tokenizer.json"
    )


def test_hf_fields_are_checked():
    assert refusal(parsed, "Dream", eos_token_id=None) == (
        f"{W}: field eos_token_id should be an integer, got None"
    )
    assert refusal(parsed, "Dream", mask_token_id="15") == (
        f"{W}: field mask_token_id should be an integer, got '15'"
    )
    assert refusal(parsed, "a2d-qwen2", rope_scaling={"factor": 2}) == (
        f"{W}: rope_scaling {{'factor': 2}} is not supported"
    )
    assert refusal(parsed, "Dream", max_position_embeddings="x") == (
        f"{W}: field max_sequence_length should be an integer, got 'x'"
    )


def test_the_model_length_is_the_configs_or_4096():
    assert parsed("Dream", max_position_embeddings=None)[0].model_length == 4096
    assert parsed("Dream", max_sequence_length=32)[0].model_length == 32  # wins
    assert parsed("llada", max_position_embeddings=100)[0].model_length == 64
    assert (
        parsed("llada", max_sequence_length=None, max_position_embeddings=100)[0].model_length
        == 100
    )


def test_eos_may_be_a_list():
    assert parsed("Dream", eos_token_id=[2, 3])[1]["prefix_id"] == 2


# ------------------------------------------------------------------------------------------
# check_sizes


def sizes(**changes) -> A2DConfig:
    values = dict(vocab_size=16, hidden_dim=8, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=16)
    return A2DConfig(**{**values, "mask_id": 15, **changes})


def test_sizes_cdd_runs_pass():
    for config in (
        sizes(),
        sizes(n_layers=512),
        sizes(hidden_dim=1 << 17, n_heads=1 << 15, n_kv_heads=1 << 15),
        sizes(ffn_dim=1 << 17),
        sizes(mask_id=0),
        sizes(n_heads=3, head_size=4, n_kv_heads=3),  # a head width of its own
    ):
        assert check_sizes(config, W) is None


@pytest.mark.parametrize(
    "name", ["vocab_size", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim"]
)
def test_a_size_below_1_is_refused(name):
    config = sizes(**{name: 0})
    assert refusal(check_sizes, config, W) == f"{W}: {name} must be >= 1, got 0"
    assert refusal(check_sizes, sizes(**{name: -2}), W) == f"{W}: {name} must be >= 1, got -2"


@pytest.mark.parametrize(
    "changes",
    [
        {"n_layers": 513},
        {"hidden_dim": (1 << 17) + 2, "n_heads": 1},
        {"ffn_dim": (1 << 17) + 1},
    ],
)
def test_sizes_past_what_cdd_runs_are_refused(changes):
    assert refusal(check_sizes, sizes(**changes), W) == f"{W}: layers or widths past what cdd runs"


def test_heads_that_do_not_fit_are_refused():
    # An odd head width (rotary halves) or query heads not shared evenly by the KV heads.
    assert refusal(check_sizes, sizes(hidden_dim=6, n_heads=2, n_kv_heads=2), W) == (
        f"{W}: 2 heads of width 3 (even) shared by 2 key-value heads do not fit"
    )
    assert refusal(check_sizes, sizes(n_heads=4, n_kv_heads=3), W) == (
        f"{W}: 4 heads of width 2 (even) shared by 3 key-value heads do not fit"
    )
    # A width that does not divide by the heads (where no head width is given).
    assert refusal(check_sizes, sizes(hidden_dim=12, n_heads=5, n_kv_heads=5), W) == (
        f"{W}: hidden size 12 / 5 heads"
    )
    assert refusal(check_sizes, sizes(hidden_dim=10, n_heads=4, n_kv_heads=2), W) == (
        f"{W}: hidden size 10 / 4 heads"
    )


@pytest.mark.parametrize("mask_id", [16, 17, -1])
def test_a_mask_outside_the_vocabulary_is_refused(mask_id):
    assert refusal(check_sizes, sizes(mask_id=mask_id), W) == (
        f"{W}: mask_id {mask_id} outside the vocabulary"
    )


# ------------------------------------------------------------------------------------------
# our_name, shape_problems, _names


def test_llada_names_become_llama_names():
    assert our_name("llada", "model.transformer.wte.weight") == "model.embed_tokens.weight"
    assert our_name("llada", "model.transformer.ln_f.weight") == "model.norm.weight"
    assert our_name("llada", "model.transformer.ff_out.weight") == "lm_head.weight"
    assert our_name("llada", "model.transformer.blocks.12.ff_proj.weight") == (
        "model.layers.12.mlp.gate_proj.weight"
    )
    assert our_name("llada", "model.transformer.blocks.0.q_proj.bias") == (
        "model.layers.0.self_attn.q_proj.bias"
    )
    for name in (
        "model.transformer.blocks.0.att_proj.weight",  # a fused block LLaDA-8B does not have
        "model.transformer.blocks.x.q_proj.weight",
        "model.transformer.blocks.0.q_proj.scale",
        "model.layers.0.self_attn.q_proj.weight",
        "xmodel.transformer.wte.weight",
    ):
        assert our_name("llada", name) is None


def test_other_families_keep_their_names():
    for family in ("Dream", "a2d-llama", "a2d-qwen2", "a2d-qwen3"):
        assert our_name(family, "model.layers.0.mlp.up_proj.weight") == (
            "model.layers.0.mlp.up_proj.weight"
        )
        assert our_name(family, "anything") == "anything"


def test_shape_problems_name_each_kind():
    expected = {"a": (2, 3), "b": (4,), "c": (1,), "d": (5,)}
    found = {"a": (3, 2), "b": (4,), "e": (1,), "f": (2,)}
    assert shape_problems(expected, found) == [
        "missing keys: c, d",
        "unexpected keys: e, f",
        "mis-shaped keys (file vs config): a (3, 2) vs (2, 3)",
    ]
    shown = {"a": "A", "e": "E", "f": "F"}.get
    assert shape_problems(expected, found, shown) == [
        "missing keys: c, d",
        "unexpected keys: E, F",
        "mis-shaped keys (file vs config): A (3, 2) vs (2, 3)",
    ]
    assert shape_problems(expected, dict(expected)) == []
    assert shape_problems({"a": (1,)}, {}) == ["missing keys: a"]


def test_names_show_three_and_count_the_rest():
    assert _names(["a"]) == "a"
    assert _names(["a", "b", "c"]) == "a, b, c"
    assert _names(["a", "b", "c", "d"]) == "a, b, c and 1 more"
    assert _names(list("abcdef"), limit=2) == "a, b and 4 more"


# ------------------------------------------------------------------------------------------
# weight_files, open_safetensors, read_headers


def test_one_file_holds_every_tensor(tmp_path):
    config, _ = parsed("a2d-llama")
    state = checkpoint(tmp_path, "a2d-llama", config)
    single = tmp_path / "model.safetensors"
    assert weight_files(tmp_path) == dict.fromkeys(state, single)


def test_an_index_maps_each_tensor_to_its_shard(tmp_path):
    config, _ = parsed("Dream")
    state = checkpoint(tmp_path, "Dream", config, shards=3)
    files = weight_files(tmp_path)
    assert set(files) == set(state)
    assert files["lm_head.weight"].parent == tmp_path
    assert {p.name for p in files.values()} == {
        f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)
    }
    headers = read_headers(files)
    assert set(headers) == set(state)
    for name, tensor in state.items():
        assert headers[name] == (files[name], "BF16", tuple(tensor.shape))


def test_neither_file_is_refused(tmp_path):
    assert refusal(weight_files, tmp_path) == (
        f"{tmp_path}: no model.safetensors or model.safetensors.index.json"
    )


@pytest.mark.parametrize(
    ("index", "problem"),
    [
        ("{", "not a safetensors index (Expecting property name enclosed in double quotes: "),
        ('{"metadata": {}}', "not a safetensors index ('weight_map')"),
        ("[1]", "not a safetensors index (list indices must be integers or slices, not str)"),
        ('{"weight_map": ["a"]}', "weight_map must map tensor names to shard file names"),
        ('{"weight_map": {"a": 3}}', "weight_map must map tensor names to shard file names"),
        ('{"weight_map": {"a": "../x"}}', "weight_map must map tensor names to shard file names"),
        ('{"weight_map": {"a": "s\\\\x"}}', "weight_map must map tensor names to shard file names"),
    ],
)
def test_a_broken_index_is_refused(tmp_path, index, problem):
    (tmp_path / "model.safetensors.index.json").write_text(index)
    message = refusal(weight_files, tmp_path)
    assert message.startswith(f"{tmp_path / 'model.safetensors.index.json'}: {problem}")


def test_missing_shards_are_named_three_at_most_in_order(tmp_path):
    save_file({"t": torch.zeros(1)}, str(tmp_path / "here.safetensors"))
    names = {"t": "here.safetensors", **{f"t{k}": f"s{k}.safetensors" for k in (4, 2, 3, 1)}}
    names["u"] = "s1.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": names}))
    assert refusal(weight_files, tmp_path) == (
        f"{tmp_path / 'model.safetensors.index.json'}: shard(s) missing: "
        "s1.safetensors, s2.safetensors, s3.safetensors"
    )


def test_a_file_that_is_not_safetensors_is_one_line(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json" + b" " * 400)
    message = refusal(weight_files, tmp_path)
    assert message.startswith(f"{path}: cannot read safetensors file (") and message.endswith(")")
    problem = message[len(f"{path}: cannot read safetensors file (") : -1]
    assert 0 < len(problem) <= 160 and "  " not in problem
    assert refusal(open_safetensors, tmp_path / "none.safetensors").startswith(
        f"{tmp_path / 'none.safetensors'}: cannot read safetensors file ("
    )


def test_a_long_reading_error_keeps_its_first_160_characters(tmp_path, monkeypatch):
    def fails(path, framework):
        assert framework == "pt"
        raise OSError("word  " * 50 + "\nend")

    monkeypatch.setattr(safetensors_file, "safe_open", fails)
    message = refusal(open_safetensors, tmp_path / "x.safetensors")
    assert (
        message
        == f"{tmp_path / 'x.safetensors'}: cannot read safetensors file ({('word  ' * 27)[:160]})"
    )


def test_a_tensor_the_index_misplaces_is_refused(tmp_path):
    config, _ = parsed("a2d-llama")
    checkpoint(tmp_path, "a2d-llama", config, shards=2)
    index = tmp_path / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"]
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    moved = sorted(k for k, v in weight_map.items() if v == first)[:2]
    files = {k: tmp_path / v for k, v in weight_map.items()}
    files[moved[0]] = tmp_path / second
    assert refusal(read_headers, files) == (
        f"{tmp_path / second}: does not hold {moved[0]}, which the index places there"
    )
    files[moved[1]] = tmp_path / second
    assert refusal(read_headers, files) == (
        f"{tmp_path / second}: does not hold {moved[0]}, which the index places there (and 1 more)"
    )
    files["ghost"] = tmp_path / first
    assert refusal(read_headers, files) == (
        f"{tmp_path / first}: does not hold ghost, which the index places there (and 2 more)"
    )


# ------------------------------------------------------------------------------------------
# load_family


@pytest.mark.parametrize("family", ["llada", "Dream", "a2d-qwen2", "a2d-qwen3"])
def test_each_family_loads_its_own_weights_as_float32_on_a_cpu(tmp_path, family):
    config, _ = parsed(family)
    state = checkpoint(tmp_path, family, config, shards=2)
    model = load_family(tmp_path, config, family)
    assert isinstance(model, A2DModel) and not model.training
    ours = model.state_dict()
    assert {t.dtype for t in ours.values()} == {torch.float32}
    for name, tensor in state.items():
        key = our_name(family, name)
        assert torch.equal(ours[key], tensor.float()), key
    if config.tie_word_embeddings:
        assert model.lm_head.weight is model.model.embed_tokens.weight
    else:
        assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    assert not any(t.is_meta for t in ours.values())


def test_a_dtype_asked_for_is_kept(tmp_path):
    config, _ = parsed("a2d-llama")
    state = checkpoint(tmp_path, "a2d-llama", config, dtype=torch.float32)
    model = load_family(tmp_path, config, "a2d-llama", dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    norm = state["model.norm.weight"].to(torch.bfloat16)
    assert torch.equal(model.model.norm.weight, norm)


def test_check_only_reads_no_weight(tmp_path):
    config, _ = parsed("llada")
    checkpoint(tmp_path, "llada", config)
    # Weights that could not be loaded: the checks read headers only.
    path = tmp_path / "model.safetensors"
    state = {
        k: torch.full_like(v, math.nan)
        for k, v in checkpoint(tmp_path / "n", "llada", config).items()
    }
    save_file(state, str(path))
    assert load_family(tmp_path, config, "llada", check_only=True) is None
    assert refusal(load_family, tmp_path, config, "llada").startswith(
        f"{path}: NaN or infinite values in "
    )


def test_weights_of_another_shape_are_refused_before_any_is_read(tmp_path):
    config, _ = parsed("llada")
    checkpoint(tmp_path, "llada", config)
    wider, _ = parsed("llada", mlp_hidden_size=32)
    message = refusal(load_family, tmp_path, wider, "llada", check_only=True)
    assert message == (
        f"{tmp_path}: weights do not match config.json: mis-shaped keys (file vs config): "
        "model.transformer.blocks.0.ff_out.weight (8, 16) vs (8, 32), "
        "model.transformer.blocks.0.ff_proj.weight (16, 8) vs (32, 8), "
        "model.transformer.blocks.0.up_proj.weight (16, 8) vs (32, 8)"
    )


def test_missing_and_unexpected_tensors_are_refused(tmp_path):
    config, _ = parsed("Dream")
    state = checkpoint(tmp_path, "Dream", config)
    del state["model.norm.weight"]
    state["model.extra.weight"] = torch.zeros(2)
    save_file(state, str(tmp_path / "model.safetensors"))
    assert refusal(load_family, tmp_path, config, "Dream") == (
        f"{tmp_path}: weights do not match config.json: missing keys: model.norm.weight; "
        "unexpected keys: model.extra.weight"
    )


def test_a_tied_model_with_its_own_output_head_is_refused(tmp_path):
    untied, _ = parsed("a2d-llama", tie_word_embeddings=False)
    checkpoint(tmp_path, "a2d-llama", untied)
    tied, _ = parsed("a2d-llama")
    assert refusal(load_family, tmp_path, tied, "a2d-llama", check_only=True) == (
        f"{tmp_path}: weights do not match config.json: unexpected keys: lm_head.weight"
    )
    # The other way round: an untied config misses it.
    folder = tmp_path / "tied"
    checkpoint(folder, "a2d-llama", tied)
    assert refusal(load_family, folder, untied, "a2d-llama") == (
        f"{folder}: weights do not match config.json: missing keys: lm_head.weight"
    )


def test_llada_tensors_it_does_not_have_are_named(tmp_path):
    config, _ = parsed("llada")
    state = checkpoint(tmp_path, "llada", config)
    for k in range(4):
        state[f"model.transformer.blocks.0.att_proj{k}.weight"] = torch.zeros(1)
    save_file(state, str(tmp_path / "model.safetensors"))
    assert refusal(load_family, tmp_path, config, "llada", check_only=True) == (
        f"{tmp_path}: tensors llada does not have: model.transformer.blocks.0.att_proj0.weight, "
        "model.transformer.blocks.0.att_proj1.weight, model.transformer.blocks.0.att_proj2.weight "
        "and 1 more"
    )


def test_tensors_that_are_not_floating_point_are_refused(tmp_path):
    config, _ = parsed("a2d-llama")
    state = checkpoint(tmp_path, "a2d-llama", config)
    state["model.norm.weight"] = torch.ones(8, dtype=torch.int32)
    save_file(state, str(tmp_path / "model.safetensors"))
    assert refusal(load_family, tmp_path, config, "a2d-llama", check_only=True) == (
        f"{tmp_path}: weights do not match config.json: not floating point: model.norm.weight"
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_every_float_kind_is_read(tmp_path, dtype):
    config, _ = parsed("a2d-llama")
    state = checkpoint(tmp_path, "a2d-llama", config, dtype=dtype)
    model = load_family(tmp_path, config, "a2d-llama")
    assert torch.equal(model.model.norm.weight, state["model.norm.weight"].float())


def test_an_infinite_weight_is_refused_naming_it(tmp_path):
    config, _ = parsed("a2d-qwen3")
    state = checkpoint(tmp_path, "a2d-qwen3", config, shards=2)
    files = weight_files(tmp_path)
    name = "model.layers.0.self_attn.k_norm.weight"
    shard = {k: v for k, v in state.items() if files[k] == files[name]}
    shard[name] = shard[name].clone()
    shard[name][1] = math.inf
    save_file(shard, str(files[name]))
    assert refusal(load_family, tmp_path, config, "a2d-qwen3") == (
        f"{files[name]}: NaN or infinite values in {name}"
    )


def test_the_supported_formats_are_named_in_one_list():
    # What the errors of an unknown config list (models/checkpoint.py).
    assert families.supported() == (
        "mdlm, udlm, a2d (cdd train adapt), llada, Dream, and llama/qwen2/qwen3 A2D conversions"
    )


def test_a_tensor_that_cannot_be_read_is_one_line_naming_it(tmp_path, monkeypatch):
    """A read error after the headers were read (a disk error, a file cut meanwhile)."""
    config, _ = parsed("a2d-llama")
    checkpoint(tmp_path, "a2d-llama", config)
    real = safetensors_file.safe_open
    name = "model.layers.0.mlp.up_proj.weight"

    class Failing:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            self.inner = self.handle.__enter__()
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def keys(self):
            return self.inner.keys()

        def get_slice(self, key):
            return self.inner.get_slice(key)

        def get_tensor(self, key):
            if key == name:
                raise OSError("Input/output  error\n" + "x" * 300)
            return self.inner.get_tensor(key)

    monkeypatch.setattr(safetensors_file, "safe_open", lambda *a, **k: Failing(real(*a, **k)))
    path = tmp_path / "model.safetensors"
    said = ("Input/output  error\\n" + "x" * 300)[:160]  # the break written as its escape
    assert refusal(load_family, tmp_path, config, "a2d-llama") == (
        f"{path}: cannot read {name} ({said})"
    )


@pytest.mark.parametrize(
    ("family", "changes", "says"),
    [
        ("llada", {"d_model": "wide"}, "field d_model should be an integer"),
        ("llada", {"mask_token_id": 1.5}, "field mask_token_id should be an integer"),
        ("llada", {"eos_token_id": "end"}, "field eos_token_id should be an integer"),
        ("llada", {"n_layers": 0}, "n_layers must be >= 1"),
        ("Dream", {"hidden_size": "wide"}, "field hidden_size should be an integer"),
    ],
)
def test_every_refusal_of_a_config_names_its_file(family: str, changes: dict, says: str):
    """Whatever part of the config is wrong, the one line starts with the file it is in."""
    message = refusal(parse_family_config, raw_config(family, **changes), family, Path("."), W)
    assert message.startswith(f"{W}: {says}"), message
