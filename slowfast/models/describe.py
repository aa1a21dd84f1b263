"""What the rest of the code needs to know about the configured model.

The trainer, the datasets, model statistics, the multigrid checks and the
tools ask :func:`describe_model` instead of reading ``MODEL.ARCH`` or
``RESNET.*``. A registered model class tells by a ``describe(cfg)``
classmethod returning :class:`ModelInfo`; a model without one gets the
defaults (one pathway, any frame count, spatial stride 1).
"""

from dataclasses import dataclass
from typing import List

from fvcore.common.config import CfgNode
from torch import nn

from slowfast.models.arch import STEM_SPATIAL_STRIDE
from slowfast.models.build import MODEL_REGISTRY


@dataclass(frozen=True)
class ModelInfo:
    """Facts about a configured model that the code around it uses.

    Attributes:
        num_pathways: input tensors the model takes (2 for SlowFast).
        alpha: frames of the fast pathway per frame of the slow one
            (SlowFast's ``SLOWFAST.ALPHA``; 1 with one pathway). Clips are
            packed as ``[slow frames, frames]`` for two pathways.
        slow_sampling: which frames the slow pathway takes
            (SLOWFAST.SLOW_SAMPLING; see ``datasets.transforms.pack_pathways``).
        spatial_stride: input pixels per pixel of the final feature map;
            smaller crops are rejected.
        min_frames: fewest frames a clip may have.
        varying_shapes: whether the model takes clips of any frame count and
            crop (global pooling before the head); multigrid needs it.
        width: the network's base width (the ResNets' res2 inner width,
            RESNET.WIDTH_PER_GROUP x NUM_GROUPS); 0 where not known (the
            CPU memory-format default then keeps the contiguous format).
    """

    num_pathways: int = 1
    alpha: int = 1
    slow_sampling: str = "linspace"
    spatial_stride: int = 1
    min_frames: int = 1
    varying_shapes: bool = True
    width: int = 0


def resnet_width(cfg: CfgNode) -> int:
    """The ResNet's base width: res2's inner width (of the slow pathway)."""
    return cfg.RESNET.WIDTH_PER_GROUP * cfg.RESNET.NUM_GROUPS


def resnet_spatial_stride(cfg: CfgNode) -> int:
    """The stem's stride times the first-block stride of res2..res5 (32 usually)."""
    stride = STEM_SPATIAL_STRIDE
    for stage in cfg.RESNET.SPATIAL_STRIDES:
        stride *= int(stage[0])
    return stride


_NORM_TYPES = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)


def param_groups(model: nn.Module, cfg: CfgNode) -> List[dict]:
    """The model's parameter groups for the optimizer.

    A model may define ``param_groups(cfg)``; otherwise norm-layer parameters
    (weight decay BN.WEIGHT_DECAY) come first, as in the reference, so that its
    optimizer states load, then the rest (SOLVER.WEIGHT_DECAY). Empty groups
    are left out.

    Args:
        model: the model (a DDP wrapper is looked through).
        cfg: the run's config.

    Returns:
        list[dict]: ``{"params": [...], "weight_decay": ...}`` groups.
    """
    inner = getattr(model, "module", model)
    own = getattr(inner, "param_groups", None)
    if callable(own):
        return own(cfg)
    norm_params: List[nn.Parameter] = []
    other_params: List[nn.Parameter] = []
    for module in model.modules():
        is_norm = isinstance(module, _NORM_TYPES)
        for param in module.parameters(recurse=False):
            if param.requires_grad:
                (norm_params if is_norm else other_params).append(param)
    groups = [
        {"params": norm_params, "weight_decay": cfg.BN.WEIGHT_DECAY},
        {"params": other_params, "weight_decay": cfg.SOLVER.WEIGHT_DECAY},
    ]
    return [g for g in groups if g["params"]]


def describe_model(cfg: CfgNode) -> ModelInfo:
    """Describes the model ``cfg`` builds (``MODEL.MODEL_NAME``), without building it.

    Args:
        cfg: the run's config.

    Returns:
        ModelInfo: pathways, frame packing, spatial stride, minimum frames,
        varying shapes and width.
    """
    name = cfg.MODEL.MODEL_NAME
    if name not in MODEL_REGISTRY:
        known = sorted(k for k, _ in MODEL_REGISTRY)
        raise ValueError(f"MODEL.MODEL_NAME = {name!r}: must be one of {known}")
    describe = getattr(MODEL_REGISTRY.get(name), "describe", None)
    return describe(cfg) if describe is not None else ModelInfo()
