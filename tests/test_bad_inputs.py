"""Every generated malformed input (tests/bad_inputs.py) costs one line and exit 2: no
traceback, no output file left behind, within a memory cap and a time limit.

The cases run in one child process (so a case that allocated without limit would hit the
cap instead of the machine), through the CLI's own entry point; each case is a test here."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bad_inputs import TIME_LIMIT_S, all_cases

MEMORY_CAP = 4 << 30  # address space of the child: torch and a tiny model fit in it
CASES = [case.name for case in all_cases()]


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def default_sigint() -> None:
    # Ctrl-C as a terminal delivers it, even where the suite runs with SIGINT ignored (a
    # shell's background job), which cdd would keep ignored as `nohup` asks.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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


@pytest.mark.slow
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


# ------------------------------------------------------------------------------------------
# Issue 49: what is not one line and exit 2, but must still be answered whole.

ROOT = Path(__file__).resolve().parent.parent
CDD = [sys.executable, "-m", "cdd_cli"]


def cdd_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", **extra}


def whole_lines(path: Path) -> list[dict]:
    """The records of an output file, each line whole (a torn one fails here)."""
    if not path.exists():
        return []
    data = path.read_text(encoding="utf-8")
    assert data == "" or data.endswith("\n"), data[-200:]
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
@pytest.mark.parametrize("after", [0.2, 1.0, 3.0])
def test_a_signal_at_any_moment_is_one_line_and_whole_records(
    tmp_path: Path, signum: int, code: int, word: str, after: float
):
    """Whenever it lands (start-up imports, model load, sampling, writing), the command
    stops with one line and 130 or 143, or has finished (0); never a traceback, never a torn
    record. No assertion depends on where the signal landed."""
    out = tmp_path / "out.jsonl"
    args = ["molecules", "-n", "64", "--steps", "8", "-q", "-o", str(out)]
    # The console script too (its own entry point), where the virtualenv has it.
    script = Path(sys.executable).with_name("cdd")
    command = [str(script), *args] if after == 1.0 and script.is_file() else [*CDD, *args]
    child = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT,
        env=cdd_env(), preexec_fn=default_sigint,
    )  # fmt: skip
    time.sleep(after)
    child.send_signal(signum)
    _, stderr = child.communicate(timeout=300)
    assert child.returncode in (code, 0), stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr  # the error, or the finished run's summary
    if child.returncode == code:
        assert lines[0].startswith(f"cdd: error: {word}"), stderr
    records = whole_lines(out)
    assert len(records) <= 64 and len({r["id"] for r in records}) == len(records)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_a_signal_while_records_are_written_keeps_whole_ones(
    tmp_path: Path, signum: int, code: int, word: str
):
    """Sent once the first record is in the file (or the run has ended): what the file holds
    is whole records, and the one line says how many."""
    out = tmp_path / "out.jsonl"
    args = ["molecules", "-n", "400", "--steps", "8", "--batch-size", "4", "-q", "-o", str(out)]
    child = subprocess.Popen(
        [*CDD, *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT,
        env=cdd_env(), preexec_fn=default_sigint,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while child.poll() is None and time.monotonic() < deadline:
        if out.exists() and out.stat().st_size:
            break
        time.sleep(0.05)
    child.send_signal(signum)
    _, stderr = child.communicate(timeout=300)
    assert child.returncode in (code, 0), stderr
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    records = whole_lines(out)
    if child.returncode == code:
        assert lines[0].startswith(f"cdd: error: {word}: {len(records)} of 400 records")
        assert lines[0].endswith("--resume"), lines[0]


@pytest.mark.slow
def test_importing_the_package_imports_no_torch_and_keeps_the_api():
    """`cdd_cli.__main__` installs the signal handlers after importing the package: the
    package itself must be quick (torch loads with the API, on first use)."""
    code = (
        "import sys, cdd_cli\n"
        "assert 'torch' not in sys.modules, 'torch imported by the package'\n"
        "from cdd_cli import errors, version\n"
        "assert 'torch' not in sys.modules\n"
        "import cdd_cli as cdd\n"
        "from cdd_cli import api\n"
        "assert cdd.Generator is api.Generator and cdd.SA is api.SA\n"
        "assert cdd.__all__ == [*api.__all__, '__version__'], cdd.__all__\n"
        "names = {}\n"
        "exec('from cdd_cli import *', names)\n"
        "assert set(api.__all__) <= set(names)\n"
        "try:\n"
        "    cdd.no_such_name\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=cdd_env()
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_more_threads_than_cores_are_capped_with_one_warning(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    args = ["molecules", "--threads", "100000", "-n", "1", "--steps", "2", "-q", "-o", str(out)]
    done = subprocess.run(
        [*CDD, *args], capture_output=True, text=True, cwd=ROOT, env=cdd_env(), timeout=300
    )
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if line.startswith("cdd: warning:")]
    assert len(warned) == 1 and "--threads 100000 is more than the" in warned[0], done.stderr
    assert len(whole_lines(out)) == 1


@pytest.fixture
def audit_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The audit's plugins (tests/bad_inputs.py) installed for this test only."""
    from cdd_cli import plugins
    from tests.bad_inputs import write_audit_plugins

    monkeypatch.syspath_prepend(str(write_audit_plugins(tmp_path / "plugins")))
    plugins._entry_points.cache_clear()
    plugins._load.cache_clear()
    yield
    plugins._entry_points.cache_clear()
    plugins._load.cache_clear()


def invoke(*args: str):
    from typer.testing import CliRunner

    from cdd_cli.cli.app import app

    return CliRunner().invoke(app, list(args))


@pytest.mark.slow
def test_a_plugins_default_tau_may_be_given_on_the_command_line(audit_plugins):
    """A tau with a default is optional, not forbidden: --tau for every -c that takes one,
    in order, or only for those that need one."""
    text = ["generate", "--prompt", "The", "-n", "1", "--length", "4", "--steps", "2", "-q"]

    def taus(*flags: str) -> dict[str, float]:
        result = invoke(*text, *flags)
        assert result.exit_code in (0, 3), result.stderr
        (record,) = [json.loads(line) for line in result.stdout.splitlines()]
        return {name: report["max"] for name, report in record["constraints"].items()}

    assert taus("-c", "no_digits", "--tau", "2") == {"no_digits": 2.0}
    assert taus("-c", "no_digits") == {"no_digits": 0.0}
    assert taus("-c", "no_digits", "-c", "toxicity", "--tau", "0.5") == {
        "no_digits": 0.0,
        "toxicity": 0.5,
    }
    assert taus("-c", "no_digits", "-c", "toxicity", "--tau", "1", "--tau", "0.5") == {
        "no_digits": 1.0,
        "toxicity": 0.5,
    }
    refused = invoke(*text, "-c", "no_digits", "-c", "toxicity", "--tau", "1", "--tau", "2",
                     "--tau", "3")  # fmt: skip
    assert refused.exit_code == 2
    assert refused.stderr.splitlines() == [
        "cdd: error: give one --tau per --constraint that needs a threshold (1: toxicity), or "
        "one per --constraint that takes one, defaults included (2: no_digits, toxicity); got "
        "3 tau value(s)"
    ]


def test_a_plugins_check_names_the_constraint_once(audit_plugins, tmp_path: Path):
    import cdd_cli as cdd
    from cdd_cli.errors import InputError

    with pytest.raises(InputError) as caught:
        cdd.constraint("sized", tau=1, size=-1)
    assert str(caught.value) == "constraint 'sized': size must be >= 0"
    with pytest.raises(InputError) as caught:
        cdd.constraint("sa")
    assert str(caught.value) == "constraint 'sa': needs 'tau'"
    spec = tmp_path / "s.yaml"
    spec.write_text("constraints:\n  - type: sized\n    tau: 1\n    size: -1\n")
    result = invoke("validate", str(spec))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"cdd: error: {spec}:2: constraint 'sized': size must be >= 0"
    ]


def test_a_slow_judge_is_told_even_when_asked_once(audit_plugins):
    import warnings

    import cdd_cli as cdd
    from cdd_cli.plugins import PluginWarning

    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        records = list(cdd.molecules(n=1, constraints=cdd.constraint("slow_once", tau=1000)))
    assert len(records) == 1
    slow = [str(w.message) for w in told if issubclass(w.category, PluginWarning)]
    assert len(slow) == 1 and "plugin 'slow_once'" in slow[0], slow


def test_train_adapt_quiet_says_only_its_error(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("A line of text to read.\n\n" * 2000)
    base = tmp_path / "base.gguf"
    base.write_text("not a GGUF file")
    args = ["train", "adapt", "-q", "--out", str(tmp_path / "o"), "--data", str(data)]
    result = invoke(*args, "--base", str(base), "--max-steps", "1")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("cdd: error: --base ") and "not a GGUF file" in line


def test_records_split_at_newlines_only(tmp_path: Path):
    """U+2028 and U+0085 are line breaks to str.splitlines, not to JSONL: a record whose
    text holds one is one record to resume, merge and eval."""
    from cdd_cli.output.jsonl import read_jsonl
    from cdd_cli.output.resume import existing_records

    record = {"id": "0-0", "seed": 0, "text": "C\u2028C\u0085C", "valid": True, "satisfied": True}
    path = tmp_path / "out.jsonl"
    path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    found = existing_records(str(path))
    assert found.keys == {(0, "0-0")} and found.torn_bytes == 0
    assert found.satisfied == {0: ["C\u2028C\u0085C"]}
    assert [item for _, item in read_jsonl(str(path), "record")] == [record]
    done = invoke("eval", str(path))
    assert done.exit_code == 0, done.stderr


def test_pattern_limits_pass_every_benchmarked_pattern_and_schema():
    """The limits refuse hostile patterns (the bad-input cases above), not the patterns and
    schemas cdd is benchmarked on (bench/structured_table.py)."""
    import importlib.util

    from cdd_cli.constraints.json_schema import schema_pattern
    from cdd_cli.constraints.pattern_limits import pattern_problem

    where = ROOT / "bench" / "structured_table.py"
    spec = importlib.util.spec_from_file_location("structured_table", where)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name, pattern in bench.REGEXES.items():
        assert pattern_problem(pattern) is None, name
    for name, schema in bench.SCHEMAS.items():
        assert schema_pattern(json.dumps(schema, separators=(",", ":"))), name
    for legal in (r"(?:[a-z]+ )*[a-z]+", r"(\d{3})+", r"[a-z ]{0,200}", r"a{1000}", r".*a.*b"):
        assert pattern_problem(legal) is None, legal
