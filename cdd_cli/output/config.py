"""The resolved configuration beside an output file (`OUT.config.yaml`): written whole, read
within limits, and compared with a run's own so that one file never holds the records of two
configurations."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

from cdd_cli.errors import InputError
from cdd_cli.output.files import config_path, is_stream, kind_of, open_regular, output_error
from cdd_cli.output.jsonl import MAX_LINE_BYTES


def first_difference(ours: object, theirs: object, where: str = "") -> str | None:
    """The dotted key of the first value that differs between two plain-data configurations
    (None where they are equal)."""
    found = difference(ours, theirs, where)
    return None if found is None else found[0]


def difference(ours: object, theirs: object, where: str = "") -> tuple[str, object, object] | None:
    """As `first_difference`, with the two values found there (ours, theirs; None for a key
    one side lacks)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in [*ours, *(k for k in theirs if k not in ours)]:
            found = difference(ours.get(key), theirs.get(key), f"{where}{key}.")
            if found:
                return found
        return None
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            found = difference(a, b, f"{where.rstrip('.')}[{index}].")
            if found:
                return found
        return None
    return None if ours == theirs else (where.rstrip(".") or "the configuration", ours, theirs)


def shown_value(value: object, limit: int = 60) -> str:
    """A setting's value as a refusal quotes it: JSON, cut to `limit` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_resolved_config(resolved: dict, output: str, also: str | None = None) -> None:
    """An output file that holds records must hold records of this configuration (`resolved`:
    a spec's plain data; sampling aside but for what shapes a sample: more samples, other
    seeds, another batch size), and its records of this run's seed must come from this
    run's inputs (`resolved[INPUTS]`: prompts, length): refused before any sampling
    otherwise, naming the first setting that differs, as is a file that holds records
    without a configuration to check them against. `also`: another file the run's records
    count in (torchrun's gathered output), checked the same way."""
    if also is not None:
        check_resolved_config(resolved, also)
    beside = config_path(output)
    if not holds_records(output):
        return
    if not beside.is_file():
        what = (
            f"{beside} beside it is {kind_of(beside.stat().st_mode)}, not a configuration"
            if beside.exists()
            else f"has no {beside} beside it to say how its lines were made"
        )
        raise output_error(
            output,
            f"is not empty, and {what}; cdd adds records only to a file whose "
            "configuration it can check: write to another file",
        )
    earlier = earlier_config(output)

    def setup(config: dict) -> dict:
        sampling = config.get("sampling")
        sampling = sampling if isinstance(sampling, dict) else {}
        # (A file written before a setting existed was made with its default: the spec's;
        # the runner has put the file's own into the spec where that default has changed.)
        sections = {
            k: {**resolved[k], **v}
            if isinstance(v, dict) and isinstance(resolved.get(k), dict)
            else v
            for k, v in config.items()
            if k != INPUTS
        }
        return {
            **{k: v for k, v in sections.items() if k != "sampling"},
            "words": config.get("words", resolved["words"]),
            "sampling.steps": sampling.get("steps"),
            **{
                f"sampling.{name}": sampling.get(name, resolved["sampling"].get(name))
                for name in SHAPING_SAMPLING
            },
        }

    found = (
        ("the configuration", None, None)
        if not isinstance(earlier, dict)
        else difference(setup(resolved), setup(earlier))
    )
    if found:
        # Both values, so that a setting the user did not set (a method a constraint chose,
        # a design's settings) is seen for what it was and is.
        differs, ours, theirs = found
        values = (
            ""
            if differs == "the configuration"
            else f": {shown_value(theirs)} there, {shown_value(ours)} in this run"
        )
        raise output_error(
            output,
            f"holds records made with other settings ({differs} differs, see "
            f"{beside}{values}); write to another file, or remove both to start over",
        )
    check_inputs(resolved.get(INPUTS), earlier.get(INPUTS), output)
    check_files(resolved.get(INPUTS), earlier.get(INPUTS), output)


def check_model_revision(output: str, revision: str) -> None:
    """The records of one file come from one model's weights: where the file's first record
    names other weights than `revision` (a model folder trained further or replaced in place:
    its path, which is all the configuration holds, is the same), appending is refused."""
    if not holds_records(output):
        return
    try:
        with open_regular(output) as f:
            first = json.loads(f.readline(MAX_LINE_BYTES + 1))
    except (OSError, ValueError, InputError):
        return  # (not a record: the configuration check and the resume's read say so)
    theirs = first.get("model_revision") if isinstance(first, dict) else None
    if isinstance(theirs, str) and theirs != revision:
        raise output_error(
            output,
            f"holds records of other weights (model_revision {theirs} there, {revision} in "
            "this run: the model's folder changed since); write to another file, or remove "
            "both to start over",
        )


def files_digest(values: Iterable[object]) -> tuple[list[str], str | None]:
    """The files a run's settings name (any string among `values`, nested, that names an
    existing file, or a folder whose files are read: a surrogate's) and one SHA-256 of their
    contents (None where none is named): their path alone is what the configuration holds."""
    named: set[Path] = set()

    def collect(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, list | tuple):
            for item in value:
                collect(item)
        elif isinstance(value, str) and 0 < len(value) < 4096 and "\0" not in value:
            with contextlib.suppress(OSError, ValueError):
                path = Path(value).expanduser()
                if path.is_file():
                    named.add(path)
                elif path.is_dir():
                    named.update(p for p in path.iterdir() if p.is_file())

    for value in values:
        collect(value)
    if not named:
        return [], None
    digest = hashlib.sha256()
    for path in sorted(named):
        digest.update(str(path).encode("utf-8", "surrogatepass") + b"\0")
        with contextlib.suppress(OSError), path.open("rb") as f:
            for block in iter(lambda f=f: f.read(1 << 20), b""):
                digest.update(block)
    return sorted(str(p) for p in named), digest.hexdigest()


def check_files(ours: object, theirs: object, output: str) -> None:
    """The files the settings name had the same contents for every seed of the file (a
    novelty reference or a lead file rewritten between two runs would mix two runs in one
    file under one configuration); groups written before cdd recorded them are not checked."""
    if not (isinstance(ours, list) and len(ours) == 1 and isinstance(ours[0], dict)):
        return
    digest = ours[0].get("files_sha256")
    for group in theirs if isinstance(theirs, list) else []:
        earlier = group.get("files_sha256") if isinstance(group, dict) else None
        if digest is not None and earlier is not None and earlier != digest:
            raise output_error(
                output,
                "holds records made from other contents of the files its settings name "
                f"(see {config_path(output)}: the same paths, changed since); write to "
                "another file, or remove both to start over",
            )


# The sampling settings that shape a sample (its steps aside: a file without them differs).
SHAPING_SAMPLING = ("decode", "sampler", "block_length", "dtype", "chat", "temperature", "top_p")


def check_inputs(ours: object, theirs: object, output: str) -> None:
    """This run's inputs (one group, `[{"seeds": [seed], ...}]`) against those the file's
    records of its seed were made with, where the file says (files written before cdd
    recorded them do not): InputError naming the first that differs."""
    if not (isinstance(ours, list) and len(ours) == 1 and isinstance(ours[0], dict)):
        return
    run = {k: v for k, v in ours[0].items() if k != "seeds"}
    seed = ours[0]["seeds"][0]
    earlier = inputs_of(theirs, seed)
    differs = None if earlier is None else first_difference(run, earlier)
    if differs is None:
        return
    beside = config_path(output)
    head = f"its records of seed {seed} were made with"
    seen = ""  # a prompt of the file's records, where they differ
    if differs == "length":
        api = f"length {earlier.get('length')}, not {run['length']}"
        cli = f"--length {earlier.get('length')}, not {run['length']}"
        finish = "the same length"
    else:
        api = cli = (
            f"{earlier.get('prompts')} prompt(s), not {run['prompts']}"
            if differs == "prompts"
            else "other prompts, or the same ones in another order"
        )
        # Only their digest is kept: a record's own prompt says what they were (a design's
        # names its blanks).
        first = first_prompt(output, seed)
        seen = "" if first is None else f" (one of its prompts: {shown_value(first)})"
        finish = "the same prompts in the same order"
    tail = f" (see {beside}); resume with {finish}, or write to another file{seen}"
    raise output_error(output, f"{head} {api}{tail}", f"{head} {cli}{tail}")


def first_prompt(output: str, seed: object) -> str | None:
    """The prompt of the first record of `seed` in `output` (None where none can be read)."""
    try:
        with open_regular(output) as f:
            for line in f:
                with contextlib.suppress(ValueError, RecursionError):
                    record = json.loads(line)
                    if isinstance(record, dict) and record.get("seed") == seed:
                        prompt = record.get("prompt")
                        return prompt if isinstance(prompt, str) else None
    except (OSError, InputError):
        return None
    return None


# Under this key a configuration read or to be written holds its inputs: what shapes the
# records besides the settings (the prompts and their order, the length), by seed. The
# file keeps them in a comment line at its head (so that it stays a spec, `--spec`):
#     # inputs: [{"seeds": [0, 1], "length": 32, "prompts": 1, "prompts_sha256": "..."}]
INPUTS = "inputs"
INPUTS_HEAD = "# inputs: "


def inputs_of(groups: object, seed: int) -> dict | None:
    """The inputs the records of `seed` were made with (None where none are recorded)."""
    for group in groups if isinstance(groups, list) else []:
        if isinstance(group, dict) and seed in (group.get("seeds") or []):
            return {k: v for k, v in group.items() if k != "seeds"}
    return None


def with_inputs(earlier: object, ours: object) -> list | None:
    """The inputs groups of a file once this run's (`ours`: one group of one seed) is
    added to the file's `earlier` ones (its seed taken out of any other group)."""
    if not (isinstance(ours, list) and len(ours) == 1 and isinstance(ours[0], dict)):
        return earlier if isinstance(earlier, list) else None
    seed = ours[0]["seeds"][0]
    run = {k: v for k, v in ours[0].items() if k != "seeds"}
    groups = []
    for group in earlier if isinstance(earlier, list) else []:
        if not isinstance(group, dict):
            continue
        seeds = [s for s in group.get("seeds") or [] if s != seed]
        if {k: v for k, v in group.items() if k != "seeds"} == run:
            seeds.append(seed)
            seed = None  # (placed)
        if seeds:
            groups.append({**group, "seeds": sorted(seeds)})
    if seed is not None:
        groups.append({"seeds": [seed], **run})
    return groups


def all_inputs(each: Iterable[object]) -> list | None:
    """The inputs groups of several files' configurations as one (a later file's inputs of
    a seed stand for an earlier's)."""
    groups = None
    for earlier in each:
        for group in earlier if isinstance(earlier, list) else []:
            if isinstance(group, dict) and isinstance(group.get("seeds"), list):
                for seed in group["seeds"]:
                    groups = with_inputs(groups, [{**group, "seeds": [seed]}])
    return groups


def holds_records(output: str) -> bool:
    """`output` is a regular file with something in it (not a stream, not empty)."""
    out = Path(output)
    return not is_stream(output) and out.is_file() and out.stat().st_size > 0


def earlier_config(output: str) -> dict | None:
    """The resolved configuration written beside `output` by the run that wrote its records
    (None: there is none, or it cannot be read as one)."""
    try:
        earlier = read_config(config_path(output))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError, InputError):
        return None
    return earlier if isinstance(earlier, dict) else None


# A configuration cdd writes beside records is a few kB: one past these limits is no such
# file, and reading it whole (or walking its YAML aliases expanded) would not end soon.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_VALUES = 100_000


def read_config(path: Path) -> object:
    """A YAML configuration file (`OUT.config.yaml`) as plain data, within MAX_CONFIG_BYTES
    and MAX_CONFIG_VALUES values once its aliases are expanded (InputError past them, or
    where it is no regular file: a FIFO is never waited on); a mapping's `INPUTS` read from
    its head."""
    with open_regular(path) as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise InputError(f"{path}: larger than {MAX_CONFIG_BYTES >> 20} MiB; no cdd configuration")
    text = data.decode("utf-8")
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None and yaml_values(root, MAX_CONFIG_VALUES) > MAX_CONFIG_VALUES:
        raise InputError(
            f"{path}: stands for more than {MAX_CONFIG_VALUES:,} values once its YAML aliases "
            "are expanded; no cdd configuration"
        )
    config = yaml.safe_load(text)
    head = next((line for line in head_lines(text) if line.startswith(INPUTS_HEAD)), None)
    if isinstance(config, dict) and head is not None:
        try:
            config[INPUTS] = json.loads(head[len(INPUTS_HEAD) :])
        except (ValueError, RecursionError):
            raise InputError(f"{path}: its inputs line is not JSON; no cdd configuration") from None
    return config


def head_lines(text: str) -> Iterator[str]:
    """The comment lines opening a YAML text."""
    for line in text.splitlines():
        if not line.startswith("#"):
            return
        yield line


def config_text(head: str, config: dict) -> str:
    """A configuration file's text: `head` (comment lines), its `INPUTS` as a comment line,
    and its settings as YAML."""
    inputs = config.get(INPUTS)
    line = f"{INPUTS_HEAD}{json.dumps(inputs, ensure_ascii=False)}\n" if inputs else ""
    settings = {k: v for k, v in config.items() if k != INPUTS}
    return head + line + yaml.safe_dump(settings, sort_keys=False)


def yaml_values(root: yaml.Node, cap: int) -> int:
    """How many values a composed YAML document stands for with its aliases expanded (an
    alias names a node again, so nested aliases multiply), counted over the node graph
    without expanding it, and no further than `cap` + 1. RecursionError where it is nested
    deeper than Python recurses."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = cap + 1  # a node within itself (an alias cycle): past any cap
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        else:
            total = 1
        sizes[id(node)] = min(total, cap + 1)
        return sizes[id(node)]

    return size(root)


def write_resolved_config(resolved: dict, output: str) -> None:
    """`OUT.config.yaml` beside a regular output file (not a stream or a device: stdout,
    /dev/stdout, /dev/null): the configuration (`resolved`), so its records can be told
    apart and reproduced, with the inputs of the records the file already holds."""
    if is_stream(output) or (Path(output).exists() and not Path(output).is_file()):
        return
    if INPUTS in resolved:
        earlier = earlier_config(output) if holds_records(output) else None
        resolved = {**resolved, INPUTS: with_inputs((earlier or {}).get(INPUTS), resolved[INPUTS])}
    command = shlex.join(["cdd", *sys.argv[1:]]).replace("\n", " ")
    write_whole_file(config_path(output), config_text(f"# latest run: {command}\n", resolved))


def write_whole_file(path: Path, text: str) -> None:
    """`path` holding `text`, replaced whole: written beside it, then renamed over it, so a
    kill or Ctrl-C mid-write leaves the earlier file (a resumed run's configuration, which
    its records are checked against), never half of one."""
    partial = path.with_name(f"{path.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        if isinstance(exc, OSError) and exc.errno is not None:
            # The error names the file the caller asked for, not the one written beside it.
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
