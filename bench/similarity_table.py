"""Similarity to a lead on the shipped QM9 model: unconstrained, the SMILES defaults, and
steering from halfway, each a `cdd molecules` run of its own, in one session.

    OMP_NUM_THREADS=1 python bench/similarity_table.py [--samples 64] [--lead SMILES]...
        [--min 0.3 0.4] [--out bench/results/similarity] [--tabulate]

Arms per lead and bound: `default` is `-c similarity --tau MIN --to LEAD`; `steer` a spec
with `projection: {project_from: 0.5}` and `repair: {surrogates_from: 1}`. Per arm: records
satisfied, violations among them by an independent recount (RDKit's older
`GetMorganFingerprintAsBitVect`, radius 2, 2,048 bits, not the judge's code), valid, unique
and novel molecules, the mean similarity of the valid ones, how many are the lead itself,
attempts per record, seconds per record (mean / median, the records' `seconds`) and the
overhead over the unconstrained run's. `--tabulate` reads the records of an earlier run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rdkit import Chem, DataStructs, RDLogger
from rdkit.Chem import rdMolDescriptors

RDLogger.DisableLog("rdApp.*")
LEADS = ("CCC1(CCC#N)CO1", "CCNc1noc(N)n1")  # QM9 held-out molecules, 9 heavy atoms each


def tag(lead: str) -> str:
    return "".join(c for c in lead if c.isalnum())[:8]


def fingerprint(smiles: str):
    mol = Chem.MolFromSmiles(smiles) if smiles else None
    return None if mol is None else rdMolDescriptors.GetMorganFingerprintAsBitVect(mol, 2, 2048)


def molecules(out: Path, name: str, samples: int, *flags: str) -> None:
    """One `cdd molecules` run into OUT/NAME.jsonl; its wall seconds appended to times.txt."""
    (out / f"{name}.jsonl").unlink(missing_ok=True)
    command = [sys.executable, "-m", "cdd_cli", "molecules", "-n", str(samples), "--seed", "0"]
    started = time.perf_counter()
    done = subprocess.run([*command, "-q", "-o", str(out / f"{name}.jsonl"), *flags])
    with (out / "times.txt").open("a") as f:
        f.write(f"{name} rc={done.returncode} wall={time.perf_counter() - started:.1f}\n")


def run_all(args: argparse.Namespace) -> None:
    out = args.out
    (out / "times.txt").write_text("")
    molecules(out, "unconstrained", args.samples)
    for lead in args.lead:
        for bound in args.min:
            spec = out / f"steer-{tag(lead)}-{bound}.yaml"
            spec.write_text(
                f'constraints:\n  - {{type: similarity, to: "{lead}", min: {bound}}}\n'
                "projection: {project_from: 0.5}\nrepair: {surrogates_from: 1}\n"
            )
            molecules(out, f"steer-{tag(lead)}-{bound}", args.samples, "--spec", str(spec))
            flags = ["-c", "similarity", "--tau", str(bound), "--to", lead]
            molecules(out, f"default-{tag(lead)}-{bound}", args.samples, *flags)


def row(records: list[dict], lead: str | None, bound: float | None, base: list[float]) -> str:
    seconds = [r["seconds"] for r in records]
    valid = [r for r in records if r["valid"]]
    cells = [str(len(valid)), str(len({r["canonical"] for r in valid}))]
    cells.append(str(sum(bool(r["novel"]) for r in valid)))
    if lead is None:
        return " | ".join(["", "", *cells, "", "", "", *timing(seconds, seconds)])
    target = fingerprint(lead)
    kept = [r for r in records if r["satisfied"]]
    recount = [fingerprint(r["text"]) for r in kept]
    wrong = sum(f is None or DataStructs.TanimotoSimilarity(target, f) < bound for f in recount)
    similarity = [r["constraints"]["similarity"]["value"] for r in valid]
    itself = sum(r["canonical"] == Chem.MolToSmiles(Chem.MolFromSmiles(lead)) for r in valid)
    attempts = statistics.mean(r["attempts"] for r in records)
    return " | ".join(
        [
            f"{len(kept)}/{len(records)}", str(wrong), *cells, f"{statistics.mean(similarity):.3f}",
            str(itself), f"{attempts:.2f}", *timing(seconds, base),
        ]
    )  # fmt: skip


def timing(seconds: list[float], base: list[float]) -> list[str]:
    mean, median = statistics.mean(seconds), statistics.median(seconds)
    cells = [f"{mean:.3f} / {median:.3f}"]
    if seconds is base:
        return [*cells, ""]
    ratio = f"{mean / statistics.mean(base):.1f}x / {median / statistics.median(base):.1f}x"
    return [*cells, ratio]


def tabulate(args: argparse.Namespace) -> str:
    def read(name: str) -> list[dict]:
        return [json.loads(line) for line in (args.out / f"{name}.jsonl").open()]

    base = [r["seconds"] for r in read("unconstrained")]
    lines = [
        "| lead | min | arm | satisfied | violations (recount) | valid | unique | novel | "
        "mean similarity | the lead | attempts | s/record mean / median | overhead |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| | | unconstrained | {row(read('unconstrained'), None, None, base)} |",
    ]
    for lead in args.lead:
        for bound in args.min:
            for arm in ("default", "steer"):
                records = read(f"{arm}-{tag(lead)}-{bound}")
                lines.append(f"| `{lead}` | {bound} | {arm} | {row(records, lead, bound, base)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--lead", action="append")
    parser.add_argument("--min", type=float, nargs="+", default=[0.3, 0.4])
    parser.add_argument("--out", type=Path, default=Path("bench/results/similarity"))
    parser.add_argument("--tabulate", action="store_true", help="only tabulate earlier records")
    args = parser.parse_args()
    args.lead = args.lead or list(LEADS)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not args.tabulate:
        run_all(args)
    table = tabulate(args)
    (args.out / "table.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
