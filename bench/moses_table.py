"""The MOSES table of the drug-sized model, unconstrained and under cdd, beside MOSES' baselines.

    python bench/moses_table.py [--n 256] [--batch-size 64] [--model moses-mdlm] [--device cpu]
        [--rows unconstrained,sa,qed,logp-novel,amide] [--moses-data WHEEL|FOLDER] [--no-fcd]
        [--out bench/results/moses_table]

Rows: the model unconstrained, and under cdd with SA <= 3.0, QED >= 0.6, logP in [1, 3] with
novelty, and an amide present. Each row: the MOSES metrics of its samples (`cdd eval --moses`'s,
cdd_cli/evaluate/moses.py; FCD where the `fcd` extra is installed; novelty against the model's
training molecules), seconds per molecule and per satisfying molecule (wall time of the row's
own batches), and violations judged again here by RDKit itself (sascorer, QED.qed,
Crippen.MolLogP, a substructure match, the canonical SMILES against the model's training and
held-out molecules and the row's earlier samples), never read from records: a sample RDKit
cannot read violates every constraint. MOSES' published baseline rows follow
(cdd_cli/evaluate/moses_baselines.py, cited there), mean over their seeds.
The issue's size is --n 10000; unique@10k over fewer samples is over all of them (a note says).
Batches are interleaved over the rows (batch 1 of every row, then batch 2 ...), so a slow spell
of a shared machine falls on every row alike.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from rdkit import Chem
from rdkit.Chem import QED, Crippen
from rdkit.Contrib.SA_Score import sascorer

from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.evaluate import moses
from cdd_cli.evaluate.molecules import CANONICALIZER, canonical
from cdd_cli.evaluate.moses_baselines import BASELINES, SOURCE
from cdd_cli.evaluate.reference import default_reference, model_reference
from cdd_cli.models import registry
from cdd_cli.run.defaults import fill_defaults
from cdd_cli.run.drawing import BatchDrawer, Draw
from cdd_cli.spec.entries import check_constraint
from cdd_cli.spec.model import Spec

AMIDE = "[CX3](=O)[NX3]"
# Row name -> (label, constraint entries as a spec file writes them).
ROWS: dict[str, tuple[str, list[tuple[str, dict]]]] = {
    "unconstrained": ("unconstrained", []),
    "sa": ("cdd: SA <= 3.0", [("sa", {"tau": 3.0})]),
    "qed": ("cdd: QED >= 0.6", [("qed", {"min": 0.6})]),
    "logp-novel": ("cdd: logP in [1, 3], novel", [("logp", {"min": 1, "max": 3}), ("novelty", {})]),
    "amide": ("cdd: amide present", [("substructure", {"smarts": AMIDE})]),
}
# The columns shown, as `moses_metrics` and BASELINES key them.
SHOWN = ("valid", "unique@1000", "unique@10000", "Novelty", "Filters", "IntDiv", "SNN/Test",
         "Frag/Test", "Scaf/Test", "FCD/Test")  # fmt: skip


def rdkit_violation(row: str, known: frozenset[str]) -> Callable[[str], bool]:
    """Whether a sample breaks the row's constraints, judged by RDKit here (not by cdd's
    judges); for the novelty row, a molecule seen earlier in the row counts as known."""
    amide = Chem.MolFromSmarts(AMIDE)
    seen: set[str] = set()

    def violates(smiles: str) -> bool:
        mol = Chem.MolFromSmiles(smiles) if smiles else None
        if mol is None or mol.GetNumAtoms() == 0:
            return row != "unconstrained"
        if row == "sa":
            return sascorer.calculateScore(mol) > 3.0
        if row == "qed":
            return QED.qed(mol) < 0.6
        if row == "logp-novel":
            key = canonical(smiles)  # as the training molecules are written
            repeated = key in known or key in seen
            seen.add(key)
            return repeated or not 1 <= Crippen.MolLogP(mol) <= 3
        if row == "amide":
            return not mol.HasSubstructMatch(amide)
        return False

    return violates


class Arm:
    """One row, drawn batch by batch; its wall time counts its own batches only."""

    def __init__(self, row: str, loaded: registry.LoadedModel, args: argparse.Namespace):
        entries = []
        for kind, options in ROWS[row][1]:
            entry = ConstraintSpec(kind, dict(options), f"bench row {row}")
            check_constraint(entry)
            entries.append(entry)
        spec = Spec()
        spec.model, spec.constraints = args.model, []
        spec.method = "unconstrained" if not entries else "cdd"
        spec.sampling.batch_size = args.batch_size
        fill_defaults(spec, loaded)
        self.generation = BatchDrawer(spec, loaded, build_constraints(entries, loaded, args.device))
        self.draws: list[Draw] = []
        self.wall = 0.0

    def run(self, indices: range) -> None:
        started = time.perf_counter()
        self.draws += self.generation.run(indices)
        self.wall += time.perf_counter() - started


def measure(row: str, arm: Arm, reference: moses.MosesReference, known: frozenset[str]) -> dict:
    texts = [d.text for d in arm.draws]
    violates = rdkit_violation(row, known)
    violations = sum(violates(t) for t in texts)
    satisfying = len(texts) - violations if row != "unconstrained" else 0
    result = {"row": row, "label": ROWS[row][0], "samples": len(texts)}
    result.update(moses.moses_metrics(texts, reference, log=lambda m: print(f"{row}: {m}")))
    result.update(
        {
            "violations": violations if row != "unconstrained" else None,
            "seconds_per_molecule": round(arm.wall / len(texts), 4),
            "seconds_per_satisfying": round(arm.wall / satisfying, 4) if satisfying else None,
            "seconds_median": round(statistics.median(d.seconds for d in arm.draws), 4),
            "mean_attempts": round(statistics.fmean(d.attempts for d in arm.draws), 2),
        }
    )
    return result


def cell(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def table(rows: list[dict]) -> str:
    """Markdown: cdd's rows, then the MOSES baselines (their metrics only)."""
    head = ["row", *SHOWN, "violations (RDKit)", "s / molecule", "s / satisfying"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["label"], *(cell(r.get(k)) for k in SHOWN)]
        cells += [f"{r['violations']} / {r['samples']}" if r["violations"] is not None else "-"]
        cells += [cell(r["seconds_per_molecule"]), cell(r["seconds_per_satisfying"])]
        lines.append("| " + " | ".join(cells) + " |")
    for name, metrics in BASELINES.items():
        cells = [f"MOSES {name}", *(cell(metrics[k][0]) if k in metrics else "-" for k in SHOWN)]
        lines.append("| " + " | ".join([*cells, "-", "-", "-"]) + " |")
    return "\n".join(lines) + f"\n\nBaselines: {SOURCE}."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="samples a row (the issue's: 10000)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--model", default="moses-mdlm")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--moses-data", type=Path, default=None)
    parser.add_argument("--no-fcd", action="store_true", help="leave FCD out (it takes minutes)")
    parser.add_argument("--out", default="bench/results/moses_table")
    args = parser.parse_args()

    loaded = registry.load(args.model, "molecules", args.device)
    rows = args.rows.split(",")
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}: choose from {', '.join(ROWS)}")
    arms = {row: Arm(row, loaded, args) for row in rows}
    for start in range(0, args.n, args.batch_size):
        for arm in arms.values():
            arm.run(range(start, min(start + args.batch_size, args.n)))

    fcd = moses.fcd_installed() and not args.no_fcd
    reference = moses.load_reference(args.moses_data, model_reference(loaded.directory), print, fcd)
    known = (default_reference(loaded.directory) or (frozenset(), ""))[0]
    results = []
    for row, arm in arms.items():
        results.append(measure(row, arm, reference, known))
        print(json.dumps(results[-1]), flush=True)

    meta = {
        "model": args.model,
        "revision": loaded.revision,
        "steps": loaded.default_steps,
        "n": args.n,
        "device": args.device,
        "batch_size": args.batch_size,
        "fcd": fcd,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "canonicalizer": CANONICALIZER,
        "baselines": SOURCE,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "moses_table.json").write_text(json.dumps({"meta": meta, "rows": results}, indent=1))
    print(f"\n{json.dumps(meta)}\n\n{table(results)}")


if __name__ == "__main__":
    main()
