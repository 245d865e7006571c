"""Issue 60: the readers of what a user hands cdd, fuzzed with a seeded generator (a few
hundred cases each, the same every run): the spec reader on generated and broken YAML, the
safetensors and GGUF readers on generated and mutated files, the JSONL reader on generated
lines. Each case is accepted, or refused in one line (`outcomes.crashes`), in time."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest

from cdd_cli.errors import InputError
from cdd_cli.models.gguf import GGUFFile
from cdd_cli.models.safetensors_file import read_header
from cdd_cli.output.jsonl import parse_line, read_jsonl
from cdd_cli.spec.reader import load_spec
from tests.fuzz.outcomes import crashes

# --------------------------------------------------------------------------------------------
# Mutations of bytes


def mutated(rng: random.Random, data: bytes) -> bytes:
    """`data` with one to four random edits: a byte changed, a run deleted or repeated, a
    random or special byte string inserted, or the end cut off."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        at = rng.randrange(len(out) + 1)
        if kind == 0 and out:
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif kind == 1:
            del out[at : at + rng.randint(1, 16)]
        elif kind == 2:
            out[at:at] = out[at : at + rng.randint(1, 16)] * rng.randint(1, 4)
        elif kind == 3:
            out[at:at] = rng.choice(SPECIAL_BYTES)
        else:
            del out[at:]
    return bytes(out)


SPECIAL_BYTES = [
    b"\x00", b"\xff\xfe", b"\xc3\x28", b"\xef\xbb\xbf", b"\n", b"\r\n", b"\t", b"\\", b'"',
    b"{", b"}", b"[", b"]", b":", b",", b"-", b"9" * 40, b"1e999", b"NaN", b"null",
    b"\xff" * 8, b"\x00" * 8,
]  # fmt: skip


# --------------------------------------------------------------------------------------------
# The spec reader

SPEC_LINES = [
    "model: default-text", "model: ''", "method: cdd", "method: nosuch", "words: plain",
    "constraints:", "  - type: regex", "    pattern: '[a-z]+'", "  - type: json_schema",
    "    schema: {type: integer, minimum: 3}", "  - type: exclude", "    words: [a, b]",
    "  - type: word_count", "    min: 3", "    max: 1e9", "projection:", "  lookahead: 4",
    "  eta: -1", "search:", "  beam: 3", "sampling:", "  steps: 0", "repair: {}",
    "reject: []", "&a x: *a", "? complex", "- a", "!!python/object:os.system x",
    "key: !!binary aGVsbG8=", "x: [1, [2, [3, [4]]]]", "tau: .nan", "tau: .inf",
    "  - {type: sa, tau: 3}", "---", "...", "%YAML 1.1", "# comment", "\t- tab", "'",
    '"\\x"', "x: |", "  block", "y: >-", "x: {", "]",
]  # fmt: skip


def spec_texts(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        lines = [rng.choice(SPEC_LINES) for _ in range(rng.randint(0, 12))]
        text = "\n".join(lines).encode()
        texts.append(mutated(rng, text) if rng.random() < 0.5 else text)
    # Structures the generator alone would rarely reach: deep, wide, aliased, not UTF-8.
    texts += [
        b"[" * 5000 + b"]" * 5000,
        b"{a: " * 2000 + b"1" + b"}" * 2000,
        b"a: &x [1]\nb: [*x, *x, *x, *x]\n" * 50,
        b"constraints:\n" + b"  - type: include\n    words: [w]\n" * 300,
        b"model: \xff\xfe",
        b"\x00" * 100,
    ]
    return texts


def test_the_spec_reader_accepts_or_refuses_every_generated_spec_in_one_line(tmp_path: Path):
    path = tmp_path / "spec.yaml"

    def run(text: bytes) -> None:
        path.write_bytes(text)
        load_spec(path)

    assert crashes(spec_texts(60, 300), run) == []


# --------------------------------------------------------------------------------------------
# The safetensors reader


def safetensors_bytes(rng: random.Random) -> bytes:
    """A safetensors file, well formed or with a header that lies: dtypes, shapes and
    offsets drawn from good and bad values, the header's length from good and bad ones."""
    header: dict = {}
    position = 0
    for k in range(rng.randint(0, 4)):
        dtype = rng.choice(["F32", "F16", "BF16", "I64", "BOOL", "F8_E4M3", "Q4", "", 7])
        shape = [rng.choice([0, 1, 2, 3, 7, -1, 2**40, 2**64]) for _ in range(rng.randint(0, 3))]
        size = rng.choice([0, 4, 8, 12, 28, 2**33])
        begin = rng.choice([position, position, 0, position + 4, 2**62])
        header[f"t{k}"] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, begin + size]}
        position = begin + size if begin + size < 4096 else position
    if rng.random() < 0.3:
        header["__metadata__"] = rng.choice([{"format": "pt"}, {"x": 1}, [], "s"])
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    length = rng.choice([len(text)] * 4 + [0, 1, len(text) + 8, 2**40, 2**63, 100_000_001])
    data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 16, 64, 256])))
    out = struct.pack("<Q", length) + text + data
    return mutated(rng, out) if rng.random() < 0.3 else out


def test_the_safetensors_reader_accepts_or_refuses_every_generated_file_in_one_line(
    tmp_path: Path,
):
    rng = random.Random(60)
    path = tmp_path / "model.safetensors"

    def run(data: bytes) -> None:
        path.write_bytes(data)
        read_header(path)

    cases = [safetensors_bytes(rng) for _ in range(300)] + [b"", b"\x00" * 7, b"\xff" * 8]
    assert crashes(cases, run) == []


# --------------------------------------------------------------------------------------------
# The GGUF reader


def gguf_string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def gguf_bytes(
    metadata: list[bytes],
    tensors: list[tuple[str, tuple[int, ...], int, int]],
    data: bytes,
    counts: tuple[int, int] | None = None,
    version: int = 3,
) -> bytes:
    """A GGUF file: its metadata entries (each already written), tensor infos (name, shape
    in ggml order, type, offset) and data, aligned to 32; `counts` overrides the stated
    numbers of tensors and entries."""
    n_tensors, n_values = counts or (len(tensors), len(metadata))
    out = b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_values) + b"".join(metadata)
    for name, shape, kind, offset in tensors:
        out += gguf_string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in shape) + struct.pack("<IQ", kind, offset)
    return out + b"\x00" * (-len(out) % 32) + data


def entry_u32(key: str, value: int) -> bytes:
    return gguf_string(key) + struct.pack("<II", 4, value)


def entry_string(key: str, value: str) -> bytes:
    return gguf_string(key) + struct.pack("<I", 8) + gguf_string(value)


def entry_strings(key: str, values: list[str]) -> bytes:
    return (
        gguf_string(key)
        + struct.pack("<IIQ", 9, 8, len(values))
        + b"".join(gguf_string(v) for v in values)
    )


def good_gguf() -> bytes:
    metadata = [
        entry_string("general.architecture", "llama"),
        entry_u32("llama.block_count", 1),
        entry_strings("tokenizer.ggml.tokens", ["a", "b", "c"]),
    ]
    weights = struct.pack("<8f", *range(8))
    return gguf_bytes(metadata, [("w", (4, 2), 0, 0)], weights)


def read_gguf(path: Path) -> None:
    gguf = GGUFFile(path)
    for name in gguf.tensors:
        gguf.tensor(name)


def gguf_cases(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    good = good_gguf()
    return [mutated(rng, good) for _ in range(count)]


# The GGUF reader's own refusal is a ValueError (its callers word it for the user).
GGUF_REFUSALS = (InputError, ValueError)


def test_the_gguf_reader_reads_the_well_formed_file(tmp_path: Path):
    path = tmp_path / "base.gguf"
    path.write_bytes(good_gguf())
    gguf = GGUFFile(path)
    assert gguf.metadata["llama.block_count"] == 1
    assert gguf.tensor("w").flatten().tolist() == [float(v) for v in range(8)]


def test_the_gguf_reader_accepts_or_refuses_every_mutated_file_in_one_line(tmp_path: Path):
    path = tmp_path / "base.gguf"

    def run(data: bytes) -> None:
        path.write_bytes(data)
        read_gguf(path)

    assert crashes(gguf_cases(60, 300), run, GGUF_REFUSALS) == []


@pytest.mark.parametrize(
    "case",
    [
        "truncated",
        "huge string length",
        "alignment 0",
        "not gguf",
        "version 9",
    ],
)
def test_the_gguf_reader_refuses_each_malformed_file_the_audit_found_in_one_line(
    tmp_path: Path, case: str
):
    good = good_gguf()
    data = {
        "truncated": good[:40],
        "huge string length": b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**62) + b"key",
        "alignment 0": gguf_bytes([entry_u32("general.alignment", 0)], [], b""),
        "not gguf": b"GGML" + good[4:],
        "version 9": gguf_bytes([], [], b"", version=9),
    }[case]
    path = tmp_path / "base.gguf"
    path.write_bytes(data)
    assert crashes([data], lambda _: read_gguf(path), GGUF_REFUSALS) == []


# --------------------------------------------------------------------------------------------
# The JSONL reader


def json_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 2**70, 1.5, -0.0, 1e308])
    if kind in (2, 3, 4):
        return "".join(rng.choice('ab"\\\n\u00e9\U0001f600\x00') for _ in range(rng.randint(0, 6)))
    if kind in (5, 6):
        keys = ["id", "text", "prompt", "seed", "x", ""]
        return {rng.choice(keys): json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def jsonl_lines(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        text = json.dumps(json_value(rng), ensure_ascii=rng.random() < 0.5).encode()
        lines.append(mutated(rng, text) if rng.random() < 0.4 else text)
    lines += [
        b"[" * 100_000,
        b'{"a": ' * 50_000 + b"1" + b"}" * 50_000,
        b"1" * 5000,
        b'{"n": ' + b"9" * 5000 + b"}",
        b"\xef\xbb\xbf{}",
        b"   \n",
        b'{"a": NaN, "b": Infinity}',
    ]
    return lines


def test_the_jsonl_line_parser_accepts_or_refuses_every_generated_line_in_one_line():
    # parse_line's documented refusals: InputError, and UnicodeDecodeError on bytes that are
    # no UTF-8 (read_jsonl names their offset in the file).
    refusals = (InputError, UnicodeDecodeError)
    cases = jsonl_lines(60, 400)
    assert crashes(cases, lambda raw: parse_line(raw, "f:1", "record"), refusals) == []
    assert crashes(cases, lambda raw: parse_line(raw, "f:1", "record", first=True), refusals) == []


def test_the_jsonl_reader_accepts_or_refuses_every_generated_file_in_one_line(tmp_path: Path):
    rng = random.Random(60)
    lines = jsonl_lines(61, 200)
    path = tmp_path / "records.jsonl"

    def run(data: bytes) -> None:
        path.write_bytes(data)
        read_jsonl(str(path), "record")

    files = [b"\n".join(rng.sample(lines, rng.randint(0, 5))) for _ in range(200)]
    assert crashes(files, run) == []
