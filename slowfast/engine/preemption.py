"""Stopping a run between two iterations: preemption signals and timed checkpoints.

A scheduler warns a job before it preempts it or before its time limit
(SLURM: ``--signal``, submitit: SIGUSR2; SIGTERM before a kill). A signal
named in TRAIN.STOP_SIGNALS only sets a flag; at each iteration that reads
the step statistics back (every LOG_PERIOD iterations and at the epoch's end,
``LoopState.readback_due``) every process learns whether any of them got one
(one small all-reduce), so they all stop after the same iteration, at most
LOG_PERIOD - 1 iterations after the signal. Then a mid-epoch checkpoint is
written (model, optimizer, scaler, every process's RNG states, the hooks'
states and the position in the epoch; ``checkpoint/files.py`` names it) and
the run raises ``Preempted``; its processes exit with ``EXIT_PREEMPTED`` (a
launcher may report another status: torchrun 1, srun with --kill-on-bad-exit
a signal) and the same command resumes after that iteration.
TRAIN.CHECKPOINT_MINUTES > 0 also writes such a checkpoint every that many
minutes, which bounds what a hard kill can lose.
With $SLOWFAST_REQUEUE_MARKER set (``tools/slurm/train.sbatch`` sets it), a
preempted run also writes that file, so that a job script can requeue the job
whatever exit status its launcher reports (srun, torchrun).
"""

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Any, Callable, Dict, Optional, Sequence, Union

import torch

from slowfast.engine.loop import HookBase, LoopState
from slowfast.utils import distributed as du
from slowfast.utils.errors import EXIT_PREEMPTED

logger = logging.getLogger(__name__)

# A signal's handler as signal.signal takes and returns it.
_Handler = Union[Callable[[int, Optional[FrameType]], Any], int, signal.Handlers, None]


class Preempted(Exception):
    """The run stopped on a signal after saving a mid-epoch checkpoint.

    Attributes:
        signum: the signal's number.
        path: the checkpoint written (None on processes other than rank 0).
        exit_status: the status a process stopped by it exits with.
    """

    exit_status = EXIT_PREEMPTED

    def __init__(self, signum: int, path: Optional[str]) -> None:
        self.signum, self.path = signum, path
        where = f"; saved {path}" if path else ""
        super().__init__(f"stopped by {signal_name(signum)}{where}")


def signal_name(signum: int) -> str:
    """``"SIGUSR1"`` for its number."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


# A job script names a file here; a preempted run writes it (holding the
# checkpoint's path) before any of its processes exits, so that the script
# knows to requeue the job whatever status srun reports.
REQUEUE_MARKER_ENV = "SLOWFAST_REQUEUE_MARKER"


def write_requeue_marker(path: Optional[str]) -> None:
    """Writes the file named by $SLOWFAST_REQUEUE_MARKER (when set)."""
    marker = os.environ.get(REQUEUE_MARKER_ENV, "")
    if marker:
        with open(marker, "w") as f:
            f.write(f"{path or ''}\n")


class StopSignals:
    """Catches the stop signals while installed; remembers the last one.

    Args:
        signums: the signals to catch.
    """

    def __init__(self, signums: Sequence[int]) -> None:
        self.signums = list(signums)
        self.received = 0
        self._previous: Dict[int, _Handler] = {}

    def _handle(self, signum: int, frame) -> None:
        if not self.received:
            logger.warning(
                "got %s: stopping at the next statistics read-back (within "
                "LOG_PERIOD iterations)",
                signal_name(signum),
            )
        self.received = signum

    def install(self) -> None:
        """Installs the handlers (once; only the main thread may, elsewhere a no-op)."""
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        for signum in self.signums:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Puts the previous handlers back."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}


class PreemptionHook(HookBase):
    """Saves a mid-epoch checkpoint on a stop signal (then stops) or on a timer.

    Goes last in the hook list, so that the checkpoint holds the states the
    other hooks reached after the step.

    Args:
        stop: the signal catcher.
        save: ``save(state) -> path``: writes the mid-epoch checkpoint
            (collective; see ``CheckpointHook.save``).
        ctx: this process's run context.
        minutes: also save every that many minutes (0: only on a signal).
        clock: seconds, monotonic (for tests).
    """

    def __init__(
        self,
        stop: StopSignals,
        save: Callable[[LoopState], Optional[str]],
        ctx: du.RunContext,
        minutes: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stop, self.save, self.ctx = stop, save, ctx
        self.seconds, self.clock = 60.0 * minutes, clock
        self.last_save = 0.0

    def before_train(self, state: LoopState) -> None:
        self.stop.install()
        self.last_save = self.clock()

    def after_step(self, state: LoopState) -> None:
        if not state.readback_due:  # the host reads the device only then
            return
        timed = self.ctx.is_master and 0 < self.seconds <= self.clock() - self.last_save
        flags = torch.tensor([self.stop.received, int(timed)], dtype=torch.long)
        if self.ctx.distributed:
            # Every process stops (or saves) after the same iteration.
            flags = du.all_reduce(flags, op="max")
        signum, timed = int(flags[0]), bool(flags[1])
        if not (signum or timed):
            return
        path = self.save(state)
        self.last_save = self.clock()
        if signum:
            if self.ctx.is_master:
                write_requeue_marker(path)
            du.barrier()  # the marker exists before any process exits
            raise Preempted(signum, path)

    def after_train(self, state: LoopState) -> None:
        self.stop.restore()
