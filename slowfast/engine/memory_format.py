"""Which memory format a run's model uses: MODEL.CHANNELS_LAST_3D, or the default.

True selects ``torch.channels_last_3d``, False the contiguous format. The
default (None) is channels-last on GPUs; on CPUs channels-last for models at
least ``CPU_MIN_WIDTH`` channels wide (``describe_model(cfg).width``; a
registered model that does not say is contiguous) whose training BN is one
group per process at the base shape, contiguous otherwise. Why: on GPUs channels-last
steps are faster with plain and sub-batch BN alike; on CPUs it is faster for
full-width models but slower for the tiny demo models, and sub-batch BN with
several splits at the base shape runs as one fused batch norm only on
contiguous batches (timings: docs/BENCHMARKS.md, "Memory format").
"""

import torch
from fvcore.common.config import CfgNode

from slowfast.models.describe import describe_model
from slowfast.multigrid.shapes import bn_layout
from slowfast.utils.distributed import procs_per_machine

CPU_MIN_WIDTH = 16


def choose_channels_last(cfg: CfgNode) -> bool:
    """Whether this run's model runs in ``torch.channels_last_3d``.

    Args:
        cfg: the run's config (MODEL.CHANNELS_LAST_3D; when None: NUM_GPUS,
            the model's width and the BN grouping of training at the base
            shape).

    Returns:
        bool: True for channels-last weights and inputs, False for contiguous.
    """
    if cfg.MODEL.CHANNELS_LAST_3D is not None:
        return bool(cfg.MODEL.CHANNELS_LAST_3D)
    if cfg.NUM_GPUS > 0:
        return torch.cuda.is_available()
    width = describe_model(cfg).width
    return width >= CPU_MIN_WIDTH and base_bn_splits(cfg) == 1


def base_bn_splits(cfg: CfgNode) -> int:
    """BN groups per training process at the base shape.

    Multigrid groups MULTIGRID.BN_BASE_SIZE clips (the process's share of
    TRAIN.BATCH_SIZE divided by it, at least 1); otherwise BN.NUM_SPLITS for
    ``sub_batchnorm`` and 1 for the other norms.
    """
    if cfg.MULTIGRID.LONG_CYCLE or cfg.MULTIGRID.SHORT_CYCLE:
        procs = procs_per_machine(cfg)
        per_proc = cfg.TRAIN.BATCH_SIZE // procs
        return bn_layout(per_proc, procs, cfg.MULTIGRID.BN_BASE_SIZE)[0]
    if cfg.BN.NORM_TYPE == "sub_batchnorm":
        return cfg.BN.NUM_SPLITS
    return 1
