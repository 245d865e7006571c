"""What every fuzz case must end in: accepted, or a refusal in one line (InputError, or the
reader's own documented refusal), within a stated time, and all the cases of a test within a
stated memory; never another exception."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Iterable
from typing import Any

from cdd_cli.errors import InputError

# The most one case may take, on one loaded core.
CASE_SECONDS = 2.0
# The most the process's peak memory may grow over one test's cases (ru_maxrss: KiB).
GROWTH_KIB = 512 << 10


def crashes(
    cases: Iterable[Any],
    run: Callable[[Any], object],
    refusals: tuple[type[BaseException], ...] = (InputError,),
) -> list[str]:
    """Each case that ended otherwise than accepted or refused in one line, in time and memory,
    said with its input (the first 200 characters of its repr) and what happened."""
    found = []
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for case in cases:
        start = time.monotonic()
        try:
            run(case)
        except refusals as exc:
            if "\n" in str(exc) or not str(exc).strip():
                found.append(f"{case!r:.200}: refused in {str(exc)!r:.200}, not one line")
        except Exception as exc:  # the failure this test looks for
            found.append(f"{case!r:.200}: {type(exc).__name__}: {str(exc)[:200]}")
        seconds = time.monotonic() - start
        if seconds > CASE_SECONDS:
            found.append(f"{case!r:.200}: took {seconds:.1f} s, more than {CASE_SECONDS} s")
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
        if grown > GROWTH_KIB:
            found.append(f"{case!r:.200}: the peak memory grew {grown >> 10} MiB by here")
            peak += grown
    return found
