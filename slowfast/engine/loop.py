"""The training loop: epochs of iterations, one step each, and hooks for the rest.

A hook sees the loop's :class:`LoopState` and acts before or after the run,
an epoch or a step (detectron2's pattern). Everything that is not running a
step (the LR and BN grouping of the schedule, guards, precise BN, checkpoints,
evaluation, logs) is a hook; ``Trainer.build_hooks`` (``engine/trainer.py``)
lists a training run's hooks in the order they act.
"""

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence


@dataclass
class StepStats:
    """What one training step reports, reduced over all processes.

    Attributes:
        loss: mean loss.
        top1_err: mean top-1 error in percent (0 for multi-label data).
        top5_err: mean top-5 error in percent (0 for multi-label data).
        failed: videos that failed to load in this batch, summed.
        applied: whether the update was applied (False: non-finite loss,
            no gradient was computed on any process).
    """

    loss: float
    top1_err: float
    top5_err: float
    failed: float
    applied: bool = True


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
        batch_size: clips in this process's batch.
        data_time: seconds spent waiting for the batch.
        compute_time: seconds of the step and the hooks around it.
        stats: the step's statistics.
        lr: learning rate of the current iteration (set by the schedule hook).
        shape: the schedule's shape of the current iteration.
        epoch_stats: the finished epoch's training statistics.
        val_metrics: the finished epoch's validation metrics, when it ran.
        extras: anything else one hook leaves for another, by name.
    """

    epoch: int = 0
    max_epoch: int = 0
    iter: int = 0
    first_iter: int = 0
    iters_in_epoch: int = 0
    global_iter: int = 0
    batch: Any = None
    batch_size: int = 0
    data_time: float = 0.0
    compute_time: float = 0.0
    stats: Optional[StepStats] = None
    lr: float = 0.0
    shape: Any = None
    epoch_stats: Dict[str, Any] = field(default_factory=dict)
    val_metrics: Optional[Dict[str, Any]] = None
    extras: Dict[str, Any] = field(default_factory=dict)


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
    """

    def __init__(
        self,
        step: StepFn,
        loader: Iterable,
        iters_in_epoch: Callable[[int], int],
        hooks: Sequence[HookBase],
    ) -> None:
        self.step = step
        self.loader = loader
        self.iters_in_epoch = iters_in_epoch
        self.hooks: List[HookBase] = list(hooks)

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
            state.batch_size = int(batch[0][0].shape[0])
            self._call("before_step", state)
            state.stats = self.step(batch)
            state.compute_time = time.perf_counter() - tic - state.data_time
            self._call("after_step", state)
            state.global_iter += 1
            tic = time.perf_counter()
        state.batch = None
        self._call("after_epoch", state)
