"""Every command README.md shows runs as written (with small sizes), from a fresh clone.

The bash blocks are read in order: each heredoc (`cat > FILE <<'EOF'`) becomes that file in
a scratch copy of the clone's example files, and each `cdd ...` command runs there through
the CLI, with `-n` at most 2, `--length` at most 16 and 4 denoising steps (the README's sizes
are for real runs; these keep the suite short). A command passes when it exits 0 (all
satisfied) or 3 (records written, some violate). The few commands that cannot run here are
listed below with the reason; any other command that is not `cdd` is a failure to read.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdd_cli.cli import app

REPO = Path(__file__).resolve().parent.parent
runner = CliRunner()

# Commands (by what they contain) that this test cannot run, and why.
NOT_HERE = {
    "./mdlm-owt": "an external checkpoint (kuleshov-group/mdlm-owt), downloaded by the user",
    "--model DIR": "a placeholder for the user's own model directory",
    "hf://": "a hub download",
    "torchrun": "the launcher: tests/test_runs.py runs 2 processes; the rest need GPUs/nodes",
    "bash .ci/": "the install and CI scripts themselves",
    ".venv/bin/": "the test command itself",
    "source ": "shell set-up",
    "docker ": "a Docker build",
}
OTHER_TOOLS = {"jq", "wait"}  # after a pipe or between background jobs: not cdd's
SMALL = {"-n": 2, "--num-samples": 2, "--length": 16}
STEPS = "4"


def blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def heredocs(block: str) -> tuple[dict[str, str], str]:
    """The files a block writes with `cat > FILE <<'EOF'`, and the block without them."""
    files = {}
    pattern = re.compile(r"^cat > (\S+) <<'EOF'\n(.*?)^EOF\n", re.S | re.M)
    for name, body in pattern.findall(block):
        files[name] = body
    return files, pattern.sub("", block)


def segments(block: str) -> list[list[str]]:
    """Each simple command of a block: continuation lines joined, comments dropped, split at
    `;`, `&&`, `&` and `|`, leading VAR=value assignments dropped."""
    joined = block.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        current: list[str] = []
        for token in [*lexer, ";"]:
            if token in (";", "&&", "&", "|", "||"):
                while current and re.fullmatch(r"[A-Z_]+=\S*", current[0]):
                    current.pop(0)
                if current:
                    out.append(current)
                current = []
            else:
                current.append(token)
    return out


def small(args: list[str]) -> list[str]:
    """`args` with the sizes capped and 4 steps where the command samples."""
    out = list(args)
    for i, arg in enumerate(out[:-1]):
        if arg in SMALL and out[i + 1].isdigit():
            out[i + 1] = str(min(int(out[i + 1]), SMALL[arg]))
    if out and out[0] in ("molecules", "generate") and "--steps" not in out:
        out += ["--steps", STEPS]
    return out


def readme_commands() -> tuple[dict[str, str], list[tuple[str, list[str]]]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    files: dict[str, str] = {}
    commands = []
    for block in blocks(text):
        written, rest = heredocs(block)
        files.update(written)
        for line in rest.replace("\\\n", " ").splitlines():  # continuation lines joined
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line)
    parsed = []
    for line in commands:
        if any(marker in line for marker in NOT_HERE):
            continue
        for segment in segments(line):
            parsed.append((line, segment))
    return files, parsed


def test_the_readme_shows_commands_this_test_reads():
    files, commands = readme_commands()
    assert {"words.yaml", "props.yaml", "person.json", "person.yaml", "date.yaml"} <= set(files)
    firsts = {segment[0] for _, segment in commands}
    assert firsts <= {"cdd"} | OTHER_TOOLS, firsts - ({"cdd"} | OTHER_TOOLS)
    assert sum(segment[0] == "cdd" for _, segment in commands) >= 30


def test_every_readme_command_runs_as_written(tmp_path, monkeypatch):
    files, commands = readme_commands()
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    shutil.copy(REPO / "constraints.example.yaml", tmp_path)
    for name, body in files.items():  # written before any command, as "see below" asks
        (tmp_path / name).write_text(body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    ran = 0
    for line, segment in commands:
        if segment[0] != "cdd":
            continue
        args = small(segment[1:])
        result = runner.invoke(app, args)
        assert result.exit_code in (0, 3), f"{line}\n-> cdd {shlex.join(args)}\n{result.output}"
        ran += 1
    assert ran >= 30


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("OMP_NUM_THREADS=1 cdd molecules -n 9 &", [["cdd", "molecules", "-n", "9"]]),
        ("cdd a ; cdd b  # note", [["cdd", "a"], ["cdd", "b"]]),
        ("cdd m -q | jq -r 'x | y'", [["cdd", "m", "-q"], ["jq", "-r", "x | y"]]),
        ("wait; cdd merge a b", [["wait"], ["cdd", "merge", "a", "b"]]),
    ],
)
def test_commands_are_split_as_a_shell_splits_them(line, expected):
    assert segments(line) == expected
