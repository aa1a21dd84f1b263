"""Training: one schedule object drives the loader, the LR and the BN groups.

``Trainer`` builds the objects of a run (model, optimizer, loaders, schedule;
one builder of ``engine/builders.py`` each, called in order) and its hooks
(``build_hooks``), then hands them to ``loop.TrainLoop``. What the run has
trained and validated goes to ``run_state.json`` (``engine/run_state.py``).
"""

import logging
import os
from typing import List, Optional, Sized, cast

from fvcore.common.config import CfgNode

from slowfast.checkpoint.files import CheckpointError
from slowfast.config.derived import global_batch_size, stop_signals
from slowfast.datasets import BatchSpec, GridBatchSampler
from slowfast.engine import precision
from slowfast.engine.builders import (
    RunSetup,
    build_loaders,
    build_model_for_run,
    build_periodic_work,
    check_iterations,
    wrap_for_processes,
    write_run_files,
)
from slowfast.engine.checkpointer import Checkpointer
from slowfast.engine.evaluator import Evaluator
from slowfast.engine.graphed_step import GraphedTrainStep
from slowfast.engine.hooks import (
    BadDataHook,
    BufferSyncHook,
    CheckpointHook,
    EvalHook,
    JsonMetricsWriter,
    NonFiniteGuard,
    PreciseBNHook,
    RunStateHook,
    ScheduleHook,
    TensorBoardWriter,
)
from slowfast.engine.loop import HookBase, LoopState, TrainLoop
from slowfast.engine.preemption import PreemptionHook, StopSignals
from slowfast.engine.run_state import RunStateError, RunStateRecorder
from slowfast.engine.step import TrainStep
from slowfast.solver.losses import get_loss_func
from slowfast.solver.optimizer import construct_optimizer
from slowfast.utils import distributed as du
from slowfast.utils import rng
from slowfast.utils.distributed import RunContext
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
        setup: the model's description and the schedule, as the launcher's
            checks resolved them (``RunSetup``); None: resolved here.

    Attributes:
        model: the model itself, never wrapped: what is validated and whose
            BN statistics are recomputed or averaged over processes.
        wrapped_model: what the training step calls, the optimizer is built
            on and checkpoints are saved from: ``model`` in
            DistributedDataParallel with several processes, else ``model``
            itself (the same object).
        loaders: the training, val and precise-BN loaders (also as
            ``train_loader``, ``val_loader`` and ``precise_loader``).
        run_state: records the run's trained and validated epochs
            (``run_state.json``).
        periods: the epochs that end with a checkpoint, a validation or
            precise BN (``multigrid.periods.PeriodicWork``).
        start_epoch, start_iter, global_iter: where training continues.
    """

    def __init__(
        self,
        cfg: CfgNode,
        ctx: RunContext,
        stop: Optional[StopSignals] = None,
        setup: Optional[RunSetup] = None,
    ) -> None:
        self.cfg, self.ctx, self.device = cfg, ctx, ctx.device
        self.stop = stop or StopSignals(stop_signals(cfg))
        rng.seed_everything(cfg.RNG_SEED + ctx.rank)
        self.autocast = precision.autocast_factory(cfg, self.device)
        setup = setup or RunSetup.from_cfg(cfg, ctx.world_size)
        if setup.schedule is None:
            raise ValueError("a training run's setup has a schedule (TRAIN.ENABLE)")
        self.model_info, self.schedule = setup.model, setup.schedule
        self.model, self.bn = build_model_for_run(
            cfg, ctx, self.model_info, self.schedule
        )
        self.wrapped_model = wrap_for_processes(self.model, ctx)
        self.optimizer = construct_optimizer(self.wrapped_model, cfg)
        self.scaler = precision.make_grad_scaler(cfg, self.device)
        self.checkpointer = Checkpointer(
            cfg, ctx, self.wrapped_model, self.optimizer, self.scaler
        )
        self.loss_fn = get_loss_func(cfg.MODEL.LOSS_FUNC)
        self.loaders = build_loaders(cfg, ctx, self.model_info, self._batches)
        self.train_loader, self.val_loader, self.precise_loader = self.loaders
        self.dataset_size = len(cast(Sized, self.train_loader.dataset))
        check_iterations(cfg, self.schedule, self.dataset_size)
        self.periods = build_periodic_work(cfg, self.schedule, self.dataset_size)
        self.run_state = RunStateRecorder(cfg.OUTPUT_DIR, ctx.is_master)
        self.resume()
        if ctx.is_master:
            write_run_files(cfg, self.schedule)

    # ------------------------------------------------------------------ set-up
    def resume(self) -> None:
        """Loads the newest checkpoint of OUTPUT_DIR (or the initial weights)
        and sets where training continues."""
        start = self.checkpointer.resume_or_init()
        self.start_epoch, self.start_iter = start.epoch, start.iteration
        self.hook_states = start.hook_states
        in_schedule = start.epoch < self.schedule.max_epoch
        epoch_iters = self._iters(start.epoch) if in_schedule else 0
        if start.iteration > epoch_iters:  # equal: the epoch's end is left to do
            raise CheckpointError(
                f"the checkpoint was saved after iteration {start.iteration} of epoch "
                f"{start.epoch + 1}, which has {epoch_iters} in this run (another "
                "batch size, dataset or process count); set "
                "TRAIN.CHECKPOINT_EPOCH_RESET True to start from its weights"
            )
        done = sum(self._iters(e) for e in range(self.start_epoch))
        self.global_iter = done + self.start_iter

    def _batches(self, epoch: int, shard_size: int) -> List[BatchSpec]:
        """The loader's batches: the size and grid of each of the epoch's
        iterations, as the schedule says (``ScheduleHook`` asks the schedule
        for the same iterations' shapes)."""
        shapes = self.schedule.epoch_batches(epoch, shard_size)
        return [BatchSpec(shape.per_proc_batch, shape.grid) for shape in shapes]

    def _iters(self, epoch: int) -> int:
        """Iterations of each process in ``epoch`` (equals the loader's length)."""
        return self.schedule.iters_in_epoch(epoch, self.dataset_size)

    def eval_hook(self) -> EvalHook:
        """Validation of ``model`` on the val loader when ``periods`` says."""
        cfg = self.cfg
        assert self.val_loader is not None  # callers check there is one
        evaluator = Evaluator.from_cfg(
            cfg, self.model, self.val_loader, self.device, self.autocast
        )
        return EvalHook(
            evaluator,
            self.periods.validation_due,
            cfg.OUTPUT_DIR,
            self.ctx.rank,
            self.run_state,
        )

    # ------------------------------------------------------------------ hooks
    def build_hooks(self) -> List[HookBase]:
        """The run's hooks, in the order they act (its table of contents)."""
        cfg, sched, periods = self.cfg, self.schedule, self.periods

        def iters_after(epoch: int) -> int:
            return sum(self._iters(e) for e in range(epoch + 1, sched.max_epoch))

        batch_sampler = self.train_loader.batch_sampler
        assert isinstance(batch_sampler, GridBatchSampler)  # the training loader's
        hooks = [
            ScheduleHook(
                sched,
                batch_sampler,
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
            RunStateHook(self.run_state),
        ]
        if self.precise_loader is not None:
            hooks.append(
                PreciseBNHook(
                    self.model,
                    self.precise_loader,
                    self.bn,
                    cfg.BN.NUM_BATCHES_PRECISE,
                    self.ctx,
                    periods.precise_bn_due,
                )
            )
        checkpoint = CheckpointHook(self.checkpointer, periods.checkpoint_due)
        hooks += [
            BufferSyncHook(self.model, self.ctx, periods.end_of_epoch),
            checkpoint,
        ]
        if self.val_loader is not None:
            hooks.append(self.eval_hook())
        if self.ctx.is_master and cfg.TENSORBOARD.ENABLE:
            log_dir = cfg.TENSORBOARD.LOG_DIR or os.path.join(
                cfg.OUTPUT_DIR, f"runs-{cfg.TRAIN.DATASET}"
            )
            # Derived, not stored: TensorBoard steps never go backwards on resume.
            hooks.append(TensorBoardWriter(log_dir, done_iters=self.global_iter))
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
        du.decided_on_master(
            self.ctx.is_master,
            lambda: self.run_state.training_from(self.start_epoch),
            (RunStateError,),
        )
        step_class = GraphedTrainStep if self.cfg.TRAIN.CUDA_GRAPHS else TrainStep
        step = step_class(
            self.wrapped_model,
            self.optimizer,
            self.loss_fn,
            self.ctx,
            self.autocast,
            self.scaler,
            self.cfg.SOLVER.CLIP_GRAD_L2NORM,
            self.cfg.DATA.MULTI_LABEL,
        )
        loop = TrainLoop(
            step,
            self.train_loader,
            self._iters,
            self.build_hooks(),
            sync_period=self.cfg.LOG_PERIOD,
        )
        loop.load_hook_states(self.hook_states)
        try:
            loop.run(self.start_epoch, max_epoch, self.global_iter, self.start_iter)
        finally:
            self._shutdown_loaders()

    def _shutdown_loaders(self) -> None:
        self.loaders.shutdown()

    def _validate_if_missing(self) -> None:
        """Every epoch is trained: runs the final validation if the run that
        trained the last epoch was stopped before logging it."""
        if self.val_loader is None:
            return
        max_epoch = self.schedule.max_epoch
        done = du.decided_on_master(
            self.ctx.is_master,
            lambda: max_epoch in self.run_state.read().validated_epochs,
            (RunStateError,),
        )
        if done:
            logger.info("all %d epochs are trained and validated", max_epoch)
            return
        logger.info(
            "all %d epochs are trained; running the final validation, which the "
            "run that trained the last epoch did not log",
            max_epoch,
        )
        state = LoopState(max_epoch=max_epoch, global_iter=self.global_iter)
        state.epoch = max_epoch - 1
        self.eval_hook().validate(state)


def train(
    cfg: CfgNode,
    rank: int = 0,
    world_size: int = 1,
    setup: Optional[RunSetup] = None,
) -> None:
    """What a training process runs (see ``slowfast.launch.spawn``).

    Args:
        cfg: the frozen config.
        rank: global rank.
        world_size: number of processes.
        setup: what the launcher's checks resolved (None: resolved here).
    """
    setup_logging(cfg.OUTPUT_DIR, rank)
    stop = StopSignals(stop_signals(cfg))
    stop.install()
    try:
        ctx = RunContext.create(cfg, rank, world_size)
        Trainer(cfg, ctx, stop, setup).train()
    finally:
        stop.restore()
