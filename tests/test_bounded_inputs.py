"""Bounded work before allocation (issue 60): reference SMILES files read within caps and never
handed to RDKit past its safe length, special files (FIFOs, devices, folders) refused where a
regular file is needed, hashes only against a given SHA-256, GGUF counts/lengths/alignments
checked against the file, the look-ahead's memory checked by `cdd validate` and before a run,
and `cdd validate` of a hub model reading no network."""

from __future__ import annotations

import os
import resource
import socket
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cdd_cli.cli.app import app
from cdd_cli.errors import InputError
from cdd_cli.evaluate import reference as reference_module
from cdd_cli.evaluate.molecules import MAX_SMILES_CHARS, canonical
from cdd_cli.evaluate.reference import library, library_lines
from cdd_cli.models.files import file_digest, regular_file
from cdd_cli.models.gguf import GGUFFile
from tests.models.test_checkpoint import adapter_over, tiny_llama

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture
def fresh_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    reference_module._library.cache_clear()
    yield
    reference_module._library.cache_clear()


# -- reference files -------------------------------------------------------------------------


def test_rdkit_canonicalises_a_smiles_at_the_cap_quickly():
    """The cap is where RDKit is still fast: a carbon chain (its slowest simple case) of
    MAX_SMILES_CHARS characters takes ~0.07 s; 18,000 take 13 s and 20,000 crash it."""
    started = time.perf_counter()
    assert canonical("C" * MAX_SMILES_CHARS) == "C" * MAX_SMILES_CHARS
    assert time.perf_counter() - started < 2.0


def test_long_reference_lines_are_skipped_unread_with_the_cap_in_the_warning(
    tmp_path: Path, fresh_library, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "ref.smi"
    with open(path, "wb") as f:
        f.write(b"CCO ethanol\n" + b"C" * 20_000 + b"\n")
        f.write(b"C" * (5 << 20) + b" a five-megabyte line\n")  # past the line cap: in pieces
        f.write(b"c1ccccc1,benzene\n# a comment\n\nCCN")  # the last line has no newline
    handed: list[str] = []

    def canonicalise(smiles: list[str]) -> list[str | None]:
        handed.extend(smiles)
        return list(smiles)

    monkeypatch.setattr(reference_module, "canonicalise_all", canonicalise)
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        known = library(path)
    assert known == {"CCO", "c1ccccc1", "CCN"}
    assert max(map(len, handed)) <= MAX_SMILES_CHARS
    (warning,) = [str(w.message) for w in told]
    assert "2 line(s) longer than 2,000 characters" in warning and "\n" not in warning


def test_a_gzipped_reference_is_read_a_line_at_a_time(tmp_path: Path):
    import gzip

    path = tmp_path / "ref.smi.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"\xef\xbb\xbfCCO\n" + b"C" * 3000 + b"\nCCN\n")  # a BOM, then a long line
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert library_lines(path) == ["CCO", "CCN"]


def test_a_reference_past_the_size_cap_is_refused_with_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(reference_module, "MAX_REFERENCE_BYTES", 1 << 20)
    path = tmp_path / "ref.smi"
    path.write_bytes(b"CCO\n" * (300_000))  # 1.2 MB
    with pytest.raises(InputError, match=r"more than 1 MiB of SMILES"):
        library_lines(path)
    path.write_bytes(b"CCO\n" + b"C" * (2 << 20))  # one line past both caps
    with pytest.raises(InputError, match=r"more than 1 MiB"):
        library_lines(path)


def test_a_reference_line_that_is_not_utf8_is_named(tmp_path: Path):
    path = tmp_path / "ref.smi"
    path.write_bytes(b"CCO\nC\xffC\n")
    with pytest.raises(InputError, match=r"line 2 is not UTF-8"):
        library_lines(path)


def test_a_fifo_or_a_device_as_reference_is_refused_without_reading_it(
    tmp_path: Path, fresh_library
):
    fifo = tmp_path / "ref.fifo"
    os.mkfifo(fifo)  # opening it to read would block forever
    with pytest.raises(InputError, match=r"must be a regular file, not a FIFO"):
        library(fifo)
    with pytest.raises(InputError, match=r"not a character device"):
        library(Path("/dev/zero"))


@pytest.mark.slow
def test_a_reference_with_a_20000_character_smiles_runs(tmp_path: Path):
    """The issue's case: RDKit crashed (exit 139) on this line; now it is skipped."""
    path = tmp_path / "ref.smi"
    path.write_text("CCO\n" + "C" * 20_000 + "\nCCN\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"constraints:\n  - {{type: novelty, reference: {path}}}\n")
    args = ["molecules", "-n", "2", "--steps", "4", "-q", "--spec", str(spec), "-o", "-"]
    done = subprocess.run(
        [sys.executable, "-m", "cdd_cli", *args],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    assert "longer than 2,000 characters" in done.stderr
    assert len(done.stdout.splitlines()) == 2


# -- special files and hashes ----------------------------------------------------------------


def test_special_files_are_refused_in_one_line(tmp_path: Path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "zero.gguf"
    link.symlink_to("/dev/zero")
    for path, kind in ((fifo, "a FIFO"), (link, "a character device"), (tmp_path, "a folder")):
        with pytest.raises(InputError, match=f"base weights must be a regular file, not {kind}$"):
            regular_file(path, "base weights")
        with pytest.raises(InputError, match="must be a regular file"):
            file_digest(path)
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    assert regular_file(plain, "x") == plain
    assert regular_file(tmp_path / "absent", "x") == tmp_path / "absent"  # absent: said elsewhere


def test_an_adapter_on_dev_zero_is_refused_at_once(tmp_path: Path):
    from cdd_cli.models.checkpoint import locate_base

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "zero.gguf").symlink_to("/dev/zero")
    started = time.perf_counter()
    for base in ({"file": "zero.gguf"}, {"file": "zero.gguf", "sha256": "0" * 64}):
        with pytest.raises(InputError, match=r"zero.gguf: base weights must be a regular file, not a character device"):  # noqa: E501
            locate_base(adapter, base, "adapter/config.json")
    assert time.perf_counter() - started < 1.0


def test_a_base_is_hashed_only_against_a_given_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from cdd_cli.models import checkpoint

    base = tmp_path / "base.gguf"
    base.write_bytes(b"weights")
    hashed: list[Path] = []
    monkeypatch.setattr(checkpoint, "base_digest", lambda path: hashed.append(path) or "ab")
    assert checkpoint.locate_base(tmp_path, {"file": "base.gguf"}, "w") == base
    assert hashed == []
    assert checkpoint.locate_base(tmp_path, {"file": "base.gguf", "sha256": "ab"}, "w") == base
    assert hashed == [base]
    with pytest.raises(InputError, match=r"not the base this adapter was trained on"):
        checkpoint.locate_base(tmp_path, {"file": "base.gguf", "sha256": "cd"}, "w")


def test_a_hash_reads_no_more_than_the_files_size(tmp_path: Path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    from cdd_cli.models import files

    with pytest.raises(InputError, match=r"changed while it was read \(2 bytes expected\)"):
        files._file_digest(str(path), 0, 2)  # a file longer than its size said


def test_a_tokenizer_json_that_is_a_folder_is_refused(tmp_path: Path):
    from cdd_cli.models.tokenizers import GPT2_VOCAB_SIZE, load_tokenizer

    (tmp_path / "tokenizer.json").mkdir()
    with pytest.raises(InputError, match=r"tokenizer.json must be a regular file, not a folder"):
        load_tokenizer(tmp_path, GPT2_VOCAB_SIZE)  # once: GPT-2 taken silently


# -- GGUF ------------------------------------------------------------------------------------


def gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def gguf_file(
    values: dict[str, tuple[int, bytes]],
    tensors: dict[str, np.ndarray] | None = None,
    alignment: int = 32,
) -> bytes:
    """A GGUF (version 3) with `values` (key -> (value type, packed value)) and float32
    `tensors`, laid out as the specification says."""
    tensors = tensors or {}
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(values))
    for key, (kind, packed) in values.items():
        head += gguf_string(key) + struct.pack("<I", kind) + packed
    offset, data = 0, b""
    for name, array in tensors.items():
        shape = tuple(reversed(array.shape))
        head += gguf_string(name) + struct.pack(f"<I{len(shape)}QIQ", len(shape), *shape, 0, offset)
        raw = array.astype(np.float32).tobytes()
        data += raw + b"\0" * (-len(raw) % alignment)
        offset = len(data)
    return head + b"\0" * (-len(head) % alignment) + data


def u32(value: int) -> tuple[int, bytes]:
    return 4, struct.pack("<I", value)


def text(value: str) -> tuple[int, bytes]:
    return 8, gguf_string(value)


def strings(*items: str) -> tuple[int, bytes]:
    return 9, struct.pack("<IQ", 8, len(items)) + b"".join(map(gguf_string, items))


SMALL = gguf_file(
    {"general.architecture": text("llama"), "llama.block_count": u32(2),
     "tokenizer.ggml.tokens": strings("a", "b", "c")},
    {"w": np.arange(32, dtype=np.float32).reshape(4, 8)},  # 128 bytes: no padding after
)  # fmt: skip


def test_the_small_gguf_reads_back():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "small.gguf"
        path.write_bytes(SMALL)
        read = GGUFFile(path)
        assert read.metadata["llama.block_count"] == 2
        assert read.metadata["tokenizer.ggml.tokens"] == 3
        assert read.tensor("w").tolist() == np.arange(32.0).reshape(4, 8).tolist()


def test_a_truncated_gguf_is_a_value_error_at_every_length(tmp_path: Path):
    path = tmp_path / "cut.gguf"
    for end in range(len(SMALL)):
        path.write_bytes(SMALL[:end])
        try:
            GGUFFile(path).tensor("w")
        except ValueError as exc:
            assert "\n" not in str(exc)
        else:
            raise AssertionError(f"{end} bytes of {len(SMALL)} read as whole")


@pytest.mark.parametrize(
    "forged, expected",
    [
        (
            b"GGUF" + struct.pack("<IQQ", 3, 2**62, 0),
            r"tensor count 4,611,686,018,427,387,904 at byte 16 runs past the file's 24 bytes",
        ),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 2**63), r"metadata count [\d,]+ at byte 24 runs past"),
        (
            b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**60) + b"k" * 8,
            r"string length [\d,]+ at byte 32 runs past",
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("a")
            + struct.pack("<IIQ", 9, 10, 2**61) + b"\0" * 16,
            r"array length [\d,]+ at .* runs past",
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("a")
            + struct.pack("<II", 9, 8) + struct.pack("<Q", 2) + struct.pack("<Q", 2**62)
            + b"\0" * 16,
            r"length 4,611,686,018,427,387,904 at byte \d+ runs past",
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("a") + struct.pack("<I", 9)
            + b"".join(struct.pack("<IQ", 9, 1) for _ in range(6)) + b"\0" * 16,
            r"nested more than 4 deep",
        ),
        (gguf_file({"general.alignment": u32(0)}), r"general.alignment 0 is not a power of two"),
        (gguf_file({"general.alignment": u32(24)}), r"alignment 24 is not a power of two"),
        (gguf_file({"general.alignment": text("x")}), r"alignment 'x' is not a power of two"),
    ],
)  # fmt: skip
def test_forged_gguf_counts_are_refused_before_any_loop_or_allocation(
    tmp_path: Path, forged: bytes, expected: str
):
    path = tmp_path / "forged.gguf"
    path.write_bytes(forged)
    started = time.perf_counter()
    with pytest.raises(ValueError, match=expected):
        GGUFFile(path)
    assert time.perf_counter() - started < 1.0


def test_a_gguf_tensor_larger_than_the_file_is_refused(tmp_path: Path):
    forged = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + gguf_string("w")
    forged += struct.pack("<I2QIQ", 2, 2**31, 2**31, 0, 0) + b"\0" * 64
    path = tmp_path / "big.gguf"
    path.write_bytes(forged)
    with pytest.raises(ValueError, match=r"tensor w \(F32, shape .*\) does not fit the file"):
        GGUFFile(path).tensor("w")
    forged = forged.replace(struct.pack("<I2Q", 2, 2**31, 2**31), struct.pack("<I2Q", 9, 1, 1))
    path.write_bytes(forged)
    with pytest.raises(ValueError, match=r"tensor 'w' has 9 dimensions"):
        GGUFFile(path)


LLAMA = {
    "general.architecture": text("llama"),
    "tokenizer.ggml.tokens": strings("a", "b"),
    "llama.embedding_length": u32(8),
    "llama.block_count": u32(1),
    "llama.attention.head_count": u32(2),
    "llama.feed_forward_length": u32(16),
    "llama.attention.layer_norm_rms_epsilon": (6, struct.pack("<f", 1e-5)),
}


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"llama.attention.head_count": u32(0)}, r"head_count must be a positive integer, got 0"),
        ({"llama.attention.head_count_kv": u32(0)}, r"head_count_kv must be a positive"),
        ({"llama.block_count": text("2")}, r"block_count must be a positive integer, got '2'"),
        ({"llama.embedding_length": u32(9)}, r"9 dimensions do not split into 2 heads"),
        ({"llama.attention.head_count_kv": u32(3)}, r"do not split into 2 heads of even size"),
        ({"llama.attention.layer_norm_rms_epsilon": u32(0)}, r"epsilon must be a positive"),
        ({"llama.rope.freq_base": (6, struct.pack("<f", float("inf")))}, r"freq_base must be"),
    ],
)
def test_gguf_llama_sizes_that_would_divide_by_zero_are_refused(
    tmp_path: Path, change: dict, expected: str
):
    from cdd_cli.models.a2d import read_gguf_llama

    path = tmp_path / "base.gguf"
    path.write_bytes(gguf_file({**LLAMA, **change}))
    with pytest.raises(ValueError, match=expected):
        read_gguf_llama(path)


def test_an_adapter_over_a_malformed_gguf_is_one_input_error(tmp_path: Path):
    import json

    from cdd_cli.models.a2d import A2DConfig
    from cdd_cli.models.checkpoint import load_adapted

    raw, _ = adapter_over(tiny_llama(tmp_path / "hf"), tmp_path / "adapter")
    (tmp_path / "adapter" / "base.gguf").write_bytes(SMALL[:40])
    raw["base"] = {"file": "base.gguf"}
    (tmp_path / "adapter" / "config.json").write_text(json.dumps(raw))
    config = A2DConfig(**{k: raw[k] for k in A2DConfig.__dataclass_fields__ if k in raw})
    problem = r"base.gguf: cannot read base weights \(tensor count 1 at byte 16 runs past the file"
    with pytest.raises(InputError, match=problem):
        load_adapted(tmp_path / "adapter", config, raw)


# -- the look-ahead's memory, and validate offline -------------------------------------------

LOOKAHEAD_SPEC = (
    "constraints:\n  - {type: regex, pattern: '[a-z]+( [a-z]+){2}'}\n"
    "projection: {lookahead: 1024}\n"
)


def test_the_lookahead_memory_check_names_the_numbers(monkeypatch: pytest.MonkeyPatch):
    from cdd_cli.run import defaults
    from cdd_cli.spec.model import Spec

    spec = Spec(source="s.yaml", method="cdd")
    spec.projection.lookahead = 1024
    loaded = type("Loaded", (), {"config": type("Config", (), {"vocab_size": 50258})()})()
    monkeypatch.setattr(defaults, "usable_memory", lambda: (16 << 30, "this machine's"))
    with pytest.raises(InputError) as caught:
        defaults.check_lookahead_fits(spec, loaded, 64)  # the issue's 13.2 GB tensor, twice
    assert str(caught.value) == (
        "s.yaml: projection.lookahead 1024: its [1024, 64, 50258] forward needs about 24.5 GiB, "
        "more than this machine's 16.0 GiB; use a lookahead of at most 667"
    )
    spec.projection.lookahead = 667
    defaults.check_lookahead_fits(spec, loaded, 64)
    spec.projection.lookahead = 0  # off: nothing to allocate
    defaults.check_lookahead_fits(spec, loaded, 64)


def test_usable_memory_is_the_lesser_of_the_machine_and_the_process_limit():
    from cdd_cli.run.defaults import usable_memory

    script = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30));"
        "from cdd_cli.run.defaults import usable_memory; print(usable_memory())"
    )
    machine = usable_memory()
    assert machine is not None
    assert machine[1] in ("this machine's", "this process's memory limit of")
    if machine[0] <= 3 << 30:
        pytest.skip("this machine has less than 3 GiB")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.stdout.strip() == f"({3 << 30}, \"this process's memory limit of\")", done.stderr


@pytest.mark.slow
def test_validate_and_generate_refuse_a_lookahead_past_memory_before_allocating(tmp_path: Path):
    """The issue's case under a 4 GiB limit: one line and exit 2 from both, no file written."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(LOOKAHEAD_SPEC)
    out = tmp_path / "out.jsonl"
    for args in (["validate", str(spec)], ["generate", "--spec", str(spec), "-n", "1", "-q",
                                           "-o", str(out)]):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "cdd_cli", *args],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)),
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.splitlines()
        needs = "projection.lookahead 1024: its [1024, 64, 50258] forward needs about 24.5 GiB"
        assert needs in line
        assert "memory limit of 4.0 GiB; use a lookahead of at most" in line
    assert not out.exists()


def test_validate_of_a_hub_model_reads_no_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("huggingface_hub")
    tried: list[object] = []

    def no_network(*args: object, **kwargs: object):
        tried.append(args)
        raise OSError("the network was touched")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: hf://cdd-test-owner/no-such-model\n")
    done = runner.invoke(app, ["validate", str(spec)])
    assert done.exit_code == 2, done.output
    assert tried == []
    assert "a check reads no network and it is not in the local Hugging Face cache" in done.output


def test_a_model_folders_files_as_fifos_are_refused_without_blocking(tmp_path: Path):
    from cdd_cli.models.checkpoint import read_config
    from cdd_cli.models.families import weight_files

    os.mkfifo(tmp_path / "config.json")
    os.mkfifo(tmp_path / "model.safetensors")
    with pytest.raises(InputError, match=r"config.json: config.json must be a regular file, not a"):
        read_config(tmp_path)
    with pytest.raises(InputError, match=r"model.safetensors must be a regular file, not a FIFO"):
        weight_files(tmp_path)
    os.mkfifo(tmp_path / "model.safetensors.index.json")
    with pytest.raises(InputError, match=r"a safetensors index must be a regular file"):
        weight_files(tmp_path)
