"""GenMol's fragment-constrained tasks with `cdd design` on the drug-sized SMILES model, judged
as GenMol judges them, beside GenMol's and SAFE-GPT's published rows.

    OMP_NUM_THREADS=1 python bench/genmol_table.py [--n 8] [--drugs 10] [--start 0]
        [--model moses-mdlm] [--out bench/results/genmol_2026-12-02] [--tabulate]

The set: GenMol's `data/fragments.csv` (10 drugs; bench/data/genmol_fragments/). Per drug and
task one `cdd design` run of `--n` samples, seed 0, one thread: linker design (the pair,
`--link A B`; GenMol reports it as scaffold morphing too), motif extension (`--motif PART`),
scaffold decoration (`--scaffold PART`), superstructure generation (`--motif CORE`, the core
kept with free ends; GenMol instead keeps one of the core's atoms open, drawn at random).
Stereo marks are dropped from every part (the model's vocabulary has none); a part with a
token the vocabulary lacks (iodine) is recorded as refused, its samples 0 valid.

GenMol's metrics (scripts/exps/frag/run.py, NVIDIA-Digital-Bio/genmol at aeb203b), per drug,
then averaged over drugs: validity = valid samples holding the part / samples asked;
uniqueness = distinct canonical SMILES / valid; quality = distinct ones with QED >= 0.6 and
SA <= 4 / samples asked; diversity (TDC's) = mean pairwise Tanimoto distance of the distinct
ones (Morgan radius 2, 2,048 bits; 0 for one); distance = mean Tanimoto distance of the
distinct ones to the drug (Morgan radius 2, 1,024 bits). Validity, uniqueness and quality
average over every drug (0 where none is valid), diversity and distance over drugs with a
valid sample, as run.py does. "Part broken" counts valid records in which an independent
RDKit substructure match (the part without its attachment points, as GenMol's filter)
finds no part: "certified", those the record says kept it (`kept` satisfied), must be 0;
"reported", all of them (the record marks each violating, exit 3).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rdkit import Chem, DataStructs, RDLogger
from rdkit.Chem import QED, rdMolDescriptors
from rdkit.Contrib.SA_Score import sascorer

RDLogger.DisableLog("rdApp.*")
DATA = Path(__file__).parent / "data" / "genmol_fragments" / "fragments.csv"
TASKS = ("linker_design", "motif_extension", "scaffold_decoration", "superstructure_generation")
OPTION = {"motif_extension": "--motif", "scaffold_decoration": "--scaffold",
          "superstructure_generation": "--motif"}  # fmt: skip
DUMMY = Chem.MolFromSmarts("[#0]")
# Published rows: GenMol from its README's "Fragment-constrained Generation" table
# (NVIDIA-Digital-Bio/genmol, commit aeb203b); SAFE-GPT from GenMol's Table 2 as InVirtuoGen's
# README reproduces it (invirtuolabs/InVirtuoGen_public, commit fb9fa4a), not read in the paper.
# Columns as printed there: validity %, uniqueness %, quality %, diversity, distance.
PUBLISHED = {
    "GenMol (README, 100 samples a drug)": {
        "linker_design": ("100.0", "83.7", "21.9", "0.547", "0.563"),
        "motif_extension": ("82.9", "77.5", "30.1", "0.617", "0.682"),
        "scaffold_decoration": ("96.6", "82.7", "31.8", "0.591", "0.651"),
        "superstructure_generation": ("97.5", "83.6", "34.8", "0.599", "0.762"),
    },
    "SAFE-GPT (via InVirtuoGen's README)": {
        "linker_design": ("76.6", "82.5", "21.7", "0.55", "not verified"),
        "motif_extension": ("96.1", "66.8", "18.6", "0.56", "not verified"),
        "scaffold_decoration": ("97.7", "74.7", "10.0", "0.57", "not verified"),
        "superstructure_generation": ("95.7", "83.0", "14.3", "0.57", "not verified"),
    },
}


def flat(smiles: str) -> str:
    """`smiles` without stereo marks, attachment points kept."""
    mol = Chem.MolFromSmiles(smiles)
    Chem.RemoveStereochemistry(mol)
    return Chem.MolToSmiles(mol)


def core(part: str) -> Chem.Mol:
    """The part as a substructure query: its atoms and bonds, attachment points deleted (each
    fragment of a linker pair a component, matched on distinct atoms)."""
    return Chem.DeleteSubstructs(Chem.MolFromSmiles(part), DUMMY)


def holds(smiles: str, query: Chem.Mol) -> bool:
    mol = Chem.MolFromSmiles(smiles)
    return mol is not None and mol.HasSubstructMatch(query)


def bits(mol: Chem.Mol, size: int):
    return rdMolDescriptors.GetMorganFingerprintAsBitVect(mol, 2, nBits=size)


def diversity(smiles: list[str]) -> float:
    """TDC's diversity: 1 - the mean Tanimoto similarity over distinct pairs (Morgan radius 2,
    2,048 bits); 0 for fewer than two molecules, as GenMol's run.py sets it."""
    if len(smiles) < 2:
        return 0.0
    prints = [bits(Chem.MolFromSmiles(s), 2048) for s in smiles]
    pairs = [DataStructs.TanimotoSimilarity(a, b) for a, b in itertools.combinations(prints, 2)]
    return 1 - statistics.fmean(pairs)


def distance(smiles: list[str], drug: str) -> float:
    """GenMol's distance: mean Tanimoto distance to the drug (Morgan radius 2, 1,024 bits)."""
    target = bits(Chem.MolFromSmiles(drug), 1024)
    prints = [bits(Chem.MolFromSmiles(s), 1024) for s in smiles]
    return statistics.fmean(DataStructs.BulkTanimotoSimilarity(target, prints, returnDistance=True))


def scores(texts: list[str | None], part: str, drug: str, asked: int) -> dict:
    """GenMol's metrics of one drug and task from the samples' SMILES (None: none written)."""
    query = core(part)
    mols = [Chem.MolFromSmiles(t) if t else None for t in texts]
    valid = [Chem.MolToSmiles(m) for m in mols if m is not None and m.GetNumAtoms() > 0]
    kept = [s for s in valid if holds(s, query)]
    distinct = list(dict.fromkeys(kept))
    good = [s for s in distinct
            if QED.qed(Chem.MolFromSmiles(s)) >= 0.6
            and sascorer.calculateScore(Chem.MolFromSmiles(s)) <= 4]  # fmt: skip
    return {
        "asked": asked, "valid": len(kept), "parsed": len(valid),
        "part_broken": len(valid) - len(kept),
        "validity": len(kept) / asked,
        "uniqueness": len(distinct) / len(kept) if kept else 0.0,
        "quality": len(good) / asked,
        "diversity": diversity(distinct) if kept else None,
        "distance": distance(distinct, drug) if kept else None,
    }  # fmt: skip


def flags(task: str, part: str) -> list[str]:
    if task == "linker_design":
        return ["--link", *part.split(".")]
    return [OPTION[task], part]


def run_all(args: argparse.Namespace, drugs: list[dict]) -> None:
    out = args.out
    times = out / "times.txt"
    for drug in drugs[args.start :]:
        for task in TASKS:
            name = f"{drug['name'].lower()}-{task}"
            path = out / f"{name}.jsonl"
            path.unlink(missing_ok=True)
            part = flat(drug[task])
            command = [sys.executable, "-m", "cdd_cli", "design", "--model", args.model,
                       "-n", str(args.n), "--seed", "0", "--threads", "1", "-q",
                       "-o", str(path), *flags(task, part)]  # fmt: skip
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            wall = time.perf_counter() - started
            refusal = done.stderr.strip().splitlines()[-1] if done.returncode == 2 else ""
            with times.open("a") as f:
                row = {"run": name, "part": part, "rc": done.returncode, "wall": round(wall, 1)}
                f.write(json.dumps({**row, "refused": refusal}) + "\n")
            print(f"{name}: rc={done.returncode} {wall:.0f}s {refusal}", flush=True)


def tabulate(args: argparse.Namespace, drugs: list[dict]) -> tuple[list[dict], str]:
    walls = {}
    for line in (args.out / "times.txt").read_text().splitlines():
        row = json.loads(line)
        walls[row["run"]] = row
    rows = []
    for task in TASKS:
        per_drug, attempts, seconds = [], [], 0.0
        for drug in drugs:
            name = f"{drug['name'].lower()}-{task}"
            path = args.out / f"{name}.jsonl"
            records = [json.loads(x) for x in path.open()] if path.exists() else []
            texts = [r["text"] if r["valid"] else None for r in records]
            texts += [None] * (args.n - len(texts))  # a refused part: no sample
            row = scores(texts, flat(drug[task]), drug["smiles"], args.n)
            query = core(flat(drug[task]))
            row["part_broken_certified"] = sum(
                r["valid"] and r["constraints"]["kept"]["satisfied"] and not holds(r["text"], query)
                for r in records
            )  # the records' own word against the independent match: must be 0
            per_drug.append(row)
            attempts += [r["attempts"] for r in records]
            seconds += walls[name]["wall"]
        mean = {key: statistics.fmean(d[key] for d in per_drug)
                for key in ("validity", "uniqueness", "quality")}  # fmt: skip
        for key in ("diversity", "distance"):
            values = [d[key] for d in per_drug if d[key] is not None]
            mean[key] = statistics.fmean(values) if values else None
        rows.append({
            "task": task, **mean, "drugs": len(drugs), "per_drug": per_drug,
            "refused": [d["name"] for d in drugs
                        if walls[f"{d['name'].lower()}-{task}"]["rc"] == 2],
            "part_broken": sum(d["part_broken"] for d in per_drug),
            "part_broken_certified": sum(d["part_broken_certified"] for d in per_drug),
            "draws_per_sample": statistics.fmean(attempts) if attempts else None,
            "seconds_per_sample": seconds / (args.n * len(drugs)),
        })  # fmt: skip
    return rows, table(rows, args)


def cell(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"  # -: no valid sample


def table(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        "| task | model | validity % | uniqueness % | quality % | diversity | distance | "
        "part broken: certified / reported | draws / sample | s / sample |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        label = row["task"].replace("_", " ")
        ours = f"**cdd, {args.model}** ({args.n} a drug, {row['drugs']} drugs)"
        lines.append(
            f"| {label} | {ours} | {cell(row['validity'], 100)} | "
            f"{cell(row['uniqueness'], 100)} | {cell(row['quality'], 100)} | "
            f"{cell(row['diversity'], digits=3)} | {cell(row['distance'], digits=3)} | "
            f"**{row['part_broken_certified']}** / {row['part_broken']} | "
            f"{row['draws_per_sample']:.1f} | "
            f"{row['seconds_per_sample']:.1f} |"
        )
        for name, published in PUBLISHED.items():
            lines.append(f"| | {name} | {' | '.join(published[row['task']])} | | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8, help="samples per drug and task")
    parser.add_argument("--drugs", type=int, default=10, help="the first DRUGS of the set")
    parser.add_argument("--start", type=int, default=0,
                        help="run from this drug on (a second process sharing --out)")  # fmt: skip
    parser.add_argument("--model", default="moses-mdlm")
    parser.add_argument("--out", type=Path, default=Path("bench/results/genmol_2026-12-02"))
    parser.add_argument("--tabulate", action="store_true", help="only tabulate earlier runs")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    drugs = list(csv.DictReader(DATA.open()))[: args.drugs]
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.tabulate:
        if args.start == 0:
            (args.out / "times.txt").write_text("")
        run_all(args, drugs)
    rows, text = tabulate(args, drugs)
    (args.out / "rows.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / "table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
