"""Statistics of a large set (a MOSES test set) computed once, in parts: each part is cached
as it finishes, so that a run stopped half-way (Ctrl-C, SIGTERM, a timeout) resumes where it
stopped, and the time left is told from the pace measured on the parts, not guessed.

On a terminal a Rich bar shows the progress on stderr; elsewhere (a log, a pipe) a plain line
is said when the first part is done, then at most every PLAIN_EVERY_S seconds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from cdd_cli.evaluate.reference import chunk_results

# Molecules a part: a multiple of ChemNet's batch (256), so that a split's activations are
# computed in the same batches whole or in parts (the same numbers); about 15 s of RDKit
# statistics a part on one core.
PART = 4096
PLAIN_EVERY_S = 30.0

Arrays = dict[str, np.ndarray]


def clock_text(seconds: float) -> str:
    whole = int(max(seconds, 0.0))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _timed(work: Callable[[list], Arrays], part: list) -> tuple[float, Arrays]:
    """`work(part)` and the seconds it took where it ran (a worker process's own pace)."""
    began = time.perf_counter()
    result = work(part)
    return time.perf_counter() - began, result


def save_atomically(path: Path, arrays: Arrays) -> None:
    """`arrays` as an .npz at `path`, never seen half-written (written aside, then renamed)."""
    partial = path.with_suffix(f".{os.getpid()}.npz")
    np.savez(partial, **arrays)
    partial.replace(path)


def computed_in_parts(
    work: Callable[[list], Arrays],
    items: Sequence,
    folder: Path,
    label: str,
    log: Callable[[str], None],
    workers: int = 1,
) -> list[Arrays]:
    """`work` of each PART-long slice of `items`, in order, each cached in `folder` as it
    finishes (the parts found there are read, not computed again). `work` must be picklable
    where `workers` > 1 (a module's function or a partial of one). `folder` names what the
    parts depend on (the data's digest, the versions): the caller removes it once done."""
    starts = range(0, max(len(items), 1), PART)  # (no items: one empty part)
    # Named by the part size too: parts of another size never mix.
    names = (f"part-{k:05d}-of-{len(starts):05d}-by-{PART}.npz" for k in range(len(starts)))
    paths = [folder / name for name in names]
    kept = [p.is_file() for p in paths]
    pending = [k for k, done in enumerate(kept) if not done]
    cached = f"{sum(kept)} of {len(paths)} parts already computed; " if any(kept) else ""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        where = f"each part cached in {folder} as it finishes"
    except OSError:
        where = "not cached (the cache folder cannot be written)"
    chunks = [list(items[starts[k] : starts[k] + PART]) for k in pending]
    workers = max(1, min(workers, len(pending)))
    if pending:
        log(
            f"{label}: {cached}{len(items):,} molecules in {len(paths)} parts over {workers} "
            f"process(es), {where}; the time left is told once a part is done"
        )
    present = len(items) - sum(len(c) for c in chunks)
    results: dict[int, Arrays] = {}
    timed = functools.partial(_timed, work)
    with (
        PartsProgress(label, len(items), present, workers, log) as report,
        contextlib.closing(chunk_results(timed, chunks, workers)) as landed,
    ):
        for k, chunk, (seconds, arrays) in zip(pending, chunks, landed, strict=True):
            results[k] = arrays
            with contextlib.suppress(OSError):  # a read-only home: computed again next time
                save_atomically(paths[k], arrays)
            report.part_done(len(chunk), seconds)
    for k, path in enumerate(paths):
        if k not in results:
            with np.load(path, allow_pickle=False) as data:
                results[k] = {name: data[name] for name in data.files}
    return [results[k] for k in range(len(paths))]


def forget_parts(folder: Path) -> None:
    """The parts of a set whose whole statistics are now cached: no longer needed."""
    shutil.rmtree(folder, ignore_errors=True)


class PartsProgress:
    """The progress of `computed_in_parts`: a Rich bar on a terminal, else plain lines."""

    def __init__(
        self,
        label: str,
        total: int,
        present: int,
        workers: int,
        log: Callable[[str], None],
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label, self.total, self.done, self.log = label, total, present, log
        self.workers, self.clock = workers, clock
        self.seconds, self.computed = 0.0, 0  # the parts' own time, and their molecules
        self.began = self.said = clock()
        self.console = console or Console(stderr=True)
        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(), console=self.console,
            disable=not self.console.is_terminal, transient=True,
        )  # fmt: skip
        self.task = self.bar.add_task(label, total=total, completed=present)

    def __enter__(self) -> PartsProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)

    def left(self) -> float:
        """Seconds left: the molecules left at the pace the parts took, over the processes."""
        per_molecule = self.seconds / self.computed
        return (self.total - self.done) * per_molecule / self.workers

    def part_done(self, molecules: int, seconds: float) -> None:
        self.done += molecules
        self.computed += molecules
        self.seconds += seconds
        self.bar.update(self.task, completed=self.done)
        now = self.clock()
        if self.bar.live.is_started or self.done >= self.total:
            return
        if self.computed == molecules or now - self.said >= PLAIN_EVERY_S:
            self.said = now
            self.log(
                f"{self.label}: {self.done:,} of {self.total:,} molecules "
                f"({100 * self.done / self.total:.0f}%), {clock_text(now - self.began)} "
                f"elapsed, about {clock_text(self.left())} left"
            )
