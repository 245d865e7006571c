"""Constraint plugins: the example distribution (examples/cdd-plugin-example, installed on the
path for these tests by conftest's `example_plugin`, not by set-up) used from a spec, the API and
`cdd train surrogate`; and faulty plugins (tests/data/plugins, put on the path here) that must
cost one line naming them, never a traceback, a lost record or another command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import cdd_cli as cdd
from cdd_cli import plugins
from cdd_cli.cli.app import app
from cdd_cli.constraints.plugin import JudgedPlugin, SoftTokens, SurrogatePlugin
from cdd_cli.constraints.registry import build_constraints
from cdd_cli.models import registry
from cdd_cli.models.surrogate import SparseTokens
from cdd_cli.plugins import PluginError, PluginWarning
from cdd_cli.spec.reader import load_spec
from tests.limits import HANG_S

runner = CliRunner()
FAULTY = Path(__file__).parents[1] / "data" / "plugins"
EXAMPLE = "cdd-plugin-example"


def forget_plugins() -> None:
    plugins._entry_points.cache_clear()
    plugins._load.cache_clear()


@pytest.fixture(autouse=True)
def example_installed(example_plugin):
    forget_plugins()
    assert "max_heavy_atoms" in plugins._entry_points(), f"examples/{EXAMPLE} is not on the path"
    yield
    forget_plugins()


@pytest.fixture
def faulty(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(FAULTY))
    forget_plugins()
    yield
    forget_plugins()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_constraints_ls_names_each_plugin_with_its_package():
    result = runner.invoke(app, ["constraints", "ls"])
    assert result.exit_code == 0, result.stderr
    rows = {line.split("\t")[0]: line.split("\t") for line in result.stdout.splitlines()}
    assert rows["sa"][4] == "built-in"
    heavy = rows["max_heavy_atoms"]
    assert heavy[1] == "molecules" and "element?" in heavy[2]
    assert heavy[3] == "[0, 200]" and heavy[4].startswith(f"{EXAMPLE} ")
    assert heavy[5] == "At most tau heavy atoms (or atoms of `element`) in the molecule."
    assert rows["uppercase"][1] == "text"


@pytest.mark.slow
def test_a_judge_only_plugin_from_a_spec_and_the_api(tmp_path: Path):
    spec = write(tmp_path, "constraints:\n  - type: max_heavy_atoms\n    tau: 1\n    element: N\n")
    result = runner.invoke(app, ["molecules", "--spec", str(spec), "-n", "6", "--seed", "3", "-q"])
    assert result.exit_code == 0, result.stderr
    cli = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(cli) == 6
    for record in cli:
        verdict = record["constraints"]["max_heavy_atoms"]
        assert verdict["satisfied"] and verdict["value"] <= 1
        assert verdict["judge"].startswith(f"plugin {EXAMPLE}")
    # What the judge says is the molecule's: one nitrogen at most, counted again by RDKit.
    from rdkit import Chem

    for record in cli:
        atoms = Chem.MolFromSmiles(record["text"]).GetAtoms()
        assert (
            sum(a.GetSymbol() == "N" for a in atoms)
            == record["constraints"]["max_heavy_atoms"]["value"]
        )
    api = list(cdd.molecules(n=6, spec=spec, seed=3))
    assert [(r["text"], r["constraints"]) for r in api] == [
        (r["text"], r["constraints"]) for r in cli
    ]


@pytest.mark.slow
def test_api_records_equal_the_clis_for_a_plugin():
    def untimed(record: dict) -> dict:
        projection = {k: v for k, v in record["projection"].items() if k != "seconds"}
        return {**record, "seconds": 0, "created": "", "projection": projection}

    flags = ["-n", "4", "-c", "max_heavy_atoms", "--tau", "8", "--seed", "5", "-q"]
    result = runner.invoke(app, ["molecules", *flags])
    assert result.exit_code == 0, result.stderr
    cli = [untimed(json.loads(line)) for line in result.stdout.splitlines()]
    api = cdd.molecules(n=4, constraints=[cdd.constraint("max_heavy_atoms", tau=8)], seed=5)
    assert [untimed(r) for r in api] == cli


@pytest.mark.slow
def test_a_plugin_with_a_surrogate_goes_through_the_alm():
    records = list(
        cdd.generate(
            "The", n=4, constraints=[cdd.constraint("uppercase", tau=0.0)], length=12, seed=2
        )
    )
    assert len(records) == 4
    for record in records:
        verdict = record["constraints"]["uppercase"]
        assert verdict["satisfied"], record["text"]
        assert verdict["value"] == 0.0 and not any(c.isupper() for c in record["text"])
        assert verdict["surrogate"] is not None  # the surrogate was read for the record
    loaded = registry.load("default-text", "text")
    entry = cdd.constraint("uppercase", tau=0.1)
    (built,) = build_constraints([entry], loaded, "cpu")
    assert isinstance(built, SurrogatePlugin)
    (judged,) = build_constraints(
        [cdd.constraint("max_heavy_atoms", tau=8)], registry.load(None, "molecules"), "cpu"
    )
    assert isinstance(judged, JudgedPlugin)


def test_soft_tokens_read_alike_in_every_form():
    probs = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.2, 0.8]]])
    table = torch.tensor([1.0, 3.0, 10.0])
    dense = SoftTokens(probs, 3)
    sparse = SoftTokens(SparseTokens(torch.tensor([[[0.5, 0.5], [0.8, 0.2]]]),
                                     torch.tensor([[[0, 1], [2, 1]]])), 3)  # fmt: skip
    assert torch.allclose(dense.expect(table), torch.tensor([[2.0, 8.6]]))
    assert torch.allclose(sparse.expect(table), dense.expect(table))
    assert torch.allclose(sparse.probs(), probs)
    ids = SoftTokens(torch.tensor([[2, 0]]), 3)
    assert ids.expect(table).tolist() == [[10.0, 1.0]] and ids.shape == (1, 2, 3)
    wide = torch.stack([table, 2 * table], dim=1)  # [V, 2]
    assert torch.allclose(sparse.expect(wide), dense.expect(wide))


@pytest.mark.parametrize(
    ("entry", "line", "message"),
    [
        (
            "tau: 3\n    element: Xx",
            2,
            "constraint 'max_heavy_atoms': key 'element': 'Xx' is not an element symbol",
        ),
        ("tau: 300", 2, "key 'tau': 300 is outside [0, 200] for 'max_heavy_atoms'"),
        (
            "tau: 3\n    colour: red",
            4,
            "unknown key 'colour' for constraint 'max_heavy_atoms' "
            "(known: type, tau, margin, surrogate, element)",
        ),
        ("element: N", 2, "constraint 'max_heavy_atoms' needs 'tau'"),
        ("tau: 3\n    element: 7", 4, "key 'element': expected str, got 7"),
    ],
)
def test_validate_checks_a_plugins_options_in_one_line(
    tmp_path: Path, entry: str, line: int, message: str
):
    spec = write(tmp_path, f"constraints:\n  - type: max_heavy_atoms\n    {entry}\n")
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"cdd: error: {spec}:{line}: {message}"


def test_an_unknown_type_lists_the_plugins_too(tmp_path: Path):
    result = runner.invoke(app, ["validate", str(write(tmp_path, "constraints:\n  - type: x\n"))])
    assert result.exit_code == 2
    assert "unknown constraint type 'x'" in result.stderr
    assert "max_heavy_atoms" in result.stderr and "uppercase" in result.stderr


def test_a_broken_plugin_is_one_line_and_breaks_nothing_else(faulty, tmp_path: Path):
    listed = runner.invoke(app, ["constraints", "ls"])
    assert listed.exit_code == 0
    rows = [line for line in listed.stdout.splitlines() if line.startswith("broken\t")]
    assert rows == [
        "broken\tbroken\tcdd-test-plugins 0.1: cannot be loaded (ModuleNotFoundError: "
        "No module named 'cdd_no_such_dependency')"
    ]
    problems = {
        "not_a_plugin": "is not a cdd ConstraintPlugin (it is dict)",
        "misnamed": "names itself 'judge_raises' under the entry point 'misnamed'",
        "sa": "'sa' is a built-in constraint type; the plugin is not used",
    }
    for name, problem in problems.items():
        (row,) = [line for line in listed.stdout.splitlines() if line.startswith(f"{name}\tbroken")]
        assert row.endswith(problem)
    # sa is still the built-in one, and a run that names no broken plugin runs.
    run = runner.invoke(app, ["molecules", "-n", "2", "-c", "sa", "--tau", "4.5", "-q"])
    assert run.exit_code == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[0])["constraints"]["sa"]["judge"] == "rdkit-sa"
    spec = write(tmp_path, "constraints:\n  - type: broken\n    tau: 1\n")
    used = runner.invoke(app, ["molecules", "--spec", str(spec), "-n", "2", "-q"])
    assert used.exit_code == 2 and used.stdout == ""
    assert used.stderr.strip() == (
        "cdd: error: plugin 'broken' (cdd-test-plugins 0.1): cannot be loaded "
        "(ModuleNotFoundError: No module named 'cdd_no_such_dependency')"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("judge_raises", "its judge raised RuntimeError: the scoring service is down"),
        ("judge_nan", "as NaN (None: cannot be scored)"),
        ("judge_miscounts", "its judge gave 1 scores for 2 texts"),
        ("bad_surrogate", "its surrogate gave (3, 3), not one score a sample"),
    ],
)
def test_a_faulty_plugin_is_one_line_naming_it(faulty, name: str, problem: str):
    result = runner.invoke(app, ["molecules", "-n", "2", "-c", name, "--tau", "50", "-q"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"cdd: error: plugin '{name}' (cdd-test-plugins 0.1): ")
    assert line.endswith(problem)
    with pytest.raises(PluginError, match=f"plugin '{name}'"):
        list(cdd.molecules(n=2, constraints=cdd.constraint(name, tau=50)))


def test_records_written_before_a_plugin_fails_are_kept(faulty, tmp_path: Path):
    import cdd_test_faulty

    cdd_test_faulty.CALLS["n"] = 0
    out = tmp_path / "out.jsonl"
    flags = ["-n", "4", "--batch-size", "2", "--method", "unconstrained", "-q", "-o", str(out)]
    result = runner.invoke(app, ["molecules", *flags, "-c", "fails_later", "--tau", "50"])
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("its judge raised ValueError: gave up on the second call")
    lines = out.read_text().splitlines()
    assert len(lines) == 2 and [json.loads(line)["id"] for line in lines] == ["0-0", "0-1"]


@pytest.mark.slow
def test_a_slow_judge_is_told_once_as_one_line(faulty):
    import re

    with pytest.warns(PluginWarning, match="plugin 'slow' .* its judge takes") as told:
        records = list(cdd.molecules(n=8, constraints=cdd.constraint("slow", tau=100), seed=1))
    assert len(records) == 8
    # The judge sleeps 0.07 s a text: at least that, and more on a loaded machine.
    (said,) = [str(w.message) for w in told if issubclass(w.category, PluginWarning)]
    assert float(re.search(r"its judge takes (\d+\.\d\d) s a text", said)[1]) >= 0.07, said
    env = {**os.environ, "PYTHONPATH": str(FAULTY)}
    command = [sys.executable, "-m", "cdd_cli", "molecules", "-n", "8", "-c", "slow", "--tau"]
    done = subprocess.run(
        [*command, "100", "-q"], capture_output=True, text=True, env=env, timeout=HANG_S
    )
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if line.startswith("cdd: warning:")]
    assert len(warned) == 1 and "plugin 'slow' (cdd-test-plugins 0.1)" in warned[0]
    assert "Traceback" not in done.stderr and len(done.stdout.splitlines()) == 8


def test_a_spec_entry_loads_with_a_plugins_defaults(tmp_path: Path):
    spec = load_spec(write(tmp_path, "constraints:\n  - type: uppercase\n    tau: 0.1\n"))
    (entry,) = spec.resolved()["constraints"]
    assert entry == {"type": "uppercase", "tau": 0.1, "margin": 0.0}


@pytest.mark.slow
def test_train_surrogate_gives_a_judge_only_plugin_gradients(tmp_path: Path, uniform_model_dir):
    from tests.conftest import QM9_SAMPLE

    data = tmp_path / "molecules.smi"
    data.write_text("\n".join(QM9_SAMPLE * 4) + "\n")
    out = tmp_path / "surrogate"
    flags = ["--model", str(uniform_model_dir), "--data", str(data), "--out", str(out)]
    small = ["--steps", "6", "--batch-size", "8", "--hidden-dim", "16", "--n-layers", "1", "-q"]
    args = ["train", "surrogate", "-c", "max_heavy_atoms", "--tau", "4", *flags, *small]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    held_out = config["held_out"]
    assert config["constraint"] == "max_heavy_atoms" and config["unscorable_as"] == 12.0
    # A tenth of the molecules is held out, each with its corrupted copy.
    assert held_out["held_out_rows"] == 2 * int(0.1 * 4 * len(QM9_SAMPLE))
    assert 0 <= held_out["agreement_at_tau"] <= 1 and held_out["mae_all"] >= 0
    assert not (out / "train_state.json").exists()  # finished: the resumable state is gone
    entry = f"  - type: max_heavy_atoms\n    tau: 4\n    surrogate: {out}\n"
    spec = write(tmp_path, f"model: {uniform_model_dir}\nconstraints:\n{entry}")
    loaded = registry.load(str(uniform_model_dir), "molecules")
    (built,) = build_constraints(load_spec(spec).constraints, loaded, "cpu")
    assert isinstance(built, SurrogatePlugin)
    run = runner.invoke(app, ["molecules", "--spec", str(spec), "-n", "2", "-q"])
    assert run.exit_code in (0, 3), run.stderr
    for line in run.stdout.splitlines():
        assert json.loads(line)["constraints"]["max_heavy_atoms"]["surrogate"] is not None


@pytest.mark.slow
def test_train_surrogate_on_text_windows(tmp_path: Path, text_model_dir):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Call me Ishmael. Some years ago, never mind how long precisely.\n\n" * 200)
    out = tmp_path / "surrogate"
    flags = ["--model", str(text_model_dir), "--data", str(corpus), "--out", str(out)]
    small = ["--steps", "4", "--batch-size", "4", "--hidden-dim", "16", "--n-layers", "1", "-q"]
    args = ["train", "surrogate", "-c", "uppercase", "--tau", "0.05", "--examples", "30"]
    result = runner.invoke(app, [*args, *flags, *small])
    assert result.exit_code == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["held_out"]["held_out_rows"] == 2 * 3
    assert json.loads((out / "tokenizer.json").read_text())["type"] == "gpt2-bpe"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give one constraint (--constraint TYPE, or a --spec with one entry); got 0"),
        (["-c", "uppercase", "--tau", "0.1"], "--data: a .txt file or folder"),
        (["-c", "max_heavy_atoms", "--tau", "4", "--data", "nowhere.smi"], "no such file"),
    ],
)
def test_train_surrogate_refuses_in_one_line(tmp_path: Path, args: list[str], message: str):
    result = runner.invoke(app, ["train", "surrogate", "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert message in line


def test_a_judge_that_prints_or_gives_numpy_numbers_is_fine(faulty):
    for name in ("printing", "numpy_judge"):
        result = runner.invoke(app, ["molecules", "-n", "2", "-c", name, "--tau", "50", "-q"])
        assert result.exit_code == 0, result.stderr
        records = [json.loads(line) for line in result.stdout.splitlines()]  # JSON lines only
        assert len(records) == 2
        for record in records:
            assert record["constraints"][name]["value"] == float(len(record["text"]))
    assert "scoring" in runner.invoke(app, ["molecules", "-n", "1", "-c", "printing", "--tau",
                                            "50", "-q"]).stderr  # fmt: skip


def test_an_optional_key_given_null_is_not_given(tmp_path: Path):
    spec = load_spec(write(tmp_path, "constraints:\n  - type: max_heavy_atoms\n    tau: 8\n"
                                     "    element: null\n"))  # fmt: skip
    assert spec.constraints[0].options == {"tau": 8}


@pytest.fixture
def cdd_signal_handler(monkeypatch: pytest.MonkeyPatch):
    """The `cdd` command's Ctrl-C handler installed, as `python -m cdd_cli` installs it."""
    import signal

    from cdd_cli.errors import on_signal

    monkeypatch.setattr(signal, "getsignal", lambda signum: on_signal)


@pytest.mark.parametrize(
    ("name", "method", "problem"),
    [
        ("judge_exits", "unconstrained", "its judge raised SystemExit: 0"),
        ("judge_interrupts", "unconstrained", "its judge raised KeyboardInterrupt"),
        ("surrogate_exits", "cdd", "its surrogate raised SystemExit: 1"),
    ],
)
def test_a_plugins_exit_or_own_interrupt_is_one_line_naming_it(
    faulty, cdd_signal_handler, name: str, method: str, problem: str
):
    flags = ["-n", "1", "-c", name, "--tau", "50", "--method", method, "-q"]
    result = runner.invoke(app, ["molecules", *flags])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"cdd: error: plugin '{name}' (cdd-test-plugins 0.1): {problem}"
    ]


def test_a_plugins_exit_in_check_or_at_import_is_one_line(faulty, tmp_path: Path):
    spec = write(tmp_path, "constraints:\n  - type: check_exits\n    tau: 1\n")
    checked = runner.invoke(app, ["validate", str(spec)])
    assert checked.exit_code == 2
    assert checked.stderr.splitlines() == [
        f"cdd: error: {spec}:2: plugin 'check_exits' (cdd-test-plugins 0.1) failed checking its "
        "options (SystemExit: 3)"
    ]
    listed = runner.invoke(app, ["constraints", "ls"])
    assert listed.exit_code == 0 and "max_heavy_atoms\t" in listed.stdout
    assert "exits_at_import\tbroken\tcdd-test-plugins 0.1: cannot be loaded (SystemExit: 0)" in (
        listed.stdout.splitlines()
    )
    unknown = runner.invoke(app, ["molecules", "-n", "1", "-c", "nosuch", "--tau", "1"])
    assert unknown.exit_code == 2 and "unknown constraint type 'nosuch'" in unknown.stderr


def test_a_real_interrupt_during_a_judge_stays_the_users(monkeypatch: pytest.MonkeyPatch):
    import signal

    from cdd_cli.errors import STOPPING, Terminated, on_signal

    assert plugins.plugins_fault(SystemExit(0)) and plugins.plugins_fault(ValueError())
    # Without cdd's handler (an API user's process) a Ctrl-C cannot be told from a plugin's.
    assert not plugins.plugins_fault(KeyboardInterrupt())
    monkeypatch.setattr(signal, "getsignal", lambda signum: on_signal)
    assert plugins.plugins_fault(KeyboardInterrupt())
    assert not plugins.plugins_fault(Terminated())
    monkeypatch.setattr(STOPPING, "raised", True)  # what on_signal marks as it raises
    assert not plugins.plugins_fault(KeyboardInterrupt())


@pytest.mark.slow
def test_what_a_plugin_writes_to_file_descriptor_1_never_reaches_the_records(
    faulty, tmp_path: Path
):
    spec = write(
        tmp_path,
        "constraints:\n  - type: fd_writer\n    tau: 50\n  - type: loud\n    tau: 50\n",
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FAULTY), str(FAULTY.parents[2])])}
    command = [sys.executable, "-m", "cdd_cli", "molecules", "--spec", str(spec), "-n", "2"]
    done = subprocess.run(
        [*command, "-q"], capture_output=True, text=True, env=env, timeout=HANG_S
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]  # JSON lines only
    assert len(records) == 2
    for said in ("loud: imported", "to file descriptor 1", "not a record", "from a shell"):
        assert said in done.stderr
