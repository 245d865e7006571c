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

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from cdd_cli.errors import InputError
from cdd_cli.output.jsonl import JsonlWriter, read_jsonl
from cdd_cli.output.resume import cut_torn_tail, existing_records
from cdd_cli.output.shards import record_key, shard_config, write_config

# A barrier waits for the slowest rank: a run may take days.
BARRIER_TIMEOUT = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Launch:
    rank: int
    world: int
    local_rank: int
    local_world: int

    def part(self, output: str) -> str:
        return f"{output}.rank{self.rank}"

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
    out = Path(output)
    found = [
        p for p in out.parent.glob(f"{out.name}.rank*") if p.name[len(out.name) + 5 :].isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name[len(out.name) + 5 :]))


def gather(output: str) -> int:
    """OUT rewritten whole with the records of its rank files (torn last lines dropped, one
    record per key, sorted by seed, prompt and sample); the files removed. The number of
    records OUT holds, or -1 when there was nothing to gather."""
    parts = parts_of(output)
    if not parts:
        return -1
    sources = [Path(output)] if Path(output).is_file() else []
    sources += parts
    config = None
    records: dict[tuple[int, int, int], dict] = {}
    for path in sources:
        torn = existing_records(str(path)).torn_bytes
        if torn:
            cut_torn_tail(str(path), torn)
        if Path(f"{path}.config.yaml").is_file() and config is None:
            config = shard_config(path)
        if not path.stat().st_size:  # a rank stopped before its first whole record
            continue
        for where, record in read_jsonl(str(path), "record"):
            records.setdefault(record_key(where, record), record)
    if records:  # (none: the run left only parts stopped before their first record)
        tmp = f"{output}.gathering"
        with JsonlWriter(tmp, lambda: None) as writer:
            for key in sorted(records):
                writer.write(records[key])
        os.replace(tmp, output)
    if config is not None and Path(output).is_file():  # (no file: no configuration beside it)
        write_config(output, config)
    for path in parts:
        path.unlink()
        Path(f"{path}.config.yaml").unlink(missing_ok=True)
    return len(records)


class Ranks:
    """The process group of one torchrun run: `start()` before sampling, `finish(code)`
    after (every rank must call both, whatever happened between)."""

    def __init__(self, launch: Launch, output: str):
        if output == "-":
            raise InputError("under torchrun give -o FILE: the ranks write parts of one file")
        self.launch, self.output = launch, output

    def start(self) -> None:
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
        dist.barrier()
        dist.destroy_process_group()
