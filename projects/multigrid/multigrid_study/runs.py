"""One run of the study: its processes and its result.

Training, then the test of its final checkpoint; a run stopped before resumes
or is only tested (``progress.py``), any other unfinished one starts over.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

from fvcore.common.config import CfgNode

from multigrid_study.compute import training_gflops
from multigrid_study.intervals import correctness
from multigrid_study.machine import machine_text, same_machine
from multigrid_study.progress import (
    RESUME,
    START,
    TEST,
    RunFailed,
    Stopper,
    next_phase,
    read_progress,
    run_process,
    train_seconds,
)
from multigrid_study.results import parse_stats
from multigrid_study.shapes import gflop_per_shape
from multigrid_study.study_runs import RESULT_FILE, Run, config_differences
from slowfast.checkpoint import fingerprint as fp
from slowfast.checkpoint.files import (
    get_path_to_checkpoint,
    list_checkpoints,
    move_aside,
)
from slowfast.launch.run_lock import RunLock
from slowfast.models.model_stats import clip_gflops_fn
from slowfast.multigrid import MultigridSchedule

_HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
RUN_NET = os.path.join(REPO_ROOT, "tools", "run_net.py")
# A stopped run's next training process resumes from its checkpoint.
TRAINING_OVERRIDES = ["TRAIN.ENABLE", "True", "TEST.ENABLE", "False"] + (
    ["TRAIN.AUTO_RESUME", "True"]
)


def testing_overrides(checkpoint: str) -> list:
    """Overrides of a run's test process: test ``checkpoint`` only."""
    return ["TRAIN.ENABLE", "False", "TEST.ENABLE", "True"] + (
        ["TEST.CHECKPOINT_FILE_PATH", checkpoint]
    )


@dataclass
class StudyRun:
    """A run with its arguments, config and resolved schedule.

    Attributes:
        run: arm, budget and seed.
        run_dir: the run's OUTPUT_DIR.
        args: run_net.py arguments shared by its training and test processes.
        cfg: the run's loaded (validated) config.
        schedule: the trainer's schedule for it (epochs, iterations).
        iterations: planned training iterations (None in a dry run).
    """

    run: Run
    run_dir: str
    args: list
    cfg: CfgNode
    schedule: MultigridSchedule
    iterations: Optional[int] = None

    @property
    def result_path(self) -> str:
        """Its ``study_result.json``; a run that has one is finished."""
        return os.path.join(self.run_dir, RESULT_FILE)

    @property
    def checkpoint(self) -> str:
        """The final checkpoint the training leaves (and the test reads)."""
        return get_path_to_checkpoint(self.run_dir, self.schedule.max_epoch)

    def command(self, phase: list) -> list:
        """The run_net.py command line, ``phase`` overrides last."""
        return [sys.executable, RUN_NET, *self.args, *phase]


def test_correctness(p: StudyRun) -> Optional[str]:
    """Per-video top-1 correctness of the run's test (``intervals.correctness``),
    from the tester's TEST.SAVE_RESULTS_PATH; None for a multi-label dataset
    or when the file does not hold the final checkpoint's results."""
    import torch

    path = os.path.join(p.run_dir, p.cfg.TEST.SAVE_RESULTS_PATH)
    if p.cfg.DATA.MULTI_LABEL or not p.cfg.TEST.SAVE_RESULTS_PATH:
        return None
    if not os.path.isfile(path):
        print(f"    warning: no per-video results {path}", flush=True)
        return None
    saved = torch.load(path, map_location="cpu", weights_only=True)
    if os.path.realpath(saved.get("checkpoint", "")) != os.path.realpath(p.checkpoint):
        print(f"    warning: {path} holds another checkpoint's results", flush=True)
        return None
    return correctness(saved["video_scores"], saved["video_labels"])


def stored_config_differences(p: StudyRun) -> Optional[str]:
    """How the run in ``p.run_dir`` was made otherwise than the study builds it.

    Returns:
        str: the differing keys (or the missing ``config.yaml``); None when
        its ``config.yaml`` defines the study's run and its test.
    """
    saved = os.path.join(p.run_dir, "config.yaml")
    if not os.path.isfile(saved):
        return "no config.yaml to check it against"
    with open(saved) as f:
        diffs = config_differences(p.cfg, fp.cfg_from_dump(f.read()))
    if diffs:
        where = fp.describe_differences(diffs, where="the run")
        return f"was made with another config ({where})"
    return None


def _continue_or_move_aside(p: StudyRun, machine: dict) -> str:
    """How an existing, unfinished run folder goes on (``progress.next_phase``).

    One that starts over is moved aside to ``<name>.stale-<time>``.

    Raises:
        RunFailed: a live process holds the folder's run lock.
    """
    if not os.path.exists(p.run_dir):
        return START
    busy = RunLock(p.run_dir).in_use()
    if busy:
        raise RunFailed(f"{p.run_dir} is in use ({busy}); let that run end first")
    checkpointed = bool(list_checkpoints(p.run_dir))
    trained = os.path.isfile(p.checkpoint)
    processes = read_progress(p.run_dir)
    phase, why = next_phase(processes, checkpointed, trained, machine)
    problem = stored_config_differences(p) if phase != START else None
    if problem:
        phase, why = START, problem
    if phase == START:
        stale = move_aside(p.run_dir, "stale")
        print(f"    {p.run_dir} has no result ({why}): moved to {stale}", flush=True)
    else:
        then = "resuming its training" if phase == RESUME else "testing it"
        print(f"    {p.run_dir}: {why}; {then}", flush=True)
    return phase


def execute(p: StudyRun, stopper: Stopper, machine: dict, code: Optional[str]) -> dict:
    """Trains and tests one run and saves its result.

    A run stopped before (``multigrid_study.progress``) resumes; any other
    existing folder of it is moved aside first and the run starts over.

    Args:
        p: the run.
        stopper: the installed signal catcher.
        machine: this machine (``machine.describe_machine``).
        code: the repository's commit (``machine.code_version``), or None.

    Returns:
        dict: the result (``study_result.json``): the ``parse_stats`` fields,
        planned epochs and iterations, wall-clocks (``train_s`` summed over
        ``train_processes``), training compute (``train_gflop``, see
        ``multigrid_study.compute``), folder, arguments, machine, commit and
        the date it finished.

    Raises:
        RunFailed: a process failed or the final checkpoint is missing.
        StudyStopped: a stop signal came, or the training was preempted.
    """
    phase = _continue_or_move_aside(p, machine)
    os.makedirs(p.run_dir, exist_ok=True)
    if phase != TEST:
        train_cmd = p.command(TRAINING_OVERRIDES)
        run_process(train_cmd, p.run_dir, "train", "study_train.out", stopper, machine)
    if not os.path.isfile(p.checkpoint):
        raise RunFailed(f"training left no final checkpoint {p.checkpoint}")
    test_cmd = p.command(testing_overrides(p.checkpoint))
    test_s = run_process(
        test_cmd, p.run_dir, "test", "study_test.out", stopper, machine
    )
    with open(os.path.join(p.run_dir, "json_stats.log")) as f:
        stats = parse_stats(f)
    processes = read_progress(p.run_dir)
    result: Dict[str, Any] = {
        "arm": p.run.arm,
        "budget": p.run.budget,
        "seed": p.run.seed,
    }
    result.update(epochs_planned=p.schedule.max_epoch, iterations_planned=p.iterations)
    result.update(stats, train_s=train_seconds(processes), test_s=test_s)
    result["train_processes"] = sum(q["phase"] == "train" for q in processes)
    result["run_dir"] = p.run_dir
    gflops_fn = clip_gflops_fn(p.cfg)
    result["gflop_per_clip"] = gflop_per_shape(stats["clips_per_shape"], gflops_fn)
    result["train_gflop"] = training_gflops(stats["clips_per_shape"], gflops_fn)
    result["args"] = p.args
    result.update(machine=machine, commit=code, date=time.strftime("%Y-%m-%d"))
    result["correct"] = test_correctness(p)
    result["test_videos"] = len(result["correct"]) if result["correct"] else None
    for key in ("epochs", "iterations"):
        if result[key] != result[f"{key}_planned"]:
            print(
                f"    warning: the logs count {result[key]} {key}, the schedule "
                f"{result[f'{key}_planned']}",
                flush=True,
            )
    with open(p.result_path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(p.result_path + ".tmp", p.result_path)  # never half written
    return result


def load_finished(runs: list, machine: dict) -> dict:
    """The results of the study's runs that finished before.

    Args:
        runs: the ``StudyRun`` list.
        machine: this machine (``machine.describe_machine``).

    Returns:
        dict: ``Run`` -> its ``study_result.json``.

    Raises:
        ValueError: a finished run was made with another config than the one
            the study builds for it, or timed on another kind of machine while runs
            are left to make here (their results would be mixed into this
            study's).
    """
    results = {}
    for p in runs:
        if not os.path.isfile(p.result_path):
            continue
        problem = stored_config_differences(p)
        if problem:
            raise ValueError(
                f"{p.run_dir} has a result but {problem}; "
                "move the folder away or pass another --out"
            )
        with open(p.result_path) as f:
            results[p.run] = json.load(f)
    if len(results) < len(runs):
        for p in runs:
            timed = results.get(p.run, {}).get("machine")
            if not same_machine(timed, machine):
                raise ValueError(
                    f"{p.run_dir} was timed on {machine_text(timed)}, this machine "
                    f"is {machine_text(machine)}: wall-clocks of two kinds of "
                    "machine do not compare; move the folder away or pass another "
                    "--out"
                )
    return results
