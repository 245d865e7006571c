"""Start-up: how long a run takes to say its first progress line (the sampler's first pass
begins: imports, the model and its constraints loaded and checked), and the import of
`cdd_cli.cli.app` alone (the part no run can skip).

    python bench/startup.py [--base REV] [--repeats 5]

Runs each command of COMMANDS (one thread, stderr a pipe: plain progress lines) with this
tree's code, and with REV's (its `cdd_cli` from `git archive`, put first on PYTHONPATH, the
same venv) where given, interleaved run by run; prints each tree's median and range.
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


COMMANDS = {
    "molecules -n 1": ["molecules", "-n", "1"],
    "molecules -n 1 -c sa --tau 3.5": ["molecules", "-n", "1", "-c", "sa", "--tau", "3.5"],
    "generate -n 1 -c toxicity --tau 0.5": [
        "generate",
        "-n",
        "1",
        "-c",
        "toxicity",
        "--tau",
        "0.5",
    ],
}


def env_of(path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(path), "OMP_NUM_THREADS": "1"}


def wall(command: list[str], path: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        command, env=env_of(path), check=True, cwd=tempfile.gettempdir(),
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - started


def first_line(command: list[str], path: Path) -> float:
    """Seconds until the command's first line on stderr; the command then runs to its end."""
    started = time.perf_counter()
    with subprocess.Popen(
        command, env=env_of(path), cwd=tempfile.gettempdir(), stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL, text=True,
    ) as proc:  # fmt: skip
        assert proc.stderr is not None
        proc.stderr.readline()
        said = time.perf_counter() - started
        proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {proc.returncode}")
    return said


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
        runs = {
            label: [sys.executable, "-m", "cdd_cli", *argv, "-o", str(out)]
            for label, argv in COMMANDS.items()
        }
        # The app's module (cdd_cli/cli.py before the cli/ package): the same import either way.
        app = "try:\n import cdd_cli.cli.app\nexcept ModuleNotFoundError:\n import cdd_cli.cli"
        imports = [sys.executable, "-c", app]
        seconds = {(label, name): [] for label in [*runs, "import"] for name in trees}
        for _ in range(args.repeats):
            for name, path in trees.items():
                for label, command in runs.items():
                    out.unlink(missing_ok=True)
                    seconds[label, name].append(first_line(command, path))
                seconds["import", name].append(wall(imports, path))
    print("| seconds to the first progress line, median (range) | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    for label in [*runs, "import"]:
        shown = f"`{label}`" if label != "import" else "`import cdd_cli.cli.app` alone"
        cells = []
        for name in trees:
            s = seconds[label, name]
            cells.append(f"{statistics.median(s):.2f} ({min(s):.2f}-{max(s):.2f})")
        print(f"| {shown} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
