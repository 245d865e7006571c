"""Shards of one run (`--shard I/N`) merged into one file: `cdd merge OUT SHARD...`.

Every shard must hold records of one configuration (its `SHARD.config.yaml`; the batch size
aside, which never changes a sample), no key (seed, id) may appear twice, and together they
must hold every record of the run: `-n` records per prompt, prompts 0 .. P-1 (P: the highest
prompt index seen, plus one) for each seed. OUT is written sorted by seed, prompt and sample,
with the shards' configuration beside it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from cdd_cli.errors import InputError
from cdd_cli.output.config import first_difference, read_config, write_whole_file
from cdd_cli.output.jsonl import JsonlWriter, read_jsonl


def shard_config(path: Path) -> dict:
    beside = Path(f"{path}.config.yaml")
    try:
        config = read_config(beside)  # bounded: a foreign file may be anything
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        problem = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise InputError(f"{path}: cannot read its configuration {beside} ({problem})") from None
    if not isinstance(config, dict) or not isinstance(config.get("sampling"), dict):
        raise InputError(f"{beside}: not a cdd configuration")
    n = config["sampling"].get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise InputError(f"{beside}: sampling.n is {n!r}, not a number of samples")
    return config


# A record's id as cdd writes it: PROMPT-SAMPLE, ASCII digits (int() would also read "٣").
RECORD_ID = re.compile(r"(0|[1-9][0-9]{0,17})-(0|[1-9][0-9]{0,17})")


def sort_key(record: dict) -> tuple[int, int, int]:
    """(seed, prompt, sample) of a cdd record; ValueError for anything else."""
    found = RECORD_ID.fullmatch(record["id"]) if isinstance(record["id"], str) else None
    seed = record["seed"]
    if found is None or not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError("not a cdd record's id and seed")
    return seed, int(found[1]), int(found[2])


def record_key(where: str, record: dict) -> tuple[int, int, int]:
    """`sort_key` of the record read at `where` ("file:line"); one line for anything else."""
    try:
        return sort_key(record)
    except (KeyError, ValueError, TypeError):
        raise InputError(f'{where}: not a cdd record (no seed, or no id like "0-3")') from None


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
            key = record_key(where, record)
            if key in records:
                raise InputError(f"{where}: record {record['id']} of seed {key[0]} is also at "
                                 f"{records[key][0]}")  # fmt: skip
            try:  # as the merged file will hold it: strict JSON (Python's json reads NaN)
                json.dumps(record, allow_nan=False)
            except ValueError:
                raise InputError(f"{where}: holds NaN or an infinity; not a cdd record") from None
            records[key] = (where, record)
    n = configs[0]["sampling"].get("n") or max(k[2] for k in records) + 1
    for (_, _, sample), (where, record) in records.items():
        if sample >= n:
            raise InputError(
                f"{where}: record {record['id']} is past the run's {n} sample(s) per prompt"
            )
    # Every (prompt, sample) up to each seed's highest prompt: counted, not listed (an id of
    # a hostile shard may name prompt 10^17), and the first gap found in order.
    prompts = {}
    for seed, prompt, _ in records:
        prompts[seed] = max(prompts.get(seed, 0), prompt + 1)
    lacking = sum(p * n for p in prompts.values()) - len(records)
    if lacking:
        first = next(
            f"{p}-{i} (seed {seed})"
            for seed in sorted(prompts)
            for p in range(prompts[seed])
            for i in range(n)
            if (seed, p, i) not in records
        )
        raise InputError(
            f"the shards lack {lacking:,} record(s), e.g. {first}: finish each shard "
            "with its command and --resume"
        )
    with JsonlWriter(out, lambda: write_config(out, configs[0])) as writer:
        for key in sorted(records):
            writer.write(records[key][1])
    return len(records)


def write_config(out: str, config: dict) -> None:
    if out != "-":
        write_whole_file(
            Path(f"{out}.config.yaml"),
            # Plain JSON data first (a date YAML read becomes its text).
            "# merged shards\n"
            + yaml.safe_dump(json.loads(json.dumps(config, default=str)), sort_keys=False),
        )
