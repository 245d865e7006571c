"""Reference sets of canonical SMILES (a model's training molecules), for novelty.

The file beside a model (`reference.smi.gz`) names the RDKit that canonicalised it. Canonical
SMILES can change between RDKit releases, so when the installed RDKit differs, the set is
canonicalised again once and cached under the user's cache folder.
"""

from __future__ import annotations

import functools
import gc
import gzip
import multiprocessing
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from multiprocessing import resource_tracker
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TypeVar

from rdkit import Chem

from cdd_cli.errors import InputError
from cdd_cli.evaluate.molecules import CANONICALIZER, MAX_SMILES_CHARS, canonical
from cdd_cli.models.files import file_digest, regular_file

if TYPE_CHECKING:
    from cdd_cli.models.registry import LoadedModel

R = TypeVar("R")  # what one chunk's work gives (`map_chunks`)

REFERENCE_HEADER = "# cdd-reference v1"


def write_smiles(path: Path, smiles: list[str], source: str) -> None:
    """A gzip'd list with a versioned header naming the canonicaliser (novelty depends on it)."""
    with gzip.open(path, "wt") as f:
        f.write(f"{REFERENCE_HEADER} canonicalizer={CANONICALIZER} source={source}\n")
        f.writelines(s + "\n" for s in smiles)


def read_smiles(path: Path) -> tuple[str, list[str]]:
    with gzip.open(path, "rt") as f:
        header = f.readline().rstrip("\n")
        if not header.startswith(REFERENCE_HEADER):
            raise InputError(f"{path}: not a cdd reference file (header {header[:40]!r})")
        return header, [line.rstrip("\n") for line in f if line.strip()]


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "cdd"


def load_reference(path: Path) -> frozenset[str] | None:
    if not path.is_file():
        return None
    header, smiles = read_smiles(path)
    if f"canonicalizer={CANONICALIZER}" in header.split():
        return frozenset(smiles)
    digest = file_digest(path)[:16]
    cached = cache_dir() / f"reference-{digest}-{CANONICALIZER}.smi.gz"
    if cached.is_file():
        return frozenset(read_smiles(cached)[1])
    readable = [s for s in smiles if len(s) <= MAX_SMILES_CHARS]  # (see MAX_SMILES_CHARS)
    recanonicalised = sorted({c for s in readable if (c := canonical(s)) is not None})
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_smiles(cached, recanonicalised, f"{path} re-canonicalised")
    except OSError:
        pass  # a read-only home only costs the re-canonicalisation next time
    return frozenset(recanonicalised)


def model_reference(directory: Path) -> frozenset[str] | None:
    """The canonical training molecules a model folder ships (`reference.smi.gz`), for
    novelty; None when it ships none. Read once per file version and process."""
    path = Path(directory) / "reference.smi.gz"
    if not path.is_file():
        return None
    stat = path.stat()
    return _reference(path.resolve(), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _reference(path: Path, mtime_ns: int, size: int) -> frozenset[str] | None:
    return load_reference(path)


def heldout_reference(directory: Path) -> frozenset[str] | None:
    """The canonical held-out molecules a model folder ships (`heldout.smi.gz`), or None."""
    path = Path(directory) / "heldout.smi.gz"
    if not path.is_file():
        return None
    stat = path.stat()
    return _reference(path.resolve(), stat.st_mtime_ns, stat.st_size)


# How records and novelty judges name the model's molecules they call known.
TRAINING = "training"
TRAINING_AND_HELDOUT = "training + held-out"


def default_reference(directory: Path) -> tuple[frozenset[str], str] | None:
    """What a model folder calls known when nothing else is named, and its name: its
    training molecules and its held-out ones where it ships both, else its training ones;
    None when it ships none. A novelty constraint without `reference:` and a molecule
    record's `novel` both judge against this one set."""
    training = model_reference(Path(directory))
    if training is None:
        return None
    heldout = heldout_reference(Path(directory))
    if heldout is None:
        return training, TRAINING
    return _union(training, heldout), TRAINING_AND_HELDOUT


@functools.lru_cache(maxsize=4)
def _union(training: frozenset[str], heldout: frozenset[str]) -> frozenset[str]:
    # Keyed by the (cached) sets themselves: found by identity, built once per process.
    return training | heldout


def novelty_reference(
    model: LoadedModel, choice: str | None, where: str
) -> tuple[frozenset[str], str]:
    """What a novelty constraint calls known, and how the record names it. `choice`:
    "training" (the model's training molecules), "all" (those and its held-out ones), or a
    SMILES file; None: the model's `default_reference` ("all" where it ships held-out
    molecules, else "training")."""
    directory = Path(model.directory)
    if choice not in (None, "training", "all"):
        path = Path(choice).expanduser().resolve()
        return library(path), str(path)
    known = default_reference(directory)
    if known is None:
        raise InputError(
            f"{where}: model {model.name} ships no training molecules ({directory}/"
            "reference.smi.gz) to judge novelty against; give `reference: FILE` (a SMILES file)"
        )
    if choice == "training" or (choice is None and known[1] == TRAINING):
        training = model_reference(directory)
        return training, f"training ({len(training):,} molecules)"
    if known[1] != TRAINING_AND_HELDOUT:
        raise InputError(
            f"{where}: reference all: model {model.name} ships no held-out molecules "
            f"({directory}/heldout.smi.gz); use reference: training"
        )
    both = known[0]
    return both, f"all: training + held-out ({len(both):,} molecules)"


MAX_LINE_BYTES = 1 << 16  # a line's SMILES and whatever columns follow it
MAX_REFERENCE_BYTES = 1 << 30  # decompressed; MOSES' 1.6M training molecules are 80 MB


def library_lines(path: Path) -> list[str]:
    """The SMILES of a user's file: one a line, the first field (whitespace or comma
    separated; a name or other columns may follow), blank and # lines skipped; gzip'd or not.
    A line or SMILES past its cap (`MAX_LINE_BYTES`, `MAX_SMILES_CHARS`) is skipped unread,
    with a warning; a file past `MAX_REFERENCE_BYTES` is refused."""
    smiles, skipped = [], 0
    try:
        with open(path, "rb") as raw:
            zipped = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if zipped else open(path, "rb") as f:
            for number, line in enumerate(bounded_lines(f, path), 1):
                field = None if line is None else first_field(path, number, line)
                if line is None or (field is not None and len(field) > MAX_SMILES_CHARS):
                    skipped += 1
                elif field:
                    smiles.append(field)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"{path}: cannot read the reference ({exc})") from None
    if skipped:
        warnings.warn(
            f"{path}: {skipped:,} line(s) longer than {MAX_SMILES_CHARS:,} characters of SMILES "
            f"(or {MAX_LINE_BYTES:,} bytes) skipped, never handed to RDKit",
            stacklevel=2,
        )
    return smiles


def bounded_lines(f: BinaryIO, path: Path) -> Iterator[bytes | None]:
    """The lines of `f`, None for one longer than `MAX_LINE_BYTES` (read past in pieces, never
    held whole); InputError once more than `MAX_REFERENCE_BYTES` have been read."""
    total = 0
    while line := f.readline(MAX_LINE_BYTES + 1):
        total += len(line)
        whole = len(line) <= MAX_LINE_BYTES  # else: the rest of it read in pieces, dropped
        piece = line
        while not whole and not piece.endswith(b"\n") and total <= MAX_REFERENCE_BYTES:
            piece = f.readline(MAX_LINE_BYTES + 1)
            if not piece:
                break
            total += len(piece)
        if total > MAX_REFERENCE_BYTES:
            raise InputError(
                f"{path}: more than {MAX_REFERENCE_BYTES >> 20:,} MiB of SMILES (the most a "
                "reference file may hold, decompressed)"
            )
        yield line if whole else None


def first_field(path: Path, number: int, line: bytes) -> str | None:
    """A line's SMILES (its first field), None for a blank or # line."""
    try:
        text = line.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: line {number:,} is not UTF-8 (byte {exc.start})") from None
    field = text.strip().replace(",", " ").split(maxsplit=1)
    return field[0] if field and not field[0].startswith("#") else None


def _canonical_chunk(smiles: list[str]) -> list[str | None]:
    """RDKit canonical SMILES of each (None: unreadable). Unlike `canonical`, the result is
    not read back: a form RDKit cannot read back never equals a generated molecule's (those
    are read back), and skipping it saves a third of the time."""
    out: list[str | None] = []
    for s in smiles:
        mol = Chem.MolFromSmiles(s) if s else None
        out.append(Chem.MolToSmiles(mol) if mol is not None and mol.GetNumAtoms() else None)
    return out


def map_chunks(
    work: Callable[[list], R], items: list, least: int, workers: int | None = None
) -> list[R]:
    """`work` of consecutive chunks of `items`, over `workers` processes (default: every core,
    16 at most) where there are at least `least` items (below that, starting the processes
    costs more than it saves): one result a chunk, in order; `work` must be picklable (a
    module's function, or a partial of one: the processes import it by name)."""
    workers = workers or min(os.cpu_count() or 1, 16)
    if workers == 1 or len(items) < least:
        return [work(items)]
    size = -(-len(items) // (workers * 8))
    chunks = [items[i : i + size] for i in range(0, len(items), size)]
    return list(chunk_results(work, chunks, workers))


STOPPING = {signal.SIGINT, signal.SIGTERM}


def _worker_started() -> None:
    # Ctrl-C reaches the whole process group: the command stops its workers itself (with
    # SIGTERM), and a worker's own KeyboardInterrupt would print its traceback. A worker
    # starts with both signals blocked (see `chunk_results`): a stop that came while Python
    # started up (which it would garble) is taken now.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)


def chunk_results(work: Callable[[list], R], chunks: list[list], workers: int) -> Iterator[R]:
    """`work` of each chunk, in order, as each lands: in this process for one worker, else
    over `workers` processes. Stopped early (Ctrl-C, SIGTERM, an error, the caller closing
    it), the workers are ended and waited for, and the pool's semaphores released: nothing
    is left for multiprocessing's resource tracker to warn of."""
    if workers == 1 or len(chunks) < 2:
        for chunk in chunks:
            yield work(chunk)
        return
    # The workers (and the pool's threads, which start any worker that replaces one) inherit
    # the signals blocked; a stop that comes while the pool starts is raised once it stands.
    # The resource tracker first: starting it unblocks them.
    resource_tracker.ensure_running()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    pool = None
    try:
        pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_worker_started)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        yield from pool.imap(work, chunks)
    except BaseException as exc:
        # A second signal (`timeout` sends its SIGTERM to the command and to its process
        # group) waits until the pool is gone.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
        # Its frames (imap's) hold the pool, and so do those of what it interrupted (imap's
        # own IndexError, its context): neither says more than the stop's own frames.
        stop = exc.with_traceback(None)
        stop.__context__ = None
    else:
        pool.close()
        pool.join()
        return
    # `cdd` leaves by os._exit, so multiprocessing's exit-time clean-up never runs: the pool's
    # semaphores are released (no resource tracker warning) when it is collected, here.
    try:
        if pool is not None:
            pool.terminate()
            pool.join()
        del pool
        gc.collect()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    raise stop


def over_cores(
    work: Callable[[list[str]], list[str | None]], items: list[str], least: int
) -> list[str | None]:
    """`work(items)` one result an item, its chunks spread over the cores (`map_chunks`)."""
    return [c for part in map_chunks(work, items, least) for c in part]


def canonicalise_all(smiles: list[str]) -> list[str | None]:
    """`_canonical_chunk` of all, over every core for a large set (~0.1 ms a molecule)."""
    return over_cores(_canonical_chunk, smiles, 20_000)


@functools.lru_cache(maxsize=4)
def _library(path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    try:
        digest = file_digest(path)[:16]
    except OSError as exc:
        raise InputError(f"{path}: cannot read the reference ({exc.strerror})") from None
    cached = cache_dir() / f"library-{digest}-{CANONICALIZER}.smi.gz"
    if cached.is_file():
        return frozenset(read_smiles(cached)[1])
    lines = library_lines(path)
    if len(lines) > 100_000:  # about 0.1 ms a molecule a core: say why the wait
        print(
            f"cdd: canonicalising {len(lines):,} SMILES of {path} with RDKit, once (cached in "
            f"{cache_dir()})",
            file=sys.stderr,
            flush=True,
        )
    found = canonicalise_all(lines)
    known = sorted({c for c in found if c is not None})
    if not known:
        raise InputError(f"{path}: no SMILES RDKit can read (one SMILES a line)")
    unread = sum(c is None for c in found)
    if unread:
        warnings.warn(
            f"{path}: {unread:,} of {len(lines):,} lines are not SMILES RDKit reads; skipped",
            stacklevel=2,
        )
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_smiles(cached, known, f"{path} canonicalised")
    except OSError:
        pass  # a read-only home only costs the canonicalisation next time
    return frozenset(known)


def library(path: Path) -> frozenset[str]:
    """A user's SMILES file as canonical SMILES: canonicalised once (in parallel), cached
    under the user's cache folder by the file's SHA-256 and the RDKit version."""
    if not path.exists():
        raise InputError(f"{path}: no such reference file")
    stat = regular_file(path, "a reference file").stat()
    return _library(path, stat.st_mtime_ns, stat.st_size)
