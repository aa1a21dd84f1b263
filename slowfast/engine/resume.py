"""Where a run starts: the newest checkpoint of OUTPUT_DIR or the initial weights."""

import logging
from dataclasses import dataclass, field
from typing import Optional

import torch
from fvcore.common.config import CfgNode
from torch import nn

from slowfast.engine import runtime
from slowfast.utils import checkpoint as cu
from slowfast.utils import distributed as du
from slowfast.utils.logging import log_json_stats

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResumePoint:
    """Where a run continues.

    Attributes:
        epoch: index of the first epoch to train.
        iteration: iterations of that epoch already done (a mid-epoch
            checkpoint), else 0.
        hook_states: the hooks' states saved with the checkpoint (class name
            -> state; empty when starting afresh or initialising from another run).
    """

    epoch: int = 0
    iteration: int = 0
    hook_states: dict = field(default_factory=dict)


def resume_or_init(
    cfg: CfgNode,
    ctx: du.RunContext,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Optional[object],
) -> ResumePoint:
    """Loads the state a run continues from; returns where it continues.

    With TRAIN.AUTO_RESUME the newest valid checkpoint of OUTPUT_DIR restores
    model, optimizer, scaler and this process's RNG states. Otherwise
    TRAIN.CHECKPOINT_FILE_PATH, when set, initialises the model (and, unless
    TRAIN.CHECKPOINT_EPOCH_RESET, the optimizer and the epoch), as the
    reference does.

    Args:
        cfg: the frozen config.
        ctx: this process's run context.
        model: the model (DDP-wrapped with several processes).
        optimizer: the optimizer.
        scaler: the GradScaler, or None.

    Returns:
        ResumePoint: the first epoch (and iteration inside it) to train.
    """
    path = cu.get_last_checkpoint(cfg.OUTPUT_DIR) if cfg.TRAIN.AUTO_RESUME else None
    if path is not None:
        info = cu.load_checkpoint(
            path,
            model,
            data_parallel=ctx.distributed,
            optimizer=optimizer,
            scaler=scaler,
        )
        states = info.get("rng_state")
        if states:
            runtime.set_rng_state(states[ctx.rank % len(states)])
        iteration = int(info.get("iteration_in_epoch", 0))
        where = f"epoch {info['epoch'] + 1} done"
        if iteration:
            where = f"epoch {info['epoch'] + 2}, iteration {iteration} done"
        logger.info("resumed from %s (%s)", path, where)
        # Marks where the replayed epochs' lines start in json_stats.log.
        line = {"_type": "resume", "checkpoint": path, "epoch": info["epoch"] + 1}
        if iteration:
            line["iteration_in_epoch"] = iteration
        log_json_stats(line, cfg.OUTPUT_DIR, ctx.rank)
        return ResumePoint(info["epoch"] + 1, iteration, info.get("hook_states") or {})
    if cfg.TRAIN.CHECKPOINT_FILE_PATH:
        reset = cfg.TRAIN.CHECKPOINT_EPOCH_RESET
        info = cu.load_checkpoint(
            cfg.TRAIN.CHECKPOINT_FILE_PATH,
            model,
            data_parallel=ctx.distributed,
            optimizer=None if reset else optimizer,
            scaler=None if reset else scaler,
            inflation=cfg.TRAIN.CHECKPOINT_INFLATE,
            convert_from_caffe2=cfg.TRAIN.CHECKPOINT_TYPE == "caffe2",
            epoch_reset=reset,
            clear_name_pattern=cfg.TRAIN.CHECKPOINT_CLEAR_NAME_PATTERN,
        )
        logger.info("initialised from %s", cfg.TRAIN.CHECKPOINT_FILE_PATH)
        return ResumePoint(0 if reset else info["epoch"] + 1)
    return ResumePoint()


def save(
    cfg: CfgNode,
    ctx: du.RunContext,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Optional[object],
    epoch: int,
    rng_state: dict,
    hook_states: Optional[dict] = None,
    iteration: Optional[int] = None,
) -> Optional[str]:
    """Saves a checkpoint (collective; rank 0 writes, all wait for it).

    Every process's RNG states are gathered so that each resumes its own.
    After the save, mid-epoch checkpoints older than the newest checkpoint
    are removed.

    Args:
        cfg: the frozen config.
        ctx: this process's run context.
        model: the model (possibly DDP-wrapped).
        optimizer: the optimizer.
        scaler: the GradScaler, or None.
        epoch: index of the finished epoch.
        rng_state: this process's RNG states at the end of the epoch.
        hook_states: the hooks' states (rank 0's), by hook class name.
        iteration: a mid-epoch checkpoint: iterations of epoch ``epoch + 1``
            done (``epoch`` is then the last finished epoch).

    Returns:
        str | None: the path written (None on the other processes).
    """
    states = du.all_gather_objects(rng_state)
    extra = {"rng_state": states}
    if hook_states:
        extra["hook_states"] = hook_states
    path = None
    if ctx.is_master:
        path = cu.save_checkpoint(
            cfg.OUTPUT_DIR,
            model,
            optimizer,
            epoch,
            cfg,
            scaler=scaler,
            extra=extra,
            iteration=iteration,
        )
        logger.info("saved %s", path)
        for old in cu.prune_mid_epoch_checkpoints(cfg.OUTPUT_DIR):
            logger.info("removed the older mid-epoch checkpoint %s", old)
    du.barrier()
    return path
