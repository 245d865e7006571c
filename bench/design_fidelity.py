"""How far `cdd design`'s molecules are from the model's own molecules that hold the part.

    python bench/design_fidelity.py --part '[*]C1CC1' --reference pool.jsonl \\
        --designs before.jsonl after.jsonl [--splits 200] [--seed 0] [--out rows.json]

The reference is rejection's: the valid records of an unconstrained run of the same model
(`cdd molecules --method unconstrained -n 4000 --seed 1 -o pool.jsonl`) whose molecule holds
the part by the `kept` judge itself (an RDKit substructure match, attachment points matching
any atom). Each `--designs` file (`cdd design --scaffold PART -n 256 --seed 1 -o FILE`) gives
its valid records that the judge certified. Per property (QED, SA, heavy atoms, logP,
molecular weight) the two-sample Kolmogorov-Smirnov distance between a design's molecules and
the reference is read against its permutation null: the mean distance over `--splits` random
splits of the pooled molecules into sets of the two sizes. Goal: every ratio <= 2.
"""

from __future__ import annotations

import argparse
import bisect
import json
import random
import statistics
from pathlib import Path

from rdkit import Chem
from rdkit.Chem import QED, Crippen, Descriptors

from cdd_cli.constraints.kept import any_atom_query, read_part
from cdd_cli.constraints.sa import rdkit_sa

PROPERTIES = ("qed", "sa", "heavy_atoms", "logp", "mw")


def properties(smiles: str) -> dict[str, float] | None:
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return None
    return {
        "qed": QED.qed(mol),
        "sa": rdkit_sa(Chem.MolToSmiles(mol)),
        "heavy_atoms": float(mol.GetNumHeavyAtoms()),
        "logp": Crippen.MolLogP(mol),
        "mw": Descriptors.MolWt(mol),
    }


def ks(a: list[float], b: list[float]) -> float:
    """The two-sample KS statistic: the largest gap between the two empirical CDFs."""
    a, b = sorted(a), sorted(b)
    return max(
        abs(bisect.bisect_right(a, x) / len(a) - bisect.bisect_right(b, x) / len(b))
        for x in a + b
    )


def null(a: list[float], b: list[float], splits: int, stream: random.Random) -> float:
    """The mean KS over random splits of a + b into sets of len(a) and len(b)."""
    pooled = a + b
    total = 0.0
    for _ in range(splits):
        stream.shuffle(pooled)
        total += ks(pooled[: len(a)], pooled[len(a) :])
    return total / splits


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", required=True, help="the scaffold, e.g. '[*]C1CC1'")
    parser.add_argument("--reference", type=Path, required=True, help="unconstrained records")
    parser.add_argument("--designs", type=Path, nargs="+", required=True)
    parser.add_argument("--splits", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    query = any_atom_query(read_part(args.part, "--part"))
    pool = [r for r in read(args.reference) if r["valid"]]
    held = [
        values
        for r in pool
        if Chem.MolFromSmiles(r["text"]).HasSubstructMatch(query)
        and (values := properties(r["text"])) is not None
    ]
    print(f"reference: {len(held)} of {len(pool)} valid unconstrained molecules hold {args.part}")
    rows = []
    for path in args.designs:
        records = read(path)
        certified = [
            values
            for r in records
            if r["valid"] and r["constraints"]["kept"]["value"] == 1.0
            and (values := properties(r["text"])) is not None
        ]  # fmt: skip
        valid = sum(r["valid"] for r in records)
        row: dict = {"designs": str(path), "records": len(records), "valid": valid,
                     "certified": len(certified), "reference": len(held)}  # fmt: skip
        stream = random.Random(args.seed)
        for name in PROPERTIES:
            a = [v[name] for v in certified]
            b = [v[name] for v in held]
            distance, floor = ks(a, b), null(a, b, args.splits, stream)
            row[name] = {"ks": round(distance, 4), "null": round(floor, 4),
                         "ratio": round(distance / floor, 2),
                         "mean": round(statistics.fmean(a), 3),
                         "reference_mean": round(statistics.fmean(b), 3)}  # fmt: skip
        rows.append(row)
        ratios = " ".join(f"{name} {row[name]['ratio']}x" for name in PROPERTIES)
        print(f"{path}: certified {len(certified)}/{valid} valid of {len(records)}; {ratios}")
        means = " ".join(
            f"{name} {row[name]['mean']} vs {row[name]['reference_mean']}" for name in PROPERTIES
        )
        print(f"  means (design vs reference): {means}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
