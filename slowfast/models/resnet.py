"""ResNet video models with one pathway: C2D, I3D (optionally non-local), Slow."""

from typing import Any, List, NamedTuple

import torch
from fvcore.common.config import CfgNode
from torch import nn

from slowfast.models.arch import ArchSpec, arch_spec, per_pathway
from slowfast.models.blocks import BlockOptions, PathwayStage, ResStage
from slowfast.models.build import MODEL_REGISTRY
from slowfast.models.describe import ModelInfo, resnet_spatial_stride, resnet_width
from slowfast.models.head import ResNetBasicHead
from slowfast.models.init import init_weights
from slowfast.models.norm import get_norm
from slowfast.models.stem import VideoModelStem, prepare_pathways


def block_options(cfg: CfgNode) -> BlockOptions:
    """Returns the block options of a config (RESNET.*, NONLOCAL, BN).

    Args:
        cfg: the run's config.

    Returns:
        BlockOptions: options shared by all residual blocks.
    """
    return BlockOptions(
        trans_func=cfg.RESNET.TRANS_FUNC,
        norm=get_norm(cfg),
        num_groups=cfg.RESNET.NUM_GROUPS,
        stride_1x1=cfg.RESNET.STRIDE_1X1,
        inplace_relu=cfg.RESNET.INPLACE_RELU,
        nonlocal_instantiation=cfg.NONLOCAL.INSTANTIATION,
    )


class ResNetSetup(NamedTuple):
    """What a ResNet-family model reads from the config before its stages.

    Attributes:
        arch: the architecture's kernels, strides and pools.
        opts: the block options.
        width: RESNET.WIDTH_PER_GROUP (the stem's channels).
        inner: inner channels of res2 (RESNET.NUM_GROUPS * width).
        channels: DATA.INPUT_CHANNEL_NUM, one per pathway.
    """

    arch: ArchSpec
    opts: BlockOptions
    width: int
    inner: int
    channels: List[int]


def resnet_setup(cfg: CfgNode, num_pathways: int) -> ResNetSetup:
    """Reads what the ResNet-family models share from a config.

    Args:
        cfg: the run's config.
        num_pathways: the model's pathways.

    Returns:
        ResNetSetup: architecture, block options, widths and input channels.
    """
    arch, opts = arch_spec(cfg, num_pathways), block_options(cfg)
    width = cfg.RESNET.WIDTH_PER_GROUP
    channels = per_pathway(
        cfg.DATA.INPUT_CHANNEL_NUM, num_pathways, "DATA.INPUT_CHANNEL_NUM"
    )
    return ResNetSetup(arch, opts, width, cfg.RESNET.NUM_GROUPS * width, channels)


def resnet_info(cfg: CfgNode, min_frames: int, **pathways: Any) -> ModelInfo:
    """The ``ModelInfo`` of a ResNet-family model (its spatial stride, width).

    Args:
        cfg: the run's config.
        min_frames: the fewest frames a clip may have.
        **pathways: the other fields (a two-pathway model's).

    Returns:
        ModelInfo: what the data side needs to know of the model.
    """
    return ModelInfo(
        spatial_stride=resnet_spatial_stride(cfg),
        min_frames=min_frames,
        width=resnet_width(cfg),
        **pathways,
    )


def make_head(cfg: CfgNode, dim_in: List[int]) -> ResNetBasicHead:
    """Builds the classification head of a config.

    Args:
        cfg: the run's config (MODEL.NUM_CLASSES, DROPOUT_RATE, HEAD_ACT).
        dim_in: channels of each pathway's final features.

    Returns:
        ResNetBasicHead: the head.
    """
    return ResNetBasicHead(
        dim_in,
        cfg.MODEL.NUM_CLASSES,
        dropout_rate=cfg.MODEL.DROPOUT_RATE,
        act=cfg.MODEL.HEAD_ACT,
    )


@MODEL_REGISTRY.register()
class ResNet(nn.Module):
    """Single-pathway 3D ResNet; MODEL.ARCH picks the temporal kernels.

    Modules (state-dict names as the reference): ``s1`` stem, ``s2`` (res2),
    ``pathway0_pool`` (temporal max-pool, 2 for c2d/i3d, 1 for slow), ``s3`` ..
    ``s5``, ``head``. Non-local blocks follow the blocks NONLOCAL.LOCATION
    names. Input: ``[x]`` with x of shape [N, C, T, H, W], any T, H, W.

    Args:
        cfg: the run's config.
    """

    num_pathways = 1
    # Stages added with add_module (the reference's names).
    s2: ResStage
    s3: ResStage
    s4: ResStage
    s5: ResStage

    @classmethod
    def describe(cls, cfg: CfgNode) -> ModelInfo:
        """One pathway of at least as many frames as the temporal max-pool after
        res2 takes (2 for C2D and I3D, 1 for Slow); the ResNet's spatial stride."""
        pool = arch_spec(cfg, cls.num_pathways).pool_after_res2[0]
        return resnet_info(cfg, min_frames=pool[0])

    def __init__(self, cfg: CfgNode) -> None:
        super().__init__()
        arch, opts, width, inner, channels = resnet_setup(cfg, self.num_pathways)
        self.channels_last = False  # build_model sets the memory format
        self.s1 = VideoModelStem(
            channels, [width], arch.stem_temp_kernels, opts.norm, opts.inplace_relu
        )
        dim_in = width
        for s in range(4):
            dim_out = width * 4 * 2**s
            spec = PathwayStage(
                dim_in=dim_in,
                dim_out=dim_out,
                dim_inner=inner * 2**s,
                temp_kernels=arch.block_temp_kernels[s][0],
                stride=arch.spatial_strides[s][0],
                dilation=arch.spatial_dilations[s][0],
                nonlocal_inds=arch.nonlocal_inds[s][0],
                nonlocal_group=arch.nonlocal_groups[s][0],
                nonlocal_pool=arch.nonlocal_pools[s][0],
            )
            self.add_module(f"s{s + 2}", ResStage([spec], opts))
            if s == 0:
                pool = arch.pool_after_res2[0]
                self.pathway0_pool = nn.MaxPool3d(
                    kernel_size=tuple(pool), stride=tuple(pool)
                )
            dim_in = dim_out
        self.head = make_head(cfg, [dim_in])
        init_weights(self, cfg.MODEL.FC_INIT_STD, cfg.RESNET.ZERO_INIT_FINAL_BN)

    def forward(self, x: List[torch.Tensor]) -> torch.Tensor:
        """Runs the network.

        Args:
            x: one tensor [N, C, T, H, W] in a list.

        Returns:
            torch.Tensor: [N, NUM_CLASSES] logits (training) or activated
            scores (eval).
        """
        x = prepare_pathways(x, self.num_pathways, self.channels_last)
        x = self.s2(self.s1(x))
        x = [self.pathway0_pool(x[0])]
        x = self.s5(self.s4(self.s3(x)))
        return self.head(x)
