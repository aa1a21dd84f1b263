"""The memory format of a model: which one a run uses, and setting it.

``choose_channels_last(cfg, info)`` is the run's choice: MODEL.CHANNELS_LAST_3D,
or the default. True selects ``torch.channels_last_3d``, False the contiguous
format. The default (None) is channels-last on GPUs, and on CPUs for models at
least ``CPU_MIN_WIDTH`` channels wide (``ModelInfo.width``; a registered model
that does not say is contiguous), contiguous otherwise: the faster format of
each case, measured in docs/benchmarks/model-step.md, "Memory format". Neither
the BN nor the MULTIGRID keys change the default: a multigrid run and its
baseline run in the same format, so that they differ in the schedule alone.

``build_model(cfg, channels_last)`` (``models/build.py``) puts the model's
weights in that format and has its input handling convert clips to it
(``set_memory_format``). The config is not rewritten: the choice is passed,
not stored.
"""

import torch
from fvcore.common.config import CfgNode

from slowfast.models.describe import ModelInfo

CPU_MIN_WIDTH = 16


def choose_channels_last(cfg: CfgNode, info: ModelInfo) -> bool:
    """Whether this run's model runs in ``torch.channels_last_3d``.

    Args:
        cfg: the run's config (MODEL.CHANNELS_LAST_3D; when None: NUM_GPUS).
        info: the model's description (its width, when the config says None).

    Returns:
        bool: True for channels-last weights and inputs, False for contiguous.
    """
    if cfg.MODEL.CHANNELS_LAST_3D is not None:
        return bool(cfg.MODEL.CHANNELS_LAST_3D)
    if cfg.NUM_GPUS > 0:
        return torch.cuda.is_available()
    return info.width >= CPU_MIN_WIDTH
