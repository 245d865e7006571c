"""Shards of one run (`--shard I/N`) merged into one file: `cdd merge OUT SHARD...`.

Every shard must hold records of one configuration (its `SHARD.config.yaml`; the batch size
aside, which never changes a sample), no key (seed, id) may appear twice, and together they
must hold every record of the run: `-n` records per prompt, prompts 0 .. P-1 (P: the highest
prompt index seen, plus one) for each seed. OUT is written sorted by seed, prompt and sample,
with the shards' configuration beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml

from cdd_cli.errors import InputError, Interrupted, Terminated
from cdd_cli.output.config import config_text, first_difference, read_config, write_whole_file
from cdd_cli.output.files import config_path, is_stream, kind_of, real_path
from cdd_cli.output.jsonl import JsonlWriter, check_output_file, read_jsonl


def shard_config(path: Path) -> dict:
    beside = config_path(str(path))
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
    """Write the records of `shards` to `out` (a new or empty file, or a stream); the number
    written. A file is written beside itself and renamed into place once whole, its
    configuration first: a merge stopped by a signal leaves no `out`, and says so."""
    try:
        return merge_into(out, shards)
    except KeyboardInterrupt as exc:
        how, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        if is_stream(out):
            kept = f"the records written to {'stdout' if out == '-' else out} are not all of them"
        else:
            kept = f"{out} not written"
        raise Interrupted(f"{how}: the merge stopped before it was whole; {kept}", code) from None


def merge_into(out: str, shards: list[Path]) -> int:
    stream = is_stream(out)
    if not stream:
        target = Path(real_path(out))
        if target.is_file() and target.stat().st_size:
            raise InputError(f"{out}: exists and is not empty; merge into a new file")
        check_output_file(out)
    for path in shards:  # regular files only: a FIFO would hold the merge up forever
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:  # a shard not there is named, not the configuration beside it
            raise InputError(f"{path}: cannot read ({exc.strerror})") from None
        if not stat.S_ISREG(mode):
            raise InputError(f"{path}: is {kind_of(mode)}, not a shard's file")
    configs = [shard_config(path) for path in shards]

    def setup(config: dict) -> dict:
        sampling = {k: v for k, v in config["sampling"].items() if k != "batch_size"}
        return {**config, "sampling": sampling}

    for path, config in zip(shards[1:], configs[1:], strict=True):
        differs = first_difference(setup(configs[0]), setup(config))
        if differs:
            raise InputError(f"{path}: another configuration than {shards[0]} ({differs})")
    records: dict[tuple[int, int, int], tuple[str, dict]] = {}
    weights: dict[str, str] = {}  # each model_revision the records name: where first seen
    for path in shards:
        for where, record in read_jsonl(str(path), "record", regular=True):
            key = record_key(where, record)
            revision = record.get("model_revision")
            if isinstance(revision, str) and revision not in weights:
                weights[revision] = where
                if len(weights) > 1:  # one model folder, trained further between shards
                    (first, at), *_ = weights.items()
                    raise InputError(
                        f"{where}: model_revision {revision}, but {at} has {first}: the "
                        "shards were drawn from other weights of the model"
                    )
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
    merged = (records[key][1] for key in sorted(records))
    if stream:
        with JsonlWriter(out) as writer:
            for record in merged:
                writer.write(record)
    else:
        write_whole_records(str(target), merged, lambda: write_config(str(target), configs[0]))
    return len(records)


def write_whole_records(
    target: str, records: Iterable[dict], before: Callable[[], None] = lambda: None
) -> None:
    """`records` written to a file beside `target` (`TARGET.merging-PID`), then, after
    `before()` (its configuration written), renamed over `target`: no reader ever sees part
    of them at `target`, whatever stops the writing (a kill leaves only the `.merging` file,
    which nothing reads)."""
    partial = f"{target}.merging-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial)  # left by a killed process of this number: nobody writes it
    try:
        with JsonlWriter(partial) as writer:
            for record in records:
                writer.write(record)
        if not writer.written:
            Path(partial).touch()  # (an empty merge is an empty file)
        before()
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def write_config(out: str, config: dict) -> None:
    if not is_stream(out):
        write_whole_file(
            config_path(out),
            # Plain JSON data first (a date YAML read becomes its text).
            config_text("# merged shards\n", json.loads(json.dumps(config, default=str))),
        )
