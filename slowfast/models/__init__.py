"""Video models: ResNet (C2D, I3D, I3D-NL, Slow) and SlowFast, by registry.

Importing this package registers the models; it needs neither a GPU nor
torchvision.
"""

from slowfast.models.build import MODEL_REGISTRY, build_model
from slowfast.models.describe import ModelInfo, describe_model
from slowfast.models.norm import (
    SubBatchNorm3d,
    get_norm,
    set_bn_process_group,
    set_bn_splits,
)
from slowfast.models.resnet import ResNet
from slowfast.models.slowfast import SlowFast

__all__ = [
    "MODEL_REGISTRY",
    "ModelInfo",
    "ResNet",
    "SlowFast",
    "SubBatchNorm3d",
    "build_model",
    "describe_model",
    "get_norm",
    "set_bn_process_group",
    "set_bn_splits",
]
