"""The architecture (DESIGN.md §4): imports run one way through the layers, with no cycle, and
no module grows past the size a reader takes in at once."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cdd_cli"


# Layers, bottom to top (DESIGN.md §4); a module imports only from its own layer or below.
# `cdd eval`'s report reads records with the constraints' judges: it sits with the API,
# above the metric primitives of the rest of evaluate/. Spec validation is generic over the
# constraints' table and the methods' names, so spec sits above both.
LAYERS = [
    {
        "errors", "version", "output", "settings", "prompts", "plugins", "suggest", "templates",
    },
    {"models", "diffusion"},
    {"evaluate"},
    {"constraints"},
    {"projection"},
    {"methods", "reporting"},  # reporting: the progress hooks hear of steps and ALM rounds
    {"spec"},
    {"run"},
    {"api", "constraint_values", "evaluate.report", "evaluate.page", "torchrun"},
    {"cli", "train", "__main__", "__init__"},
]  # fmt: skip


def layer_of(module: str) -> int:
    """The layer of `cdd_cli.X.Y...`: that of its longest named prefix (X.Y, else X)."""
    parts = module.split(".")[1:]
    for size in range(len(parts), 0, -1):
        name = ".".join(parts[:size])
        for k, names in enumerate(LAYERS):
            if name in names:
                return k
    raise AssertionError(f"{module}: in no layer")


def package_modules() -> dict[str, ast.Module]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"))
    return modules


def imported(module: str, node: ast.AST, known: set[str]) -> list[str]:
    """The cdd modules an import statement of `module` loads: relative imports resolved,
    `from PACKAGE import X` naming the package's `__init__` (for `cdd_cli`, the whole API)
    and the submodule X where there is one."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("cdd_cli")]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if not module.endswith("__init__"):
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])]).removesuffix(".__init__")
    if base != "cdd_cli" and not base.startswith("cdd_cli."):
        return []
    names = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        # `from PACKAGE import X` runs the package's __init__ even where X is a submodule (for
        # `cdd_cli`, the whole API): it counts as importing the package, and X besides.
        found = [base]
        found += [sub] if sub in known or f"{sub}.__init__" in known else [base]
        names += found
    return list(dict.fromkeys(names))


def import_graph() -> dict[str, set[str]]:
    """Each cdd module -> the cdd modules it imports, wherever the import stands."""
    modules = package_modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for module, tree in modules.items():
        found = set()
        for node in ast.walk(tree):
            for name in imported(module, node, known):
                name = "cdd_cli.__init__" if name == "cdd_cli" else name
                if name not in known and f"{name}.__init__" in known:
                    name = f"{name}.__init__"
                if name in known and name != module:
                    found.add(name)
        graph[module] = found
    return graph


def test_imports_run_downward_only():
    upward = [
        f"{module} imports {name}"
        for module, names in import_graph().items()
        for name in sorted(names)
        if layer_of(name) > layer_of(module)
    ]
    assert upward == []


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for name in sorted(graph[module]):
            if state.get(name) == 1:
                cycles.append(" -> ".join([*path[path.index(name) :], name]))
            elif name not in state:
                visit(name, [*path, name])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_import_checks_see_relative_bare_and_nested_imports():
    known = {"cdd_cli.__init__", "cdd_cli.version", "cdd_cli.run.runner", "cdd_cli.run.domains"}
    relative = ast.parse("from .domains import Domain").body[0]
    assert imported("cdd_cli.run.runner", relative, known) == ["cdd_cli.run.domains"]
    bare = ast.parse("from cdd_cli import __version__, version").body[0]
    assert imported("cdd_cli.models.x", bare, known) == ["cdd_cli", "cdd_cli.version"]
    # A submodule taken from its package runs the package's __init__ first.
    submodule = ast.parse("from cdd_cli.run import domains").body[0]
    assert imported("cdd_cli.x", submodule, known) == ["cdd_cli.run", "cdd_cli.run.domains"]
    nested = ast.parse("def f():\n    import cdd_cli.run.runner\n")
    found = [n for node in ast.walk(nested) for n in imported("cdd_cli.x", node, known)]
    assert found == ["cdd_cli.run.runner"]


def test_imports_inside_functions_are_optional_dependencies_with_a_reason():
    """A cdd module is never imported lazily (it hides the order); a third-party import
    inside a function says why on its line or the line above (an optional extra, a
    platform's module)."""
    unexplained = []
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if getattr(node, "level", 0) or any(n.startswith("cdd_cli") for n in names):
                    unexplained.append(f"{where}: a cdd module imported inside a function")
                elif not any("#" in lines[k] for k in (node.lineno - 2, node.lineno - 1)):
                    unexplained.append(f"{where}: {names[0]} imported lazily without a reason")
    assert unexplained == []


# DESIGN.md §4: "No module over 500 lines" (a reader takes one in at once; a longer one has
# seams to split along).
MAX_MODULE_LINES = 500


def test_no_module_is_over_500_lines():
    long = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
