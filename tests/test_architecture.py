"""The package's layers: imports point down, no import circles, small files,
and no run that imports what only reports need.

Layers, lowest first: utils < config < solver < models < datasets <
multigrid < checkpoint < engine < launch (tools and projects sit on top). A
module may import its own package and the layers below it. Every import
counts, lazy and type-checking ones included.
"""

import ast
import os
import subprocess
import sys

import pytest

from .conftest import REPO_ROOT

LAYERS = [
    "utils", "config", "solver", "models", "datasets",
    "multigrid", "checkpoint", "engine", "launch",
]  # fmt: skip
MAX_LINES = 400


def _modules() -> dict:
    """Module name -> file path of every module of ``slowfast/``."""
    out = {}
    root = os.path.join(REPO_ROOT, "slowfast")
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


def _imports(module: str, path: str, modules: dict) -> set:
    """The ``slowfast`` modules ``module`` imports (``from pkg import sub``
    counts as importing ``pkg.sub`` when that is a module)."""
    tree = ast.parse(open(path).read())
    is_package = path.endswith("__init__.py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level]
                if is_package:
                    parts = module.split(".")[: len(module.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            subs = [f"{base}.{alias.name}" for alias in node.names]
            names = [s for s in subs if s in modules] or [base]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] == "slowfast")
    found.discard(module)
    return found


def _graph() -> dict:
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in _imports(module, path, modules):
            while name not in modules and "." in name:
                name = name.rsplit(".", 1)[0]
            if name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) < 2:
        return -1  # the top package imports nothing
    assert parts[1] in LAYERS, f"{module}: package {parts[1]} has no layer"
    return LAYERS.index(parts[1])


def test_imports_point_down_the_layers():
    upward = [
        f"{src} -> {dst}"
        for src, targets in sorted(_graph().items())
        for dst in sorted(targets)
        if _layer(dst) > _layer(src)
    ]
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(
        upward
    )


def test_no_import_circles():
    graph = _graph()
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert not circles, f"import circles: {circles}"


@pytest.mark.parametrize("folder", ["slowfast", "tools", "projects", "tests"])
def test_no_source_file_over_400_lines(folder):
    long_files = []
    for root, _, files in os.walk(os.path.join(REPO_ROOT, folder)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path) as handle:
                    count = sum(1 for _ in handle)
                if count > MAX_LINES:
                    long_files.append(f"{os.path.relpath(path, REPO_ROOT)}: {count}")
    assert not long_files, f"files over {MAX_LINES} lines: {long_files}"


def test_a_run_imports_no_library_that_only_reports_need():
    """scikit-learn (mAP) and matplotlib (the study's plots) take seconds to
    import; every training and test process would pay them at start-up."""
    code = (
        "import sys, runpy; runpy.run_path(sys.argv[1]); "
        "from slowfast.engine import tester, trainer; "
        "print(sorted({m.split('.')[0] for m in sys.modules} "
        "& {'sklearn', 'scipy', 'matplotlib'}))"
    )
    tool = os.path.join(REPO_ROOT, "tools", "run_net.py")
    out = subprocess.run(
        [sys.executable, "-c", code, tool], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
