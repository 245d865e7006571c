"""Per-step code reads device values back to the host only where listed, with the reason.

On a GPU every `.cpu()`, `.item()` or `.tolist()` inside a denoising step waits for the device
to finish its queue: a few are needed (the exact judges read decoded text; Python search and
layout code reads plain lists), an unlisted one is a slowdown nobody chose. This test walks
the per-step modules and fails on any such call not in `ALLOWED`, or on an allowance no longer
used (so the list stays the truth).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cdd_cli"

JUDGES = "the exact judges read decoded text: the ids come to the host"
ACCOUNTS = "per-sample accounts and verdicts are Python lists, read once per stage call"
SEARCH = "the best-first search and its costs run in Python over plain lists"
SCALAR = "a schedule value at one time t, read once per step as a Python float"
LAYOUT = "the closed form's plan is a dynamic programme in Python over the step's masses"
LOOKAHEAD = "which samples decide where, read once a step; each candidate's pick is a host draw"

# (module, function) -> ({method: calls}, why)
ALLOWED: dict[tuple[str, str], tuple[dict[str, int], str]] = {
    ("projection/judges.py", "Judges.decided_text"): ({"tolist": 1}, JUDGES),
    ("projection/stages/final.py", "FinalJudges.run"): ({"tolist": 1}, JUDGES),
    ("projection/stages/final.py", "LinearisedLadder.run"): ({"tolist": 3}, JUDGES),
    ("projection/stages/redraws.py", "LookAhead.run"): ({"tolist": 2}, ACCOUNTS),
    ("projection/stages/closed_forms.py", "ClosedFormLookAhead.run"): (
        {"cpu": 1, "tolist": 1},
        LOOKAHEAD,
    ),
    ("projection/stages/alm.py", "ALM.run"): ({"tolist": 2}, ACCOUNTS),
    ("projection/stages/redraws.py", "RedrawAfterALM.run"): ({"tolist": 2}, ACCOUNTS),
    ("projection/stages/flip_search.py", "FlipSearch.run"): ({"tolist": 3, "cpu": 2}, SEARCH),
    ("projection/alm.py", "project"): ({"cpu": 2, "item": 4, "tolist": 2}, ACCOUNTS),
    ("projection/linearized.py", "linearised_search"): ({"cpu": 1, "tolist": 5}, JUDGES),
    ("projection/search.py", "best_first"): ({"tolist": 4}, SEARCH),
    ("projection/search.py", "Reading.__init__"): ({"tolist": 2}, SEARCH),
    ("diffusion/sampler.py", "Sampler.denoise"): ({"tolist": 1}, SCALAR),
    ("diffusion/processes.py", "MaskedProcess.unmask_probability"): ({"item": 2}, SCALAR),
    ("diffusion/processes.py", "UniformProcess.posterior"): ({"item": 2}, SCALAR),
    ("constraints/lexical/layout.py", "WordLayout.plan"): ({"cpu": 1}, LAYOUT),
    ("constraints/lexical/layout.py", "WordLayout.role_scores"): ({"cpu": 1}, LAYOUT),
    ("constraints/lexical/layout.py", "WordLayout.role_scores.score"): ({"cpu": 1}, LAYOUT),
    ("constraints/pattern_layout.py", "PatternLayout.apply"): ({"cpu": 1, "tolist": 1}, LAYOUT),
    ("constraints/pattern_layout.py", "PatternLayout.edges_from_automaton"): (
        {"tolist": 2},
        "built once per automaton and cached, not per step",
    ),
    ("constraints/pattern_layout.py", "PatternLayout.mass_by_atoms"): ({"tolist": 1}, LAYOUT),
    ("constraints/pattern_layout.py", "PatternLayout.paths"): ({"tolist": 1}, LAYOUT),
    ("constraints/pattern_layout.py", "PatternLayout.rows_along"): ({"tolist": 1}, LAYOUT),
    ("constraints/pattern_layout.py", "PatternLayout.log_weight_of"): ({"cpu": 1}, LAYOUT),
    ("constraints/pattern_layout.py", "PatternLayout.set_mass"): ({"cpu": 4}, LAYOUT),
}
PER_STEP = sorted(
    {module for module, _ in ALLOWED} | {"projection/engine.py", "projection/step.py"}
)
SYNCS = {"cpu", "item", "tolist"}


def host_reads(source: str) -> Counter:
    """(function's dotted name, method) -> calls of `.cpu()`, `.item()`, `.tolist()`."""
    found: Counter = Counter()

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, f"{scope}.{child.name}" if scope else child.name)
                continue
            call = child
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in SYNCS
                and not call.args
            ):
                found[scope, call.func.attr] += 1
            visit(child, scope)

    visit(ast.parse(source), "")
    return found


def test_per_step_code_reads_the_device_only_where_listed():
    seen: dict[tuple[str, str], dict[str, int]] = {}
    for module in PER_STEP:
        for (scope, method), calls in host_reads((PACKAGE / module).read_text()).items():
            seen.setdefault((module, scope), {})[method] = calls
    unlisted = {k: v for k, v in seen.items() if ALLOWED.get(k, ({}, ""))[0] != v}
    stale = [k for k in ALLOWED if k not in seen]
    assert not unlisted, f"host reads not listed (or changed) in ALLOWED: {unlisted}"
    assert not stale, f"allowances no longer used: {stale}"


def test_the_walk_finds_a_read_where_it_is_and_names_its_function():
    source = (
        "class A:\n"
        "    def f(self, x):\n"
        "        y = x.tolist()\n"
        "        def g():\n"
        "            return x.cpu(), x.to('cpu'), x.item()\n"
        "        return y\n"
        "def h(x):\n"
        "    return x.tolist(1)\n"  # an argument: not a tensor's own method
    )
    assert host_reads(source) == Counter(
        {("A.f", "tolist"): 1, ("A.f.g", "cpu"): 1, ("A.f.g", "item"): 1}
    )
