"""Do two trees write the same records? For refactors that must not change what cdd samples.

    python bench/same_records.py --base REV

Runs a fixed set of commands (molecules with SA and novelty, molecular properties, text with
toxicity on the tweets and the shipped model, a lexical spec, counting, a JSON Schema and a
regex, both kinds of plugin constraint, `--method paper` and `--method reject`) with this
tree's code and with REV's (a git worktree, the same venv), and compares every record field
except timing (`seconds`, `projection.seconds`) and provenance. Prints one line per command
and exits 1 if any record differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEXICAL = """model: default-text
constraints:
  - type: word_at
    position: 3
    word: whale
  - type: word_count
    max: 12
  - type: exclude
    words: [the]
"""
PROPERTIES = """constraints:
  - {type: qed, min: 0.45}
  - {type: substructure, smarts: "[CX3]=O"}
  - {type: novelty}
"""
SCHEMA = """constraints:
  - type: json_schema
    schema:
      type: object
      properties:
        name: {type: string, maxLength: 8}
        age: {type: integer, minimum: 18, maximum: 99}
      required: [name, age]
  - type: exclude
    words: [damn]
"""
REGEX = """constraints:
  - {type: regex, pattern: '[A-Z][a-z]+ (is|was) [0-9]{1,3}\\.'}
"""
SPECS = {"lexical": LEXICAL, "properties": PROPERTIES, "schema": SCHEMA, "regex": REGEX}
COMMANDS = {
    "sa_novel": "molecules -n 48 --seed 3 -c sa --tau 3.5 --novel",
    "sa_3.0": "molecules -n 48 --seed 5 -c sa --tau 3.0",
    "novel": "molecules -n 32 --seed 7 --novel",
    "toxicity_tweets": f"generate --model {ROOT / 'bench/models/tweets-mdlm'} --prompt 'you are "
    "such a stupid' -n 6 -c toxicity --tau 0.5 --length 24 --seed 2",
    "toxicity_default": "generate --prompt 'The sea was' -n 4 -c toxicity --tau 0.25 "
    "--length 24 --seed 2",
    "lexical": "generate --spec {lexical} --prompt 'Call me' -n 4 --length 24 --seed 1",
    "count": 'generate --prompt "How many r\'s are in strawberry?" -n 4 -c count --length 16 '
    "--seed 1",
    "properties": "molecules --spec {properties} -n 16 --seed 2",
    "json_schema": "generate --spec {schema} --prompt 'Record:' -n 2 --length 24 --seed 3",
    "regex": "generate --spec {regex} -n 2 --length 12 --seed 4",
    "plugin_exact": "molecules -n 16 -c max_heavy_atoms --tau 8 --seed 5",
    "plugin_surrogate": "generate -n 4 -c uppercase --tau 0.02 --length 16 --seed 6",
    "paper": "molecules -n 4 --method paper -c sa --tau 4.5 --steps 8 --seed 7",
    "reject": "molecules -n 16 --method reject -c sa --tau 3.0 --seed 8",
}


def without_timing(record: dict) -> dict:
    # Timing, and the provenance fields newer revisions add (when, which cdd, which weights).
    provenance = ("seconds", "created", "cdd_version", "model_revision")
    out = {k: v for k, v in record.items() if k not in provenance}
    # Written differently since 2026-12 (the same draws): the seed as a decimal string, and a
    # bound as "max"/"min" where it was a bare "tau".
    if isinstance(out.get("sample_seed"), str):
        out["sample_seed"] = int(out["sample_seed"])
    for verdict in (out.get("constraints") or {}).values():
        for side in ("max", "min"):
            if side in verdict:
                verdict["tau"] = verdict.pop(side)
    if out.get("projection"):
        # settled_by: which stage did the work, a field newer revisions add (issue 45).
        ignored = ("seconds", "settled_by")
        out["projection"] = {k: v for k, v in out["projection"].items() if k not in ignored}
    return out


def records(tree: Path, command: str, specs: dict[str, Path]) -> list[dict]:
    for name, path in specs.items():
        command = command.replace("{" + name + "}", str(path))
    argv = shlex.split(command)
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "2"}
    result = subprocess.run(
        [sys.executable, "-m", "cdd_cli", *argv, "-q"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode not in (0, 3):
        raise SystemExit(f"{tree}: cdd {' '.join(argv)} failed: {result.stderr.strip()}")
    return [without_timing(json.loads(line)) for line in result.stdout.splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare against")
    parser.add_argument("--only", nargs="*", choices=list(COMMANDS), help="these commands")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base],
            check=True,
            capture_output=True,
        )
        specs = {name: Path(scratch) / f"{name}.yaml" for name in SPECS}
        for name, path in specs.items():
            path.write_text(SPECS[name])
        differing = 0
        try:
            for name, command in COMMANDS.items():
                if args.only and name not in args.only:
                    continue
                old, new = records(base, command, specs), records(ROOT, command, specs)
                diff = sum(a != b for a, b in zip(old, new, strict=False))
                diff += abs(len(old) - len(new))
                differing += diff
                print(f"{name}: {len(new)} records, {diff} differ", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)])
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
