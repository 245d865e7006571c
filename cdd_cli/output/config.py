"""The resolved configuration beside an output file (`OUT.config.yaml`): written whole, read
within limits, and compared with a run's own so that one file never holds the records of two
configurations."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from pathlib import Path

import yaml

from cdd_cli.errors import InputError


def first_difference(ours: object, theirs: object, where: str = "") -> str | None:
    """The dotted key of the first value that differs between two plain-data configurations
    (None where they are equal)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in [*ours, *(k for k in theirs if k not in ours)]:
            found = first_difference(ours.get(key), theirs.get(key), f"{where}{key}.")
            if found:
                return found
        return None
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            found = first_difference(a, b, f"{where.rstrip('.')}[{index}].")
            if found:
                return found
        return None
    return None if ours == theirs else where.rstrip(".") or "the configuration"


def check_resolved_config(resolved: dict, output: str, also: str | None = None) -> None:
    """An output file that holds records must hold records of this configuration (`resolved`:
    a spec's plain data; sampling aside but for its steps: more samples, other seeds, another
    batch size): refused before any sampling otherwise, naming the first setting that
    differs. `also`: another file the run's records count in (torchrun's gathered output),
    checked the same way."""
    if also is not None:
        check_resolved_config(resolved, also)
    beside = Path(f"{output}.config.yaml")
    if not holds_records(output) or not beside.is_file():
        return
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
        }
        return {
            **{k: v for k, v in sections.items() if k != "sampling"},
            "words": config.get("words", resolved["words"]),
            "sampling.steps": sampling.get("steps"),
            **{
                f"sampling.{name}": sampling.get(name, resolved["sampling"][name])
                for name in ("decode", "sampler", "block_length", "dtype", "temperature", "top_p")
            },
        }

    differs = (
        "the configuration"
        if not isinstance(earlier, dict)
        else first_difference(setup(resolved), setup(earlier))
    )
    if differs:
        raise InputError(
            f"-o {output}: holds records made with other settings ({differs} differs, see "
            f"{beside}); write to another file, or remove both to start over"
        )


def holds_records(output: str) -> bool:
    """`output` is a regular file with something in it (not stdout, not empty)."""
    out = Path(output)
    return output != "-" and out.is_file() and out.stat().st_size > 0


def earlier_config(output: str) -> dict | None:
    """The resolved configuration written beside `output` by the run that wrote its records
    (None: there is none, or it cannot be read as one)."""
    beside = Path(f"{output}.config.yaml")
    try:
        earlier = read_config(beside)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError, InputError):
        return None
    return earlier if isinstance(earlier, dict) else None


# A configuration cdd writes beside records is a few kB: one past these limits is no such
# file, and reading it whole (or walking its YAML aliases expanded) would not end soon.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_VALUES = 100_000


def read_config(path: Path) -> object:
    """A YAML configuration file (`OUT.config.yaml`) as plain data, within MAX_CONFIG_BYTES
    and MAX_CONFIG_VALUES values once its aliases are expanded (InputError past them)."""
    with Path(path).open("rb") as f:
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
    return yaml.safe_load(text)


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
    """`OUT.config.yaml` beside a regular output file (not /dev/null and the like): the
    configuration (`resolved`), so its records can be told apart and reproduced."""
    if output == "-" or (Path(output).exists() and not Path(output).is_file()):
        return
    command = shlex.join(["cdd", *sys.argv[1:]]).replace("\n", " ")
    write_whole_file(
        Path(f"{output}.config.yaml"),
        f"# latest run: {command}\n" + yaml.safe_dump(resolved, sort_keys=False),
    )


def write_whole_file(path: Path, text: str) -> None:
    """`path` holding `text`, replaced whole: written beside it, then renamed over it, so a
    kill or Ctrl-C mid-write leaves the earlier file (a resumed run's configuration, which
    its records are checked against), never half of one."""
    partial = path.with_name(f"{path.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
