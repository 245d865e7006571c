"""JSONL records on disk: one complete line per record, flushed as soon as it is final; which
records of a run a process writes (its shard, less what its output already holds: resume);
whether an output file's records were made with this configuration (`OUT.config.yaml`
beside it); and the writing loop that turns Ctrl-C into a line saying what was kept.

Plain data only: nothing here knows a model, a constraint or a spec object."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shlex
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import yaml

from cdd_cli.errors import InputError, Interrupted, Terminated

# What cdd reads of a JSONL input (prompts, records, shards) before refusing it: each line is
# parsed as it comes and the objects are all held, so a stream without end (`--prompts
# /dev/zero`, `yes | cdd eval -`) must stop at a size, not at the memory's end. A record of
# the longest continuation cdd writes is a few MB.
MAX_LINE_BYTES = 16 << 20
MAX_INPUT_BYTES = 256 << 20
MAX_LINES = 1_000_000


class JsonlWriter:
    """Writes to stdout for "-", else appends to a file (never truncates earlier records).

    The target is checked when the writer is made, and the file is opened (created) at the
    first record, after `before_first()` (e.g. writing the resolved configuration beside it):
    a run that fails before its first record leaves no file behind."""

    def __init__(self, target: str, before_first: Callable[[], None] | None = None):
        self.target = target
        self.failed = False
        self.written = 0
        self.before_first = before_first
        self.stream: IO[str] | None = sys.stdout if target == "-" else None
        self.fd: int | None = None  # the output file, appended to without a buffer
        if target != "-":
            check_output_file(target)

    def open(self) -> IO[str] | int:
        if self.before_first is not None:
            self.before_first()
            self.before_first = None
        if self.stream is None and self.fd is None:
            try:
                self.fd = os.open(self.target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise InputError(
                    f"-o {self.target}: cannot open for appending ({exc.strerror})"
                ) from None
        return self.stream if self.stream is not None else self.fd

    def write(self, record: dict) -> None:
        # Strict JSON: a NaN or infinity is a defect upstream, never a record.
        line = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
        target = self.open()
        try:
            if isinstance(target, int):
                self.write_whole(target, line.encode("utf-8"))
            else:  # stdout: one write call per record, so a reader never sees half a line
                target.write(line)
                target.flush()
            self.written += 1
        except BrokenPipeError:
            raise  # the reader went away: handled by the CLI
        except OSError as exc:
            self.failed = True
            raise InputError(f"-o {self.target}: cannot write ({exc.strerror})") from None

    def write_whole(self, fd: int, data: bytes) -> None:
        """Append `data` whole or not at all: a write cut short (a full disk) is cut back to
        where the file ended, so no torn record is left for a later append to bury."""
        end = os.fstat(fd).st_size
        done = 0
        try:
            while done < len(data):
                done += os.write(fd, data[done:])
        except BaseException:  # a full disk, or a signal between two partial writes
            if done < len(data):
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, end)
            raise

    def close(self) -> None:
        if self.fd is not None:  # stdout is not the writer's to close
            try:
                os.close(self.fd)
            except OSError:
                if not self.failed:  # the write already said why
                    raise InputError(f"-o {self.target}: cannot write (close failed)") from None
            self.fd = None

    def kept(self, total: int, present: int = 0) -> str:
        """What a stopped run leaves: how many of `total` records, each a complete line;
        `present`: those the output already held (a resumed run), counted with the ones
        written now, as the file holds them all."""
        kept = present + self.written
        if not kept and self.target != "-" and not os.path.exists(self.target):
            # The file is made at the first record: none is there to keep anything "in".
            return f"0 of {total} records written (no {self.target} yet)"
        where = "to stdout" if self.target == "-" else f"in {self.target}"
        return f"{kept} of {total} records kept {where}, each a complete line"

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_output_file(target: str) -> None:
    """An output file cdd may append records to: not a folder or a pipe, and, when it has
    content, records (appending to some other file would mix the two)."""
    if not target:
        raise InputError("-o: the file name is empty (give a file, or - for stdout)")
    path = Path(target)
    if path.is_dir():
        raise InputError(f"-o {target}: is a directory (give a file, or - for stdout)")
    if path.exists() and stat.S_ISFIFO(path.stat().st_mode):
        raise InputError(f"-o {target}: is a pipe (write to stdout with -o - and redirect it)")
    beside = Path(f"{target}.config.yaml")  # where the resolved configuration goes
    if beside.is_dir():
        raise InputError(f"-o {target}: {beside} is a directory")
    if beside.is_symlink():
        raise InputError(f"-o {target}: {beside} is a symbolic link; cdd will not write through it")
    if path.is_file() and path.stat().st_size:
        with path.open("rb") as f:
            first = f.readline(MAX_LINE_BYTES + 1)  # a record may be a few MB
        try:
            record = json.loads(first)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict) or "id" not in record:
            raise InputError(
                f"-o {target}: exists and does not hold cdd records; appending would mix them "
                "into it (choose another file)"
            )


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
    if target == "-" or not path.is_file():
        return Existing(set(), {}, 0)
    satisfied: dict[int, list[str]] = {}
    attempts: dict[tuple[int, str], int] = {}
    torn = 0
    with path.open("rb") as f:
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
                raise InputError(
                    f"-o {target}:{number}: not a cdd record; choose another file"
                ) from None
            if key in attempts:
                raise InputError(f"-o {target}:{number}: a second record {key[1]} of seed {key[0]}")
            if record.get("satisfied"):
                satisfied.setdefault(key[0], []).append(str(record.get("text", "")))
            drawn = record.get("attempts")
            attempts[key] = drawn if type(drawn) is int and drawn >= 1 else 1
    return Existing(set(attempts), satisfied, torn, attempts)


def cut_torn_tail(target: str, torn_bytes: int) -> None:
    """Drop the incomplete last line a kill or a full disk left."""
    with Path(target).open("rb+") as f:
        f.truncate(f.seek(0, os.SEEK_END) - torn_bytes)


def read_jsonl(
    source: str, what: str, max_lines: int = MAX_LINES, max_bytes: int = MAX_INPUT_BYTES
) -> list[tuple[str, dict]]:
    """The JSON objects of a JSONL file or stdin ("-"), each with its "file:line" for error
    messages; blank lines are skipped. `what` names the records in errors. Read a line at a
    time, within `max_lines` objects, `max_bytes` in all and `MAX_LINE_BYTES` a line."""
    where = "stdin" if source == "-" else source
    items = []
    try:
        with contextlib.ExitStack() as stack:
            stream = sys.stdin.buffer if source == "-" else stack.enter_context(open(source, "rb"))
            total = 0
            for number in itertools.count(1):
                raw = stream.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                total += len(raw)
                if len(raw) > MAX_LINE_BYTES:
                    raise InputError(
                        f"{where}:{number}: a line longer than {MAX_LINE_BYTES >> 20} MiB; not a "
                        f"JSON {what}"
                    )
                if total > max_bytes:
                    raise InputError(
                        f"{where}: more than {max_bytes >> 20} MiB of {what}s, the most cdd reads "
                        "at once; split the file"
                    )
                try:
                    item = parse_line(raw, f"{where}:{number}", what, first=number == 1)
                except UnicodeDecodeError as exc:  # named by its byte in the file
                    offset = total - len(raw) + exc.start
                    raise InputError(f"{where}: not UTF-8 (byte {offset})") from None
                if item is None:
                    continue
                if len(items) == max_lines:
                    raise InputError(
                        f"{where}: more than {max_lines:,} {what}s, the most cdd reads at once; "
                        "split the file"
                    )
                items.append((f"{where}:{number}", item))
    except OSError as exc:
        raise InputError(f"{source}: cannot read ({exc.strerror or exc})") from None
    if not items:
        raise InputError(f"{where}: no {what}s")
    return items


def parse_line(raw: bytes, where: str, what: str, first: bool = False) -> dict | None:
    """One JSONL line's object (None: a blank line), or InputError naming the line;
    UnicodeDecodeError where the line is not UTF-8."""
    # A byte-order mark (Windows editors) opening the file is not text.
    line = raw.decode("utf-8-sig" if first else "utf-8")
    if not line.strip():
        return None
    try:
        item = json.loads(line)
    except ValueError as exc:  # JSONDecodeError has .msg; a 5,000-digit number does not
        problem = getattr(exc, "msg", None) or str(exc).split(":")[0]
        raise InputError(f"{where}: not a JSON {what} ({problem})") from None
    except RecursionError:
        raise InputError(f"{where}: not a JSON {what} (nested too deeply)") from None
    if not isinstance(item, dict):
        raise InputError(f"{where}: not a JSON {what} (not an object)")
    return item


@contextlib.contextmanager
def output_lock(target: str) -> Iterator[None]:
    """Hold `TARGET.lock` (an advisory lock) for the whole run: two processes appending to
    one file at once would each pass the one-configuration check and interleave their runs.
    The lock dies with its process (a kill leaves an empty, unlocked file behind)."""
    try:
        import fcntl  # POSIX only: Windows has no such module
    except ImportError:  # no advisory locks on this platform
        yield
        return
    if target == "-":
        yield
        return
    path = f"{target}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise InputError(f"-o {target}: cannot create its lock {path} ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise InputError(
            f"-o {target}: another cdd process is writing it (it holds {path}); wait for it "
            "to finish or choose another file"
        ) from None
    try:
        yield
    finally:
        # Removed while still held: a process that opens the path after this makes a new
        # file, and one that opened it before finds it locked.
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


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
            raise InputError(
                f"-o {output}: ends with an incomplete record (a run stopped mid-write); add "
                "--resume to drop it and finish the run"
            )
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
        raise InputError(
            f"-o {named}: already holds {len(done)} of this run's {total} records (seed "
            f"{seed}); add --resume to write only the missing ones, or choose another file"
        )
    if done:
        say(f"-o {named}: resuming: {len(done)} of {total} records already there")
    share.ids, share.satisfied, share.draws = done, satisfied, sum(drawn.values())
    return share


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


def written_records(
    resolved: dict,
    records: Iterable[dict],
    output: str,
    total: int,
    display: contextlib.AbstractContextManager,
    present: int = 0,
) -> Iterator[dict]:
    """Each of `records` once it is written to `output` (its configuration `resolved` beside
    it, which the caller checked against the file's first), inside the live `display`;
    Ctrl-C becomes `Interrupted`, saying what was kept of `total` (`present`: records of the
    run the output already held)."""
    writer = JsonlWriter(output, lambda: write_resolved_config(resolved, output))
    try:
        with writer, display:
            for row in records:
                writer.write(row)
                yield row
    except KeyboardInterrupt as exc:
        finish = "" if output == "-" else f"; finish it with: {resume_command()}"
        how, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        raise Interrupted(f"{how}: {writer.kept(total, present)}{finish}", code) from None


def resume_command() -> str:
    """This command line with --resume (the command that finishes an interrupted run)."""
    args = [a for a in sys.argv[1:] if a != "--resume"]
    return shlex.join(["cdd", *args, "--resume"]).replace("\n", " ")
