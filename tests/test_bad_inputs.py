"""Every generated malformed input (tests/bad_inputs.py) costs one line and exit 2: no
traceback, no output file left behind, within a memory cap and a time limit.

The cases run in one child process (so a case that allocated without limit would hit the
cap instead of the machine), through the CLI's own entry point; each case is a test here."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bad_inputs import TIME_LIMIT_S, all_cases

MEMORY_CAP = 4 << 30  # address space of the child: torch and a tiny model fit in it
CASES = [case.name for case in all_cases()]


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bad-inputs") / "results.json"
    script = Path(__file__).with_name("bad_inputs.py")
    done = subprocess.run(
        [sys.executable, str(script), str(out)],
        preexec_fn=capped,
        capture_output=True,
        text=True,
        timeout=len(CASES) * TIME_LIMIT_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


def test_there_are_enough_cases():
    assert len(CASES) >= 200


@pytest.mark.parametrize("name", CASES)
def test_a_malformed_input_is_one_line_and_exit_2(results: dict, name: str):
    result = results[name]
    assert result["exit"] == 2, result
    (line,) = result["stderr"]
    assert line.startswith("cdd: error: ") and "internal error" not in line, line
    assert result["new_files"] == [], result  # no output, no config beside it, no run folder
    assert result["changed_files"] == [], result  # and earlier files as they were


@pytest.mark.parametrize(
    "args",
    [["constraints", "ls"], ["models", "ls"], ["validate", "constraints.example.yaml"]],
)
def test_a_full_standard_output_is_one_line(args: list[str]):
    root = Path(__file__).resolve().parent.parent
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "cdd_cli", *args], stdout=full, stderr=subprocess.PIPE,
            text=True, cwd=root,
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["cdd: error: No space left on device (writing the output)"]
