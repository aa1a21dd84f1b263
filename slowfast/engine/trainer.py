"""Training: one schedule object drives the loader, the LR and the BN groups.

``Trainer`` builds the objects of a run (model, optimizer, loaders, schedule)
and its hooks (``build_hooks``), then hands them to ``loop.TrainLoop``.
"""

import logging
import os
from typing import List, Optional

import simplejson
from fvcore.common.config import CfgNode
from torch import nn

from slowfast.config.derived import global_batch_size, stop_signals
from slowfast.datasets import construct_loader, shutdown_workers
from slowfast.datasets.grid import SamplingGrid
from slowfast.engine import runtime
from slowfast.engine.bn_grouping import BNGrouping, convert_to_sub_bn
from slowfast.engine.hooks import (
    BadDataHook,
    BufferSyncHook,
    CheckpointHook,
    EvalHook,
    JsonMetricsWriter,
    NonFiniteGuard,
    PreciseBNHook,
    ScheduleHook,
    TensorBoardWriter,
    is_due,
)
from slowfast.engine.loop import HookBase, LoopState, TrainLoop
from slowfast.engine.losses import get_loss_func
from slowfast.engine.memory_format import choose_channels_last
from slowfast.engine.optimizer import construct_optimizer
from slowfast.engine.preemption import PreemptionHook, StopSignals
from slowfast.engine.resume import resume_or_init
from slowfast.engine.step import TrainStep
from slowfast.models import build_model, describe_model
from slowfast.models.model_stats import log_model_info
from slowfast.multigrid import MultigridSchedule
from slowfast.multigrid.checks import check_epochs_have_iterations
from slowfast.utils.distributed import RunContext, all_gather_objects
from slowfast.utils.logging import setup_logging

logger = logging.getLogger(__name__)


class Trainer:
    """Owns the objects of one training run on one process.

    Args:
        cfg: the frozen config.
        ctx: this process's run context (rank, world size, device).
        stop: the stop-signal catcher (installed by ``train`` before the run is
            built, so that a signal during set-up stops it after one
            iteration); None: one for TRAIN.STOP_SIGNALS, installed with the loop.
    """

    def __init__(
        self, cfg: CfgNode, ctx: RunContext, stop: Optional[StopSignals] = None
    ) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.stop = stop or StopSignals(stop_signals(cfg))
        rank, world_size = ctx.rank, ctx.world_size
        runtime.check_data_dir(cfg)
        runtime.seed_everything(cfg.RNG_SEED + rank)
        self.device = ctx.device
        self.autocast = runtime.autocast_factory(cfg, self.device)

        self.schedule = MultigridSchedule.from_cfg(cfg, num_procs=world_size)
        info = describe_model(cfg)
        multigrid = cfg.MULTIGRID.LONG_CYCLE or cfg.MULTIGRID.SHORT_CYCLE
        if multigrid and not info.varying_shapes:
            raise ValueError(
                f"MODEL.MODEL_NAME = {cfg.MODEL.MODEL_NAME!r} takes clips of one "
                "shape only; multigrid (MULTIGRID.LONG_CYCLE / SHORT_CYCLE) needs "
                "a model that takes varying shapes"
            )
        self.schedule.validate(min_crop=info.spatial_stride, min_frames=info.min_frames)

        model = build_model(cfg, choose_channels_last(cfg))
        if ctx.is_master and cfg.LOG_MODEL_INFO:
            with runtime.preserved_rng():  # logging must not change the run
                log_model_info(model, cfg)
        self.bn = None
        if multigrid or cfg.BN.NORM_TYPE != "batchnorm":
            convert_to_sub_bn(model)
            sync_sizes = {
                self.schedule.bn_sync_size(e) for e in range(self.schedule.max_epoch)
            }
            self.bn = BNGrouping(model, sync_sizes, world_size, rank)
        model.to(self.device)  # keeps build_model's memory format
        self.net = model  # unwrapped; self.model may be its DDP wrapper
        self.model = model
        if world_size > 1:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = nn.parallel.DistributedDataParallel(
                model, device_ids=device_ids
            )
        self.optimizer = construct_optimizer(self.model, cfg)
        self.scaler = runtime.make_grad_scaler(cfg, self.device)
        self.loss_fn = get_loss_func(cfg.MODEL.LOSS_FUNC)

        self.train_loader = construct_loader(
            cfg, "train", plan_fn=self._plan, num_procs=world_size, rank=rank
        )
        self.val_loader = None  # TRAIN.EVAL_PERIOD 0: no validation, no val split
        if cfg.TRAIN.EVAL_PERIOD > 0:
            self.val_loader = construct_loader(
                cfg, "val", num_procs=world_size, rank=rank
            )
        self.precise_loader = None
        if cfg.BN.USE_PRECISE_STATS:
            self.precise_loader = construct_loader(
                cfg, "train", num_procs=world_size, rank=rank
            )
        self.dataset_size = len(self.train_loader.dataset)
        check_epochs_have_iterations(self.schedule, self.dataset_size)
        if multigrid:
            total = self.schedule.total_iters(self.dataset_size)
            base = self.schedule.baseline_iters(self.dataset_size)
            logger.info(
                "%d iterations in all on %d clips: %.2fx fewer than the baseline's %d",
                total,
                self.dataset_size,
                base / total,
                base,
            )
        start = resume_or_init(cfg, ctx, self.model, self.optimizer, self.scaler)
        self.start_epoch, self.start_iter = start.epoch, start.iteration
        self.hook_states = start.hook_states
        done = sum(self._iters(e) for e in range(self.start_epoch))
        self.global_iter = done + self.start_iter
        if ctx.is_master:
            self._write_run_files()

    # ------------------------------------------------------------------ set-up
    def _plan(self, epoch: int, shard_size: int) -> list:
        """The loader's batch plan: the schedule's, with a sampling grid per shape."""
        grids = {}
        plan = []
        for shape in self.schedule.epoch_plan(epoch, shard_size):
            if id(shape) not in grids:
                grids[id(shape)] = SamplingGrid.from_iter_shape(shape)
            plan.append((shape.per_proc_batch, grids[id(shape)]))
        return plan

    def _iters(self, epoch: int) -> int:
        """Iterations of each process in ``epoch`` (equals the loader's length)."""
        return self.schedule.iters_in_epoch(epoch, self.dataset_size)

    def _write_run_files(self) -> None:
        """Writes the resolved config and schedule to OUTPUT_DIR."""
        os.makedirs(self.cfg.OUTPUT_DIR, exist_ok=True)
        with open(os.path.join(self.cfg.OUTPUT_DIR, "config.yaml"), "w") as f:
            f.write(self.cfg.dump())
        with open(os.path.join(self.cfg.OUTPUT_DIR, "schedule.json"), "w") as f:
            simplejson.dump(self.schedule.describe(), f, indent=1)

    # ------------------------------------------------------------------ hooks
    def build_hooks(self) -> List[HookBase]:
        """The run's hooks, in the order they act (its table of contents)."""
        cfg, sched = self.cfg, self.schedule

        def eval_or_checkpoint_due(epoch: int) -> bool:
            last = sched.max_epoch
            return is_due(epoch, cfg.TRAIN.EVAL_PERIOD, last) or is_due(
                epoch, cfg.TRAIN.CHECKPOINT_PERIOD, last
            )

        def iters_after(epoch: int) -> int:
            return sum(self._iters(e) for e in range(epoch + 1, sched.max_epoch))

        hooks = [
            ScheduleHook(
                sched,
                self.train_loader.batch_sampler,
                self.optimizer,
                self.bn,
                global_batch_size(cfg),
            ),
            NonFiniteGuard(cfg.OUTPUT_DIR),
            BadDataHook(self.dataset_size, cfg.DATA.MAX_BAD_FRACTION),
            JsonMetricsWriter(
                cfg.OUTPUT_DIR,
                self.ctx,
                cfg.LOG_PERIOD,
                iters_after,
                cfg.DATA.MULTI_LABEL,
            ),
        ]
        if self.precise_loader is not None:
            hooks.append(
                PreciseBNHook(
                    self.net,
                    self.precise_loader,
                    self.bn,
                    cfg.BN.NUM_BATCHES_PRECISE,
                    self.ctx,
                    eval_or_checkpoint_due,
                )
            )
        checkpoint = CheckpointHook(
            cfg, self.ctx, self.model, self.optimizer, self.scaler
        )
        hooks += [
            BufferSyncHook(self.net, self.ctx, eval_or_checkpoint_due),
            checkpoint,
        ]
        if self.val_loader is not None:
            hooks.append(
                EvalHook(cfg, self.ctx, self.net, self.val_loader, self.autocast)
            )
        if self.ctx.is_master and cfg.TENSORBOARD.ENABLE:
            log_dir = cfg.TENSORBOARD.LOG_DIR or os.path.join(
                cfg.OUTPUT_DIR, f"runs-{cfg.TRAIN.DATASET}"
            )
            # Derived, not stored: TensorBoard steps never go backwards on resume.
            hooks.append(TensorBoardWriter(log_dir, purge_step=self.global_iter))
        # Last: a mid-epoch checkpoint holds what the other hooks did this step.
        hooks.append(
            PreemptionHook(
                self.stop,
                lambda state: checkpoint.save(state, mid_epoch=True),
                self.ctx,
                cfg.TRAIN.CHECKPOINT_MINUTES,
            )
        )
        return hooks

    # ------------------------------------------------------------------- loop
    def train(self) -> None:
        """Runs the remaining epochs of the schedule."""
        max_epoch = self.schedule.max_epoch
        if self.start_epoch >= max_epoch:
            try:
                self._validate_if_missing()
            finally:
                self._shutdown_loaders()
            return
        logger.info(
            "training epochs %d..%d of %d (%d clips per epoch)%s",
            self.start_epoch + 1,
            max_epoch,
            max_epoch,
            self.dataset_size,
            f", epoch {self.start_epoch + 1} from iteration {self.start_iter + 1}"
            if self.start_iter
            else "",
        )
        step = TrainStep(
            self.model,
            self.optimizer,
            self.loss_fn,
            self.ctx,
            self.autocast,
            self.scaler,
            self.cfg.SOLVER.CLIP_GRAD_L2NORM,
            self.cfg.DATA.MULTI_LABEL,
        )
        hooks = self.build_hooks()
        for hook in hooks:
            if isinstance(hook, CheckpointHook):
                hook.hooks = hooks  # the final list, a subclass's hooks included
            saved = self.hook_states.get(type(hook).__name__)
            if saved:
                hook.load_state_dict(saved)
        loop = TrainLoop(step, self.train_loader, self._iters, hooks)
        try:
            loop.run(self.start_epoch, max_epoch, self.global_iter, self.start_iter)
        finally:
            self._shutdown_loaders()

    def _shutdown_loaders(self) -> None:
        for loader in (self.train_loader, self.val_loader, self.precise_loader):
            if loader is not None:
                shutdown_workers(loader)

    def _validate_if_missing(self) -> None:
        """Every epoch is trained: runs the final validation if the run that
        trained the last epoch was stopped before logging it."""
        if self.val_loader is None:
            return
        max_epoch = self.schedule.max_epoch
        done = False
        if self.ctx.is_master:
            path = os.path.join(self.cfg.OUTPUT_DIR, "json_stats.log")
            if os.path.exists(path):
                with open(path) as f:
                    lines = [simplejson.loads(line) for line in f if line.strip()]
                done = any(
                    line.get("_type") == "val_epoch"
                    and line.get("epoch") == f"{max_epoch}/{max_epoch}"
                    for line in lines
                )
        if all_gather_objects(done)[0]:
            logger.info("all %d epochs are trained and validated", max_epoch)
            return
        logger.info(
            "all %d epochs are trained; running the final validation, which the "
            "run that trained the last epoch did not log",
            max_epoch,
        )
        state = LoopState(max_epoch=max_epoch, global_iter=self.global_iter)
        state.epoch = max_epoch - 1
        hook = EvalHook(self.cfg, self.ctx, self.net, self.val_loader, self.autocast)
        hook.after_epoch(state)


def train(cfg: CfgNode, rank: int = 0, world_size: int = 1) -> None:
    """Entry point of a training process (see ``slowfast.utils.distributed``).

    Args:
        cfg: the frozen config.
        rank: global rank.
        world_size: number of processes.
    """
    setup_logging(cfg.OUTPUT_DIR, rank)
    stop = StopSignals(stop_signals(cfg))
    stop.install()
    try:
        Trainer(cfg, RunContext.create(cfg, rank, world_size), stop).train()
    finally:
        stop.restore()
