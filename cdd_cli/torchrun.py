"""One run written by one process, or by every process of a torchrun launch together.

`write_run` is what `cdd molecules -o FILE` and `cdd generate -o FILE` do around the
Generator's `write`, offered to API users alike:

    from cdd_cli.run.runner import Output
    from cdd_cli.torchrun import write_run

    def job(part: Output, device: str, lead: bool) -> int:
        return cdd.Generator("default-molecules", device=device).write(part, 256)[0]

    code = write_run(Output("out.jsonl"), "auto", job)  # the same under `torchrun`

Outside torchrun, `job` writes the file itself (under its lock; with `resume`, after the
parts an interrupted torchrun run left are gathered into it). Under torchrun, each rank
writes its share to a part of the file (`distributed.py`), on its own GPU, and every rank
meets the others after its share, whatever happened, so that none waits for a rank that
failed; rank 0 then gathers the parts into the file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch.distributed as dist

from cdd_cli.errors import InputError, Interrupted, Terminated
from cdd_cli.output.distributed import Launch, Ranks, gather, launch_from_env
from cdd_cli.output.lock import output_lock
from cdd_cli.run.runner import Output

# One process's share of a run: (the output it writes, its device, whether it speaks for the
# run: the only process outside torchrun, rank 0 under it) -> its exit code.
Job = Callable[[Output, str, bool], int]


def write_run(
    output: Output,
    device: str,
    job: Job,
    say: Callable[[str], None] = print,
    error: Callable[[str], None] = print,
) -> int:
    """`job` run in this process, or as this torchrun rank's share of the run: the run's exit
    code (under torchrun the worst of the ranks'). Rank 0 tells `say` how many records the
    file holds once gathered, or `error` that another rank failed (its parts stay for a
    rerun with resume)."""
    launch = launch_from_env()
    if launch is None:
        with output_lock(output.path):
            if output.resume and output.path != "-" and output.shard == (0, 1):
                gather(output.path)  # the parts an interrupted torchrun run left
            return job(output, device, True)
    if output.shard != (0, 1):
        raise InputError("--shard under torchrun: the ranks are the shards")
    ranks = Ranks(launch, output.path)
    lead = launch.rank == 0
    part = Output(
        launch.part(output.path),
        output.resume,
        (launch.rank, launch.world),
        output.path,
        output.resume_hint,
    )
    with peers_lost(launch):
        ranks.start()
    code = 1  # a defect, unless the run says otherwise
    try:
        with output_lock(part.path):
            code = job(part, launch.device(device), lead)
    except InputError:
        code = 2
        raise
    except Interrupted as exc:
        code = exc.code
        raise
    except KeyboardInterrupt as exc:
        code = 143 if isinstance(exc, Terminated) else 130
        raise
    finally:
        with peers_lost(launch):
            worst, written = ranks.finish(code)
            try:
                if lead and written >= 0:
                    say(f"{written} records from {launch.world} processes in {output.path}")
                # Another rank's violations (3) are in the gathered file, not a failure. Said
                # before the ranks part: torchrun stops rank 0 once the others are out.
                if lead and worst != code and written < 0:
                    error(f"another process of the run failed (exit {worst}): rerun with --resume")
            finally:
                ranks.close()
    return worst


@contextlib.contextmanager
def peers_lost(launch: Launch) -> Iterator[None]:
    """A rank that meets the others after one died without a word (`kill -9`, its machine
    gone): gloo's "Connection closed by peer" as one line naming the lost rank (where two
    make the run) and the resume, which is exact: every rank's part keeps whole records."""
    try:
        yield
    except RuntimeError as exc:
        said = str(exc)
        if not isinstance(exc, dist.DistError) and "by peer" not in said:
            raise
        others = [r for r in range(launch.world) if r != launch.rank]
        lost = f"rank {others[0]}" if len(others) == 1 else "another rank"
        raise Interrupted(
            f"{lost} of the run's {launch.world} processes stopped without a word (killed?); "
            "the records written are kept: rerun the same command with --resume to finish",
            1,
        ) from None
