"""torchrun's pieces in-process (cdd_cli/output/distributed.py): the launch read from the
environment, the rank files of a run and their gathering into OUT, and `Ranks` on a real
one-process gloo group (what torchrun starts, with WORLD_SIZE 1 so no other process is
needed)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import yaml

from cdd_cli.errors import InputError
from cdd_cli.output import distributed
from cdd_cli.output.distributed import (
    BARRIER_TIMEOUT,
    Launch,
    Ranks,
    gather,
    launch_from_env,
    parts_of,
)

TORCHRUN = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def record(id_: str, seed: int = 0, **extra) -> dict:
    return {"id": id_, "seed": seed, "text": f"t{id_}", **extra}


def write(path: Path, records: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def config_of(path: Path, seed: int) -> Path:
    beside = Path(f"{path}.config.yaml")
    beside.write_text(yaml.safe_dump({"model": "m", "sampling": {"n": 2, "seed": seed}}))
    return beside


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------------------------------
# Launch


def test_a_rank_writes_its_part_beside_the_output():
    assert Launch(3, 4, 1, 2).part("runs/out.jsonl") == "runs/out.jsonl.rank3"
    assert Launch(0, 2, 0, 2).part("o") == "o.rank0"


def test_without_a_gpu_the_device_is_as_given():
    launch = Launch(3, 4, 3, 4)
    for device in ("auto", "cuda", "cpu", "cuda:1"):
        assert launch.device(device) == device


def test_on_a_gpu_machine_auto_and_cuda_mean_the_local_ranks_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert Launch(5, 8, 3, 4).device("auto") == "cuda:1"  # local rank 3 of 2 GPUs
    assert Launch(5, 8, 2, 4).device("cuda") == "cuda:0"
    assert Launch(1, 8, 1, 4).device("auto") == "cuda:1"
    # Another device stays as given.
    assert Launch(5, 8, 3, 4).device("cpu") == "cpu"
    assert Launch(5, 8, 3, 4).device("cuda:0") == "cuda:0"


# ------------------------------------------------------------------------------------------
# launch_from_env


@pytest.fixture
def no_torchrun(monkeypatch):
    for name in TORCHRUN:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("world", [None, "1", "0"])
def test_outside_torchrun_or_with_one_process_there_is_no_launch(no_torchrun, world):
    if world is not None:
        no_torchrun.setenv("WORLD_SIZE", world)
        no_torchrun.setenv("RANK", "0")
    assert launch_from_env() is None


def test_the_launch_is_read_from_torchruns_variables(no_torchrun):
    no_torchrun.setenv("WORLD_SIZE", "8")
    no_torchrun.setenv("RANK", "5")
    no_torchrun.setenv("LOCAL_RANK", "1")
    no_torchrun.setenv("LOCAL_WORLD_SIZE", "4")
    assert launch_from_env() == Launch(rank=5, world=8, local_rank=1, local_world=4)


def test_one_node_defaults_the_local_rank_and_size_to_the_global_ones(no_torchrun):
    no_torchrun.setenv("WORLD_SIZE", "2")
    no_torchrun.setenv("RANK", "1")
    assert launch_from_env() == Launch(rank=1, world=2, local_rank=1, local_world=2)


@pytest.mark.parametrize(
    "env",
    [
        {"WORLD_SIZE": "2"},  # no RANK
        {"WORLD_SIZE": "2", "RANK": "one"},
        {"WORLD_SIZE": "two", "RANK": "0"},
        {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "x"},
        {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": ""},
    ],
)
def test_a_broken_torchrun_environment_is_one_line(no_torchrun, env):
    for name, value in env.items():
        no_torchrun.setenv(name, value)
    with pytest.raises(InputError) as info:
        launch_from_env()
    assert str(info.value) == "WORLD_SIZE is set but RANK is missing or not a number"


# ------------------------------------------------------------------------------------------
# parts_of


def test_parts_are_the_rank_files_of_this_output_in_rank_order(tmp_path):
    out = tmp_path / "out.jsonl"
    for rank in (10, 2, 0, 1):
        write(out.with_name(f"out.jsonl.rank{rank}"), [record("0-0")])
    for other in (
        "out.jsonl.rank",  # no rank number
        "out.jsonl.rankx",
        "out.jsonl.rank1.config.yaml",  # a part's configuration, not a part
        "out.jsonl.rank-1",
        "other.jsonl.rank0",  # another output's
        "out.jsonl",
    ):
        (tmp_path / other).write_text("")
    assert parts_of(str(out)) == [tmp_path / f"out.jsonl.rank{r}" for r in (0, 1, 2, 10)]


def test_no_parts_where_a_run_left_none(tmp_path):
    assert parts_of(str(tmp_path / "out.jsonl")) == []
    (tmp_path / "out.jsonl").write_text("")
    assert parts_of(str(tmp_path / "out.jsonl")) == []


def test_parts_of_an_output_in_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "o.rank1", [record("0-0")])
    assert parts_of("o") == [Path("o.rank1")]


# ------------------------------------------------------------------------------------------
# gather


def test_nothing_to_gather_leaves_the_output_alone(tmp_path):
    out = write(tmp_path / "out.jsonl", [record("0-1"), record("0-0")])
    assert gather(str(out)) == -1
    assert [r["id"] for r in lines(out)] == ["0-1", "0-0"]
    assert gather(str(tmp_path / "none.jsonl")) == -1
    assert not (tmp_path / "none.jsonl").exists()


def test_parts_are_gathered_into_the_output_sorted_and_removed(tmp_path):
    out = tmp_path / "out.jsonl"
    config_of(out, 7)
    write(out, [record("2-0", 1)])  # what an earlier gathering left
    write(tmp_path / "out.jsonl.rank0", [record("10-0", 1), record("0-0", 1)])
    write(tmp_path / "out.jsonl.rank1", [record("1-0", 1), record("0-1", 0)])
    config_of(tmp_path / "out.jsonl.rank1", 7)
    assert gather(str(out)) == 5
    assert [(r["seed"], r["id"]) for r in lines(out)] == [
        (0, "0-1"), (1, "0-0"), (1, "1-0"), (1, "2-0"), (1, "10-0"),
    ]  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out.jsonl.config.yaml"]
    assert yaml.safe_load(Path(f"{out}.config.yaml").read_text())["sampling"]["seed"] == 7


def test_gathering_without_an_output_yet_creates_it(tmp_path):
    out = tmp_path / "out.jsonl"
    write(tmp_path / "out.jsonl.rank1", [record("0-1")])
    write(tmp_path / "out.jsonl.rank0", [record("0-0")])
    assert gather(str(out)) == 2
    assert [r["id"] for r in lines(out)] == ["0-0", "0-1"]
    # No configuration anywhere: none written.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_one_record_per_key_the_outputs_first_then_the_lowest_ranks(tmp_path):
    out = write(tmp_path / "out.jsonl", [record("0-0", text="kept")])
    write(tmp_path / "out.jsonl.rank0", [record("0-0", text="rank0"), record("0-1", text="r0")])
    write(tmp_path / "out.jsonl.rank1", [record("0-1", text="r1"), record("0-2", text="r1")])
    assert gather(str(out)) == 3
    assert [(r["id"], r["text"]) for r in lines(out)] == [
        ("0-0", "kept"),
        ("0-1", "r0"),
        ("0-2", "r1"),
    ]


def test_a_torn_last_line_is_dropped(tmp_path):
    out = write(tmp_path / "out.jsonl", [record("0-0")], tail='{"id": "0-5", "se')
    write(tmp_path / "out.jsonl.rank0", [record("0-1")], tail='{"id": "0-3", "seed": 0, "te')
    write(tmp_path / "out.jsonl.rank1", [record("0-2")])
    assert gather(str(out)) == 3
    assert out.read_text() == "".join(json.dumps(record(f"0-{i}")) + "\n" for i in range(3))


def test_the_configuration_is_the_first_one_found(tmp_path):
    out = tmp_path / "out.jsonl"
    write(tmp_path / "out.jsonl.rank0", [record("0-0")])  # none beside it
    write(tmp_path / "out.jsonl.rank1", [record("0-1")])
    config_of(tmp_path / "out.jsonl.rank1", 11)
    write(tmp_path / "out.jsonl.rank2", [record("0-2")])
    config_of(tmp_path / "out.jsonl.rank2", 12)
    assert gather(str(out)) == 3
    text = Path(f"{out}.config.yaml").read_text()
    assert text.startswith("# merged shards\n") and yaml.safe_load(text)["sampling"]["seed"] == 11
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out.jsonl.config.yaml"]


def test_the_outputs_own_configuration_comes_first(tmp_path):
    out = write(tmp_path / "out.jsonl", [record("0-0")])
    config_of(out, 3)
    write(tmp_path / "out.jsonl.rank0", [record("0-1")])
    config_of(tmp_path / "out.jsonl.rank0", 4)
    assert gather(str(out)) == 2
    assert yaml.safe_load(Path(f"{out}.config.yaml").read_text())["sampling"]["seed"] == 3


def test_a_part_that_holds_no_cdd_records_is_refused_with_one_line(tmp_path):
    part = write(tmp_path / "out.jsonl.rank0", [record("0-0"), {"id": "0-1", "seed": "one"}])
    with pytest.raises(InputError) as info:
        gather(str(tmp_path / "out.jsonl"))
    assert str(info.value) == f"output {str(part)!r}, line 2: not a cdd record; choose another file"
    assert info.value.cli == f"-o {part}:2: not a cdd record; choose another file"
    assert not (tmp_path / "out.jsonl").exists() and part.exists()


def test_a_part_whose_id_is_no_cdd_id_is_one_line_naming_it(tmp_path):
    # The seed reads as a number for the resume check, the id is no PROMPT-SAMPLE.
    part = write(tmp_path / "out.jsonl.rank1", [record("0-0"), record("0-01"), record("x")])
    with pytest.raises(InputError) as info:
        gather(str(tmp_path / "out.jsonl"))
    assert str(info.value) == f'{part}:2: not a cdd record (no seed, or no id like "0-3")'
    assert part.exists()


@pytest.mark.parametrize("left", ["", '{"id": "0-0", "se'])
def test_a_rank_stopped_before_its_first_whole_record_leaves_nothing_to_refuse(tmp_path, left: str):
    """A rank killed between opening its part and writing a whole record left an empty file
    or a torn line: gathered as no records, and removed."""
    out = tmp_path / "out.jsonl"
    (tmp_path / "out.jsonl.rank0").write_text(left)
    write(tmp_path / "out.jsonl.rank1", [record("0-1")])
    assert gather(str(out)) == 1
    assert [r["id"] for r in lines(out)] == ["0-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
    (tmp_path / "out.jsonl.rank0").write_text(left)  # and alone, with its configuration
    config_of(tmp_path / "out.jsonl.rank0", 5)
    out.unlink()
    assert gather(str(out)) == 0 and not out.exists()
    assert list(tmp_path.iterdir()) == []  # no configuration beside a file not there


# ------------------------------------------------------------------------------------------
# Ranks, on a real one-process gloo group


@pytest.fixture
def group(monkeypatch):
    """torchrun's rendezvous variables for a group of one process; the group destroyed after."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert not dist.is_initialized()
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def rank_files(folder: Path) -> Path:
    """An output of 3 records and a part of 2 more, as an interrupted run leaves them."""
    out = write(folder / "out.jsonl", [record("0-2")])
    write(folder / "out.jsonl.rank1", [record("0-1"), record("0-0")])
    return out


def test_ranks_need_an_output_file():
    with pytest.raises(InputError) as info:
        Ranks(Launch(0, 2, 0, 2), "-")
    assert str(info.value) == "under torchrun give -o FILE: the ranks write parts of one file"


def test_rank_0_starts_the_group_and_gathers_what_a_run_left(group, tmp_path):
    out = rank_files(tmp_path)
    ranks = Ranks(Launch(0, 2, 0, 2), str(out))
    ranks.start()
    assert dist.is_initialized() and dist.get_world_size() == 1
    assert dist.get_backend() == "gloo"  # CPU barriers, whatever the device samples on
    # A barrier may wait for days: the group's timeout is the module's.
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    assert backend.options._timeout == BARRIER_TIMEOUT
    assert [r["id"] for r in lines(out)] == ["0-0", "0-1", "0-2"]
    assert parts_of(str(out)) == []
    ranks.close()
    assert not dist.is_initialized()


def test_another_rank_leaves_the_gathering_to_rank_0(group, tmp_path):
    out = rank_files(tmp_path)
    ranks = Ranks(Launch(1, 2, 1, 2), str(out))
    ranks.start()
    assert parts_of(str(out)) == [tmp_path / "out.jsonl.rank1"]
    assert ranks.finish(0) == (0, -1)
    assert parts_of(str(out)) == [tmp_path / "out.jsonl.rank1"]
    assert [r["id"] for r in lines(out)] == ["0-2"]
    ranks.close()


def test_a_group_already_started_is_joined(group, tmp_path):
    dist.init_process_group("gloo")
    ranks = Ranks(Launch(0, 2, 0, 2), str(tmp_path / "out.jsonl"))
    ranks.start()  # a second init would raise
    assert ranks.finish(0) == (0, -1)  # nothing to gather
    ranks.close()
    assert not dist.is_initialized()


@pytest.mark.parametrize(("code", "gathered"), [(0, 3), (3, 3), (1, -1), (2, -1), (130, -1)])
def test_rank_0_gathers_after_a_run_that_wrote_its_records(group, tmp_path, code, gathered):
    out = tmp_path / "out.jsonl"
    ranks = Ranks(Launch(0, 2, 0, 2), str(out))
    ranks.start()
    rank_files(tmp_path)  # what the ranks wrote meanwhile
    assert ranks.finish(code) == (code, gathered)
    if gathered == -1:  # a rank failed: the parts stay for --resume
        assert parts_of(str(out)) == [tmp_path / "out.jsonl.rank1"]
        assert [r["id"] for r in lines(out)] == ["0-2"]
    else:
        assert parts_of(str(out)) == []
        assert [r["id"] for r in lines(out)] == ["0-0", "0-1", "0-2"]
    ranks.close()


def test_finish_reads_the_worst_code_of_all_ranks(group, tmp_path, monkeypatch):
    """The code is reduced with MAX over the group: another rank's 2 outweighs this one's 0."""
    real = dist.all_reduce

    def another_rank_failed(tensor, op):
        assert op == dist.ReduceOp.MAX
        real(tensor, op=op)
        tensor.copy_(torch.maximum(tensor, torch.tensor([2])))

    ranks = Ranks(Launch(0, 2, 0, 2), str(rank_files(tmp_path)))
    ranks.start()
    write(tmp_path / "out.jsonl.rank0", [record("1-0")])
    monkeypatch.setattr(distributed.dist, "all_reduce", another_rank_failed)
    assert ranks.finish(0) == (2, -1)
    assert len(parts_of(str(tmp_path / "out.jsonl"))) == 1
    ranks.close()


def test_a_part_of_blank_lines_is_no_part_cdd_wrote(tmp_path):
    # Not empty, so not a rank stopped before its first record: refused, left for the user.
    part = tmp_path / "out.jsonl.rank0"
    part.write_text("\n\n")
    with pytest.raises(InputError) as info:
        gather(str(tmp_path / "out.jsonl"))
    assert str(info.value) == f"{part}: no records"
    assert part.exists() and not (tmp_path / "out.jsonl").exists()
