"""The model registry and ``build_model``."""

from typing import Optional

import torch
from fvcore.common.config import CfgNode
from fvcore.common.registry import Registry
from torch import nn

from slowfast.models.input_norm import attach_input_norm
from slowfast.utils.registry import check_registered

MODEL_REGISTRY = Registry("MODEL")
MODEL_REGISTRY.__doc__ = """Video models by MODEL.MODEL_NAME.

A registered class is constructed as ``cls(cfg)`` and takes a list of pathway
tensors [N, C, T, H, W] in its forward: normalised float clips (build_model
adds the step that normalises the datasets' uint8 clips for it).
"""


def build_model(cfg: CfgNode, channels_last: Optional[bool] = None) -> nn.Module:
    """Builds the model named by MODEL.MODEL_NAME on the CPU.

    Weights are initialised and set in the memory format that ``channels_last``
    says (None: MODEL.CHANNELS_LAST_3D, None there meaning contiguous; a run
    passes ``memory_format.choose_channels_last``); the model's forward
    converts its inputs to it. Every model gets an ``input_norm`` that normalises the
    datasets' uint8 clips before its forward (``input_norm.attach_input_norm``).
    The caller moves the model to its device and wraps it for DDP.

    Args:
        cfg: the run's config.
        channels_last: build in ``torch.channels_last_3d`` (True) or contiguous
            (False); None: as MODEL.CHANNELS_LAST_3D says.

    Returns:
        nn.Module: the model, in training mode.

    Raises:
        ValueError: MODEL.MODEL_NAME is not registered or the config does not
            describe a valid model (the message names the key).
    """
    check_model_name(cfg)
    if channels_last is None:
        channels_last = bool(cfg.MODEL.CHANNELS_LAST_3D)
    model = attach_input_norm(MODEL_REGISTRY.get(cfg.MODEL.MODEL_NAME)(cfg), cfg)
    return set_memory_format(model, channels_last)


def check_model_name(cfg: CfgNode) -> None:
    """Raises a one-line ValueError unless MODEL.MODEL_NAME is registered."""
    names = [name for name, _ in MODEL_REGISTRY]
    check_registered("MODEL.MODEL_NAME", cfg.MODEL.MODEL_NAME, names)


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
        # Module.to takes memory_format at runtime; torch's overloads omit it.
        model = model.to(memory_format=torch.channels_last_3d)  # type: ignore[call-overload]
    return model
