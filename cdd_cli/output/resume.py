"""Which records of a run a process writes (its shard, less what its output already holds:
resume), and the writing loop that turns Ctrl-C into a line saying what was kept and how to
finish the run (in the caller's words: a `cdd ... --resume` command, an API call)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cdd_cli.errors import Interrupted, Terminated
from cdd_cli.output.config import write_resolved_config
from cdd_cli.output.files import is_stream, open_regular, output_error
from cdd_cli.output.jsonl import MAX_LINE_BYTES, JsonlWriter

# How a run resumes, in the API's words and the command line's.
RESUME = "resume (Output(..., resume=True))"
CLI_RESUME = "add --resume"


@dataclass
class Existing:
    """What an output file already holds: the keys (seed, id) of its complete records, the
    satisfied texts of each seed (novelty's run memory), the size of a torn last line (a
    kill or full disk mid-write; 0 when the file ends with a whole record), and each
    record's draws (its `attempts`; 1 where it names none)."""

    keys: set[tuple[int, str]]
    satisfied: dict[int, list[str]]
    torn_bytes: int
    attempts: dict[tuple[int, str], int] = field(default_factory=dict)


def existing_records(target: str) -> Existing:
    """The records already in `target` (none for stdout or a file not there yet), read a line
    at a time: split at newlines only (a record's text may hold U+2028 or U+0085, which
    `str.splitlines` would cut it at), and a line longer than any record is no record."""
    path = Path(target)
    if is_stream(target) or not path.is_file():
        return Existing(set(), {}, 0)
    satisfied: dict[int, list[str]] = {}
    attempts: dict[tuple[int, str], int] = {}
    torn = 0
    with open_regular(path) as f:
        for number in itertools.count(1):
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            if not raw.endswith(b"\n") and len(raw) <= MAX_LINE_BYTES:
                torn = len(raw)  # the last line, cut short by a kill or a full disk
                break
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                key = (int(record["seed"]), str(record["id"]))
            except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
                raise output_error(
                    target, "not a cdd record; choose another file", line=number
                ) from None
            if key in attempts:
                second = f"a second record {key[1]} of seed {key[0]}"
                raise output_error(target, second, line=number)
            if record.get("satisfied"):
                satisfied.setdefault(key[0], []).append(str(record.get("text", "")))
            drawn = record.get("attempts")
            attempts[key] = drawn if type(drawn) is int and drawn >= 1 else 1
    return Existing(set(attempts), satisfied, torn, attempts)


def cut_torn_tail(target: str, torn_bytes: int) -> None:
    """Drop the incomplete last line a kill or a full disk left."""
    with Path(target).open("rb+") as f:
        f.truncate(f.seek(0, os.SEEK_END) - torn_bytes)


@dataclass
class Share:
    """What this process writes of a run: its shard of the samples (`--shard I/N`: sample k
    of the run, counted over prompts, when k % N == I; interleaved, so cheap and costly
    samples spread evenly), less the records its output file already holds (`--resume`),
    with the texts of those that satisfied the constraints (novelty's memory of the run)."""

    ids: set[str] = field(default_factory=set)
    satisfied: list[str] = field(default_factory=list)
    shard: tuple[int, int] = (0, 1)
    draws: int = 0  # the draws of the records already written (the time left's reckoning)

    def holds(self, k: int) -> bool:
        """Whether sample k of the run is in this process's shard."""
        return k % self.shard[1] == self.shard[0]

    def count(self, first: int, stop: int) -> int:
        """How many of samples first .. stop - 1 of the run are in this shard."""
        index, shards = self.shard
        return len(range(first + (index - first) % shards, stop, shards))

    def samples(self, first: int, n: int, prompt: str) -> Iterator[int]:
        """The prompt's samples this process writes (the run's samples first .. first +
        n - 1, record ids PROMPT-i), in order, as they are asked for."""
        index, shards = self.shard
        start = (index - first) % shards
        return (i for i in range(start, n, shards) if f"{prompt}-{i}" not in self.ids)


def resume_from(
    output: str,
    seed: int,
    shape: tuple[int, int],
    resume: bool,
    say: Callable[[str], None],
    shard: tuple[int, int] = (0, 1),
    also: str | None = None,
) -> Share:
    """The share of a run of `shape` (prompts, samples per prompt) and `seed` that this
    process writes: the samples of its `shard`, less the records already in `output` (and
    in `also`, torchrun's gathered file): refused without `--resume`, skipped with it. A torn
    last line (a kill or a full disk mid-write) is dropped with `--resume` (and said),
    refused without."""
    prompts, n = shape
    share = Share(shard=shard)
    total = share.count(0, prompts * n)

    def ours(record_id: str) -> bool:
        prompt, _, sample = record_id.partition("-")
        if not (prompt.isdigit() and sample.isdigit()):
            return False
        p, i = int(prompt), int(sample)
        return p < prompts and i < n and share.holds(p * n + i)

    existing = existing_records(output)
    if existing.torn_bytes:
        if not resume:
            problem = (
                "ends with an incomplete record (a run stopped mid-write); {} to drop it and "
                "finish the run"
            )
            raise output_error(output, problem.format(RESUME), problem.format(CLI_RESUME))
        cut_torn_tail(output, existing.torn_bytes)
        say(f"-o {output}: dropped an incomplete last line ({existing.torn_bytes} bytes)")
    satisfied = existing.satisfied.get(seed, [])
    drawn = {i: a for (s, i), a in existing.attempts.items() if s == seed and ours(i)}
    if also is not None:
        gathered = existing_records(also)
        drawn |= {i: a for (s, i), a in gathered.attempts.items() if s == seed and ours(i)}
        satisfied = satisfied + gathered.satisfied.get(seed, [])
    done = set(drawn)
    named = also or output
    if done and not resume:
        problem = (
            f"already holds {len(done)} of this run's {total} records (seed {seed}); {{}} to "
            "write only the missing ones, or choose another file"
        )
        raise output_error(named, problem.format(RESUME), problem.format(CLI_RESUME))
    if done:
        say(f"-o {named}: resuming: {len(done)} of {total} records already there")
    share.ids, share.satisfied, share.draws = done, satisfied, sum(drawn.values())
    return share


def written_records(
    resolved: dict,
    records: Iterable[dict],
    output: str,
    total: int,
    display: contextlib.AbstractContextManager,
    present: int = 0,
    resume_hint: str | None = None,
) -> Iterator[dict]:
    """Each of `records` once it is written to `output` (its configuration `resolved` beside
    it, which the caller checked against the file's first), inside the live `display`;
    Ctrl-C becomes `Interrupted`, saying what was kept of `total` (`present`: records of the
    run the output already held) and how to finish the run: `resume_hint`, in the caller's
    words (the CLI's `cdd ... --resume` command line, the API's call; None: not said)."""
    writer = JsonlWriter(output, lambda: write_resolved_config(resolved, output))
    try:
        with writer, display:
            for row in records:
                writer.write(row)
                yield row
    except KeyboardInterrupt as exc:
        finish = ""
        if not is_stream(output) and resume_hint is not None:
            finish = f"; finish it with: {resume_hint}"
        how, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        raise Interrupted(f"{how}: {writer.kept(total, present)}{finish}", code) from None
