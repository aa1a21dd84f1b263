"""The study's results kept in the repository, one JSON file per run.

A finished run's ``study_result.json`` (arm, budget, seed, machine, commit,
date, epochs, iterations, wall-clocks, accuracies, per-video correctness, its
``run_net.py`` arguments) is copied to ``results/multigrid_study/<study>/<run
name>.json`` as soon as the run is tested, with the checkout's path written
as ``.`` so that the file reads the same on every machine. Tables are made
from these files. A file there that another study wrote (other arguments for
the same run name) stops the study before any run: results never mix.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, List, Sequence

from multigrid_study.study_runs import Run

RESULTS_ROOT = os.path.join("results", "multigrid_study")


def results_folder(repo_root: str, option: str, study_out: str) -> str:
    """The study's folder of results: ``--results``, else one named after the
    study folder under the repository's ``results/multigrid_study``."""
    if option:
        return option
    name = os.path.basename(os.path.normpath(study_out))
    return os.path.join(repo_root, RESULTS_ROOT, name)


def portable(value: Any, repo_root: str) -> Any:
    """``value`` with the checkout's absolute path written as ``.``."""
    root = os.path.normpath(repo_root)
    if isinstance(value, str):
        return "." + value[len(root) :] if value.startswith(root) else value
    if isinstance(value, list):
        return [portable(v, repo_root) for v in value]
    if isinstance(value, dict):
        return {k: portable(v, repo_root) for k, v in value.items()}
    return value


def _path(folder: str, run: Run) -> str:
    return os.path.join(folder, f"{run.name}.json")


def check_folder(folder: str, runs: Sequence, repo_root: str) -> None:
    """Raises ValueError when ``folder`` holds a result of one of the study's
    runs made with other arguments (another study of the same name)."""
    for p in runs:
        path = _path(folder, p.run)
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            kept = json.load(f).get("args")
        if kept != portable(p.args, repo_root):
            raise ValueError(
                f"{path} holds {p.run.name} of another study (other arguments); "
                "pass another --results or move the file away"
            )


def keep(folder: str, run: Run, result: dict, repo_root: str) -> str:
    """Writes a finished run's result into ``folder``; returns its path."""
    os.makedirs(folder, exist_ok=True)
    path = _path(folder, run)
    with open(path + ".tmp", "w") as f:
        json.dump(portable(result, repo_root), f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return path


def load_kept(folder: str) -> List[dict]:
    """The results kept in ``folder``, one per ``*.json`` file, by file name
    (what ``keep`` wrote)."""
    paths = sorted(glob.glob(os.path.join(folder, "*.json")))
    if not paths:
        raise ValueError(f"{folder}: no kept results (*.json) there")
    results = []
    for path in paths:
        with open(path) as f:
            results.append(json.load(f))
    return results
