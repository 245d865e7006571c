"""The output package's promises read in-process, one function at a time: resuming a run's
share of an output file, the resolved configuration beside it (written, read back, compared), the
writing loop's Ctrl-C line, and JSONL reading within its limits. (The CLI tests reach these
through subprocesses, which run the installed package.)"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from cdd_cli.errors import InputError, Interrupted, Terminated
from cdd_cli.output.config import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_VALUES,
    check_resolved_config,
    earlier_config,
    first_difference,
    holds_records,
    read_config,
    write_resolved_config,
    write_whole_file,
    yaml_values,
)
from cdd_cli.output.jsonl import (
    MAX_LINE_BYTES,
    JsonlWriter,
    check_output_file,
    parse_line,
    read_jsonl,
)
from cdd_cli.output.resume import Share, existing_records, resume_from, written_records


def write_records(path: Path, rows: list[dict], tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail, encoding="utf-8")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def worded(error: InputError, output: object, problem: str, cli: str | None = None) -> None:
    """An output file's problem in the API's words (`output 'out.jsonl': problem`) and in the
    command line's (`.cli`: `-o out.jsonl: cli`, the problem where `cli` is None)."""
    assert str(error) == f"output {str(output)!r}: {problem}"
    assert error.cli == f"-o {output}: {problem if cli is None else cli}"


def worded_like(error: InputError, output: object, pattern: str, line: int | None = None) -> None:
    """As `worded`, the problem matching `pattern` from its start (`line`: the line named)."""
    at, cli_at = ("", "") if line is None else (f", line {line}", f":{line}")
    assert re.match(re.escape(f"output {str(output)!r}{at}: ") + pattern, str(error)), str(error)
    assert re.match(re.escape(f"-o {output}{cli_at}: ") + pattern, error.cli), error.cli


# ---------------------------------------------------------------------------------------------
# Share


def test_a_share_holds_the_samples_of_its_shard():
    share = Share(shard=(1, 3))
    assert [k for k in range(10) if share.holds(k)] == [1, 4, 7]
    assert Share().holds(0) and Share().holds(5)


@pytest.mark.parametrize("shard", [(0, 1), (0, 3), (1, 3), (2, 3), (3, 4)])
@pytest.mark.parametrize(("first", "stop"), [(0, 0), (0, 10), (2, 11), (5, 6), (7, 20)])
def test_a_share_counts_its_samples_in_a_range(shard, first, stop):
    share = Share(shard=shard)
    assert share.count(first, stop) == sum(share.holds(k) for k in range(first, stop))


def test_a_prompts_samples_are_those_of_the_shard_less_the_records_written():
    # Prompt 1 of a run with 5 samples a prompt: its samples are the run's 5..9.
    share = Share(shard=(1, 3))
    assert list(share.samples(5, 5, "1")) == [i for i in range(5) if (5 + i) % 3 == 1] == [2]
    share = Share(shard=(0, 2), ids={"1-1", "0-3"})
    assert list(share.samples(5, 5, "1")) == [3]  # 1 is written; 0-3 is another prompt's
    assert list(Share(ids={"2-0"}).samples(0, 3, "2")) == [1, 2]


# ---------------------------------------------------------------------------------------------
# resume_from


def said() -> tuple[list[str], object]:
    lines: list[str] = []
    return lines, lines.append


def test_resume_from_an_empty_or_missing_output_is_the_whole_shard(tmp_path: Path):
    got, say = said()
    share = resume_from(str(tmp_path / "none.jsonl"), 7, (2, 3), False, say, (1, 2))
    assert (share.ids, share.satisfied, share.shard, share.draws) == (set(), [], (1, 2), 0)
    assert got == []
    share = resume_from("-", 7, (2, 3), True, say)
    assert (share.ids, share.shard, share.draws) == (set(), (0, 1), 0) and got == []


def test_resume_from_skips_the_runs_records_and_says_so(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    write_records(
        out,
        [
            {"id": "0-0", "seed": 7, "satisfied": True, "text": "a", "attempts": 2},
            {"id": "1-2", "seed": 7, "satisfied": False, "text": "b"},
            {"id": "1-1", "seed": 7, "satisfied": True, "text": "c", "attempts": 4},
            {"id": "0-0", "seed": 8, "satisfied": True, "text": "d", "attempts": 9},
        ],
    )
    got, say = said()
    share = resume_from(str(out), 7, (2, 3), True, say)
    assert share.ids == {"0-0", "1-2", "1-1"}
    assert share.satisfied == ["a", "c"]  # this seed's satisfied texts, in the file's order
    assert share.draws == 2 + 1 + 4
    assert share.shard == (0, 1)
    assert got == [f"-o {out}: resuming: 3 of 6 records already there"]


def test_resume_from_refuses_a_runs_records_without_resume(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    write_records(out, [{"id": "0-1", "seed": 7}, {"id": "0-0", "seed": 7}])
    got, say = said()
    with pytest.raises(InputError) as caught:
        resume_from(str(out), 7, (2, 4), False, say, (0, 2))
    worded(
        caught.value,
        out,
        "already holds 1 of this run's 4 records (seed 7); resume (Output(..., resume=True)) "
        "to write only the missing ones, or choose another file",
        "already holds 1 of this run's 4 records (seed 7); add --resume to write only the "
        "missing ones, or choose another file",
    )
    assert got == []


@pytest.mark.parametrize(
    "record_id",
    ["x-0", "0-x", "0", "-1", "0-", "2-0", "0-3", "0-1-1", "0--1", " 0-0", "0-0 "],
)
def test_resume_from_ignores_records_not_of_this_run(tmp_path: Path, record_id: str):
    """Another run's records (another shape, another naming) are no part of this run's share:
    written again, neither refused without --resume nor counted."""
    out = tmp_path / "out.jsonl"
    write_records(out, [{"id": record_id, "seed": 7, "satisfied": False, "attempts": 3}])
    got, say = said()
    share = resume_from(str(out), 7, (2, 3), False, say)
    assert (share.ids, share.draws) == (set(), 0) and got == []


@pytest.mark.parametrize(
    ("shard", "ids"), [((0, 2), {"0-0", "0-2", "1-1"}), ((1, 2), {"0-1", "1-0", "1-2"})]
)
def test_resume_from_counts_only_the_shards_records(tmp_path: Path, shard, ids):
    out = tmp_path / "out.jsonl"
    write_records(out, [{"id": f"{p}-{i}", "seed": 3} for p in range(2) for i in range(3)])
    got, say = said()
    share = resume_from(str(out), 3, (2, 3), True, say, shard)
    assert share.ids == ids and share.draws == 3
    assert got == [f"-o {out}: resuming: 3 of 3 records already there"]


def test_resume_from_the_last_prompt_and_sample_are_the_runs(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    write_records(
        out, [{"id": "1-2", "seed": 3}, {"id": "2-0", "seed": 3}, {"id": "0-3", "seed": 3}]
    )
    share = resume_from(str(out), 3, (2, 3), True, lambda line: None)
    assert share.ids == {"1-2"}


def test_resume_from_drops_a_torn_last_line_with_resume_and_says_so(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    write_records(out, [{"id": "0-0", "seed": 1}], tail='{"id": "0-1", "se')
    got, say = said()
    share = resume_from(str(out), 1, (1, 2), True, say)
    assert out.read_text() == '{"id": "0-0", "seed": 1}\n'
    assert share.ids == {"0-0"}
    assert got == [
        f"-o {out}: dropped an incomplete last line (17 bytes)",
        f"-o {out}: resuming: 1 of 2 records already there",
    ]


def test_resume_from_refuses_a_torn_last_line_without_resume(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    write_records(out, [], tail='{"id": "0-1"')
    got, say = said()
    with pytest.raises(InputError) as caught:
        resume_from(str(out), 1, (1, 2), False, say)
    worded(
        caught.value,
        out,
        "ends with an incomplete record (a run stopped mid-write); resume (Output(..., "
        "resume=True)) to drop it and finish the run",
        "ends with an incomplete record (a run stopped mid-write); add --resume to drop it and "
        "finish the run",
    )
    assert out.read_text() == '{"id": "0-1"' and got == []


def test_resume_from_counts_the_gathered_file_too(tmp_path: Path):
    """torchrun: this process's part (`output`) and the file parts gather into (`also`)."""
    part, gathered = tmp_path / "part.jsonl", tmp_path / "all.jsonl"
    write_records(part, [{"id": "0-0", "seed": 5, "satisfied": True, "text": "p", "attempts": 2}])
    write_records(
        gathered,
        [
            {"id": "0-0", "seed": 5, "satisfied": True, "text": "p", "attempts": 2},
            {"id": "0-2", "seed": 5, "satisfied": True, "text": "g", "attempts": 6},
            {"id": "0-1", "seed": 5, "attempts": 3},  # the other shard's
            {"id": "0-4", "seed": 6, "satisfied": True, "text": "x", "attempts": 8},
        ],
    )
    got, say = said()
    share = resume_from(str(part), 5, (1, 4), True, say, (0, 2), str(gathered))
    assert share.ids == {"0-0", "0-2"}
    assert share.draws == 2 + 6  # a record in both files is counted once
    assert share.satisfied == ["p", "p", "g"]
    assert got == [f"-o {gathered}: resuming: 2 of 2 records already there"]
    with pytest.raises(InputError) as caught:
        resume_from(str(part), 5, (1, 4), False, say, (0, 2), str(gathered))
    worded_like(caught.value, gathered, "already holds 2 of this run's 2 ")


def test_resume_from_a_gathered_file_alone(tmp_path: Path):
    part, gathered = tmp_path / "part.jsonl", tmp_path / "all.jsonl"
    write_records(gathered, [{"id": "0-1", "seed": 5, "satisfied": True, "text": "g"}])
    share = resume_from(str(part), 5, (1, 2), True, lambda line: None, (0, 1), str(gathered))
    assert share.ids == {"0-1"} and share.satisfied == ["g"] and share.draws == 1


# ---------------------------------------------------------------------------------------------
# first_difference


@pytest.mark.parametrize(
    ("ours", "theirs", "found"),
    [
        ({}, {}, None),
        ({"a": 1}, {"a": 1}, None),
        (1, 1, None),
        (1, 2, "the configuration"),
        ({"a": 1}, {"a": 2}, "a"),
        ({"a": 1, "b": 1}, {"a": 2, "b": 2}, "a"),  # the first, in ours' order
        ({"b": 1, "a": 1}, {"a": 2, "b": 2}, "b"),
        ({"a": 1}, {"a": 1, "b": 2}, "b"),  # a key only theirs has
        ({"a": 1, "b": 2}, {"a": 1}, "b"),  # a key only ours has
        ({"a": None}, {}, None),  # a missing key reads as None
        ({"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 2}}}, "a.b.c"),
        ({"a": {"b": 1}}, {"a": {"b": 1, "d": 2}}, "a.d"),
        ({"a": [1, 2]}, {"a": [1, 2]}, None),
        ({"a": [1, 2]}, {"a": [1, 3]}, "a[1]"),
        ({"a": [{"x": 1}, {"x": 2}]}, {"a": [{"x": 1}, {"x": 3}]}, "a[1].x"),
        ({"a": [[1, 2]]}, {"a": [[1, 5]]}, "a[0][1]"),
        ({"a": [1, 2]}, {"a": [1, 2, 3]}, "a"),  # another length: the list differs
        ([1, 2], [1, 3], "[1]"),
        ([1], [1, 2], "the configuration"),
        ({"a": 1}, [1], "the configuration"),
        ({"a": {"b": 1}}, {"a": 5}, "a"),
        ({"a": 0}, {"a": False}, None),  # equal as Python compares them
    ],
)
def test_first_difference_names_the_first_key_that_differs(ours, theirs, found):
    assert first_difference(ours, theirs) == found


def test_first_difference_under_a_prefix():
    assert first_difference({"b": 1}, {"b": 2}, "a.") == "a.b"
    assert first_difference(1, 2, "a.") == "a"
    assert first_difference([1], [2], "a.") == "a[0]"


# ---------------------------------------------------------------------------------------------
# The resolved configuration: written, read back, compared


def resolved(**changes: object) -> dict:
    """A spec's plain data (`Spec.resolved()`), as far as the check reads it."""
    config = {
        "model": "tiny",
        "method": "mask",
        "words": None,
        "constraints": [{"type": "max_length", "max": 5}],
        "projection": {"steps": 10, "lr": 0.1},
        "sampling": {
            "steps": 8,
            "decode": "greedy",
            "sampler": "ancestral",
            "block_length": None,
            "dtype": "float32",
            "temperature": 1.0,
            "top_p": 1.0,
            "chat": False,
            "seed": 0,
            "batch_size": 4,
            "n": 2,
        },
    }
    for dotted, value in changes.items():
        section, _, name = dotted.partition("__")
        if name:
            config[section] = {**config[section], name: value}
        else:
            config[section] = value
    return config


def with_records(tmp_path: Path, config: object, name: str = "out.jsonl") -> str:
    out = tmp_path / name
    write_records(out, [{"id": "0-0", "seed": 0}])
    Path(f"{out}.config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return str(out)


def test_the_same_configuration_passes(tmp_path: Path):
    check_resolved_config(resolved(), with_records(tmp_path, resolved()))


@pytest.mark.parametrize(
    "changes",
    [
        {"sampling__seed": 3},
        {"sampling__batch_size": 16},
        {"sampling__n": 100},
        {"sampling__other": "new"},
    ],
)
def test_sampling_aside_but_its_steps_may_change(tmp_path: Path, changes: dict):
    check_resolved_config(resolved(**changes), with_records(tmp_path, resolved()))
    check_resolved_config(resolved(), with_records(tmp_path, resolved(**changes), "b.jsonl"))


@pytest.mark.parametrize(
    ("changes", "name", "values"),
    [
        ({"sampling__steps": 9}, "sampling.steps", "8 there, 9"),
        ({"sampling__decode": "sample"}, "sampling.decode", '"greedy" there, "sample"'),
        ({"sampling__sampler": "other"}, "sampling.sampler", '"ancestral" there, "other"'),
        ({"sampling__block_length": 4}, "sampling.block_length", "null there, 4"),
        ({"sampling__dtype": "bfloat16"}, "sampling.dtype", '"float32" there, "bfloat16"'),
        ({"sampling__temperature": 0.5}, "sampling.temperature", "1.0 there, 0.5"),
        ({"sampling__top_p": 0.9}, "sampling.top_p", "1.0 there, 0.9"),
        # chat: the prompts' template, so their tokens
        ({"sampling__chat": True}, "sampling.chat", "false there, true"),
        ({"words": 40}, "words", "null there, 40"),
        ({"model": "other"}, "model", '"tiny" there, "other"'),
        ({"method": "other"}, "method", '"mask" there, "other"'),
        ({"constraints": [{"type": "max_length", "max": 6}]}, "constraints[0].max", "5 there, 6"),
        ({"projection__lr": 0.2}, "projection.lr", "0.1 there, 0.2"),
    ],
)
def test_another_setting_is_refused_naming_it(
    tmp_path: Path, changes: dict, name: str, values: str
):
    out = with_records(tmp_path, resolved())
    with pytest.raises(InputError) as caught:
        check_resolved_config(resolved(**changes), out)
    worded(
        caught.value,
        out,
        f"holds records made with other settings ({name} differs, see {out}.config.yaml: "
        f"{values} in this run); write to another file, or remove both to start over",
    )
    # The other way round: the file's setting differs from this run's.
    out = with_records(tmp_path, resolved(**changes), "b.jsonl")
    with pytest.raises(InputError, match=rf"\({re.escape(name)} differs"):
        check_resolved_config(resolved(), out)


def test_a_setting_under_another_ones_key_is_named_with_both_values(tmp_path: Path):
    """A command's own settings written under the method's key (a design's blanks): the
    refusal names the setting inside it, or the whole value where one side is no mapping."""
    designed = resolved(method={"name": "mask", "blank": "1-3"})
    out = with_records(tmp_path, designed)
    with pytest.raises(InputError, match=r'\(method.blank differs, see .*: "1-3" there, "2-5" in'):
        check_resolved_config(resolved(method={"name": "mask", "blank": "2-5"}), out)
    with pytest.raises(InputError, match=r'\(method differs, see .*: \{"name": "mask", "blank"'):
        check_resolved_config(resolved(), out)
    # A long value is cut, the line stays short.
    with pytest.raises(InputError) as caught:
        check_resolved_config(resolved(method={"name": "mask", "blank": "x" * 5000}), out)
    assert f'"{"x" * 56}... in this run' in str(caught.value) and len(str(caught.value)) < 400


@pytest.mark.parametrize(
    "missing", ["decode", "sampler", "block_length", "dtype", "chat", "temperature", "top_p"]
)
def test_a_file_written_before_a_sampling_setting_existed_had_the_runs(tmp_path: Path, missing):
    """A setting the file does not name was made with its default, which the runner has put
    into this run's spec where it changed: the run's value stands for it."""
    earlier = resolved()
    del earlier["sampling"][missing]
    check_resolved_config(resolved(), with_records(tmp_path, earlier))
    changed = resolved(**{f"sampling__{missing}": "changed"})
    check_resolved_config(changed, with_records(tmp_path, earlier, "b.jsonl"))
    # Named, it is compared.
    with pytest.raises(InputError, match=rf"\(sampling.{missing} differs"):
        check_resolved_config(changed, with_records(tmp_path, resolved(), "c.jsonl"))


def test_a_file_written_before_a_sections_setting_existed_had_the_runs(tmp_path: Path):
    earlier = resolved()
    del earlier["projection"]["lr"]
    check_resolved_config(resolved(projection__lr=0.5), with_records(tmp_path, earlier))
    with pytest.raises(InputError, match=r"\(projection.steps differs"):
        check_resolved_config(
            resolved(projection__lr=0.5, projection__steps=11), with_records(tmp_path, earlier, "b")
        )


def test_a_file_written_before_words_existed_had_the_specs(tmp_path: Path):
    earlier = resolved(words=12)
    del earlier["words"]
    check_resolved_config(resolved(words=12), with_records(tmp_path, earlier))
    with pytest.raises(InputError, match=r"\(words differs"):
        # The file's sections are compared against this run's: its words are this run's.
        check_resolved_config(resolved(words=12), with_records(tmp_path, resolved(), "b"))


def test_a_file_without_steps_differs_from_a_run_with_them(tmp_path: Path):
    earlier = resolved()
    del earlier["sampling"]["steps"]
    with pytest.raises(InputError, match=r"\(sampling.steps differs"):
        check_resolved_config(resolved(), with_records(tmp_path, earlier))


def test_a_section_that_is_not_a_mapping_is_compared_whole(tmp_path: Path):
    with pytest.raises(InputError, match=r"\(projection differs"):
        check_resolved_config(resolved(), with_records(tmp_path, resolved(projection=5)))
    # The file's sampling is no mapping: the run's defaults stand for its settings, its
    # steps are missing.
    with pytest.raises(InputError, match=r"\(sampling.steps differs"):
        check_resolved_config(resolved(), with_records(tmp_path, resolved(sampling=[1]), "b"))
    check_resolved_config(
        resolved(sampling__steps=None), with_records(tmp_path, resolved(sampling="x"), "c")
    )


def test_a_section_only_one_side_has_is_a_difference(tmp_path: Path):
    earlier = {**resolved(), "extra": {"a": 1}}
    with pytest.raises(InputError, match=r"\(extra differs"):
        check_resolved_config(resolved(), with_records(tmp_path, earlier))


@pytest.mark.parametrize("content", ["- a list\n", "just text\n", ":\n  - [\n", "\xff"])
def test_a_configuration_that_is_no_mapping_differs_whole(tmp_path: Path, content: str):
    out = with_records(tmp_path, {})
    Path(f"{out}.config.yaml").write_text(content, encoding="latin-1")
    with pytest.raises(
        InputError, match=r"\(the configuration differs, see .*out.jsonl.config.yaml\)"
    ):
        check_resolved_config(resolved(), out)


def test_nothing_to_check_without_records_or_a_configuration(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    other = yaml.safe_dump(resolved(model="other"))
    check_resolved_config(resolved(), str(out))  # no file
    Path(f"{out}.config.yaml").write_text(other)
    check_resolved_config(resolved(), str(out))  # a configuration, no records
    out.write_text("")
    check_resolved_config(resolved(), str(out))  # an empty file
    check_resolved_config(resolved(), "-")


def test_records_without_a_configuration_are_refused(tmp_path: Path):
    """Nothing says which run made them (another tool's lines, or a file whose configuration
    was lost): appending or resuming would mix runs unseen."""
    out = tmp_path / "out.jsonl"
    write_records(out, [{"id": "0-0", "seed": 0}])
    with pytest.raises(InputError) as caught:
        check_resolved_config(resolved(), str(out))
    worded(
        caught.value,
        out,
        f"is not empty, and has no {out}.config.yaml beside it to say how its lines were made; "
        "cdd adds records only to a file whose configuration it can check: write to another "
        "file",
    )
    os.mkfifo(f"{out}.config.yaml")  # never opened (it would wait for a writer)
    with pytest.raises(InputError, match=r"config.yaml beside it is a pipe \(FIFO\), not a conf"):
        check_resolved_config(resolved(), str(out))


def test_the_gathered_file_is_checked_too(tmp_path: Path):
    part = tmp_path / "part.jsonl"
    gathered = with_records(tmp_path, resolved(model="other"), "all.jsonl")
    with pytest.raises(InputError) as caught:
        check_resolved_config(resolved(), str(part), gathered)
    worded_like(caught.value, gathered, r"holds records .*\(model differs")
    check_resolved_config(resolved(model="other"), str(part), gathered)
    part_out = with_records(tmp_path, resolved(), "part2.jsonl")
    with pytest.raises(InputError) as caught:
        check_resolved_config(resolved(model="other"), part_out, gathered)
    worded_like(caught.value, part_out, r"holds records .*\(model differs")


def test_holds_records_is_a_regular_file_with_content(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    assert not holds_records(str(out))
    out.write_text("")
    assert not holds_records(str(out))
    out.write_text("x")
    assert holds_records(str(out))
    assert not holds_records("-") and not holds_records(str(tmp_path))


def test_earlier_config_reads_the_file_beside_or_none(tmp_path: Path):
    out = str(tmp_path / "out.jsonl")
    assert earlier_config(out) is None
    Path(f"{out}.config.yaml").write_text("a: 1\nb: [x]\n")
    assert earlier_config(out) == {"a": 1, "b": ["x"]}
    for bad in (b"- 1\n", b"a: [\n", b"\xff\xfe", b"a: *nothing\n"):
        Path(f"{out}.config.yaml").write_bytes(bad)
        assert earlier_config(out) is None
    Path(f"{out}.config.yaml").write_bytes(b"x" * (MAX_CONFIG_BYTES + 1))
    assert earlier_config(out) is None


def test_read_config_refuses_a_file_past_its_size(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xff" + b"#" * (MAX_CONFIG_BYTES - 1))  # at the limit: read, no text
    with pytest.raises(UnicodeDecodeError):
        read_config(path)
    path.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(InputError) as caught:
        read_config(path)
    assert str(caught.value) == f"{path}: larger than 1 MiB; no cdd configuration"


def test_read_config_refuses_aliases_that_expand_past_its_values(tmp_path: Path):
    path = tmp_path / "c.yaml"
    # 10 aliases of a list of 10 aliases of a list of 10 ... : 10^6 values.
    levels = ["a0: &a0 [" + ", ".join(["x"] * 10) + "]"]
    for level in range(1, 6):
        levels.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    path.write_text("\n".join(levels) + "\n")
    with pytest.raises(InputError) as caught:
        read_config(path)
    assert str(caught.value) == (
        f"{path}: stands for more than 100,000 values once its YAML aliases are expanded; "
        "no cdd configuration"
    )
    path.write_text("a: &a [1, 2]\nb: *a\n")
    assert read_config(path) == {"a": [1, 2], "b": [1, 2]}
    path.write_text("")
    assert read_config(path) is None


def test_yaml_values_counts_what_the_aliases_stand_for():
    def count(text: str, cap: int = MAX_CONFIG_VALUES) -> int:
        return yaml_values(yaml.compose(text, Loader=yaml.SafeLoader), cap)

    assert count("1") == 1
    assert count("[1, 2, 3]") == 4
    assert count("{a: 1, b: [2, 3]}") == 1 + 2 + 1 + 3
    assert count("a: &x [1, 2]\nb: *x\nc: *x\n") == 1 + (1 + 3) * 3
    assert count("[" + ", ".join(["x"] * 50) + "]", cap=10) == 11  # no further than cap + 1
    assert count("a: &x [1, 2]\nb: [*x, *x]\n", cap=100) == 1 + 1 + 3 + 1 + 1 + 3 + 3


def test_yaml_values_of_an_alias_within_itself_is_past_any_cap():
    # PyYAML composes a recursive alias into a node that holds itself.
    node = yaml.SequenceNode("tag:yaml.org,2002:seq", [])
    node.value.append(node)
    assert yaml_values(node, 7) == 8


def test_write_resolved_config_writes_the_command_and_the_configuration(
    tmp_path: Path, monkeypatch
):
    out = tmp_path / "out.jsonl"
    monkeypatch.setattr(sys, "argv", ["/x/cdd", "run", "spec.yaml", "-o", "a b\nc"])
    config = {"z": 1, "a": {"y": [1, 2], "b": "text"}}
    write_resolved_config(config, str(out))
    text = Path(f"{out}.config.yaml").read_text(encoding="utf-8")
    assert text.splitlines()[0] == "# latest run: cdd run spec.yaml -o 'a b c'"
    assert text == (
        "# latest run: cdd run spec.yaml -o 'a b c'\n" + yaml.safe_dump(config, sort_keys=False)
    )
    assert text.index("z:") < text.index("a:")  # the configuration's own order
    assert yaml.safe_load(text) == config
    assert not out.exists()  # the records file is the writer's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl.config.yaml"]


def test_write_resolved_config_replaces_the_earlier_one(tmp_path: Path, monkeypatch):
    out = tmp_path / "out.jsonl"
    monkeypatch.setattr(sys, "argv", ["cdd", "run"])
    write_resolved_config({"a": 1}, str(out))
    write_resolved_config({"b": 2}, str(out))
    assert Path(f"{out}.config.yaml").read_text() == "# latest run: cdd run\nb: 2\n"


def test_write_resolved_config_only_beside_a_regular_file(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_resolved_config({"a": 1}, "-")
    folder = tmp_path / "dir"
    folder.mkdir()
    write_resolved_config({"a": 1}, str(folder))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    write_resolved_config({"a": 1}, str(fifo))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "pipe"]
    assert list(folder.iterdir()) == []
    (tmp_path / "out.jsonl").write_text("")
    write_resolved_config({"a": 1}, "out.jsonl")
    assert (tmp_path / "out.jsonl.config.yaml").is_file()


def test_write_whole_file_leaves_the_earlier_file_when_it_fails(tmp_path: Path, monkeypatch):
    path = tmp_path / "c.yaml"
    write_whole_file(path, "first\n")
    assert path.read_text() == "first\n"

    def fail(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        write_whole_file(path, "second\n")
    assert path.read_text() == "first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


# ---------------------------------------------------------------------------------------------
# written_records


class Display(contextlib.AbstractContextManager):
    def __init__(self):
        self.entered = self.exited = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        self.exited += 1


def test_each_record_is_yielded_once_it_is_written(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["cdd", "run", "s.yaml"])
    out = tmp_path / "out.jsonl"
    rows = [{"id": "0-0", "seed": 1, "text": "é"}, {"id": "0-1", "seed": 1}]
    display = Display()
    seen = []
    for row in written_records({"model": "m"}, iter(rows), str(out), 2, display):
        seen.append((row, lines(out)))
        assert display.entered == 1 and display.exited == 0
    assert seen == [(rows[0], rows[:1]), (rows[1], rows)]
    assert display.exited == 1
    assert Path(f"{out}.config.yaml").read_text() == "# latest run: cdd run s.yaml\nmodel: m\n"


def test_no_records_leave_no_file(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    assert list(written_records({"a": 1}, [], str(out), 3, Display())) == []
    assert list(tmp_path.iterdir()) == []


def then(rows: list[dict], stop: BaseException):
    yield from rows
    raise stop


@pytest.mark.parametrize(
    ("stop", "how", "code"),
    [(KeyboardInterrupt(), "interrupted", 130), (Terminated(), "terminated", 143)],
)
def test_ctrl_c_says_what_was_kept_and_how_to_finish(tmp_path: Path, monkeypatch, stop, how, code):
    monkeypatch.setattr(sys, "argv", ["cdd", "run", "s.yaml", "-o", "out.jsonl", "--resume"])
    monkeypatch.chdir(tmp_path)
    rows = [{"id": "0-1", "seed": 1}, {"id": "0-2", "seed": 1}]
    display = Display()
    with pytest.raises(Interrupted) as caught:
        hint = "cdd run s.yaml -o out.jsonl --resume"
        for _ in written_records({}, then(rows, stop), "out.jsonl", 9, display, 3, hint):
            pass
    assert str(caught.value) == (
        f"{how}: 5 of 9 records kept in out.jsonl, each a complete line; finish it with: "
        "cdd run s.yaml -o out.jsonl --resume"
    )
    assert caught.value.code == code
    assert lines(tmp_path / "out.jsonl") == rows
    assert display.exited == 1


def test_ctrl_c_before_the_first_record_says_no_file_yet(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["cdd", "run"])
    out = str(tmp_path / "out.jsonl")
    with pytest.raises(Interrupted) as caught:
        hint = "cdd run --resume"
        list(written_records({}, then([], KeyboardInterrupt()), out, 4, Display(), 0, hint))
    assert str(caught.value) == (
        f"interrupted: 0 of 4 records written (no {out} yet); finish it with: cdd run --resume"
    )
    assert caught.value.code == 130


def test_ctrl_c_to_stdout_has_nothing_to_finish(monkeypatch, capsys):
    with pytest.raises(Interrupted) as caught:
        list(written_records({}, then([{"id": "0-0"}], KeyboardInterrupt()), "-", 2, Display()))
    assert str(caught.value) == "interrupted: 1 of 2 records kept to stdout, each a complete line"
    assert capsys.readouterr().out == '{"id": "0-0"}\n'


# ---------------------------------------------------------------------------------------------
# The writer's other edges


def test_kept_counts_the_records_present_with_those_written(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    writer = JsonlWriter(str(out))
    assert writer.kept(5) == f"0 of 5 records written (no {out} yet)"
    assert writer.kept(5, present=2) == f"2 of 5 records kept in {out}, each a complete line"
    with writer:
        writer.write({"id": "0-0"})
    assert writer.kept(5, 1) == f"2 of 5 records kept in {out}, each a complete line"
    out.unlink()
    assert writer.kept(5) == f"1 of 5 records kept in {out}, each a complete line"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert (
        JsonlWriter(str(empty)).kept(3) == f"0 of 3 records kept in {empty}, each a complete line"
    )
    assert JsonlWriter("-").kept(3) == "0 of 3 records kept to stdout, each a complete line"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, None),
        (lambda p: p.write_text(""), None),
        (lambda p: p.write_text('{"id": "0-0"}\n'), None),
        (lambda p: p.write_text('{"seed": 0}\n'), "exists and does not hold cdd records"),
        (lambda p: Path(f"{p}.config.yaml").mkdir(), ".config.yaml is a directory"),
        (
            lambda p: Path(f"{p}.config.yaml").symlink_to(p.parent / "elsewhere"),
            ".config.yaml is a symbolic link; cdd will not write through it",
        ),
    ],
)
def test_check_output_file(tmp_path: Path, make, message):
    out = tmp_path / "out.jsonl"
    make(out)
    if message is None:
        check_output_file(str(out))
    else:
        with pytest.raises(InputError) as caught:
            check_output_file(str(out))
        worded_like(caught.value, out, f".*{message}")


def test_check_output_file_reads_only_the_first_line(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "0-0"}\nnot json\n')
    check_output_file(str(out))


# ---------------------------------------------------------------------------------------------
# read_jsonl's limits


def test_read_jsonl_takes_max_lines_objects_and_no_more(tmp_path: Path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"a": 1}\n\n{"a": 2}\n\n')
    assert [item for _, item in read_jsonl(str(source), "prompt", max_lines=2)] == [
        {"a": 1},
        {"a": 2},
    ]
    source.write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
    with pytest.raises(InputError) as caught:
        read_jsonl(str(source), "prompt", max_lines=2)
    assert (
        str(caught.value)
        == f"{source}: more than 2 prompts, the most cdd reads at once; split the file"
    )
    source.write_text("".join('{"a": 1}\n' for _ in range(1001)))
    with pytest.raises(InputError, match=r": more than 1,000 records, the most"):
        read_jsonl(str(source), "record", max_lines=1000)


def test_read_jsonl_takes_max_bytes_and_no_more(tmp_path: Path):
    source = tmp_path / "in.jsonl"
    line = b'{"a": "' + b"x" * 1000 + b'"}\n'
    count = (1 << 20) // len(line)
    source.write_bytes(line * count + b" " * ((1 << 20) - count * len(line)))
    assert len(read_jsonl(str(source), "prompt", max_bytes=1 << 20)) == count  # at the limit
    source.write_bytes(line * (count + 1))
    with pytest.raises(InputError) as caught:
        read_jsonl(str(source), "prompt", max_bytes=1 << 20)
    assert str(caught.value) == (
        f"{source}: more than 1 MiB of prompts, the most cdd reads at once; split the file"
    )


def test_read_jsonl_refuses_a_line_longer_than_any_record(tmp_path: Path):
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"a": 1}\n' + b'{"a": "' + b"x" * MAX_LINE_BYTES + b'"}\n')
    with pytest.raises(InputError) as caught:
        read_jsonl(str(source), "record")
    assert str(caught.value) == f"{source}:2: a line longer than 16 MiB; not a JSON record"


def test_read_jsonl_takes_a_line_as_long_as_a_record_may_be(tmp_path: Path):
    source = tmp_path / "in.jsonl"
    body = b'{"a": "' + b"x" * (MAX_LINE_BYTES - 10) + b'"}'
    source.write_bytes(body + b"\n" * (MAX_LINE_BYTES - len(body)))  # the line: exactly 16 MiB
    [(where, item)] = read_jsonl(str(source), "record")
    assert where == f"{source}:1" and len(item["a"]) == MAX_LINE_BYTES - 10


def test_read_jsonl_names_a_bad_byte_by_its_offset_in_the_file(tmp_path: Path):
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"a": 1}\n\n{"b": "\xc3\x28"}\n')
    with pytest.raises(InputError) as caught:
        read_jsonl(str(source), "prompt")
    assert str(caught.value) == f"{source}: not UTF-8 (byte 17)"


def test_read_jsonl_takes_a_byte_order_mark_only_first(tmp_path: Path):
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"a": 1}\n\xef\xbb\xbf{"b": 2}\n')
    with pytest.raises(InputError, match=r"in.jsonl:2: not a JSON prompt"):
        read_jsonl(str(source), "prompt")


def test_read_jsonl_of_a_folder_cannot_read(tmp_path: Path):
    with pytest.raises(InputError, match=rf"^{tmp_path}: cannot read \(Is a directory\)$"):
        read_jsonl(str(tmp_path), "prompt")


def test_parse_line():
    assert parse_line(b"  \n", "f:1", "prompt") is None
    assert parse_line(b'{"a": 1}\n', "f:1", "prompt") == {"a": 1}
    assert parse_line(b'\xef\xbb\xbf{"a": 1}\n', "f:1", "prompt", first=True) == {"a": 1}
    with pytest.raises(InputError, match=r"^f:3: not a JSON record \(not an object\)$"):
        parse_line(b"3\n", "f:3", "record")


# ---------------------------------------------------------------------------------------------
# Edges the first mutation run left open


def test_a_line_longer_than_any_record_is_no_record(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    body = b'{"id": "0-1", "seed": 0, "text": "'
    long = body + b"x" * (MAX_LINE_BYTES + 2 - len(body) - 2) + b'"}'  # MAX_LINE_BYTES + 2
    out.write_bytes(b'{"id": "0-0", "seed": 0}\n' + long + b"\n")
    with pytest.raises(InputError) as caught:
        existing_records(str(out))
    worded_like(caught.value, out, "not a cdd record; choose another file$", line=2)


def test_a_record_as_long_as_a_line_may_be_is_read(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    body = b'{"id": "0-0", "seed": 0, "text": "'
    whole = body + b"x" * (MAX_LINE_BYTES - len(body) - 3) + b'"}\n'  # MAX_LINE_BYTES
    out.write_bytes(whole + b'{"id": "0-1", "seed": 0}\n')
    existing = existing_records(str(out))
    assert existing.keys == {(0, "0-0"), (0, "0-1")} and existing.torn_bytes == 0


def test_a_torn_tail_as_long_as_a_line_may_be_is_torn(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    tail = b'{"id": "0-1", "seed": 0, "text": "' + b"x" * MAX_LINE_BYTES
    out.write_bytes(b'{"id": "0-0", "seed": 0}\n' + tail[:MAX_LINE_BYTES])
    existing = existing_records(str(out))
    assert existing.keys == {(0, "0-0")} and existing.torn_bytes == MAX_LINE_BYTES


class Endless:
    """A stream without end (`--prompts /dev/zero`): a line is as long as what is asked for,
    and a read without a limit never returns (here: fails the test)."""

    def readline(self, size: int = -1) -> bytes:
        assert size is not None and size >= 0, "read without a limit: never ends"
        return b"\0" * size


def test_read_jsonl_of_a_stream_without_end_stops_at_a_line(monkeypatch):
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=Endless()))
    with pytest.raises(InputError) as caught:
        read_jsonl("-", "prompt")
    assert str(caught.value) == "stdin:1: a line longer than 16 MiB; not a JSON prompt"


def test_a_byte_order_mark_is_text_but_at_the_first_line():
    with pytest.raises(InputError, match=r"^f:2: not a JSON prompt \(Unexpected UTF-8 BOM"):
        parse_line(b'\xef\xbb\xbf{"a": 1}\n', "f:2", "prompt")


def test_resume_from_a_shard_of_three(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    write_records(out, [{"id": f"0-{i}", "seed": 3} for i in range(6)])
    share = resume_from(str(out), 3, (2, 3), True, lambda line: None, (1, 3))
    assert share.ids == {"0-1"}  # sample k of the run when k % 3 == 1: 1 and 4 (1-1)
    write_records(out, [{"id": f"{p}-{i}", "seed": 3} for p in range(2) for i in range(3)])
    share = resume_from(str(out), 3, (2, 3), True, lambda line: None, (1, 3))
    assert share.ids == {"0-1", "1-1"}


def test_resume_from_a_part_and_a_gathered_file_holding_others(tmp_path: Path):
    """A record only the part holds (an interrupted gathering) counts as much as one only
    the gathered file holds; a gathered file of no satisfied record adds none."""
    part, gathered = tmp_path / "part.jsonl", tmp_path / "all.jsonl"
    write_records(part, [{"id": "0-0", "seed": 5, "satisfied": True, "text": "p", "attempts": 2}])
    write_records(gathered, [{"id": "0-1", "seed": 5, "satisfied": False, "attempts": 3}])
    share = resume_from(str(part), 5, (1, 4), True, lambda line: None, (0, 1), str(gathered))
    assert share.ids == {"0-0", "0-1"} and share.draws == 5 and share.satisfied == ["p"]
    missing = tmp_path / "none.jsonl"
    share = resume_from(str(part), 5, (1, 4), True, lambda line: None, (0, 1), str(missing))
    assert share.ids == {"0-0"} and share.satisfied == ["p"]


def test_first_difference_keeps_every_letter_of_a_key():
    assert first_difference({"AX": [1]}, {"AX": [2]}) == "AX[0]"
    assert first_difference({"a": {"X": 1}}, {"a": {"X": 2}}) == "a.X"


def test_read_config_takes_as_many_values_as_its_limit(tmp_path: Path):
    path = tmp_path / "c.yaml"
    # A list of 999 scalars (1,000 values) named 99 times, with 999 scalars more: 1 + 99,000
    # + 999 = 100,000 values.
    items = ", ".join(["x"] * 999)
    path.write_text(f"[&a [{items}], " + ", ".join(["*a"] * 98) + f", {items}]\n")
    data = read_config(path)
    assert len(data) == 99 + 999 and len(data[0]) == 999
    path.write_text(f"[&a [{items}], " + ", ".join(["*a"] * 98) + f", {items}, x]\n")
    with pytest.raises(InputError, match=r"stands for more than 100,000 values"):
        read_config(path)


def test_yaml_values_counts_a_mapping_key_that_is_a_collection():
    root = yaml.compose("? [1, 2, 3]\n: x\n", Loader=yaml.SafeLoader)
    assert yaml_values(root, 100) == 1 + 4 + 1


def test_write_whole_file_into_a_missing_folder_says_why(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        write_whole_file(tmp_path / "none" / "c.yaml", "text\n")
    assert list(tmp_path.iterdir()) == []


def test_an_output_whose_first_record_is_over_a_mebibyte_is_appended_to(tmp_path: Path):
    """A record may be a few MB (a long prompt and text): the first line is read as far as
    any record line may go (`MAX_LINE_BYTES`), as resume reads it."""
    out = tmp_path / "out.jsonl"
    record = {"id": "0-0", "seed": 0, "text": "C" * (3 << 20)}
    out.write_text(json.dumps(record) + "\n")
    check_output_file(str(out))
    assert existing_records(str(out)).keys == {(0, "0-0")}
