"""A run's processes across study invocations: stopped by a signal, resumed.

A study stops, inside a run or between two, on one of its runs' stop signals
(TRAIN.STOP_SIGNALS: SIGUSR1, SIGUSR2, SIGTERM by default; from ``timeout``, a
scheduler or ``kill``). It passes the signal on to the process it is running
and waits for it: a training process saves a mid-epoch checkpoint and exits
with EXIT_PREEMPTED (``slowfast/engine/preemption.py``), and the study exits
with that status too. The same command then resumes the run: its training
continues from that checkpoint (the trainer's own resume), and its training
wall-clock is the sum of its training processes'.

Each run folder's ``study_progress.json`` lists the run's processes: the phase
(``train`` or ``test``), the wall-clock and the exit status, written when a
process starts (with no status) and again when it ends. A process left with no
status was killed together with the study (SIGKILL, a lost machine): its time
is unknown, so the run starts over.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Optional, Sequence

from slowfast.engine.preemption import EXIT_PREEMPTED, signal_name

PROGRESS_FILE = "study_progress.json"
# Where an unfinished run goes on (see ``next_phase``).
START, RESUME, TEST = "start", "resume", "test"


class RunFailed(RuntimeError):
    """A run's process failed or left no final checkpoint."""


class StudyStopped(Exception):
    """A stop signal reached the study, or a training process was preempted.

    Attributes:
        signum: the signal the study got (0: only the process got one).
    """

    def __init__(self, signum: int, where: str) -> None:
        self.signum = signum
        what = f"stopped by {signal_name(signum)}" if signum else "stopped"
        super().__init__(f"{what} {where}")


class Stopper:
    """Catches the stop signals while installed and passes them on to the
    running process (a signal sent to the whole process group reaches it
    twice; the trainer stops once).

    Args:
        signums: the signals to catch.
    """

    def __init__(self, signums: Sequence[int]) -> None:
        self.signums = list(signums)
        self.received = 0
        self.child: Optional[subprocess.Popen] = None
        self._previous: dict = {}

    def _handle(self, signum: int, frame) -> None:
        self.received = signum
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def install(self) -> None:
        """Installs the handlers."""
        for signum in self.signums:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Puts the previous handlers back."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}


def read_progress(run_dir: str) -> list:
    """The processes recorded in ``run_dir`` (empty when none)."""
    path = os.path.join(run_dir, PROGRESS_FILE)
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return json.load(f)


def _write_progress(run_dir: str, processes: list) -> None:
    path = os.path.join(run_dir, PROGRESS_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(processes, f, indent=1)
    os.replace(path + ".tmp", path)


def next_phase(processes: list, trained: bool) -> tuple:
    """Where an unfinished run goes on.

    Args:
        processes: its recorded processes (``read_progress``).
        trained: its final checkpoint exists.

    Returns:
        tuple: ``TEST`` (training done), ``RESUME`` (every training process
        was preempted after a checkpoint) or ``START`` (anything else: the
        run starts over), and why, for the log.
    """
    if any(p["status"] is None for p in processes):
        return START, "a process of it was killed with the study, its time unknown"
    train = [p for p in processes if p["phase"] == "train"]
    if not train:
        return START, "it has no training process recorded"
    if train[-1]["status"] == 0 and trained:
        return TEST, f"trained in {len(train)} process(es), not tested"
    if all(p["status"] == EXIT_PREEMPTED for p in train):
        return RESUME, f"stopped after a checkpoint {len(train)} time(s)"
    return START, f"its training ended with exit status {train[-1]['status']}"


def train_seconds(processes: list) -> float:
    """The training wall-clock: the sum over the training processes."""
    return sum(p["seconds"] for p in processes if p["phase"] == "train")


def run_process(
    cmd: list, run_dir: str, phase: str, log_name: str, stopper: Stopper
) -> float:
    """Runs one of a run's processes, recorded, and passes stop signals on.

    Its output goes to ``log_name`` in ``run_dir``, after the output of the
    same phase's earlier processes.

    Args:
        cmd: the command.
        run_dir: the run's folder.
        phase: ``"train"`` or ``"test"``.
        log_name: the log file's name.
        stopper: the installed signal catcher.

    Returns:
        float: the process's wall-clock (s).

    Raises:
        StudyStopped: a stop signal came before it started or ended it, or it
            exited with EXIT_PREEMPTED (a process that ends well all the same
            returns; the study stops before the next one).
        RunFailed: it exited with another non-zero status.
    """
    what = f"{os.path.basename(run_dir)}'s {phase}"
    if stopper.received:
        raise StudyStopped(stopper.received, f"before {what}")
    processes = read_progress(run_dir)
    entry = {"phase": phase, "seconds": None, "status": None}
    processes.append(entry)
    _write_progress(run_dir, processes)
    log_path = os.path.join(run_dir, log_name)
    earlier = sum(p["phase"] == phase for p in processes) - 1
    start = time.perf_counter()
    with open(log_path, "a") as log:
        if earlier:
            log.write(f"--- study: {phase} process {earlier + 1} ---\n")
            log.flush()
        stopper.child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            code = stopper.child.wait()
        finally:
            stopper.child = None
    entry.update(seconds=time.perf_counter() - start, status=code)
    _write_progress(run_dir, processes)
    if code == EXIT_PREEMPTED or (code != 0 and stopper.received):
        raise StudyStopped(stopper.received, f"in {what}")
    if code != 0:
        with open(log_path) as log:
            tail = [line.strip() for line in log if line.strip()][-1:]
        raise RunFailed(f"exit status {code} ({log_path}): {' '.join(tail)}")
    return entry["seconds"]
