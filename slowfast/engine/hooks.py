"""The hooks of a training run: everything around the step, one job each.

``Trainer.build_hooks`` lists a run's hooks in the order they act; that list
reads as the run's table of contents:

1. ``ScheduleHook``: the epoch's batches and shapes, each iteration's LR and
   BN grouping (the one multigrid schedule drives all three).
2. ``NonFiniteGuard``: stops the run at the first non-finite step.
3. ``BadDataHook``: counts videos that failed to load; fails past the bound.
4. ``JsonMetricsWriter`` (below, with the other metric writer): the
   ``train_iter`` / ``train_epoch`` lines; ``RunStateHook``: the trained epoch
   in ``run_state.json``.
5. ``PreciseBNHook``, ``BufferSyncHook``, ``CheckpointHook``, ``EvalHook``:
   the end of an epoch, when the run's ``multigrid.periods.PeriodicWork``
   says (periods count the baseline's epochs of training).
6. ``TensorBoardWriter``: the same numbers for TensorBoard.
7. ``PreemptionHook`` (``engine/preemption.py``), last: a mid-epoch checkpoint
   on a stop signal (then the run stops) or every TRAIN.CHECKPOINT_MINUTES.

A new hook (EMA, a profiler, ...) subclasses ``loop.HookBase`` and goes into
that list; the loop does not change.
"""

import logging
import math
from typing import Callable, Optional

import torch
from torch import nn

from slowfast.checkpoint.load import get_last_checkpoint
from slowfast.datasets.bad_data import BadDataMonitor
from slowfast.datasets.loader import GridBatchSampler, clips_in_batch
from slowfast.engine.bn_grouping import BNGrouping
from slowfast.engine.checkpointer import Checkpointer
from slowfast.engine.evaluator import Evaluator
from slowfast.engine.loop import HookBase, LoopState, StepRecord
from slowfast.engine.meters import TrainMeter, data_wait_text
from slowfast.engine.precise_bn import update_bn_stats_in_place
from slowfast.engine.run_state import RunStateRecorder
from slowfast.multigrid import IterShape, MultigridSchedule
from slowfast.solver.optimizer import set_lr
from slowfast.utils import distributed as du
from slowfast.utils import rng
from slowfast.utils.errors import UserError
from slowfast.utils.logging import log_json_stats

logger = logging.getLogger(__name__)


def epoch_str(state: LoopState) -> str:
    """``"3/18"``: the current epoch, counted from 1, of all."""
    return f"{state.epoch + 1}/{state.max_epoch}"


def shape_str(shape: IterShape) -> str:
    """``"128x2x45"``: global clips x frames x crop of an iteration's shape."""
    return f"{shape.batch_size}x{shape.num_frames}x{shape.crop_size}"


class ScheduleHook(HookBase):
    """Selects each epoch's batches and sets each iteration's LR and BN groups.

    The loader cuts its batches by the same schedule (``Trainer._batches``):
    each step's batch must hold the clips of the schedule's shape.

    Args:
        schedule: the run's ``MultigridSchedule``.
        batch_sampler: the training loader's ``GridBatchSampler``.
        optimizer: whose LR is set.
        bn: the ``BNGrouping`` (None: plain BN).
        base_batch: the global batch at the base shape (for the epoch's log line).
    """

    def __init__(
        self,
        schedule: MultigridSchedule,
        batch_sampler: GridBatchSampler,
        optimizer: torch.optim.Optimizer,
        bn: Optional[BNGrouping],
        base_batch: int,
    ):
        self.schedule = schedule
        self.batch_sampler = batch_sampler
        self.optimizer = optimizer
        self.bn = bn
        self.base_batch = base_batch

    def before_train(self, state: LoopState) -> None:
        # One stream of the remaining epochs' batches (``engine/loop.py``).
        self.batch_sampler.set_epoch(
            state.epoch, state.first_iter, end_epoch=state.max_epoch
        )

    def before_epoch(self, state: LoopState) -> None:
        stage = self.schedule.entry_at(state.epoch)
        logger.info(
            "epoch %s, stage %d, shape %dx%dx%d, %d iterations",
            epoch_str(state),
            stage.lr_stage,
            self.base_batch * stage.batch_factor,
            stage.num_frames,
            stage.crop_size,
            state.iters_in_epoch,
        )
        state.lr = self.schedule.lr_at(state.epoch)

    def before_step(self, state: LoopState) -> None:
        sched, epoch, it = self.schedule, state.epoch, state.iter
        shape = sched.iter_shape(epoch, it)
        clips = clips_in_batch(state.batch)
        if clips != shape.per_proc_batch:
            raise RuntimeError(
                f"epoch {epoch_str(state)} iteration {it}: loader gave "
                f"{clips} clips, the schedule has {shape.per_proc_batch}"
            )
        if self.bn is not None:
            self.bn.apply(shape.bn_splits, sched.bn_sync_size(epoch))
        state.shape = shape
        state.lr = sched.lr_at(epoch + it / state.iters_in_epoch)
        set_lr(self.optimizer, state.lr)


class NonFiniteLossError(UserError, FloatingPointError):
    """The loss was not finite: a user error (the recipe's LR, or the data)."""


class NonFiniteGuard(HookBase):
    """Stops the run at the first step whose loss or gradients were not finite
    (every process at the same step).

    The step skipped that update on the device (``engine/step.py``); the guard
    sees it when the statistics are read back (``LoopState.readback``) and
    names the first such iteration.

    Args:
        output_dir: where the last good checkpoint is looked up for the message.
    """

    def __init__(self, output_dir: str):
        self.output_dir = output_dir

    def after_step(self, state: LoopState) -> None:
        bad = next((r for r in state.readback if not r.stats.applied), None)
        if bad is None:
            return
        last = get_last_checkpoint(self.output_dir)
        saved = f"the last good checkpoint is {last}"
        if not last:
            saved = "no checkpoint was saved yet"
        loss = bad.stats.loss
        what = "a gradient is not finite" if math.isfinite(loss) else f"loss is {loss}"
        raise NonFiniteLossError(
            f"{what} at epoch {bad.epoch + 1}/{state.max_epoch}, iteration "
            f"{bad.iter + 1}/{state.iters_in_epoch} (global iteration "
            f"{bad.global_iter + 1}): lower SOLVER.BASE_LR or lengthen "
            f"SOLVER.WARMUP_EPOCHS; {saved}"
        )


class BadDataHook(HookBase):
    """Counts videos that failed to load; fails past ``max_fraction`` of them."""

    def __init__(self, dataset_size: int, max_fraction: float):
        self.dataset_size, self.max_fraction = dataset_size, max_fraction
        self.monitor: Optional[BadDataMonitor] = None
        self.resumed: dict = {}

    def state_dict(self) -> dict:
        return {"count": self.monitor.count} if self.monitor else {}

    def load_state_dict(self, state: dict) -> None:
        self.resumed = state

    def before_epoch(self, state: LoopState) -> None:
        self.monitor = BadDataMonitor(self.dataset_size, self.max_fraction)
        if state.first_iter > 0 and self.resumed:  # inside the epoch resumed
            self.monitor.count = int(self.resumed["count"])
        self.resumed = {}

    def after_step(self, state: LoopState) -> None:
        assert self.monitor is not None  # before_epoch made it
        for record in state.readback:
            self.monitor.update(int(record.stats.failed))

    def after_epoch(self, state: LoopState) -> None:
        assert self.monitor is not None  # before_epoch made it
        state.extras["bad_videos"] = self.monitor.end_epoch(state.epoch)
        self.monitor = None  # nothing to keep between epochs


class PreciseBNHook(HookBase):
    """Recomputes BN statistics at the base shape (BN.USE_PRECISE_STATS).

    Runs after the epochs for which ``due(epoch)`` holds, with the training
    RNG states put aside, so that a resumed run draws the same numbers.
    """

    def __init__(self, model, loader, bn, num_batches: int, ctx, due):
        self.model, self.loader, self.bn = model, loader, bn
        self.num_batches, self.device, self.due = num_batches, ctx.device, due

    def after_epoch(self, state: LoopState) -> None:
        if not self.due(state.epoch):
            return
        with rng.preserved_rng():
            self.loader.batch_sampler.set_epoch(state.epoch)
            if self.bn is not None:
                self.bn.apply(1, 1)
            device = self.device

            def inputs():
                for batch, *_ in self.loader:
                    yield [x.to(device) for x in batch]

            num = min(self.num_batches, len(self.loader))
            update_bn_stats_in_place(self.model, inputs(), num)


class BufferSyncHook(HookBase):
    """Averages BN running statistics over processes (they drift apart)."""

    def __init__(self, model: nn.Module, ctx: du.RunContext, due):
        self.model, self.ctx, self.due = model, ctx, due

    def after_epoch(self, state: LoopState) -> None:
        if not self.ctx.distributed or not self.due(state.epoch):
            return
        with torch.no_grad():
            du.all_reduce_mean(
                [buf for buf in self.model.buffers() if buf.is_floating_point()]
            )


class CheckpointHook(HookBase):
    """Saves a checkpoint (model, optimizer, scaler, every process's RNG
    states and the hooks' states the loop hands over, ``state.hook_states``)
    after the epochs for which ``due(epoch)`` holds.

    Args:
        checkpointer: the run's ``checkpointer.Checkpointer``.
        due: ``PeriodicWork.checkpoint_due`` (TRAIN.CHECKPOINT_PERIOD).
    """

    def __init__(self, checkpointer: Checkpointer, due: Callable[[int], bool]):
        self.checkpointer, self.due = checkpointer, due

    def after_epoch(self, state: LoopState) -> None:
        if self.due(state.epoch):
            self.save(state)

    def save(self, state: LoopState, mid_epoch: bool = False) -> Optional[str]:
        """Saves now (collective): after the epoch, or after ``state.iter``.

        Returns:
            str | None: the path written (None on processes other than rank 0).
        """
        return self.checkpointer.save(
            state.epoch - 1 if mid_epoch else state.epoch,
            state.hook_states(),
            iteration=state.iter + 1 if mid_epoch else None,
        )


class EvalHook(HookBase):
    """One view per video of the val split, after the epochs for which
    ``due(epoch)`` holds.

    Args:
        evaluator: the model on the val loader (``evaluator.Evaluator``).
        due: ``PeriodicWork.validation_due`` (TRAIN.EVAL_PERIOD).
        output_dir: OUTPUT_DIR (``json_stats.log``).
        rank: global rank (rank 0 writes).
        run_state: records the validated epochs (``run_state.json``).
    """

    def __init__(
        self,
        evaluator: Evaluator,
        due: Callable[[int], bool],
        output_dir: str,
        rank: int,
        run_state: RunStateRecorder,
    ):
        self.evaluator, self.due = evaluator, due
        self.output_dir, self.rank, self.run_state = output_dir, rank, run_state

    def after_epoch(self, state: LoopState) -> None:
        if self.due(state.epoch):
            self.validate(state)

    def validate(self, state: LoopState) -> None:
        """Validates the model after epoch ``state.epoch``, due or not."""
        with rng.preserved_rng():
            metrics, _, _ = self.evaluator.run()
        stats = {"_type": "val_epoch", "epoch": epoch_str(state)}
        stats.update(metrics)
        log_json_stats(stats, self.output_dir, self.rank)
        self.run_state.validated(state.epoch + 1)
        state.val_metrics = metrics


class RunStateHook(HookBase):
    """Records each trained epoch in ``run_state.json`` (see ``run_state.py``).

    Args:
        run_state: the run's recorder (rank 0 writes).
    """

    def __init__(self, run_state: RunStateRecorder):
        self.run_state = run_state

    def after_epoch(self, state: LoopState) -> None:
        self.run_state.trained(state.epoch + 1)


# ------------------------------------------------------------ metric writers


class JsonMetricsWriter(HookBase):
    """Writes ``train_iter`` lines every ``log_period`` steps and ``train_epoch``.

    Args:
        output_dir: OUTPUT_DIR (``json_stats.log``).
        ctx: this process's run context (rank 0 writes).
        log_period: steps between ``train_iter`` lines.
        iters_after: ``epoch -> iterations in the later epochs`` (ETA).
        multi_label: no top-k errors.
    """

    def __init__(
        self,
        output_dir: str,
        ctx: du.RunContext,
        log_period: int,
        iters_after: Callable[[int], int],
        multi_label: bool,
    ):
        self.output_dir, self.rank = output_dir, ctx.rank
        self.log_period = log_period
        self.iters_after = iters_after
        self.multi_label = multi_label
        self.meter: Optional[TrainMeter] = None
        self.resumed: dict = {}

    def state_dict(self) -> dict:
        return {"meter": self.meter.state_dict()} if self.meter else {}

    def load_state_dict(self, state: dict) -> None:
        self.resumed = state

    def before_epoch(self, state: LoopState) -> None:
        self.meter = TrainMeter(
            self.log_period, state.iters_in_epoch, self.iters_after(state.epoch)
        )
        if state.first_iter > 0 and self.resumed:  # inside the epoch resumed
            self.meter.load_state_dict(self.resumed["meter"])
        self.resumed = {}

    def after_step(self, state: LoopState) -> None:
        for record in state.readback:
            self._add(record, state)

    def _add(self, record: StepRecord, state: LoopState) -> None:
        stats, shape, meter = record.stats, record.shape, self.meter
        assert shape is not None  # ScheduleHook gives every step its shape
        assert meter is not None  # before_epoch made it
        top1: Optional[float] = None
        top5: Optional[float] = None
        if not self.multi_label:
            top1, top5 = stats.top1_err, stats.top5_err
        meter.add(
            stats.loss,
            shape.batch_size,
            record.data_time,
            record.compute_time,
            top1,
            top5,
            shape_str(shape),
        )
        if (record.iter + 1) % self.log_period == 0:
            line = meter.iter_stats(
                epoch_str(state), record.iter, record.lr, shape_str(shape)
            )
            log_json_stats(line, self.output_dir, self.rank)

    def after_epoch(self, state: LoopState) -> None:
        assert self.meter is not None  # before_epoch made it
        line = self.meter.epoch_stats(epoch_str(state), state.lr)
        line["bad_videos"] = state.extras.pop("bad_videos", 0)
        state.epoch_stats = line
        log_json_stats(line, self.output_dir, self.rank)
        if self.rank == 0 and len(self.meter.shapes) > 1:
            logger.info("Data wait per shape: %s", data_wait_text(self.meter.shapes))
        self.meter = None  # only a mid-epoch checkpoint keeps the meters


class TensorBoardWriter(HookBase):
    """Train loss, LR and batch size per step; epoch loss and val metrics.

    Iteration ``i`` (from 1) is written at step ``i``, an epoch's points at its
    last iteration's step. A resumed run purges the steps after the ones it
    resumed from (what an earlier attempt logged past its checkpoint) and
    keeps the rest, the resumed-from epoch's validation point included.

    Args:
        log_dir: the event files' folder.
        done_iters: iterations the run had done before this process started.
    """

    def __init__(self, log_dir: str, done_iters: int):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir, purge_step=done_iters + 1)

    def after_step(self, state: LoopState) -> None:
        for record in state.readback:
            assert record.shape is not None  # ScheduleHook gives every step its shape
            step = record.global_iter + 1
            self.writer.add_scalar("Train/loss", record.stats.loss, step)
            self.writer.add_scalar("Train/lr", record.lr, step)
            self.writer.add_scalar("Train/batch_size", record.shape.batch_size, step)

    def after_epoch(self, state: LoopState) -> None:
        step = state.global_iter
        self.writer.add_scalar("Train/epoch_loss", state.epoch_stats["loss"], step)
        for key in ("top1_err", "top5_err", "map"):
            if state.val_metrics and key in state.val_metrics:
                self.writer.add_scalar(f"Val/{key}", state.val_metrics[key], step)

    def after_train(self, state: LoopState) -> None:
        self.writer.close()
