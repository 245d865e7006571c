"""`cdd merge` in-process (cdd_cli/output/shards.py): small shards written here, merged by
`merge_shards`, and each promise of the module's docstring checked on the file it writes or
the one line it refuses with."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
import yaml

from cdd_cli.errors import InputError
from cdd_cli.output import shards
from cdd_cli.output.shards import merge_shards, shard_config, sort_key, write_config

# Keys in an order sort_keys would change (the merged configuration keeps the shards' order).
CONFIG = {
    "model": "m",
    "method": "cdd",
    "sampling": {"seed": 0, "n": 2, "batch_size": 4},
    "constraints": [{"type": "include", "words": ["harbor"]}],
}


def record(id_: str, seed: int = 0, **extra) -> dict:
    return {"id": id_, "seed": seed, "text": f"t{id_}/{seed}", **extra}


def shard(folder: Path, name: str, records: list[dict], config: dict | str | None = None) -> Path:
    """A shard file of `records` with its configuration beside it (CONFIG unless given;
    a string is written as it is)."""
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    config = CONFIG if config is None else config
    text = config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False)
    Path(f"{path}.config.yaml").write_text(text)
    return path


def refusal(out: Path, paths: list[Path]) -> str:
    with pytest.raises(InputError) as info:
        merge_shards(str(out), paths)
    message = str(info.value)
    assert "\n" not in message
    assert not out.exists() and not Path(f"{out}.config.yaml").exists()
    return message


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------------------------------
# shard_config


def test_shard_config_reads_the_configuration_beside_the_shard(tmp_path):
    path = shard(tmp_path, "a.jsonl", [], {"sampling": {"n": 1}, "model": "x"})
    assert shard_config(path) == {"sampling": {"n": 1}, "model": "x"}
    # n may be absent (inferred from the records later).
    path = shard(tmp_path, "b.jsonl", [], "sampling:\n  seed: 3\n")
    assert shard_config(path) == {"sampling": {"seed": 3}}


def test_a_missing_configuration_names_the_shard_its_file_and_the_problem(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(record("0-0")) + "\n")
    with pytest.raises(InputError) as info:
        shard_config(path)
    beside = f"{path}.config.yaml"
    assert str(info.value) == (
        f"{path}: cannot read its configuration {beside} "
        f"([Errno 2] No such file or directory: '{beside}')"
    )


def test_an_unreadable_configuration_is_one_line_of_at_most_160_characters(tmp_path):
    # A YAML error is several lines long; the line keeps its first 160 characters.
    text = "sampling:\n  n: 1\n  seed: [" + "x" * 300 + "\n"
    path = shard(tmp_path, "a.jsonl", [], text)
    with pytest.raises(InputError) as info:
        shard_config(path)
    message = str(info.value)
    head = f"{path}: cannot read its configuration {path}.config.yaml ("
    assert message.startswith(head) and message.endswith(")")
    problem = message[len(head) : -1]
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as exc:
        whole = " ".join(str(exc).split())
    assert len(whole) > 160 and problem == whole[:160]
    assert "  " not in problem and "\n" not in problem


def test_a_configuration_that_is_not_utf8_is_refused(tmp_path):
    path = shard(tmp_path, "a.jsonl", [], "x")
    Path(f"{path}.config.yaml").write_bytes(b"sampling:\n  n: \xff\n")
    with pytest.raises(InputError, match=r"cannot read its configuration .*can't decode byte"):
        shard_config(path)


def test_an_error_without_words_is_named_by_its_kind(tmp_path, monkeypatch):
    path = shard(tmp_path, "a.jsonl", [])

    def unreadable(_path):
        raise OSError

    monkeypatch.setattr(shards, "read_config", unreadable)
    with pytest.raises(InputError) as info:
        shard_config(path)
    assert str(info.value) == f"{path}: cannot read its configuration {path}.config.yaml (OSError)"


@pytest.mark.parametrize(
    "text",
    [
        "- sampling\n",  # a list
        "model: m\n",  # no sampling
        "sampling: 3\n",  # sampling not a mapping
        "sampling: [1, 2]\n",
        "",  # an empty file: None
    ],
)
def test_a_configuration_without_a_sampling_mapping_is_not_a_cdd_configuration(tmp_path, text):
    path = shard(tmp_path, "a.jsonl", [], text)
    with pytest.raises(InputError) as info:
        shard_config(path)
    assert str(info.value) == f"{path}.config.yaml: not a cdd configuration"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("0", "0"),
        ("-2", "-2"),
        ("true", "True"),
        ("many", "'many'"),
        ("1.5", "1.5"),
        ("'2'", "'2'"),
    ],
)
def test_sampling_n_must_be_a_positive_integer(tmp_path, value, shown):
    path = shard(tmp_path, "a.jsonl", [], f"sampling:\n  n: {value}\n")
    with pytest.raises(InputError) as info:
        shard_config(path)
    assert str(info.value) == (
        f"{path}.config.yaml: sampling.n is {shown}, not a number of samples"
    )


@pytest.mark.parametrize("n", [1, 2, 1000])
def test_any_positive_n_is_a_number_of_samples(tmp_path, n):
    path = shard(tmp_path, "a.jsonl", [], f"sampling:\n  n: {n}\n")
    assert shard_config(path)["sampling"]["n"] == n


# ------------------------------------------------------------------------------------------
# sort_key


def test_sort_key_is_seed_prompt_and_sample_as_numbers():
    assert sort_key({"id": "3-5", "seed": 7}) == (7, 3, 5)
    assert sort_key({"id": "12-0", "seed": -1}) == (-1, 12, 0)
    assert sort_key({"id": "0-10", "seed": 0, "text": "x"}) == (0, 0, 10)
    big = "9" * 18
    assert sort_key({"id": f"{big}-{big}", "seed": 2}) == (2, int(big), int(big))


@pytest.mark.parametrize(
    "item",
    [
        {"id": 3, "seed": 0},  # not a string
        {"id": ["0-1"], "seed": 0},
        {"id": "0-1", "seed": "0"},  # a text seed
        {"id": "0-1", "seed": True},  # a bool is no seed
        {"id": "0-1", "seed": 1.0},
        {"id": "0-1", "seed": None},
        {"id": "01-1", "seed": 0},  # leading zeros: not as cdd writes ids
        {"id": "0-01", "seed": 0},
        {"id": "0-1-2", "seed": 0},
        {"id": "0_1", "seed": 0},
        {"id": " 0-1", "seed": 0},
        {"id": "0-1\n", "seed": 0},
        {"id": "\u0663-1", "seed": 0},  # Arabic-Indic digits
        {"id": "1" * 19 + "-0", "seed": 0},  # past 18 digits
        {"id": "", "seed": 0},
    ],
)
def test_sort_key_refuses_anything_but_a_cdd_record(item):
    with pytest.raises(ValueError) as info:
        sort_key(item)
    assert str(info.value) == "not a cdd record's id and seed"


def test_sort_key_needs_both_keys():
    with pytest.raises(KeyError):
        sort_key({"seed": 0})
    with pytest.raises(KeyError):
        sort_key({"id": "0-0"})


# ------------------------------------------------------------------------------------------
# merge_shards


def test_shards_merge_sorted_by_seed_prompt_and_sample_with_their_configuration(tmp_path):
    # Seeds 1 and 3, prompts 0..10 (10 sorts after 2 as a number, not as text), n = 2,
    # spread over three shards in no order.
    every = [record(f"{p}-{i}", s) for s in (3, 1) for p in range(11) for i in range(2)]
    parts = [every[k::3] for k in range(3)]
    paths = [shard(tmp_path, f"s{k}.jsonl", part) for k, part in enumerate(parts)]
    out = tmp_path / "out.jsonl"
    assert merge_shards(str(out), paths) == 44
    merged = lines(out)
    expected = sorted(every, key=lambda r: (r["seed"], *map(int, r["id"].split("-"))))
    assert merged == expected
    assert [r["id"] for r in merged[:6]] == ["0-0", "0-1", "1-0", "1-1", "2-0", "2-1"]
    assert merged[0]["seed"] == 1 and merged[-1]["seed"] == 3
    assert [r["id"] for r in merged[18:22]] == ["9-0", "9-1", "10-0", "10-1"]
    text = Path(f"{out}.config.yaml").read_text()
    assert text.startswith("# merged shards\n")
    assert yaml.safe_load(text) == CONFIG
    # The shards' key order, not sorted.
    assert list(yaml.safe_load(text)) == ["model", "method", "sampling", "constraints"]
    assert list(yaml.safe_load(text)["sampling"]) == ["seed", "n", "batch_size"]


def test_one_shard_holding_the_whole_run_merges(tmp_path):
    path = shard(tmp_path, "a.jsonl", [record("0-1"), record("0-0")])
    out = tmp_path / "out.jsonl"
    assert merge_shards(str(out), [path]) == 2
    assert [r["id"] for r in lines(out)] == ["0-0", "0-1"]


def test_records_are_written_as_they_were_read(tmp_path):
    first = record("0-0", valid=True, qed=0.5, extra={"nested": [1, "ü"]})
    path = shard(tmp_path, "a.jsonl", [first, record("0-1")])
    out = tmp_path / "out.jsonl"
    merge_shards(str(out), [path])
    assert lines(out)[0] == first
    assert "ü" in out.read_text(encoding="utf-8")


def test_an_empty_output_file_is_merged_into(tmp_path):
    path = shard(tmp_path, "a.jsonl", [record("0-0"), record("0-1")])
    out = tmp_path / "out.jsonl"
    out.write_text("")
    assert merge_shards(str(out), [path]) == 2
    assert [r["id"] for r in lines(out)] == ["0-0", "0-1"]


def test_an_output_file_with_content_is_refused(tmp_path):
    path = shard(tmp_path, "a.jsonl", [record("0-0"), record("0-1")])
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps(record("0-0")) + "\n")
    with pytest.raises(InputError) as info:
        merge_shards(str(out), [path])
    assert str(info.value) == f"{out}: exists and is not empty; merge into a new file"
    assert lines(out) == [record("0-0")]


def test_the_batch_size_may_differ_between_shards(tmp_path):
    other = {**CONFIG, "sampling": {**CONFIG["sampling"], "batch_size": 1}}
    without = {**CONFIG, "sampling": {"seed": 0, "n": 2}}
    paths = [
        shard(tmp_path, "a.jsonl", [record("0-0")]),
        shard(tmp_path, "b.jsonl", [record("0-1")], other),
        shard(tmp_path, "c.jsonl", [record("1-0"), record("1-1")], without),
    ]
    out = tmp_path / "out.jsonl"
    assert merge_shards(str(out), paths) == 4
    # The first shard's configuration, its batch size included, goes beside the output.
    assert yaml.safe_load(Path(f"{out}.config.yaml").read_text()) == CONFIG


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({**CONFIG, "model": "other"}, "model"),
        ({**CONFIG, "sampling": {**CONFIG["sampling"], "seed": 1}}, "sampling.seed"),
        ({**CONFIG, "sampling": {**CONFIG["sampling"], "steps": 9}}, "sampling.steps"),
        (
            {**CONFIG, "constraints": [{"type": "include", "words": ["x"]}]},
            "constraints[0].words[0]",
        ),
    ],
)
def test_another_configuration_is_refused_naming_its_first_difference(tmp_path, changed, named):
    paths = [
        shard(tmp_path, "a.jsonl", [record("0-0")]),
        shard(tmp_path, "b.jsonl", [record("1-0")]),
        shard(tmp_path, "c.jsonl", [record("0-1"), record("1-1")], changed),
    ]
    message = refusal(tmp_path / "out.jsonl", paths)
    assert message == f"{paths[2]}: another configuration than {paths[0]} ({named})"


def test_the_second_shards_configuration_is_checked_too(tmp_path):
    paths = [
        shard(tmp_path, "a.jsonl", [record("0-0")]),
        shard(tmp_path, "b.jsonl", [record("0-1")], {**CONFIG, "method": "sa"}),
    ]
    message = refusal(tmp_path / "out.jsonl", paths)
    assert message == f"{paths[1]}: another configuration than {paths[0]} (method)"


def test_a_shard_that_is_not_there_is_named_as_missing_not_its_configuration(tmp_path):
    # `cdd merge out.jsonl s0.jsonl s1.jsonl` where s1's run was never made: the shard is
    # what is missing, not (only) the configuration beside it.
    present = shard(tmp_path, "a.jsonl", [record("0-0")])
    missing = tmp_path / "b.jsonl"
    message = refusal(tmp_path / "out.jsonl", [present, missing])
    assert message == f"{missing}: cannot read (No such file or directory)"


def test_shards_of_other_weights_of_one_model_folder_are_refused(tmp_path):
    # The configurations name the same model folder; its weights changed between the shards.
    a = shard(tmp_path, "a.jsonl", [record("0-0", model_revision="aaaaaaaaaaaa")])
    b = shard(tmp_path, "b.jsonl", [record("0-1", model_revision="bbbbbbbbbbbb")])
    message = refusal(tmp_path / "out.jsonl", [a, b])
    assert message == (
        f"{b}:1: model_revision bbbbbbbbbbbb, but {a}:1 has aaaaaaaaaaaa: the shards were "
        "drawn from other weights of the model"
    )


def test_the_same_record_twice_is_refused_naming_both_lines(tmp_path):
    a = shard(tmp_path, "a.jsonl", [record("0-0", 5), record("2-1", 5)])
    b = shard(tmp_path, "b.jsonl", [record("0-1", 5), record("2-1", 5)])
    message = refusal(tmp_path / "out.jsonl", [a, b])
    assert message == f"{b}:2: record 2-1 of seed 5 is also at {a}:2"


def test_a_shard_given_twice_is_refused(tmp_path):
    a = shard(tmp_path, "a.jsonl", [record("0-0"), record("0-1")])
    message = refusal(tmp_path / "out.jsonl", [a, a])
    assert message == f"{a}:1: record 0-0 of seed 0 is also at {a}:1"


def test_the_same_id_under_another_seed_is_another_record(tmp_path):
    a = shard(tmp_path, "a.jsonl", [record("0-0", 1), record("0-1", 1)])
    b = shard(tmp_path, "b.jsonl", [record("0-0", 2), record("0-1", 2)])
    out = tmp_path / "out.jsonl"
    assert merge_shards(str(out), [b, a]) == 4
    assert [(r["seed"], r["id"]) for r in lines(out)] == [
        (1, "0-0"),
        (1, "0-1"),
        (2, "0-0"),
        (2, "0-1"),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"a": 1},
        {"id": "0-1"},  # no seed
        {"seed": 0, "text": "x"},  # no id
        {"id": "0-1", "seed": "0"},
        {"id": "x-1", "seed": 0},
        {"id": 1, "seed": 0},
    ],
)
def test_a_foreign_line_is_not_a_cdd_record(tmp_path, bad):
    a = shard(tmp_path, "a.jsonl", [record("0-0")])
    b = shard(tmp_path, "b.jsonl", [bad])
    message = refusal(tmp_path / "out.jsonl", [a, b])
    assert message == f'{b}:1: not a cdd record (no seed, or no id like "0-3")'


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_an_infinity_in_a_record_is_refused(tmp_path, value):
    a = shard(tmp_path, "a.jsonl", [record("0-0")])
    b = tmp_path / "b.jsonl"
    shard(tmp_path, "b.jsonl", [])
    b.write_text(json.dumps(record("0-1")) + "\n" + f'{{"id": "1-0", "seed": 0, "qed": {value}}}\n')
    message = refusal(tmp_path / "out.jsonl", [a, b])
    assert message == f"{b}:2: holds NaN or an infinity; not a cdd record"


def test_a_torn_line_is_named_as_not_a_json_record(tmp_path):
    a = shard(tmp_path, "a.jsonl", [record("0-0")])
    b = shard(tmp_path, "b.jsonl", [])
    b.write_text(json.dumps(record("0-1"))[:12] + "\n")
    message = refusal(tmp_path / "out.jsonl", [a, b])
    assert message.startswith(f"{b}:1: not a JSON record (")


def test_a_sample_at_or_past_n_is_refused(tmp_path):
    a = shard(tmp_path, "a.jsonl", [record("0-0"), record("0-1")])
    b = shard(tmp_path, "b.jsonl", [record("1-0"), record("1-2")])  # n is 2: samples 0 and 1
    message = refusal(tmp_path / "out.jsonl", [a, b])
    assert message == f"{b}:2: record 1-2 is past the run's 2 sample(s) per prompt"


def test_n_comes_from_the_first_shards_configuration(tmp_path):
    # n: 3 there: the shards, which hold samples 0 and 1 only, lack sample 2.
    three = {**CONFIG, "sampling": {**CONFIG["sampling"], "n": 3}}
    a = shard(tmp_path, "a.jsonl", [record("0-0"), record("0-1")], three)
    b = shard(tmp_path, "b.jsonl", [record("1-0"), record("1-1")], three)
    message = refusal(tmp_path / "out.jsonl", [a, b])
    assert message == (
        "the shards lack 2 record(s), e.g. 0-2 (seed 0): finish each shard with its command "
        "and --resume"
    )


def test_without_n_the_highest_sample_seen_sets_it(tmp_path):
    no_n = {"model": "m", "sampling": {"seed": 0}}
    records = [record(f"{p}-{i}") for p in range(2) for i in range(3)]
    a = shard(tmp_path, "a.jsonl", records[:4], no_n)
    b = shard(tmp_path, "b.jsonl", records[4:], no_n)
    out = tmp_path / "out.jsonl"
    assert merge_shards(str(out), [a, b]) == 6
    assert [r["id"] for r in lines(out)] == ["0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]
    # ... and a gap below it is still a gap: sample 2 of prompt 0 seen, 1 of prompt 1 not.
    c = shard(
        tmp_path, "c.jsonl", [record("0-0"), record("0-1"), record("0-2"), record("1-0")], no_n
    )
    d = shard(tmp_path, "d.jsonl", [record("1-2")], no_n)
    message = refusal(tmp_path / "out2.jsonl", [c, d])
    assert message.startswith("the shards lack 1 record(s), e.g. 1-1 (seed 0): ")


def test_the_first_gap_is_named_in_seed_prompt_and_sample_order(tmp_path):
    # Seed 4 lacks 0-1; seed 2 lacks 1-0 and 2-1 (prompts up to its highest, 2).
    a = shard(tmp_path, "a.jsonl", [record("0-0", 4), record("1-0", 4), record("1-1", 4)])
    b = shard(tmp_path, "b.jsonl", [record("0-0", 2), record("0-1", 2), record("1-1", 2)])
    c = shard(tmp_path, "c.jsonl", [record("2-0", 2)])
    message = refusal(tmp_path / "out.jsonl", [a, b, c])
    assert message == (
        "the shards lack 3 record(s), e.g. 1-0 (seed 2): finish each shard with its command "
        "and --resume"
    )


def test_missing_prompts_count_up_to_each_seeds_highest(tmp_path):
    # Seed 0: prompts 0..3 (8 records), holds 2; seed 1: prompt 0 only, whole.
    a = shard(tmp_path, "a.jsonl", [record("3-0"), record("3-1")])
    b = shard(tmp_path, "b.jsonl", [record("0-0", 1), record("0-1", 1)])
    message = refusal(tmp_path / "out.jsonl", [a, b])
    assert message.startswith("the shards lack 6 record(s), e.g. 0-0 (seed 0): ")


def test_a_hostile_prompt_index_is_counted_not_listed(tmp_path):
    a = shard(tmp_path, "a.jsonl", [record("0-0")])
    b = shard(tmp_path, "b.jsonl", [record("99999999999999999-1")])
    message = refusal(tmp_path / "out.jsonl", [a, b])
    assert message.startswith(
        "the shards lack 199,999,999,999,999,998 record(s), e.g. 0-1 (seed 0)"
    )


def test_merging_to_stdout_writes_no_configuration_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    paths = [
        shard(tmp_path, "a.jsonl", [record("0-1")]),
        shard(tmp_path, "b.jsonl", [record("0-0")]),
    ]
    assert merge_shards("-", paths) == 2
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == [
        "0-0",
        "0-1",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.jsonl", "a.jsonl.config.yaml", "b.jsonl", "b.jsonl.config.yaml",
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------
# write_config


def test_write_config_writes_plain_data_in_the_given_order(tmp_path):
    out = tmp_path / "out.jsonl"
    config = {"z": datetime.date(2024, 1, 2), "a": {"y": 1, "b": [1.5, "x"]}}
    write_config(str(out), config)
    text = Path(f"{out}.config.yaml").read_text()
    assert text == "# merged shards\nz: '2024-01-02'\na:\n  y: 1\n  b:\n  - 1.5\n  - x\n"
    assert not Path(f"{out}.config.yaml.partial").exists()


def test_write_config_for_stdout_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_config("-", {"sampling": {"n": 1}})
    assert list(tmp_path.iterdir()) == []


def test_a_date_in_the_shards_configuration_is_merged_as_its_text(tmp_path):
    text = "model: m\nsampling:\n  n: 1\nwhen: 2024-01-01\n"
    a = shard(tmp_path, "a.jsonl", [record("0-0")], text)
    out = tmp_path / "out.jsonl"
    assert merge_shards(str(out), [a]) == 1
    assert yaml.safe_load(Path(f"{out}.config.yaml").read_text()) == {
        "model": "m", "sampling": {"n": 1}, "when": "2024-01-01",
    }  # fmt: skip
