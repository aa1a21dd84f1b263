"""The training loop: epochs of iterations, one step each, and hooks for the rest.

A hook sees the loop's :class:`LoopState` and acts before or after the run,
an epoch or a step (detectron2's pattern). Everything that is not running a
step (the LR and BN grouping of the schedule, guards, precise BN, checkpoints,
evaluation, logs) is a hook; ``Trainer.build_hooks`` (``engine/trainer.py``)
lists a training run's hooks in the order they act.
"""

import time
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    cast,
)

import torch

from slowfast.multigrid.shapes import IterShape


class StepStats:
    """What one training step reports, reduced over all processes.

    A step may leave its values on the device (``StepStats.pending``): they are
    copied to the host when first read, and ``read_all`` copies a list of them
    at once, so that a run waits for the device once every few steps instead
    of once a step.

    Attributes:
        loss: mean loss.
        top1_err: mean top-1 error in percent (0 for multi-label data).
        top5_err: mean top-5 error in percent (0 for multi-label data).
        failed: videos that failed to load in this batch, summed.
        applied: whether the update was applied (False: the loss or a gradient
            was not finite; weights, BN statistics and optimizer state were
            left as they were before the step).
    """

    __slots__ = ("_values", "_host")
    FIELDS = ("loss", "top1_err", "top5_err", "failed", "applied")
    _values: Optional[torch.Tensor]
    _host: Optional[Tuple[float, float, float, float, bool]]

    def __init__(
        self,
        loss: float,
        top1_err: float,
        top5_err: float,
        failed: float,
        applied: bool = True,
    ) -> None:
        self._values = None
        self._host = (
            float(loss),
            float(top1_err),
            float(top5_err),
            float(failed),
            bool(applied),
        )

    @classmethod
    def pending(cls, values: torch.Tensor) -> "StepStats":
        """Statistics still on the device: ``values`` holds loss, top-1 and
        top-5 error, failed videos and applied (1 or 0), in that order."""
        stats = cls.__new__(cls)
        stats._values, stats._host = values, None
        return stats

    @staticmethod
    def read_all(stats: Sequence["StepStats"]) -> None:
        """Copies the values of every pending one to the host, in one copy."""
        pending = [s for s in stats if s._host is None]
        if not pending:
            return
        # A pending one's values are on the device until this copy.
        values = [cast(torch.Tensor, s._values) for s in pending]
        rows = torch.stack(values).cpu().tolist()
        for item, row in zip(pending, rows):
            item._host = (*row[:4], bool(row[4]))
            item._values = None

    def _read(self) -> tuple:
        if self._host is None:
            StepStats.read_all([self])
        assert self._host is not None  # read_all filled it
        return self._host

    @property
    def loss(self) -> float:
        return self._read()[0]

    @property
    def top1_err(self) -> float:
        return self._read()[1]

    @property
    def top5_err(self) -> float:
        return self._read()[2]

    @property
    def failed(self) -> float:
        return self._read()[3]

    @property
    def applied(self) -> bool:
        return self._read()[4]

    def __repr__(self) -> str:
        values = ", ".join(f"{k}={v}" for k, v in zip(self.FIELDS, self._read()))
        return f"StepStats({values})"


@dataclass
class StepRecord:
    """One iteration as the hooks see it once its statistics are on the host.

    Attributes:
        epoch, iter, global_iter: where it ran (``global_iter``: iterations
            done before it).
        shape: the schedule's shape of the iteration.
        lr: its learning rate.
        data_time: seconds spent waiting for the batch.
        compute_time: seconds of the step (with the wait for the device at
            the iteration that read the statistics back).
        stats: the step's statistics, on the host.
    """

    epoch: int
    iter: int
    global_iter: int
    shape: Optional[IterShape]
    lr: float
    data_time: float
    compute_time: float
    stats: StepStats


@dataclass
class LoopState:
    """Where the loop is, and what the hooks share.

    Attributes:
        epoch: index of the current epoch.
        max_epoch: number of epochs of the run.
        iter: index of the current iteration in its epoch.
        first_iter: the first iteration of the current epoch (0, or where a
            run resumed inside it).
        iters_in_epoch: iterations of the current epoch.
        global_iter: iterations done before the current one (all epochs).
        batch: the current batch, as the loader gave it.
        data_time: seconds spent waiting for the batch.
        compute_time: seconds of the step and the hooks around it.
        stats: the step's statistics (may still be on the device: read them
            from ``readback``).
        readback: the iterations whose statistics were read back to the host
            at this step, oldest first (``StepRecord``); empty at other steps.
            The loop reads them back every ``sync_period`` steps and at the
            epoch's last iteration (``readback_due``).
        readback_due: whether this step read statistics back (hooks that
            need the host to agree with the device, such as the preemption
            check, act only then).
        lr: learning rate of the current iteration (set by the schedule hook).
        shape: the schedule's shape of the current iteration.
        epoch_stats: the finished epoch's training statistics.
        val_metrics: the finished epoch's validation metrics, when it ran.
        extras: anything else one hook leaves for another, by name.
        hook_states: ``hook_states() -> {hook class name: state}``: the loop's
            hooks' non-empty ``state_dict()`` (what a checkpoint keeps).
    """

    epoch: int = 0
    max_epoch: int = 0
    iter: int = 0
    first_iter: int = 0
    iters_in_epoch: int = 0
    global_iter: int = 0
    batch: Any = None
    data_time: float = 0.0
    compute_time: float = 0.0
    stats: Optional[StepStats] = None
    readback: List[StepRecord] = field(default_factory=list)
    readback_due: bool = False
    lr: float = 0.0
    shape: Optional[IterShape] = None
    epoch_stats: Dict[str, Any] = field(default_factory=dict)
    val_metrics: Optional[Dict[str, Any]] = None
    extras: Dict[str, Any] = field(default_factory=dict)
    hook_states: Callable[[], Dict[str, dict]] = dict


class HookBase:
    """A hook: override the events it acts on. ``state`` is the loop's state.

    A hook whose state a resumed run needs (across epochs, or inside the
    epoch a mid-epoch checkpoint interrupts) returns it from ``state_dict``
    (plain values); checkpoints store it under the hook's class name and a
    resumed run hands it back to ``load_state_dict``.
    """

    def state_dict(self) -> dict:
        """What a checkpoint keeps of this hook (empty: nothing)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restores what ``state_dict`` returned, when resuming."""

    def before_train(self, state: LoopState) -> None:
        """Before the first epoch."""

    def before_epoch(self, state: LoopState) -> None:
        """Before the first batch of an epoch is fetched."""

    def before_step(self, state: LoopState) -> None:
        """After the batch is fetched, before the step."""

    def after_step(self, state: LoopState) -> None:
        """After the step (``state.stats`` holds its statistics)."""

    def after_epoch(self, state: LoopState) -> None:
        """After the last step of an epoch."""

    def after_train(self, state: LoopState) -> None:
        """At the end of the run, also when it fails."""


StepFn = Callable[[Any], StepStats]


class TrainLoop:
    """Runs epochs of steps and calls the hooks around them.

    The loader is iterated once for the whole run: ``before_train`` hooks
    select the batches of every remaining epoch (``ScheduleHook`` sets the
    span of the training sampler), and each epoch takes its iteration count
    from that one stream. A loader's workers then keep preparing batches
    across epoch ends, evaluations and checkpoints.

    Args:
        step: ``step(batch) -> StepStats``: one forward, backward and update.
        loader: once the ``before_train`` hooks ran, yields the batches of the
            run's remaining epochs in order (less those a resumed epoch skips).
        iters_in_epoch: ``epoch -> iterations``; the loader must give exactly
            that many batches per epoch.
        hooks: in the order they act.
        sync_period: the step's statistics are read back to the host after
            every ``sync_period``-th iteration of an epoch (counted from its
            first) and after its last (LOG_PERIOD in training), so that the
            host queues steps ahead of the device in between.
    """

    def __init__(
        self,
        step: StepFn,
        loader: Iterable,
        iters_in_epoch: Callable[[int], int],
        hooks: Sequence[HookBase],
        sync_period: int = 1,
    ) -> None:
        self.step = step
        self.loader = loader
        self.iters_in_epoch = iters_in_epoch
        self.hooks: List[HookBase] = list(hooks)
        self.sync_period = max(1, sync_period)
        self._pending: List[StepRecord] = []

    def hook_states(self) -> Dict[str, dict]:
        """The hooks' non-empty states, by hook class name (a checkpoint's)."""
        states = {type(h).__name__: h.state_dict() for h in self.hooks}
        return {name: s for name, s in states.items() if s}

    def load_hook_states(self, states: Dict[str, dict]) -> None:
        """Hands each hook its state saved by ``hook_states`` (a resume)."""
        for hook in self.hooks:
            saved = states.get(type(hook).__name__)
            if saved:
                hook.load_state_dict(saved)

    def _call(self, event: str, state: LoopState) -> None:
        for hook in self.hooks:
            getattr(hook, event)(state)

    def run(
        self,
        start_epoch: int,
        max_epoch: int,
        global_iter: int = 0,
        start_iter: int = 0,
    ) -> LoopState:
        """Trains epochs ``start_epoch .. max_epoch - 1``.

        Args:
            start_epoch: first epoch index (a resumed run's next epoch).
            max_epoch: number of epochs of the run.
            global_iter: iterations done before this run's first step.
            start_iter: iterations of ``start_epoch`` already done (a run
                resumed inside it); the hooks select the remaining batches.

        Returns:
            LoopState: the state after the last epoch.
        """
        state = LoopState(
            epoch=start_epoch,
            first_iter=start_iter,
            max_epoch=max_epoch,
            global_iter=global_iter,
            hook_states=self.hook_states,
        )
        try:
            self._call("before_train", state)
            batches = iter(self.loader)
            for epoch in range(start_epoch, max_epoch):
                first = start_iter if epoch == start_epoch else 0
                self.run_epoch(state, batches, epoch, first)
            if next(batches, None) is not None:
                raise RuntimeError(
                    f"the loader gave more batches than the schedule plans for "
                    f"epochs {start_epoch + 1}..{max_epoch}"
                )
        finally:
            self._call("after_train", state)
        return state

    def run_epoch(
        self, state: LoopState, batches: Iterator, epoch: int, first_iter: int = 0
    ) -> None:
        """One epoch (from iteration ``first_iter``): its hooks and its
        iterations' batches from ``batches``, one step each."""
        state.epoch, state.iter, state.first_iter = epoch, first_iter, first_iter
        state.iters_in_epoch = self.iters_in_epoch(epoch)
        state.epoch_stats, state.val_metrics = {}, None
        self._call("before_epoch", state)
        tic = time.perf_counter()
        for it in range(first_iter, state.iters_in_epoch):
            batch = next(batches, None)
            if batch is None:
                raise RuntimeError(
                    f"epoch {epoch + 1}: the loader gave {it - first_iter} "
                    f"batches, the schedule plans {state.iters_in_epoch - first_iter}"
                )
            state.iter, state.batch = it, batch
            state.data_time = time.perf_counter() - tic
            self._call("before_step", state)
            state.stats = self.step(batch)
            state.compute_time = time.perf_counter() - tic - state.data_time
            self._read_back(state)
            self._call("after_step", state)
            state.global_iter += 1
            tic = time.perf_counter()
        state.batch = None
        self._call("after_epoch", state)

    def _read_back(self, state: LoopState) -> None:
        """Records the step; at a read-back iteration copies the pending
        steps' statistics to the host at once (``state.readback``)."""
        assert state.stats is not None  # the step just taken set it
        self._pending.append(
            StepRecord(
                state.epoch,
                state.iter,
                state.global_iter,
                state.shape,
                state.lr,
                state.data_time,
                state.compute_time,
                state.stats,
            )
        )
        last = state.iter + 1 == state.iters_in_epoch
        state.readback_due = last or (state.iter + 1) % self.sync_period == 0
        if not state.readback_due:
            state.readback = []
            return
        tic = time.perf_counter()
        StepStats.read_all([record.stats for record in self._pending])
        wait = time.perf_counter() - tic  # the device finishing the queued steps
        self._pending[-1].compute_time += wait
        state.compute_time += wait
        state.readback, self._pending = self._pending, []
