"""torchrun: one run spread over processes, GPUs and nodes.

    torchrun --standalone --nproc-per-node 2 -m cdd_cli molecules -n 256 --seed 3 -o out.jsonl

Under torchrun (RANK, WORLD_SIZE and LOCAL_RANK set, WORLD_SIZE > 1) rank R is shard R/W of
the run (`--shard`'s interleaved share of the samples), samples on `cuda:LOCAL_RANK` when the
device is a GPU, and writes its records to `OUT.rankR`. Rank 0 folds whatever parts an
earlier, interrupted run left into OUT before anyone starts, so a resume may use another
process count; every rank counts OUT's records as written; after the last rank finishes,
rank 0 writes OUT whole, sorted by seed, prompt and sample (a temporary file renamed over it),
and removes the parts. The processes meet through torch.distributed's gloo backend (CPU
barriers; nodes rendezvous as torchrun arranges). Only rank 0 shows progress.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from cdd_cli.errors import InputError
from cdd_cli.output.config import INPUTS, all_inputs
from cdd_cli.output.files import config_path, is_stream, real_path
from cdd_cli.output.jsonl import read_jsonl
from cdd_cli.output.lock import output_lock
from cdd_cli.output.resume import cut_torn_tail, existing_records
from cdd_cli.output.shards import record_key, shard_config, write_config, write_whole_records

# A barrier waits for the slowest rank: a run may take days.
BARRIER_TIMEOUT = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Launch:
    rank: int
    world: int
    local_rank: int
    local_world: int

    def part(self, output: str) -> str:
        """This rank's part of `output`: beside its file (every name of it names one part)."""
        return f"{real_path(output)}.rank{self.rank}"

    def device(self, device: str) -> str:
        """`auto` or `cuda` on a GPU machine means this process's GPU, cuda:LOCAL_RANK."""
        if device in ("auto", "cuda") and torch.cuda.is_available():
            return f"cuda:{self.local_rank % torch.cuda.device_count()}"
        return device


def launch_from_env() -> Launch | None:
    """The torchrun process this is, or None outside torchrun (or with one process)."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return None
        rank = int(os.environ["RANK"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    except (KeyError, ValueError):
        raise InputError("WORLD_SIZE is set but RANK is missing or not a number") from None
    return Launch(rank, world, local, local_world)


def parts_of(output: str) -> list[Path]:
    """The rank files a run writing to `output` left, in rank order."""
    out = Path(real_path(output))
    found = [
        p for p in out.parent.glob(f"{out.name}.rank*") if p.name[len(out.name) + 5 :].isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name[len(out.name) + 5 :]))


def gather(output: str) -> int:
    """OUT rewritten whole with the records of its rank files (torn last lines dropped, one
    record per key, sorted by seed, prompt and sample; written beside it and renamed over
    it, with the first configuration found and every file's inputs); the files removed. The
    number of records OUT holds, or -1 when there was nothing to gather."""
    parts = parts_of(output)
    if not parts:
        return -1
    target = real_path(output)
    sources = [Path(target)] if Path(target).is_file() else []
    sources += parts
    configs = []
    records: dict[tuple[int, int, int], dict] = {}
    for path in sources:
        torn = existing_records(str(path)).torn_bytes
        if torn:
            cut_torn_tail(str(path), torn)
        if config_path(str(path)).is_file():
            configs.append(shard_config(path))
        if not path.stat().st_size:  # a rank stopped before its first whole record
            continue
        for where, record in read_jsonl(str(path), "record", regular=True):
            records.setdefault(record_key(where, record), record)
    config = None
    if configs:  # the first settings found (OUT's own), the inputs of every seed any holds
        config = {**configs[0], INPUTS: all_inputs(c.get(INPUTS) for c in configs)}

    def write_beside() -> None:
        if config is not None:
            write_config(target, config)

    if records:  # (none: the run left only parts stopped before their first record)
        write_whole_records(target, (records[key] for key in sorted(records)), write_beside)
    elif Path(target).is_file():  # (no file: no configuration beside it)
        write_beside()
    for path in parts:
        path.unlink()
        config_path(str(path)).unlink(missing_ok=True)
    return len(records)


class Ranks:
    """The process group of one torchrun run: `start()` before sampling, `finish(code)`
    after (every rank must call both, whatever happened between)."""

    def __init__(self, launch: Launch, output: str):
        if is_stream(output):  # (stdout, /dev/stdout, /dev/null: no file to hold parts)
            raise InputError("under torchrun give -o FILE: the ranks write parts of one file")
        self.launch, self.output = launch, output
        self.held = contextlib.ExitStack()

    def start(self) -> None:
        if self.launch.rank == 0:
            # OUT, under any of its names, is this run's until `close()`: another process
            # appending to it, or gathering its parts, would mix two runs in it.
            self.held.enter_context(output_lock(self.output))
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=BARRIER_TIMEOUT)
        if self.launch.rank == 0:
            gather(self.output)  # what an interrupted run left, whatever its process count
        dist.barrier()

    def finish(self, code: int) -> tuple[int, int]:
        """The run's exit code (the worst of the ranks') and, on rank 0, the records OUT holds
        once gathered (-1 elsewhere, or when a rank failed: its parts stay for --resume).
        `close()` next, on every rank."""
        worst = torch.tensor([code])
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        written = -1
        if self.launch.rank == 0 and int(worst) in (0, 3):
            written = gather(self.output)
        return int(worst), written

    def close(self) -> None:
        """Every rank waits here for rank 0 to have said what it gathered: torchrun stops the
        other processes as soon as one exits non-zero (3: some record violates), which must
        not cut rank 0 short."""
        try:
            dist.barrier()
            dist.destroy_process_group()
        finally:
            self.held.close()
