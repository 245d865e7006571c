"""Start-up: the wall time of a one-molecule run, which is almost all start-up.

    python bench/startup.py [--base REV] [--repeats 5]

Runs `python -m cdd_cli molecules -n 1 -q -o FILE` (one thread) with this tree's code, and with
REV's (its `cdd_cli` from `git archive`, put first on PYTHONPATH, the same venv) where given,
interleaved run by run; prints each tree's median and range of wall seconds, and the import of
`cdd_cli.cli` alone (the part no run can skip).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def wall(command: list[str], path: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(path), "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    subprocess.run(
        command, env=env, check=True, cwd=tempfile.gettempdir(), stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=None, help="a git revision to compare with")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"this tree": ROOT}
        if args.base:
            base = Path(scratch) / "base"
            base.mkdir()
            archive = subprocess.run(
                ["git", "archive", args.base, "cdd_cli"], cwd=ROOT, capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
            trees[args.base] = base
        out = Path(scratch) / "one.jsonl"
        run = [sys.executable, "-m", "cdd_cli", "molecules", "-n", "1", "-q", "-o", str(out)]
        imports = [sys.executable, "-c", "import cdd_cli.cli"]
        seconds: dict[str, list[float]] = {name: [] for name in trees}
        imported: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.repeats):
            for name, path in trees.items():
                out.unlink(missing_ok=True)
                seconds[name].append(wall(run, path))
                imported[name].append(wall(imports, path))
    print("| tree | `molecules -n 1` s, median (range) | `import cdd_cli.cli` s, median |")
    print("|---|---|---|")
    for name in trees:
        s = seconds[name]
        print(
            f"| {name} | {statistics.median(s):.2f} ({min(s):.2f}-{max(s):.2f}) | "
            f"{statistics.median(imported[name]):.2f} |"
        )


if __name__ == "__main__":
    main()
