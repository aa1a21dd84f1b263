"""Helpers for tests of the command-line tools in ``tools/``."""

import importlib.util
import os
import sys
from types import ModuleType

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool_path(filename: str) -> str:
    """Path of ``tools/<filename>`` in this checkout."""
    return os.path.join(REPO_ROOT, "tools", filename)


def load_tool(filename: str) -> ModuleType:
    """Imports ``tools/<filename>`` as a module (the tools are scripts, not a package).

    Args:
        filename: e.g. "run_net.py" or "dev/check_types.py".

    Returns:
        ModuleType: the executed module.
    """
    return load_tool_path(os.path.join("tools", filename))


def load_tool_path(path: str) -> ModuleType:
    """Imports the script at ``path`` (relative to the repository) as a module.

    Args:
        path: e.g. "projects/multigrid/tables.py".

    Returns:
        ModuleType: the executed module.
    """
    rel = os.path.splitext(path)[0]
    name = "tool_" + rel.removeprefix("tools/").replace("/", "_")
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO_ROOT, path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
