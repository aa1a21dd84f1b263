"""The user's own modules: models, datasets and more from outside the package.

The config key IMPORTS lists modules by their dotted names; ``--import
MODULE`` (``tools/run_net.py``, ``tools/submit.py``) adds to it. A module
registers its classes and functions when imported (``@MODEL_REGISTRY.register()``
and the like), so every process imports them before any registered name is
looked up:

- the process that loads the config, before the registries check its names
  (``launch/config.load_run_config``): ``tools/run_net.py`` under every
  launcher (torchrun's and srun's processes each run it) and every tool;
- ``launch/job.run_job``, the one start sequence, for a job handed a loaded
  config (the tasks of ``tools/submit.py``'s submitit job);
- each process that ``launch/spawn.launch_job`` spawns, before its stages.

A module is named as Python imports it (``projects.extend_example.tiny_model``
for ``projects/extend_example/tiny_model.py``), from PYTHONPATH, the installed
packages or the current directory (added to the end of ``sys.path``), so that
it has one name in every process: spawned processes and loader workers find
its classes by it. A file path is refused with its module name as the hint. A
module that cannot be imported fails with one line naming it and what to do
(a config error: exit status 2).
"""

import difflib
import importlib
import logging
import os
import pkgutil
import sys
import traceback
from typing import Iterable, List, Sequence

from fvcore.common.config import CfgNode

from slowfast.config import ConfigError

logger = logging.getLogger(__name__)

EXAMPLE = "projects.extend_example.tiny_model"


class UserModuleError(ConfigError):
    """A module of IMPORTS or ``--import`` cannot be imported (one line)."""


def import_user_modules(names: Iterable[str], where: str = "IMPORTS") -> None:
    """Imports the modules in order (one already imported is not imported again).

    Args:
        names: dotted module names.
        where: how the user gave them, for messages ("IMPORTS", "--import").

    Raises:
        UserModuleError: a name is no module name, or its module cannot be
            imported (one line naming it and what to do).
    """
    names = list(names)
    if not names:
        return
    _search_current_directory()
    for name in names:
        _import(str(name), where)


def check_imports(cfg: CfgNode) -> None:
    """Imports the config's IMPORTS: the first check of ``load_run_config``.

    Raises:
        UserModuleError: as ``import_user_modules``.
    """
    import_user_modules(cfg.IMPORTS)


def with_imports(cfg: CfgNode, names: Sequence[str]) -> CfgNode:
    """The frozen config with ``names`` added to the end of its IMPORTS.

    Args:
        cfg: a frozen config.
        names: modules given on the command line (``--import``).

    Returns:
        CfgNode: ``cfg`` itself when IMPORTS holds them all, else a copy.
    """
    new = [name for name in dict.fromkeys(names) if name not in cfg.IMPORTS]
    if not new:
        return cfg
    cfg = cfg.clone()
    cfg.defrost()
    cfg.IMPORTS = list(cfg.IMPORTS) + new
    cfg.freeze()
    return cfg


def describe_imports(names: Iterable[str]) -> str:
    """The imported modules and their files, for the run's log."""
    shown = []
    for name in names:
        path = getattr(sys.modules.get(name), "__file__", None) or "?"
        rel = os.path.relpath(path, os.getcwd()) if path != "?" else path
        shown.append(f"{name} ({path if rel.startswith('..') else rel})")
    return "user modules (IMPORTS): " + ", ".join(shown)


def _search_current_directory() -> None:
    """Lets modules of the current directory be imported (after the others)."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)


def _import(name: str, where: str) -> None:
    """Imports one module, or raises UserModuleError with what to do."""
    problem = _name_problem(name)
    if problem:
        raise UserModuleError(f"{where} {name!r}: {problem}")
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if name == missing or name.startswith(missing + "."):
            raise UserModuleError(f"{where} {name!r}: {_not_found(name)}") from err
        raise UserModuleError(
            f"{where} {name!r}: importing it failed: {_failure(err)}; install "
            f"{missing.split('.')[0]!r} or fix the import"
        ) from err
    except Exception as err:  # the module's own error: named, with its line
        fix = f'fix the module (python -c "import {name}" shows the traceback)'
        if "already registered" in str(err):
            fix = (
                "a name registers once: rename the class or function, and import "
                "each module by one name only"
            )
        raise UserModuleError(
            f"{where} {name!r}: importing it failed: {_failure(err)}; {fix}"
        ) from err


def _name_problem(name: str) -> str:
    """Why ``name`` is no dotted module name ("" when it is one)."""
    if name.endswith(".py") or "/" in name or os.sep in name:
        path = os.path.abspath(name)
        rel = os.path.relpath(path, os.getcwd())
        if rel.startswith(".."):
            folder, stem = os.path.split(os.path.splitext(path)[0])
            return (
                f"a file path, not a module name; add {folder} to PYTHONPATH "
                f"and give its module name {stem}"
            )
        module = os.path.splitext(rel)[0].replace(os.sep, ".")
        return f"a file path, not a module name; give its module name {module}"
    if not all(part.isidentifier() for part in name.split(".")):
        return f"not a module name (dotted Python names, e.g. {EXAMPLE})"
    return ""


def _not_found(name: str) -> str:
    """The message for a module that is nowhere on the search path."""
    parent, _, last = name.rpartition(".")
    hint = ""
    if parent:
        try:
            package = importlib.import_module(parent)
        except Exception:
            package = None
        places = getattr(package, "__path__", None)
        if places is not None:
            known = [module.name for module in pkgutil.iter_modules(places)]
            close = difflib.get_close_matches(last, known, n=1)
            hint = f" (did you mean {parent}.{close[0]}?)" if close else ""
    return (
        f"no such module{hint} on the search path (PYTHONPATH, the installed "
        f"packages, the current directory {os.getcwd()}); give the module's "
        f"dotted name from the folder you run in ({EXAMPLE} for "
        f"{EXAMPLE.replace('.', '/')}.py) or add its folder to PYTHONPATH"
    )


def _failure(err: Exception) -> str:
    """An import's exception on one line, with the module's line that raised it."""
    if isinstance(err, SyntaxError):
        where = f" ({_short(err.filename)}, line {err.lineno})" if err.filename else ""
        return f"SyntaxError: {err.msg}{where}"
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = f"{type(err).__name__}: {'; '.join(lines)}" if lines else type(err).__name__
    # The first frame past this file and importlib: the imported module's line.
    frames: List[traceback.FrameSummary] = [
        frame
        for frame in traceback.extract_tb(err.__traceback__)
        if frame.filename != __file__ and "importlib" not in frame.filename
    ]
    if frames:
        return f"{text} ({_short(frames[0].filename)}, line {frames[0].lineno})"
    return text


def _short(path: str) -> str:
    """A path relative to the current directory when it lies under it."""
    rel = os.path.relpath(path, os.getcwd())
    return path if rel.startswith("..") else rel
