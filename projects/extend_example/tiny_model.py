"""A model registered from outside the package: a tiny 3D CNN.

Imported by name (IMPORTS in the config, or ``--import``), it registers
``TinyC3D`` for ``MODEL.MODEL_NAME``. See README.md beside it.
"""

import logging

from torch import nn

from slowfast.models import MODEL_REGISTRY, ModelInfo, get_norm
from slowfast.models.head import ResNetBasicHead

logger = logging.getLogger(__name__)


@MODEL_REGISTRY.register()
class TinyC3D(nn.Module):
    """Three 3x3x3 conv-BN-ReLU blocks (spatial stride 2 each), pooling, a head.

    Built from the config like the package's models: DATA.INPUT_CHANNEL_NUM,
    RESNET.WIDTH_PER_GROUP (the first width, doubled per block), BN.NORM_TYPE,
    MODEL.NUM_CLASSES, MODEL.DROPOUT_RATE and MODEL.HEAD_ACT. Its forward takes
    the batch as they do: a list of one pathway [N, C, T, H, W].
    """

    def __init__(self, cfg):
        super().__init__()
        width = cfg.RESNET.WIDTH_PER_GROUP
        dims = [cfg.DATA.INPUT_CHANNEL_NUM[0], width, 2 * width, 4 * width]
        norm, layers = get_norm(cfg), []
        for dim_in, dim_out in zip(dims, dims[1:]):
            conv = nn.Conv3d(dim_in, dim_out, 3, (1, 2, 2), 1, bias=False)
            layers += [conv, norm(dim_out), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.head = ResNetBasicHead(
            [dims[-1]],
            cfg.MODEL.NUM_CLASSES,
            cfg.MODEL.DROPOUT_RATE,
            cfg.MODEL.HEAD_ACT,
        )
        params = sum(p.numel() for p in self.parameters())
        logger.info("TinyC3D built: widths %s, %d parameters", dims[1:], params)

    @classmethod
    def describe(cls, cfg) -> ModelInfo:
        """One pathway, any clip shape; crops must be multiples of 8."""
        return ModelInfo(spatial_stride=8, width=cfg.RESNET.WIDTH_PER_GROUP)

    def forward(self, inputs):
        return self.head([self.features(inputs[0])])
