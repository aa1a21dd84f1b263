"""Reads the frozen config into the explicit fields of a ``MultigridSchedule``."""

from __future__ import annotations

import logging

from fvcore.common.config import CfgNode

from slowfast.config.derived import global_batch_size, lr_scale
from slowfast.multigrid.long_cycle import ScheduleEntry, build_long_cycle
from slowfast.multigrid.shapes import resolve_short_factors
from slowfast.solver.lr_policy import LrPolicy

logger = logging.getLogger(__name__)


def short_cycle_factors(cfg: CfgNode, spatial_stride: int) -> tuple:
    """MULTIGRID.SHORT_CYCLE_FACTORS after the feature-map rule of
    MULTIGRID.SHORT_CYCLE_MIN_MAP, for a network of total ``spatial_stride``
    (``ModelInfo.spatial_stride``; see ``shapes.resolve_short_factors``)."""
    mg = cfg.MULTIGRID
    return resolve_short_factors(
        mg.SHORT_CYCLE_FACTORS,
        mg.SHORT_CYCLE_MIN_MAP,
        spatial_stride,
        cfg.DATA.TRAIN_CROP_SIZE,
    )


def _log_raised_factors(mg: CfgNode, factors: tuple) -> None:
    given = [float(f) for f in mg.SHORT_CYCLE_FACTORS]
    if mg.SHORT_CYCLE and list(factors) != given:
        logger.info(
            "short cycle: MULTIGRID.SHORT_CYCLE_FACTORS %s raised to %s so that "
            "the last feature map at the smallest view is at least "
            "MULTIGRID.SHORT_CYCLE_MIN_MAP = %g px wide (0 keeps the factors)",
            [round(f, 4) for f in given],
            [round(f, 4) for f in factors],
            mg.SHORT_CYCLE_MIN_MAP,
        )


def schedule_fields(cfg: CfgNode, num_procs: int, spatial_stride: int) -> dict:
    """Returns the constructor arguments of ``MultigridSchedule`` for a run.

    Args:
        cfg: the frozen config (read only).
        num_procs: number of training processes.
        spatial_stride: the network's total spatial stride (the short cycle's
            feature-map rule).

    Returns:
        dict: field name -> value; the long cycle and its LR solver resolved.

    Raises:
        ValueError: SOLVER.STEPS too short for the long cycle, or a long-cycle
            shape with no frames (one line, names the key).
    """
    solver, mg = cfg.SOLVER, cfg.MULTIGRID
    # SOLVER.STEPS were checked (strictly increasing, below MAX_EPOCH) when
    # the config was loaded (``config/validate.py``).
    steps = [int(s) if float(s).is_integer() else s for s in solver.STEPS]
    policy = LrPolicy(
        name=solver.LR_POLICY,
        base_lr=solver.BASE_LR * lr_scale(cfg),
        max_epoch=solver.MAX_EPOCH,
        steps=tuple(steps),
        lrs=tuple(solver.LRS),
        gamma=solver.GAMMA,
        step_size=solver.STEP_SIZE,
        end_lr=solver.COSINE_END_LR * lr_scale(cfg),
        warmup_epochs=solver.WARMUP_EPOCHS,
        warmup_start_lr=solver.WARMUP_START_LR * lr_scale(cfg),
    )
    shape = dict(base_frames=cfg.DATA.NUM_FRAMES, base_crop=cfg.DATA.TRAIN_CROP_SIZE)
    short = dict(
        short_cycle=mg.SHORT_CYCLE,
        short_factors=short_cycle_factors(cfg, spatial_stride),
        short_mode=mg.SHORT_CYCLE_CROP_MODE,
    )
    _log_raised_factors(mg, short["short_factors"])
    if mg.LONG_CYCLE:
        entries, policy, scale = build_long_cycle(
            policy,
            epoch_factor=mg.EPOCH_FACTOR,
            long_factors=mg.LONG_CYCLE_FACTORS,
            **shape,
            **short,
        )
    else:
        frames, crop, scale = cfg.DATA.NUM_FRAMES, cfg.DATA.TRAIN_CROP_SIZE, False
        entries = (ScheduleEntry(0, 1, frames, crop, solver.MAX_EPOCH),)
    if cfg.BN.NORM_TYPE == "sub_batchnorm":
        bn_default = (cfg.BN.NUM_SPLITS, 1)
    elif cfg.BN.NORM_TYPE == "sync_batchnorm":
        # As the reference: statistics shared by groups of NUM_SYNC_DEVICES
        # processes (1: no sharing).
        bn_default = (1, min(cfg.BN.NUM_SYNC_DEVICES, num_procs))
    else:
        bn_default = (1, 1)
    return dict(
        entries=tuple(entries),
        max_epoch=entries[-1].end_epoch,
        policy=policy,
        scale_lr_by_factor=scale,
        base_batch=global_batch_size(cfg),
        num_frames=cfg.DATA.NUM_FRAMES,
        crop_size=cfg.DATA.TRAIN_CROP_SIZE,
        num_procs=num_procs,
        long_cycle=mg.LONG_CYCLE,
        short_cycle=mg.SHORT_CYCLE,
        short_factors=short["short_factors"],
        short_mode=short["short_mode"],
        sampling_rate=cfg.DATA.SAMPLING_RATE,
        long_cycle_sampling_rate=mg.LONG_CYCLE_SAMPLING_RATE,
        train_jitter=tuple(cfg.DATA.TRAIN_JITTER_SCALES),
        jitter_mode=mg.JITTER_SCALE_MODE,
        bn_base_size=mg.BN_BASE_SIZE,
        bn_default=bn_default,
        baseline_max_epoch=solver.MAX_EPOCH,
    )
