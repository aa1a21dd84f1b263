"""The metric writers of a training run: ``json_stats.log`` and TensorBoard.

Both are hooks (``Trainer.build_hooks`` places them); they read ``LoopState``
and write, one job each.
"""

import logging
from typing import Callable, Optional

from slowfast.engine.hooks import epoch_str, shape_str
from slowfast.engine.loop import HookBase, LoopState, StepRecord
from slowfast.engine.meters import TrainMeter, data_wait_text
from slowfast.utils import distributed as du
from slowfast.utils.logging import log_json_stats

logger = logging.getLogger(__name__)


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
        stats, shape = record.stats, record.shape
        top = (None, None) if self.multi_label else (stats.top1_err, stats.top5_err)
        self.meter.add(
            stats.loss,
            shape.batch_size,
            record.data_time,
            record.compute_time,
            *top,
            shape_str(shape),
        )
        if (record.iter + 1) % self.log_period == 0:
            line = self.meter.iter_stats(
                epoch_str(state), record.iter, record.lr, shape_str(shape)
            )
            log_json_stats(line, self.output_dir, self.rank)

    def after_epoch(self, state: LoopState) -> None:
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
