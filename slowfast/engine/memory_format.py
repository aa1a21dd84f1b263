"""Which memory format a run's model uses: MODEL.CHANNELS_LAST_3D, or the default.

True selects ``torch.channels_last_3d``, False the contiguous format. The
default (None) is channels-last on GPUs; on CPUs channels-last for models at
least ``CPU_MIN_WIDTH`` channels wide (``describe_model(cfg).width``; a
registered model that does not say is contiguous) unless the recipe's BN
splits every batch (``BN.NORM_TYPE sub_batchnorm`` with ``BN.NUM_SPLITS`` > 1),
contiguous otherwise. Why: on GPUs channels-last steps are faster with plain
and sub-batch BN alike; on CPUs it is faster for models 16 channels wide or
more but slower for the 8-wide demo models, and sub-batch BN on every
iteration runs as one fused batch norm only on contiguous batches (timings:
docs/BENCHMARKS.md, "Memory format"). The MULTIGRID keys never change the
default: a multigrid run and its baseline run in the same format, so that
they differ in the schedule alone.
"""

import torch
from fvcore.common.config import CfgNode

from slowfast.models.describe import describe_model

CPU_MIN_WIDTH = 16


def choose_channels_last(cfg: CfgNode) -> bool:
    """Whether this run's model runs in ``torch.channels_last_3d``.

    Args:
        cfg: the run's config (MODEL.CHANNELS_LAST_3D; when None: NUM_GPUS,
            the model's width and BN.NORM_TYPE / BN.NUM_SPLITS).

    Returns:
        bool: True for channels-last weights and inputs, False for contiguous.
    """
    if cfg.MODEL.CHANNELS_LAST_3D is not None:
        return bool(cfg.MODEL.CHANNELS_LAST_3D)
    if cfg.NUM_GPUS > 0:
        return torch.cuda.is_available()
    width = describe_model(cfg).width
    return width >= CPU_MIN_WIDTH and recipe_bn_splits(cfg) == 1


def recipe_bn_splits(cfg: CfgNode) -> int:
    """BN groups per batch that the recipe's BN asks for, multigrid aside:
    BN.NUM_SPLITS for ``sub_batchnorm``, 1 for the other norms."""
    if cfg.BN.NORM_TYPE == "sub_batchnorm":
        return cfg.BN.NUM_SPLITS
    return 1
