"""The code's layers: imports point down, no import circles, short
functions, no run that imports what only reports need, and an installed
package without the workshop.

Layers, lowest first: the runtime package ``slowfast`` (utils < config <
models < solver < datasets < multigrid < checkpoint < engine < launch), then
the workshop beside it, ``workshop`` (dataprep < bench), which imports
``slowfast`` and which a training run never imports; tools and projects sit on
top. A module may import its own package and the layers below it. Every import
counts, lazy and type-checking ones included.
"""

import ast
import os
import subprocess
import sys

import setuptools

from tests.conftest import REPO_ROOT

RUNTIME = [
    "utils", "config", "models", "solver", "datasets",
    "multigrid", "checkpoint", "engine", "launch",
]  # fmt: skip
WORKSHOP = ["dataprep", "bench"]
LAYERS = [f"slowfast.{p}" for p in RUNTIME] + [f"workshop.{p}" for p in WORKSHOP]
MAX_FILE_LINES = 600
# A function's body (its docstring included, its signature not) stays within
# MAX_FUNCTION_LINES; functions of 60-80 lines need not shrink. At most three
# exceptions, each with its reason.
MAX_FUNCTION_LINES = 80
LONG_FUNCTIONS = {
    # Strict loading of every checkpoint kind (resume, fine-tuning, inflation,
    # Caffe2) into one model, optimizer and scaler, with one-line errors.
    "slowfast/checkpoint/load.py:load_checkpoint",
}
SOURCE_FOLDERS = ["slowfast", "workshop", "tools", "projects", "tests"]
PACKAGES = ("slowfast", "workshop")


def _modules() -> dict:
    """Module name -> file path of every module of ``slowfast/`` and
    ``workshop/``."""
    out = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(REPO_ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    rel = os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, ".")
                    out[rel.removesuffix(".__init__")] = path
    return out


def _imports(module: str, path: str, modules: dict) -> set:
    """The ``slowfast`` and ``workshop`` modules ``module`` imports (``from pkg
    import sub`` counts as importing ``pkg.sub`` when that is a module)."""
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
        found.update(n for n in names if n.split(".")[0] in PACKAGES)
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
        return -1  # a top package imports nothing
    package = ".".join(parts[:2])
    assert package in LAYERS, f"{module}: package {package} has no layer"
    return LAYERS.index(package)


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


def test_the_package_never_imports_the_workshop():
    """``slowfast`` runs without ``workshop/``, which pip does not install: no
    module of it imports the workshop, its top package included (a layer the
    test above does not rank). The workshop does import ``slowfast``: were none
    of those imports seen, the scan would be missing imports."""
    modules = _modules()
    pairs = [
        (src.split(".")[0], dst.split(".")[0], f"{src} -> {dst}")
        for src, path in sorted(modules.items())
        for dst in sorted(_imports(src, path, modules))
    ]
    into_workshop = [
        line for src, dst, line in pairs if (src, dst) == ("slowfast", "workshop")
    ]
    assert not into_workshop, "the package imports the workshop:\n" + "\n".join(
        into_workshop
    )
    assert any((src, dst) == ("workshop", "slowfast") for src, dst, _ in pairs), (
        "no import of slowfast seen in the workshop: the scan misses imports"
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


def _python_files():
    for folder in SOURCE_FOLDERS:
        for root, _, files in os.walk(os.path.join(REPO_ROOT, folder)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    yield os.path.relpath(path, REPO_ROOT).replace(os.sep, "/"), path


def test_no_source_file_over_the_file_limit():
    long_files = []
    for rel, path in _python_files():
        with open(path) as handle:
            count = sum(1 for _ in handle)
        if count > MAX_FILE_LINES:
            long_files.append(f"{rel}: {count}")
    assert not long_files, f"files over {MAX_FILE_LINES} lines: {long_files}"


def _function_lengths():
    """``path:name`` -> body lines of every function of the source folders."""
    lengths = {}
    for rel, path in _python_files():
        with open(path) as handle:
            tree = ast.parse(handle.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.end_lineno - node.body[0].lineno + 1
                key = f"{rel}:{node.name}"
                lengths[key] = max(body, lengths.get(key, 0))
    return lengths


def test_no_function_over_the_guard():
    lengths = _function_lengths()
    assert len(LONG_FUNCTIONS) <= 3, "the allow-list holds at most three functions"
    long = [
        f"{key}: {n} lines"
        for key, n in sorted(lengths.items())
        if n > MAX_FUNCTION_LINES and key not in LONG_FUNCTIONS
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
    stale = [k for k in LONG_FUNCTIONS if lengths.get(k, 0) <= MAX_FUNCTION_LINES]
    assert not stale, f"allowed long functions that are short now (drop them): {stale}"


def _imported_by_a_run(prefixes: str) -> list:
    """The imported modules starting with one of ``prefixes`` once
    ``tools/run_net.py``, the trainer and the tester are loaded."""
    code = (
        "import sys, runpy; runpy.run_path(sys.argv[1]); "
        "from slowfast.engine import tester, trainer; "
        f"print(sorted(m for m in sys.modules if m.startswith({prefixes!r})))"
    )
    tool = os.path.join(REPO_ROOT, "tools", "run_net.py")
    out = subprocess.run(
        [sys.executable, "-c", code, tool],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,  # ``-c`` puts it on the path: the workshop is importable
    )
    return ast.literal_eval(out.stdout.strip())


def test_a_run_imports_no_library_that_only_reports_need():
    """scikit-learn (mAP) and matplotlib (the study's plots) take seconds to
    import; every training and test process would pay them at start-up."""
    assert _imported_by_a_run(("sklearn", "scipy", "matplotlib")) == []


def test_a_run_imports_no_workshop_module():
    """Benchmarks, checks and data preparation stay out of training and test
    processes (lazy imports too: the layers below them never import them)."""
    assert _imported_by_a_run(("workshop",)) == []
    assert "slowfast.engine" in str(_imported_by_a_run(("slowfast.engine",)))


def _installed_packages() -> list:
    """The packages ``pip install .`` installs: setup.py's ``find_packages``
    call, its arguments read from setup.py (importing it would run ``setup``)."""
    with open(os.path.join(REPO_ROOT, "setup.py")) as handle:
        tree = ast.parse(handle.read())
    constants = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    (call,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", "") == "find_packages"
    ]
    kwargs = {}
    for keyword in call.keywords:  # a name stands for its assignment above
        value = constants.get(getattr(keyword.value, "id", None), keyword.value)
        kwargs[keyword.arg] = ast.literal_eval(value)
    assert not call.args and "where" not in kwargs, "setup.py changed: read it anew"
    return setuptools.find_packages(REPO_ROOT, **kwargs)


def test_pip_installs_the_runtime_package_only():
    """The installed packages are ``slowfast`` and its runtime layers: no
    workshop, tests, tools or projects."""
    packages = _installed_packages()
    others = [p for p in packages if p.split(".")[0] != "slowfast"]
    assert not others, f"pip install . would install {others}"
    assert {"slowfast"} | {f"slowfast.{p}" for p in RUNTIME} <= set(packages)
    workshop = setuptools.find_packages(REPO_ROOT, include=["workshop", "workshop.*"])
    assert {f"workshop.{p}" for p in WORKSHOP} <= set(workshop)  # found, left out
