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
(``train`` or ``test``), the wall-clock, the exit status, the stop signal that
came while it ran and the machine, written when a process starts (with no
status) and again when it ends. A training process left with no status was
killed together with the study (SIGKILL, a lost machine): its time is unknown,
so the run starts over, as does a run stopped on another kind of machine
(``machine.py``) or by Ctrl-C (SIGINT is no stop signal: the trainer dies
without a checkpoint). A run trained to its final checkpoint only has its test
made again.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from multigrid_study.machine import machine_text, same_machine
from slowfast.engine.preemption import StopSignals, signal_name
from slowfast.utils.errors import EXIT_PREEMPTED

PROGRESS_FILE = "study_progress.json"
# Where an unfinished run goes on (see ``next_phase``).
START, RESUME, TEST = "start", "resume", "test"


class RunFailed(RuntimeError):
    """A run's process failed or left no final checkpoint."""


class StudyStopped(Exception):
    """A stop signal reached the study, or a training process was preempted.

    Attributes:
        signum: the signal the study got (0: none, or Ctrl-C).
        resumable: the run it stopped goes on from its checkpoint next time
            (False after Ctrl-C: it starts over).
    """

    def __init__(self, signum: int, where: str, resumable: bool = True) -> None:
        self.signum, self.resumable = signum, resumable
        what = f"stopped by {signal_name(signum)}" if signum else "stopped"
        super().__init__(f"{what} {where}")


class Stopper(StopSignals):
    """The stop signals, caught while installed and passed on to the running process.

    A signal sent to the whole process group reaches the process twice; the
    trainer stops once.

    Args:
        signums: the signals to catch.
    """

    def __init__(self, signums: Sequence[int]) -> None:
        super().__init__(signums)
        self.child: Optional[subprocess.Popen] = None

    def _handle(self, signum: int, frame) -> None:
        self.received = signum
        self.forward()

    def forward(self) -> None:
        """Passes the signal received on to the running process, if any."""
        child = self.child
        if self.received and child is not None and child.poll() is None:
            child.send_signal(self.received)


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


def next_phase(
    processes: list, checkpointed: bool, trained: bool, machine: dict
) -> Tuple[str, str]:
    """Where an unfinished run goes on.

    A training process counts as stopped when it exited with EXIT_PREEMPTED
    or a stop signal reached the study while it ran (one killed by the signal
    while starting or ending, before or after the trainer catches it).

    Args:
        processes: its recorded processes (``read_progress``).
        checkpointed: its folder holds a checkpoint to resume from.
        trained: its final checkpoint exists.
        machine: this machine (``machine.describe_machine``).

    Returns:
        tuple: ``TEST`` (training done; its test is made again), ``RESUME``
        (every training process stopped, a checkpoint left) or ``START``
        (anything else: the run starts over), and why, for the log.
    """
    for p in processes:
        if not same_machine(p.get("machine"), machine):
            return START, f"it ran on another machine ({machine_text(p['machine'])})"
    train = [p for p in processes if p["phase"] == "train"]
    if not train:
        return START, "it has no training process recorded"
    if any(p["status"] is None for p in train):
        return START, "a training process was killed with the study, its time unknown"
    if train[-1]["status"] == 0:
        if trained:
            return TEST, f"trained in {len(train)} process(es), not tested"
        return START, "its training ended without its final checkpoint"
    stopped = all(p["status"] == EXIT_PREEMPTED or p.get("stopped_by") for p in train)
    if stopped and trained:
        return TEST, f"trained in {len(train)} process(es), stopped while ending"
    if stopped and checkpointed:
        return RESUME, f"stopped {len(train)} time(s), a checkpoint left"
    if stopped:
        return START, "it was stopped before its first checkpoint"
    return START, f"its training ended with exit status {train[-1]['status']}"


def train_seconds(processes: list) -> float:
    """The training wall-clock: the sum over the training processes."""
    return sum(p["seconds"] for p in processes if p["phase"] == "train")


def run_process(
    cmd: list, run_dir: str, phase: str, log_name: str, stopper: Stopper, machine: dict
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
        machine: this machine, recorded with the process.

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
    record: Dict[str, Any] = {
        "phase": phase,
        "seconds": None,
        "status": None,
        "machine": machine,
    }
    processes.append(record)
    _write_progress(run_dir, processes)
    log_path = os.path.join(run_dir, log_name)
    earlier = sum(p["phase"] == phase for p in processes) - 1
    start = time.perf_counter()
    with open(log_path, "a") as log:
        if earlier:
            log.write(f"--- study: {phase} process {earlier + 1} ---\n")
            log.flush()
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        stopper.child = child
        try:
            stopper.forward()  # a signal that came while the process started
            code = child.wait()
        except KeyboardInterrupt:  # Ctrl-C reaches the process too: record it
            record.update(seconds=time.perf_counter() - start, status=child.wait())
            _write_progress(run_dir, processes)
            raise
        finally:
            stopper.child = None
    record.update(seconds=time.perf_counter() - start, status=code)
    if stopper.received:
        record["stopped_by"] = signal_name(stopper.received)
    _write_progress(run_dir, processes)
    if code == EXIT_PREEMPTED or (code != 0 and stopper.received):
        raise StudyStopped(stopper.received, f"in {what}")
    if code != 0:
        with open(log_path) as log:
            tail = [line.strip() for line in log if line.strip()][-1:]
        raise RunFailed(f"exit status {code} ({log_path}): {' '.join(tail)}")
    return record["seconds"]
