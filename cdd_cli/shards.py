"""Shards of one run (`--shard I/N`) merged into one file: `cdd merge OUT SHARD...`.

Every shard must hold records of one configuration (its `SHARD.config.yaml`; the batch size
aside, which never changes a sample), no key (seed, id) may appear twice, and together they
must hold every record of the run: `-n` records per prompt, prompts 0 .. P-1 (P: the highest
prompt index seen, plus one) for each seed. OUT is written sorted by seed, prompt and sample,
with the shards' configuration beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from cdd_cli.errors import InputError
from cdd_cli.records import JsonlWriter, first_difference, read_jsonl


def shard_config(path: Path) -> dict:
    beside = Path(f"{path}.config.yaml")
    try:
        config = yaml.safe_load(beside.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read its configuration {beside} ({exc})") from None
    if not isinstance(config, dict) or not isinstance(config.get("sampling"), dict):
        raise InputError(f"{beside}: not a cdd configuration")
    return config


def sort_key(record: dict) -> tuple[int, int, int]:
    prompt, sample = (int(part) for part in str(record["id"]).split("-"))
    return int(record["seed"]), prompt, sample


def merge_shards(out: str, shards: list[Path]) -> int:
    """Write the records of `shards` to `out` (a new or empty file); the number written."""
    if Path(out).is_file() and Path(out).stat().st_size:
        raise InputError(f"{out}: exists and is not empty; merge into a new file")
    configs = [shard_config(path) for path in shards]

    def setup(config: dict) -> dict:
        sampling = {k: v for k, v in config["sampling"].items() if k != "batch_size"}
        return {**config, "sampling": sampling}

    for path, config in zip(shards[1:], configs[1:], strict=True):
        differs = first_difference(setup(configs[0]), setup(config))
        if differs:
            raise InputError(f"{path}: another configuration than {shards[0]} ({differs})")
    records: dict[tuple[int, int, int], tuple[str, dict]] = {}
    for path in shards:
        for where, record in read_jsonl(str(path), "record"):
            try:
                key = sort_key(record)
            except (KeyError, ValueError, TypeError):
                raise InputError(f"{where}: not a cdd record (no seed or id)") from None
            if key in records:
                raise InputError(f"{where}: record {record['id']} of seed {key[0]} is also at "
                                 f"{records[key][0]}")  # fmt: skip
            records[key] = (where, record)
    n = configs[0]["sampling"].get("n") or max(k[2] for k in records) + 1
    missing = []
    for seed in sorted({k[0] for k in records}):
        prompts = max(k[1] for k in records if k[0] == seed) + 1
        missing += [
            f"{p}-{i} (seed {seed})"
            for p in range(prompts)
            for i in range(n)
            if (seed, p, i) not in records
        ]
    if missing:
        raise InputError(
            f"the shards lack {len(missing)} record(s), e.g. {missing[0]}: finish each shard "
            "with its command and --resume"
        )
    with JsonlWriter(out, lambda: write_config(out, configs[0])) as writer:
        for key in sorted(records):
            writer.write(records[key][1])
    return len(records)


def write_config(out: str, config: dict) -> None:
    if out != "-":
        Path(f"{out}.config.yaml").write_text(
            "# merged shards\n" + yaml.safe_dump(json.loads(json.dumps(config)), sort_keys=False),
            encoding="utf-8",
        )
