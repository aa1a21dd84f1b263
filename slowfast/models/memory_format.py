"""The memory format of a model: which one a run uses, and setting it.

``choose_channels_last(cfg)`` is the run's choice: MODEL.CHANNELS_LAST_3D, or
the default. True selects ``torch.channels_last_3d``, False the contiguous
format. The default (None) is channels-last on GPUs, and on CPUs for models at
least ``CPU_MIN_WIDTH`` channels wide (``describe_model(cfg).width``; a
registered model that does not say is contiguous), contiguous otherwise. Why:
on GPUs channels-last steps are faster with plain and sub-batch BN alike; on
CPUs it is faster for models 16 channels wide or more, with plain and
sub-batch BN, but slower for the 8-wide demo models (timings:
docs/benchmarks/model-step.md, "Memory format"). Neither the BN nor the MULTIGRID keys
change the default: a multigrid run and its baseline run in the same format,
so that they differ in the schedule alone.

``set_memory_format(model, channels_last)`` puts a built model's weights in
that format and has its input handling (the model's and its input
normaliser's ``channels_last``) convert clips to it; ``build_model`` calls it.
The config is not rewritten: the choice is passed, not stored.
"""

import torch
from fvcore.common.config import CfgNode
from torch import nn

from slowfast.models.describe import describe_model

CPU_MIN_WIDTH = 16


def choose_channels_last(cfg: CfgNode) -> bool:
    """Whether this run's model runs in ``torch.channels_last_3d``.

    Args:
        cfg: the run's config (MODEL.CHANNELS_LAST_3D; when None: NUM_GPUS
            and the model's width).

    Returns:
        bool: True for channels-last weights and inputs, False for contiguous.
    """
    if cfg.MODEL.CHANNELS_LAST_3D is not None:
        return bool(cfg.MODEL.CHANNELS_LAST_3D)
    if cfg.NUM_GPUS > 0:
        return torch.cuda.is_available()
    return describe_model(cfg).width >= CPU_MIN_WIDTH


def set_memory_format(model: nn.Module, channels_last: bool) -> nn.Module:
    """Puts ``model`` in ``torch.channels_last_3d`` (True) or keeps it contiguous.

    The model and its ``input_norm`` (when present) take a ``channels_last``
    attribute: their forward converts inputs to the weights' format.

    Returns:
        nn.Module: the same model.
    """
    for part in (model, getattr(model, "input_norm", None)):
        if part is not None and hasattr(part, "channels_last"):
            part.channels_last = bool(channels_last)
    if channels_last:
        model = model.to(memory_format=torch.channels_last_3d)
    return model
