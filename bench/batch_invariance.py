"""Same seed, same records at any batch size: what the row floor (cdd_cli/models/rows.py)
costs and what it buys.

    OMP_NUM_THREADS=1 python bench/batch_invariance.py [--repeats 2] [--jobs sa toxicity ...]
        [--out FILE.json]

Arms, interleaved job by job: `floor` (cdd as shipped: every linear product on >= 16 rows)
and `off` (the same code with the floor at 0 rows, i.e. each product on the rows it has, as
before issue 49). Jobs: `cdd molecules -n 70 --seed 3 -c sa --tau 3.5` at --batch-size 1, 7
and 64, `cdd generate --prompt "The people of" -n 8 --length 32 -c toxicity --tau 0.25` at
1 and 8, and unconstrained `cdd molecules -n 256` at 64 (all `--threads 1 -q`). Per arm:
records (timing fields aside) that differ from the same arm's largest batch, and wall seconds
(the command's, start-up included; the best of --repeats).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The CLI with the floor set first: 16 is the shipped value, 0 turns it off.
RUN = "import sys; import cdd_cli.models.rows as r; r.MIN_ROWS = int(sys.argv.pop(1)); " \
      "from cdd_cli.cli.app import main; main()"  # fmt: skip
FLOORS = {"floor": 16, "off": 0}
SA = ["molecules", "-n", "70", "--seed", "3", "-c", "sa", "--tau", "3.5"]
TOXICITY = ["generate", "--prompt", "The people of", "-n", "8", "--length", "32", "-c",
            "toxicity", "--tau", "0.25"]  # fmt: skip
JOBS = {
    "sa": (SA, ["1", "7", "64"]),
    "toxicity": (TOXICITY, ["1", "8"]),
    "unconstrained": (["molecules", "-n", "256", "--seed", "3"], ["64"]),
}


def records(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        r.pop("seconds", None), r.pop("created", None)
        if r.get("projection"):
            r["projection"].pop("seconds", None)
        out[r["id"]] = json.dumps(r, sort_keys=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--jobs", nargs="+", choices=list(JOBS), default=list(JOBS))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cdd-invariance-"))
    rows = []
    jobs = {name: JOBS[name] for name in args.jobs}
    for job, (command, batches) in jobs.items():
        for batch in batches:
            seconds: dict[str, list[float]] = {arm: [] for arm in FLOORS}
            for repeat in range(args.repeats):
                for arm, floor in FLOORS.items():  # interleaved: the same load for both
                    out = work / f"{job}-{batch}-{arm}-{repeat}.jsonl"
                    cli = [sys.executable, "-c", RUN, str(floor), *command, "-q"]
                    cli += ["--threads", "1", "--batch-size", batch, "-o", str(out)]
                    started = time.perf_counter()
                    done = subprocess.run(cli, cwd=REPO, capture_output=True, text=True)
                    seconds[arm].append(time.perf_counter() - started)
                    if done.returncode not in (0, 3):
                        raise SystemExit(f"{' '.join(cli)}: exit {done.returncode}\n{done.stderr}")
            for arm in FLOORS:
                rows.append({"job": job, "batch": int(batch), "arm": arm,
                             "seconds": round(min(seconds[arm]), 2),
                             "file": str(work / f"{job}-{batch}-{arm}-0.jsonl")})  # fmt: skip
    for row in rows:
        largest = max(r["batch"] for r in rows if r["job"] == row["job"])
        reference = next(
            r for r in rows if (r["job"], r["batch"], r["arm"]) == (row["job"], largest, row["arm"])
        )
        mine, theirs = records(Path(row["file"])), records(Path(reference["file"]))
        row["differ"] = sum(mine[k] != theirs[k] for k in theirs)
        row["records"] = len(theirs)
    print("| job | batch | floor: differ | off: differ | floor s | off s | floor / off |")
    print("|---|---|---|---|---|---|---|")
    for job, (_, batches) in jobs.items():
        for batch in batches:
            on, off = (
                next(r for r in rows if (r["job"], r["batch"], r["arm"]) == (job, int(batch), a))
                for a in ("floor", "off")
            )
            print(
                f"| {job} | {batch} | {on['differ']}/{on['records']} | "
                f"{off['differ']}/{off['records']} | {on['seconds']} | {off['seconds']} | "
                f"{on['seconds'] / off['seconds']:.3f} |"
            )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
