"""Safetensors files read for loading: opened with a one-line error, and their headers (each
tensor's dtype and shape) read without any weight.

Both loaders (`checkpoint.py` for cdd's own formats, `families.py` for published ones) compare
a file's header with the module its config builds on the meta device before any weight is
allocated, so a config or a file that claims more than the other holds costs nothing. The
header itself is bounded: safetensors refuses one that claims over 100 MB before reading it.
"""

from __future__ import annotations

from pathlib import Path

from safetensors import SafetensorError, safe_open

from cdd_cli.errors import InputError, one_line

# The dtypes of weights cdd loads, as safetensors names them; an integer or boolean tensor
# where a weight belongs is a broken or foreign file.
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")

# What safetensors (and the disk under it) raise on a file it cannot read.
READ_ERRORS = (SafetensorError, OSError, ValueError, RuntimeError)
# A file's header: each tensor's name -> (dtype, shape).
Header = dict[str, tuple[str, tuple[int, ...]]]


def reading_problem(exc: BaseException) -> str:
    """Why a read failed, for a one-line message: at most 160 characters (safetensors may
    quote a long header)."""
    return one_line(exc)[:160]


def open_safetensors(path: Path):
    """`safe_open(path)`, refused in one line (InputError) where the file is unreadable."""
    try:
        return safe_open(str(path), framework="pt")
    except READ_ERRORS as exc:
        raise InputError(f"{path}: cannot read safetensors file ({reading_problem(exc)})") from None


def read_header(path: Path) -> Header:
    """Each tensor's dtype and shape from a safetensors file's header, reading no weights."""
    try:
        with open_safetensors(path) as f:
            header = {}
            for name in f.keys():  # noqa: SIM118 (a safetensors handle is not a dict)
                piece = f.get_slice(name)
                header[name] = (str(piece.get_dtype()), tuple(piece.get_shape()))
            return header
    except READ_ERRORS as exc:
        raise InputError(f"{path}: cannot read safetensors file ({reading_problem(exc)})") from None


def read_headers(files: dict[str, Path]) -> dict[str, tuple[Path, str, tuple[int, ...]]]:
    """Each tensor's file, dtype and shape from the headers of the files `files` maps tensors
    to (a sharded checkpoint's index); a tensor placed in a file that does not hold it is
    refused."""
    out: dict[str, tuple[Path, str, tuple[int, ...]]] = {}
    for path in sorted(set(files.values())):
        out.update({name: (path, *kind) for name, kind in read_header(path).items()})
    misplaced = sorted(k for k, p in files.items() if k not in out or out[k][0] != p)
    if misplaced:
        raise InputError(
            f"{files[misplaced[0]]}: does not hold {misplaced[0]}, which the index places there"
            + (f" (and {len(misplaced) - 1} more)" if len(misplaced) > 1 else "")
        )
    return out
