"""`cdd_cli.torchrun.write_run` in-process: one process writes the file itself; a torchrun rank
(on a real one-process gloo group, joined as rank 0 of two) writes its part, and rank 0
gathers the parts and says so, or says that another rank failed."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from cdd_cli.errors import InputError
from cdd_cli.output import distributed
from cdd_cli.run.runner import Output
from cdd_cli.torchrun import write_run

TORCHRUN = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def write(path: Path, ids: list[str]) -> None:
    records = [{"id": i, "seed": 0, "text": f"t{i}"} for i in ids]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def ids_in(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


class Told:
    def __init__(self) -> None:
        self.said: list[str] = []
        self.errors: list[str] = []


@pytest.fixture
def one_process(monkeypatch):
    for name in TORCHRUN:
        monkeypatch.delenv(name, raising=False)


def test_one_process_writes_the_output_itself(one_process, tmp_path):
    out = tmp_path / "out.jsonl"
    seen = []

    def job(part: Output, device: str, lead: bool) -> int:
        seen.append((part, device, lead))
        write(Path(part.path), ["0-0"])
        return 3

    told = Told()
    given = Output(str(out))
    assert write_run(given, "cpu", job, told.said.append, told.errors.append) == 3
    assert seen == [(given, "cpu", True)]
    assert told.said == [] and told.errors == []


def test_resuming_gathers_what_an_interrupted_torchrun_run_left_first(one_process, tmp_path):
    out = tmp_path / "out.jsonl"
    write(out, ["0-2"])
    write(tmp_path / "out.jsonl.rank1", ["0-1", "0-0"])
    held = []
    job = lambda part, device, lead: held.append(ids_in(Path(part.path))) or 0  # noqa: E731
    assert write_run(Output(str(out), resume=True), "cpu", job) == 0
    assert held == [["0-0", "0-1", "0-2"]]
    assert not (tmp_path / "out.jsonl.rank1").exists()


@pytest.fixture
def rank_0_of_2(monkeypatch):
    """A real gloo group of this one process, which torchrun's variables call rank 0 of 2."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    for name, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    dist.init_process_group("gloo")  # joined by the run, not started again
    monkeypatch.setenv("WORLD_SIZE", "2")
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_a_rank_writes_its_part_and_rank_0_gathers_the_parts(rank_0_of_2, tmp_path):
    out = tmp_path / "out.jsonl"
    write(tmp_path / "out.jsonl.rank1", ["0-1"])  # what the other rank wrote
    seen = []

    def job(part: Output, device: str, lead: bool) -> int:
        seen.append((part, device, lead))
        write(Path(part.path), ["0-0"])
        return 0

    told = Told()
    assert write_run(Output(str(out)), "cpu", job, told.said.append, told.errors.append) == 0
    part = Output(f"{out}.rank0", False, (0, 2), str(out))
    assert seen == [(part, "cpu", True)]
    assert ids_in(out) == ["0-0", "0-1"]
    assert told.said == [f"2 records from 2 processes in {out}"] and told.errors == []
    assert not dist.is_initialized()  # every rank met the others, then the group ended


def test_another_ranks_failure_is_told_and_its_code_returned(rank_0_of_2, tmp_path, monkeypatch):
    real = dist.all_reduce

    def another_rank_failed(tensor, op):
        real(tensor, op=op)
        tensor.copy_(torch.maximum(tensor, torch.tensor([2])))

    monkeypatch.setattr(distributed.dist, "all_reduce", another_rank_failed)
    told = Told()
    out = tmp_path / "out.jsonl"
    job = lambda part, device, lead: 0  # noqa: E731
    assert write_run(Output(str(out)), "cpu", job, told.said.append, told.errors.append) == 2
    failed = "another process of the run failed (exit 2): rerun with --resume"
    assert told.said == [] and told.errors == [failed]


def test_under_torchrun_the_ranks_are_the_shards(rank_0_of_2, tmp_path):
    with pytest.raises(InputError, match="--shard under torchrun: the ranks are the shards"):
        write_run(Output(str(tmp_path / "o.jsonl"), shard=(0, 2)), "cpu", lambda *a: 0)
