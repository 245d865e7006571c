"""`cdd eval --moses` on a first run: the test sets' statistics computed in parts, each cached
as it finishes (a stopped run resumes), the time left told from the measured pace, and a stop
that says one line and leaves no worker and no semaphore behind."""

from __future__ import annotations

import gzip
import importlib.util
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from cdd_cli.evaluate import chemnet, parts
from cdd_cli.evaluate.moses import features, split_features
from cdd_cli.evaluate.parts import PartsProgress, computed_in_parts

ROOT = Path(__file__).resolve().parents[2]
SMILES = [
    "CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN(CC)CC", "c1ccc2ccccc2c1", "C(",
    "O=C(O)c1ccccc1", "C1CCc2ccccc2C1", "Cc1noc(C)c1CN(C)C(=O)Nc1cc(F)cc(F)c1",
]  # fmt: skip


def lengths(smiles: list[str]) -> dict[str, np.ndarray]:
    """A part's work in these tests: something to cache per molecule."""
    return {"lengths": np.array([len(s) for s in smiles])}


def test_a_stopped_run_resumes_where_it_stopped(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(parts, "PART", 2)
    computed: list[list[str]] = []

    def stopped_at_the_third(smiles: list[str]) -> dict[str, np.ndarray]:
        if len(computed) == 2:
            raise KeyboardInterrupt
        computed.append(smiles)
        return lengths(smiles)

    folder = tmp_path / "parts"
    with pytest.raises(KeyboardInterrupt):
        computed_in_parts(stopped_at_the_third, SMILES, folder, "set", lambda _: None)
    assert len(list(folder.glob("part-*.npz"))) == 2 and not list(folder.glob("*.*.npz"))
    said: list[str] = []
    computed.clear()
    again = computed_in_parts(lambda s: computed.append(s) or lengths(s), SMILES, folder,
                              "set", said.append)  # fmt: skip
    assert computed == [SMILES[4:6], SMILES[6:8], SMILES[8:]]  # only the parts not kept
    assert [p["lengths"].tolist() for p in again] == [
        [len(s) for s in SMILES[k : k + 2]] for k in range(0, len(SMILES), 2)
    ]
    assert said[0].startswith("set: 2 of 5 parts already computed; 9 molecules in 5 parts")


def test_split_statistics_in_parts_are_those_of_the_whole(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(parts, "PART", 2)
    whole = features(SMILES)
    for properties in (True, False):
        said: list[str] = []
        found = split_features(SMILES, "ab" * 32, f"set{properties}", properties, said.append)
        assert said[0].startswith(f"MOSES set{properties} statistics: 9 molecules in 5 parts")
        computing = len(said)
        cached = split_features(SMILES, "ab" * 32, f"set{properties}", properties, said.append)
        assert len(said) == computing  # read back, nothing computed
        for got in (found, cached):
            assert (got.fingerprints == whole.fingerprints).all()
            assert got.fragments == whole.fragments and got.scaffolds == whole.scaffolds
            if properties:
                for name, values in whole.properties.items():
                    assert got.properties[name].tolist() == values.tolist(), name
            else:
                assert got.properties == {}
    empty = split_features([], "ef" * 32, "empty", True, lambda _: None)
    assert empty.fingerprints.shape == (0, 1024) and len(empty.properties["QED"]) == 0
    # Once the whole is cached, its parts are gone.
    left = sorted(p.name for p in (tmp_path / "cdd").iterdir())
    assert len(left) == 3 and all(n.endswith(".npz") for n in left), left


def test_plain_lines_tell_the_time_left_from_the_measured_pace():
    said: list[str] = []
    now = [100.0]
    out = Console(file=io.StringIO(), force_terminal=False)
    report = PartsProgress("MOSES test statistics", 1000, 0, 2, said.append, out,
                           lambda: now[0])  # fmt: skip
    with report:
        now[0] += 5
        report.part_done(100, 2.0)  # 20 ms a molecule in a worker, two workers
        now[0] += 5
        report.part_done(100, 2.0)  # within PLAIN_EVERY_S of the last line: not said
        now[0] += parts.PLAIN_EVERY_S
        report.part_done(100, 4.0)  # slower: 8 s over 300 molecules
    assert said == [
        "MOSES test statistics: 100 of 1,000 molecules (10%), 0:00:05 elapsed, about 0:00:09 "
        "left",
        "MOSES test statistics: 300 of 1,000 molecules (30%), 0:00:40 elapsed, about 0:00:09 "
        "left",
    ]


def test_on_a_terminal_a_bar_shows_the_progress_not_lines():
    said: list[str] = []
    screen = io.StringIO()
    out = Console(file=screen, force_terminal=True, width=100)
    with PartsProgress("MOSES test statistics", 10, 4, 1, said.append, out) as report:
        report.part_done(2, 1.0)
    assert said == [] and "MOSES test statistics" in screen.getvalue()


@pytest.mark.skipif(importlib.util.find_spec("fcd") is None, reason="FCD: the fcd extra")
@pytest.mark.slow
def test_chemnet_statistics_in_parts_are_those_of_the_whole(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    valid = [s for s in SMILES if s != "C("]
    canonical = [chemnet.canonical_or_same(s) for s in valid]
    mu, sigma = chemnet.statistics(canonical)
    # One part (the default PART): the very numbers of the whole.
    one = chemnet.split_statistics(valid, "cd" * 32, "one", lambda _: None)
    assert (one[0] == mu).all() and (one[1] == sigma).all()
    # Parts of 3 are other batches than the whole's one: equal to float32's precision.
    monkeypatch.setattr(parts, "PART", 3)
    three = chemnet.split_statistics(valid, "cd" * 32, "three", lambda _: None)
    assert np.allclose(three[0], mu, rtol=1e-5, atol=1e-6)
    assert np.allclose(three[1], sigma, rtol=1e-4, atol=1e-6)


def moses_folder(root: Path, size: int) -> Path:
    data = root / "moses" / "dataset" / "data"
    data.mkdir(parents=True)
    smiles = [SMILES[k % len(SMILES)] for k in range(size)]
    for name in ("test", "test_scaffolds"):
        text = "SMILES\n" + "\n".join(smiles) + "\n"
        (data / f"{name}.csv.gz").write_bytes(gzip.compress(text.encode()))
    metrics = root / "moses" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "mcf.csv").write_text("names,smarts\nMCF5,[#6]1-[#8]-[#6]-1\n")
    (metrics / "wehi_pains.csv").write_text('"O=C1C=CC(=O)C=C1"   ,"<regId=quinone>"\n')
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
)
def test_a_stop_while_the_workers_compute_says_one_line(tmp_path: Path, signum, code, word):
    # Three parts over two worker processes; the stop comes once they are at work, as
    # `timeout` sends it: to the command, then to its whole process group (Ctrl-C: the group).
    data = moses_folder(tmp_path / "data", 3 * parts.PART)
    records = tmp_path / "m.jsonl"
    records.write_text('{"id": "0-0", "text": "CCO", "valid": true, "constraints": {}}\n')
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "cdd_cli", "eval", str(records), "--moses",
               "--moses-data", str(data)]  # fmt: skip
    # Ctrl-C as a terminal delivers it, even where this suite runs with SIGINT ignored (a
    # shell's background job: cdd keeps an ignored SIGINT ignored, as `nohup` asks).
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    with subprocess.Popen(
        command, env=env, start_new_session=True, preexec_fn=default_sigint, **pipes
    ) as run:
        assert run.stderr is not None
        lines = [run.stderr.readline()]
        while lines[-1] and not lines[-1].startswith("MOSES test statistics:"):
            lines.append(run.stderr.readline())  # (novelty and FCD skipped, said before)
        assert lines[-1].startswith("MOSES test statistics: 12,288 molecules in 3 parts over")
        started = len(lines)
        children = Path(f"/proc/{run.pid}/task/{run.pid}/children")
        deadline = time.monotonic() + 60
        while len(children.read_text().split()) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)  # the resource tracker and the two workers
        if signum == signal.SIGTERM:
            run.send_signal(signum)
        os.killpg(run.pid, signum)
        out, err = run.communicate(timeout=60)
    lines += err.splitlines()
    assert run.returncode == code and out == ""
    assert lines[started:] == [f"cdd: error: {word}"], "\n".join(lines)
