"""Training: one schedule object drives the loader, the LR and the BN groups."""

import logging
import math
import os
import time

import simplejson
import torch
import torch.distributed as dist
from fvcore.common.config import CfgNode
from fvcore.nn.precise_bn import update_bn_stats
from torch import nn

from slowfast.datasets import construct_loader, shutdown_workers
from slowfast.datasets.bad_data import BadDataMonitor
from slowfast.datasets.grid import SamplingGrid
from slowfast.engine import runtime
from slowfast.engine.bn_grouping import BNGrouping, convert_to_sub_bn
from slowfast.engine.evaluator import evaluate
from slowfast.engine.losses import get_loss_func
from slowfast.engine.meters import TrainMeter
from slowfast.engine.metrics import topk_errors
from slowfast.engine.optimizer import construct_optimizer, set_lr
from slowfast.engine.resume import resume_or_init, save
from slowfast.models import build_model
from slowfast.multigrid import MultigridSchedule
from slowfast.multigrid.checks import check_epochs_have_iterations
from slowfast.utils import checkpoint as cu
from slowfast.utils.distributed import procs_per_machine
from slowfast.utils.logging import log_json_stats, setup_logging
from slowfast.utils.model_stats import log_model_info, network_stride

logger = logging.getLogger(__name__)


class Trainer:
    """Owns the objects of one training run on one process.

    Args:
        cfg: the frozen config.
        rank: global rank of this process.
        world_size: number of processes.
    """

    def __init__(self, cfg: CfgNode, rank: int = 0, world_size: int = 1) -> None:
        self.cfg = cfg
        self.rank = rank
        self.world_size = world_size
        self.is_master = rank == 0
        runtime.check_data_dir(cfg)
        runtime.seed_everything(cfg.RNG_SEED + rank)
        self.device = runtime.get_device(cfg, rank % procs_per_machine(cfg))
        self.autocast = runtime.autocast_factory(cfg, self.device)

        self.schedule = MultigridSchedule.from_cfg(cfg, num_procs=world_size)
        multi_pathway = cfg.MODEL.ARCH in cfg.MODEL.MULTI_PATHWAY_ARCH
        self.schedule.validate(
            min_crop=network_stride(cfg),
            min_frames=cfg.SLOWFAST.ALPHA if multi_pathway else 1,
        )

        model = build_model(cfg)
        if self.is_master and cfg.LOG_MODEL_INFO:
            with runtime.preserved_rng():  # logging must not change the run
                log_model_info(model, cfg)
        self.bn = None
        multigrid = cfg.MULTIGRID.LONG_CYCLE or cfg.MULTIGRID.SHORT_CYCLE
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
            cfg, "train", shape_fn=self._shape_fn, num_procs=world_size, rank=rank
        )
        self.val_loader = construct_loader(cfg, "val", num_procs=world_size, rank=rank)
        self.precise_loader = None
        if cfg.BN.USE_PRECISE_STATS:
            self.precise_loader = construct_loader(
                cfg, "train", num_procs=world_size, rank=rank
            )
        self.dataset_size = len(self.train_loader.dataset)
        check_epochs_have_iterations(self.schedule, self.dataset_size)
        self.start_epoch = resume_or_init(
            cfg, self.model, self.optimizer, self.scaler, rank, world_size
        )
        # Derived, not stored: TensorBoard steps never go backwards on resume.
        self.global_iter = sum(self._iters(e) for e in range(self.start_epoch))
        self.writer = None
        if self.is_master:
            self._write_run_files()
            if cfg.TENSORBOARD.ENABLE:
                from torch.utils.tensorboard import SummaryWriter

                log_dir = cfg.TENSORBOARD.LOG_DIR or os.path.join(
                    cfg.OUTPUT_DIR, f"runs-{cfg.TRAIN.DATASET}"
                )
                self.writer = SummaryWriter(log_dir, purge_step=self.global_iter)

    # ------------------------------------------------------------------ set-up
    def _shape_fn(self, epoch: int, it: int):
        """Per-process batch size and sampling grid of an iteration (loader)."""
        shape = self.schedule.iter_shape(epoch, it)
        grid = SamplingGrid(
            shape.num_frames,
            shape.crop_size,
            *shape.sampling_rate,
            *shape.jitter_scales,
        )
        return shape.per_proc_batch, grid

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

    # ------------------------------------------------------------------- loop
    def train(self) -> None:
        """Runs the remaining epochs of the schedule."""
        max_epoch = self.schedule.max_epoch
        logger.info(
            "training epochs %d..%d of %d (%d clips per epoch)",
            self.start_epoch + 1,
            max_epoch,
            max_epoch,
            self.dataset_size,
        )
        try:
            for epoch in range(self.start_epoch, max_epoch):
                self.train_epoch(epoch)
                self.end_epoch(epoch)
        finally:
            if self.writer is not None:
                self.writer.close()
            for loader in (self.train_loader, self.val_loader, self.precise_loader):
                if loader is not None:
                    shutdown_workers(loader)

    def end_epoch(self, epoch: int) -> None:
        """Precise BN, checkpoint and validation, as their periods say.

        Evaluation runs with the training RNG states put aside, so a resumed
        run (which skips it) draws the same random numbers afterwards.

        Args:
            epoch: index of the finished epoch.
        """
        cfg = self.cfg
        rng = runtime.get_rng_state()
        last = epoch + 1 == self.schedule.max_epoch
        do_eval = (epoch + 1) % cfg.TRAIN.EVAL_PERIOD == 0 or last
        do_ckpt = (epoch + 1) % cfg.TRAIN.CHECKPOINT_PERIOD == 0 or last
        if not (do_eval or do_ckpt):
            return
        with runtime.preserved_rng():
            if self.precise_loader is not None:
                self.precise_bn(epoch)
        self.sync_buffers()
        if do_ckpt:
            save(
                cfg,
                self.model,
                self.optimizer,
                self.scaler,
                epoch,
                rng,
                self.rank,
                self.world_size,
            )
        if do_eval:
            with runtime.preserved_rng():
                self.validate(epoch)

    def train_epoch(self, epoch: int) -> None:
        """Trains one pass over the training set at the schedule's shapes.

        Args:
            epoch: epoch index.
        """
        cfg, sched = self.cfg, self.schedule
        self.model.train()
        self.train_loader.batch_sampler.set_epoch(epoch)
        iters = len(self.train_loader)
        later = sum(self._iters(e) for e in range(epoch + 1, sched.max_epoch))
        meter = TrainMeter(cfg.LOG_PERIOD, iters, later)
        monitor = BadDataMonitor(self.dataset_size, cfg.DATA.MAX_BAD_FRACTION)
        entry = sched.entry_at(epoch)
        epoch_str = f"{epoch + 1}/{sched.max_epoch}"
        logger.info(
            "epoch %s, stage %d, shape %dx%dx%d, %d iterations",
            epoch_str,
            entry.lr_stage,
            cfg.TRAIN.BATCH_SIZE * entry.batch_factor,
            entry.num_frames,
            entry.crop_size,
            iters,
        )
        lr = sched.lr_at(epoch)
        tic = time.perf_counter()
        for it, (inputs, labels, _index, extras) in enumerate(self.train_loader):
            data_time = time.perf_counter() - tic
            shape = sched.iter_shape(epoch, it)
            if inputs[0].shape[0] != shape.per_proc_batch:
                raise RuntimeError(
                    f"epoch {epoch_str} iteration {it}: loader gave "
                    f"{inputs[0].shape[0]} clips, schedule expects "
                    f"{shape.per_proc_batch}"
                )
            if self.bn is not None:
                self.bn.apply(shape.bn_splits, sched.bn_sync_size(epoch))
            lr = sched.lr_at(epoch + it / iters)
            set_lr(self.optimizer, lr)
            loss, top1, top5, failed = self._step(inputs, labels, extras["num_failed"])
            if not math.isfinite(loss):
                raise FloatingPointError(
                    f"loss is {loss} at epoch {epoch_str}, iteration {it} "
                    f"(global iteration {self.global_iter}); the last good "
                    f"checkpoint is {cu.get_last_checkpoint(cfg.OUTPUT_DIR)}"
                )
            monitor.update(int(failed))
            compute_time = time.perf_counter() - tic - data_time
            top = (None, None) if cfg.DATA.MULTI_LABEL else (top1, top5)
            shape_str = f"{shape.batch_size}x{shape.num_frames}x{shape.crop_size}"
            meter.add(loss, shape.batch_size, data_time, compute_time, *top, shape_str)
            self.global_iter += 1
            if (it + 1) % cfg.LOG_PERIOD == 0:
                line = meter.iter_stats(epoch_str, it, lr, shape_str)
                log_json_stats(line, cfg.OUTPUT_DIR, self.rank)
            if self.writer is not None:
                step = self.global_iter
                self.writer.add_scalar("Train/loss", loss, step)
                self.writer.add_scalar("Train/lr", lr, step)
                self.writer.add_scalar("Train/batch_size", shape.batch_size, step)
            tic = time.perf_counter()
        line = meter.epoch_stats(epoch_str, lr)
        line["bad_videos"] = monitor.end_epoch(epoch)
        log_json_stats(line, cfg.OUTPUT_DIR, self.rank)
        if self.writer is not None:
            self.writer.add_scalar("Train/epoch_loss", line["loss"], self.global_iter)

    def _step(self, inputs, labels, num_failed) -> list[float]:
        """One forward/backward/update.

        The statistics are reduced over processes right after the forward
        pass, so that a non-finite loss stops every process at the same
        iteration, before any gradient all-reduce.

        Returns:
            [loss, top1_err, top5_err, failed videos] over all processes.
        """
        inputs = [x.to(self.device, non_blocking=True) for x in inputs]
        labels = labels.to(self.device, non_blocking=True)
        with self.autocast():
            preds = self.model(inputs)
            loss = self.loss_fn(preds.float(), labels)
        stats = self._reduce_stats(loss.detach(), preds.detach(), labels, num_failed)
        if not math.isfinite(stats[0]):
            return stats
        self.optimizer.zero_grad(set_to_none=True)
        clip = self.cfg.SOLVER.CLIP_GRAD_L2NORM
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            if clip:
                self.scaler.unscale_(self.optimizer)
                nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.optimizer.step()
        return stats

    def _reduce_stats(self, loss, preds, labels, num_failed) -> list[float]:
        """[loss, top1_err, top5_err, failed videos] averaged/summed over processes."""
        if self.cfg.DATA.MULTI_LABEL:
            top1, top5 = 0.0, 0.0
        else:
            top1, top5 = topk_errors(preds.float(), labels, (1, 5))
        failed = float(torch.as_tensor(num_failed).sum())
        stats = torch.tensor([loss.item(), top1, top5, failed], dtype=torch.float64)
        if self.world_size > 1:
            stats = stats.to(self.device)
            dist.all_reduce(stats)
            stats[:3] /= self.world_size
        return stats.cpu().tolist()

    # ----------------------------------------------------------- epoch ends
    def precise_bn(self, epoch: int) -> None:
        """Recomputes BN statistics at the base shape (BN.USE_PRECISE_STATS).

        Args:
            epoch: the finished epoch (selects the clips used).
        """
        loader = self.precise_loader
        loader.batch_sampler.set_epoch(epoch)
        if self.bn is not None:
            self.bn.apply(1, 1)
        device = self.device

        def inputs():
            for batch, *_ in loader:
                yield [x.to(device) for x in batch]

        num = min(self.cfg.BN.NUM_BATCHES_PRECISE, len(loader))
        update_bn_stats(self.net, inputs(), num)

    def sync_buffers(self) -> None:
        """Averages BN running statistics over processes (they drift apart)."""
        if self.world_size == 1:
            return
        with torch.no_grad():
            for buf in self.net.buffers():
                if buf.is_floating_point():
                    dist.all_reduce(buf)
                    buf /= self.world_size

    def validate(self, epoch: int) -> dict:
        """One view per video of the val split; logs and returns the metrics."""
        metrics, _, _ = evaluate(
            self.net, self.val_loader, self.cfg, self.device, self.autocast
        )
        stats = {
            "_type": "val_epoch",
            "epoch": f"{epoch + 1}/{self.schedule.max_epoch}",
        }
        stats.update(metrics)
        log_json_stats(stats, self.cfg.OUTPUT_DIR, self.rank)
        if self.writer is not None:
            for key in ("top1_err", "top5_err", "map"):
                if key in metrics:
                    self.writer.add_scalar(f"Val/{key}", metrics[key], self.global_iter)
        return metrics


def train(cfg: CfgNode, rank: int = 0, world_size: int = 1) -> None:
    """Entry point of a training process (see ``slowfast.utils.distributed``).

    Args:
        cfg: the frozen config.
        rank: global rank.
        world_size: number of processes.
    """
    setup_logging(cfg.OUTPUT_DIR, rank)
    Trainer(cfg, rank, world_size).train()
