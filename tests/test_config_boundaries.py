"""The config stops at the builders: per-clip dataset code and model bodies
read what ``__init__`` resolved from it, never the config itself."""

import ast
import os

from tests.conftest import REPO_ROOT

# Dataset methods that run once per dataset, where reading the config belongs.
DATASET_SETUP = {"__init__", "_load_annotations"}


def _files(package: str):
    root = os.path.join(REPO_ROOT, "slowfast", package)
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as handle:
                    yield os.path.relpath(path, REPO_ROOT), ast.parse(handle.read())


def _reads_cfg(node: ast.AST) -> bool:
    """Whether ``node`` reads a name ``cfg`` or an attribute ``.cfg``."""
    return any(
        (isinstance(n, ast.Name) and n.id == "cfg")
        or (isinstance(n, ast.Attribute) and n.attr == "cfg")
        for n in ast.walk(node)
    )


def _is_static(method: ast.FunctionDef) -> bool:
    names = {d.id for d in method.decorator_list if isinstance(d, ast.Name)}
    return bool(names & {"classmethod", "staticmethod"})


def _methods(tree: ast.Module):
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            for item in cls.body:
                if isinstance(item, ast.FunctionDef):
                    yield cls.name, item


def test_dataset_methods_per_clip_do_not_read_the_config():
    offenders = [
        f"{path}: {cls}.{method.name}"
        for path, tree in _files("datasets")
        for cls, method in _methods(tree)
        if method.name not in DATASET_SETUP
        and not _is_static(method)
        and _reads_cfg(method)
    ]
    assert not offenders, "per-clip code reads the config: " + ", ".join(offenders)


def test_model_forwards_do_not_read_the_config():
    offenders = [
        f"{path}: {cls}.forward"
        for path, tree in _files("models")
        for cls, method in _methods(tree)
        if method.name == "forward" and _reads_cfg(method)
    ]
    assert not offenders, "forward reads the config: " + ", ".join(offenders)


def test_the_guard_sees_a_config_read():
    tree = ast.parse("class D:\n    def _load_clip(self):\n        return self.cfg.X\n")
    ((_, method),) = _methods(tree)
    assert _reads_cfg(method) and not _is_static(method)
