"""The objects of a training run, one builder each (``Trainer.__init__`` calls
them in order: the order is part of the run, as seeding comes first and every
builder after it may draw random numbers)."""

import logging
import os
from typing import Any, Dict, NamedTuple, Optional, Tuple

import simplejson
import torch
from fvcore.common.config import CfgNode
from torch import nn
from torch.utils.data import DataLoader

from slowfast.datasets import construct_loader, shutdown_workers
from slowfast.datasets.loader import BatchesFn
from slowfast.engine.bn_grouping import BNGrouping, convert_to_sub_bn
from slowfast.engine.precision import mixed_precision_dtype
from slowfast.models import build_model, describe_model
from slowfast.models.describe import ModelInfo
from slowfast.models.kernels.self_check import KernelVerdict
from slowfast.models.memory_format import choose_channels_last
from slowfast.models.model_stats import log_model_info
from slowfast.models.norm import check_split_kernels as norm_check_split_kernels
from slowfast.models.norm import set_bn_split_kernels
from slowfast.multigrid import MultigridSchedule, report
from slowfast.multigrid.periods import PeriodicWork
from slowfast.multigrid.schedule import check_epochs_have_iterations
from slowfast.utils import rng
from slowfast.utils.distributed import RunContext
from slowfast.utils.logging import log_json_stats

logger = logging.getLogger(__name__)


def uses_multigrid(cfg: CfgNode) -> bool:
    """Whether the run follows a multigrid schedule (long or short cycle)."""
    return bool(cfg.MULTIGRID.LONG_CYCLE or cfg.MULTIGRID.SHORT_CYCLE)


class RunSetup(NamedTuple):
    """What a run resolves from its config once, before any process builds
    anything: the launcher's checks make it and hand it to every process.

    Attributes:
        model: the configured model's description (``describe_model``).
        schedule: the training schedule, checked against the model; None
            when the run does not train.
    """

    model: ModelInfo
    schedule: Optional[MultigridSchedule]

    @classmethod
    def from_cfg(cls, cfg: CfgNode, world_size: int) -> "RunSetup":
        """Describes the model and, when training, builds its schedule.

        Raises:
            ValueError: a schedule the model cannot follow (one line, names
                the key).
        """
        model = describe_model(cfg)
        schedule = None
        if cfg.TRAIN.ENABLE:
            schedule = MultigridSchedule.from_cfg(cfg, world_size, model)
        return cls(model, schedule)


def build_model_for_run(
    cfg: CfgNode, ctx: RunContext, info: ModelInfo, schedule: MultigridSchedule
) -> Tuple[nn.Module, Optional[BNGrouping]]:
    """The model on this process's device, and its BN grouping.

    BN layers become sub-batch BN under multigrid or another BN.NORM_TYPE; the
    grouping then sets their splits and sync sizes as the schedule says.

    Args:
        cfg: the run's config.
        ctx: this process's run context.
        info: the model's description.
        schedule: the run's schedule (its BN splits and sync sizes).

    Returns:
        (model, BNGrouping or None for plain BN): the model is not wrapped.
    """
    channels_last = choose_channels_last(cfg, info)
    model = build_model(cfg, channels_last)
    if ctx.is_master and cfg.LOG_MODEL_INFO:
        with rng.preserved_rng():  # logging must not change the run
            log_model_info(model, cfg, info=info)
    bn = None
    if uses_multigrid(cfg) or cfg.BN.NORM_TYPE != "batchnorm":
        convert_to_sub_bn(model)
        set_bn_split_kernels(model, cfg.BN.SPLIT_KERNELS)
        if ctx.device.type == "cuda" and cfg.BN.SPLIT_KERNELS == "auto":
            check_split_kernels(cfg, ctx.device, channels_last, ctx.is_master)
        sync_sizes = {schedule.bn_sync_size(e) for e in range(schedule.max_epoch)}
        bn = BNGrouping(model, sync_sizes, ctx.world_size, ctx.rank)
    model.to(ctx.device)  # keeps build_model's memory format
    return model, bn


def check_split_kernels(
    cfg: CfgNode, device: torch.device, channels_last: bool, master: bool
) -> KernelVerdict:
    """Checks the split-BN kernels for the run's batches before training
    (``models/kernels/self_check.py``); the master records the verdict in
    ``json_stats.log`` (``"_type": "kernel_check"``).

    Args:
        cfg: the run's config (its autocast dtype).
        device: the model's device.
        channels_last: the batches are channels-last-3d.
        master: this process writes the run's statistics.

    Returns:
        KernelVerdict: whether the layers use the kernels.
    """
    dtype = mixed_precision_dtype(cfg, device) or torch.float32
    verdict = norm_check_split_kernels(device, dtype, channels_last)
    if master:
        log_json_stats(
            {
                "_type": "kernel_check",
                "split_bn": "triton" if verdict.ok else "native",
                "reason": verdict.reason,
                "seconds": round(verdict.seconds, 3),
                "dtype": str(dtype).removeprefix("torch."),
                "channels_last": channels_last,
            },
            cfg.OUTPUT_DIR,
        )
    return verdict


def wrap_for_processes(model: nn.Module, ctx: RunContext) -> nn.Module:
    """``model`` in DistributedDataParallel in a data-parallel run (several
    processes, or one in a process group), else itself."""
    if not ctx.distributed:
        return model
    device = ctx.device
    device_ids = [device.index] if device.type == "cuda" else None
    logger.info(
        "Model in DistributedDataParallel over %d process%s",
        ctx.world_size,
        "" if ctx.world_size == 1 else "es",
    )
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


class Loaders(NamedTuple):
    """The loaders of a training run.

    Attributes:
        train: the training loader (its batches follow the schedule).
        val: the val loader; None when TRAIN.EVAL_PERIOD is 0 (no val split).
        precise: the training split again for precise BN (the training
            loader's dataset, its own batches and workers); None without it.
    """

    train: DataLoader
    val: Optional[DataLoader]
    precise: Optional[DataLoader]

    def shutdown(self) -> None:
        """Stops the workers of every loader."""
        for loader in self:
            if loader is not None:
                shutdown_workers(loader)


def build_loaders(
    cfg: CfgNode, ctx: RunContext, info: ModelInfo, batches_fn: BatchesFn
) -> Loaders:
    """The training, val (TRAIN.EVAL_PERIOD > 0) and precise-BN loaders.

    Args:
        cfg: the frozen config.
        ctx: this process's run context (its shard of each split).
        info: the model's description (how clips are packed for it).
        batches_fn: ``(epoch, shard size) -> the epoch's batches`` of the training
            loader.
    """
    shard: Dict[str, Any] = dict(num_procs=ctx.world_size, rank=ctx.rank, model=info)
    train = construct_loader(cfg, "train", batches_fn=batches_fn, **shard)
    val = None
    if cfg.TRAIN.EVAL_PERIOD > 0:
        val = construct_loader(cfg, "val", **shard)
    precise = None
    if cfg.BN.USE_PRECISE_STATS:
        precise = construct_loader(cfg, "train", dataset=train.dataset, **shard)
    return Loaders(train, val, precise)


def check_iterations(
    cfg: CfgNode, schedule: MultigridSchedule, dataset_size: int
) -> None:
    """Fails when an epoch has no iteration; logs multigrid's iteration saving."""
    check_epochs_have_iterations(schedule, dataset_size)
    if not uses_multigrid(cfg):
        return
    total = schedule.total_iters(dataset_size)
    base = schedule.baseline_iters(dataset_size)
    logger.info(
        "%d iterations in all on %d clips: %.2fx fewer than the baseline's %d",
        total,
        dataset_size,
        base / total,
        base,
    )


def build_periodic_work(
    cfg: CfgNode, schedule: MultigridSchedule, dataset_size: int
) -> PeriodicWork:
    """The epochs that end with a checkpoint, a validation or precise BN
    (TRAIN.CHECKPOINT_PERIOD / EVAL_PERIOD in baseline epochs of training,
    ``multigrid/periods.py``), logged once with the baseline's counts."""
    args = (
        cfg.TRAIN.CHECKPOINT_PERIOD,
        cfg.TRAIN.EVAL_PERIOD,
        cfg.BN.USE_PRECISE_STATS,
    )
    work = PeriodicWork.for_schedule(schedule, dataset_size, *args)
    text = (
        f"end-of-epoch work (TRAIN.CHECKPOINT_PERIOD {args[0]}, TRAIN.EVAL_PERIOD "
        f"{args[1]}, in baseline epochs of {work.unit_iters} iterations): "
        f"{work.summary()}"
    )
    if uses_multigrid(cfg):
        baseline = PeriodicWork.for_schedule(
            schedule, dataset_size, *args, baseline=True
        )
        text += f"; its baseline's {baseline.summary()}"
    logger.info(text)
    return work


def write_run_files(cfg: CfgNode, schedule: MultigridSchedule) -> None:
    """Writes the resolved config and schedule to OUTPUT_DIR (config.yaml,
    schedule.json)."""
    os.makedirs(cfg.OUTPUT_DIR, exist_ok=True)
    with open(os.path.join(cfg.OUTPUT_DIR, "config.yaml"), "w") as f:
        f.write(cfg.dump())
    with open(os.path.join(cfg.OUTPUT_DIR, "schedule.json"), "w") as f:
        simplejson.dump(report.describe(schedule), f, indent=1)
