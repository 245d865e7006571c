"""Every repository path a shipped file names exists.

A reader follows `cdd_cli/constraints/...`, `bench/...`, `tests/...`, `docs/...` or
`examples/...` in the README, the docs pages, the example spec, the model cards, the build
files and the example plugin, and a relative link in a markdown page; a module that moved
leaves such a name stale. This test reads every one of them and checks that the path (or, for
a glob such as `cdd_cli/assets/*/MODEL_CARD.md`, at least one match) is in the repository.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Path-like strings: a top-level folder of the repository, a slash, and the rest of the path
# (letters, digits, `_ . - * /`); `.../` style ellipses end it.
PREFIXES = ("cdd_cli", "bench", "tests", "docs", "examples", ".ci")
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:" + "|".join(re.escape(p) for p in PREFIXES) + r")/[\w*./-]*)"
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
# bench/README.md names its raw outputs relative to bench/: `results/NAME`.
BENCH_RESULT = re.compile(r"(?<![\w/.-])(results/[\w.-]+)")
TEXT_SUFFIXES = {".md", ".py", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".jsonl", ""}


def shipped_files() -> list[Path]:
    files = [REPO / "README.md", REPO / "constraints.example.yaml", REPO / "pyproject.toml"]
    files += [REPO / "Dockerfile", REPO / "bench" / "README.md"]
    files += sorted((REPO / "docs").glob("*.md"))
    files += sorted((REPO / "cdd_cli" / "assets").glob("*/*.md"))
    files += sorted(
        path
        for path in (REPO / "examples").rglob("*")
        if path.is_file()
        and path.suffix in TEXT_SUFFIXES
        and not {"__pycache__", "build"} & set(path.parts)
        and ".egg-info" not in str(path)
    )
    return [path for path in files if path.is_file()]


def named_paths(path: Path) -> list[tuple[str, Path]]:
    """(as written, where it points) for every repository path `path` names."""
    text = path.read_text(encoding="utf-8")
    out = []
    for match in REPO_PATH.finditer(text):
        name = match.group(1).rstrip(".").split("...")[0]
        if name.rstrip("/") in PREFIXES:
            continue
        out.append((name, REPO / name))
    if path.suffix == ".md":
        prose = re.sub(r"```.*?```|`[^`\n]*`", "", text, flags=re.S)  # code is not a link
        for match in LINK.finditer(prose):
            target = match.group(1).split("#")[0]
            if not target or re.match(r"[a-z]+:", target):
                continue  # an anchor on the same page, or a web address
            out.append((match.group(1), (path.parent / target).resolve()))
    if path == REPO / "bench" / "README.md":
        for match in BENCH_RESULT.finditer(text):
            name = match.group(1).rstrip(".")
            out.append((name, path.parent / name))
    return out


def exists(target: Path) -> bool:
    """The path, a glob's match, or an output stem (`--out DIR/run` writes `run.md`, ...)."""
    if "*" in str(target):
        return any(REPO.glob(str(target.relative_to(REPO))))
    return target.exists() or any(target.parent.glob(glob.escape(target.name) + ".*"))


@pytest.mark.parametrize(
    "path", shipped_files(), ids=lambda path: str(path.relative_to(REPO))
)
def test_every_path_a_shipped_file_names_exists(path: Path):
    missing = sorted({name for name, target in named_paths(path) if not exists(target)})
    assert not missing, f"{path.relative_to(REPO)} names paths that do not exist: {missing}"


def test_the_paths_are_read_as_written(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "See `cdd_cli/run/` and cdd_cli/assets/*/MODEL_CARD.md, [x](../docs/a.md#b), "
        "[web](https://x.org/a), [here](#top), bench/results/... and tests/test_x.py; "
        "`[N+](=O)` is code.\n"
    )
    names = [name for name, _ in named_paths(page)]
    assert names == [
        "cdd_cli/run/", "cdd_cli/assets/*/MODEL_CARD.md", "bench/results/", "tests/test_x.py",
        "../docs/a.md#b",
    ]
