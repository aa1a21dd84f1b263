"""SlowFast network (Feichtenhofer et al., 2019), optionally non-local."""

from typing import List

import torch
from fvcore.common.config import CfgNode
from torch import nn

from slowfast.models.blocks import PathwayStage, ResStage
from slowfast.models.build import MODEL_REGISTRY
from slowfast.models.describe import ModelInfo
from slowfast.models.fusion import FuseFastToSlow
from slowfast.models.init import init_weights
from slowfast.models.resnet import make_head, resnet_info, resnet_setup
from slowfast.models.stem import VideoModelStem, prepare_pathways


@MODEL_REGISTRY.register()
class SlowFast(nn.Module):
    """Two-pathway ResNet with lateral fast-to-slow fusion after s1..s4.

    The fast pathway has SLOWFAST.BETA_INV times fewer channels and
    SLOWFAST.ALPHA times more frames; each ``s{n}_fuse`` concatenates a
    time-strided conv of the fast features to the slow ones. Input:
    ``[slow, fast]`` tensors [N, C, T, H, W] with T_fast = ALPHA * T_slow.

    Args:
        cfg: the run's config.
    """

    num_pathways = 2
    # Added with add_module (the reference's names).
    s2: ResStage
    s3: ResStage
    s4: ResStage
    s5: ResStage
    s2_fuse: FuseFastToSlow
    s3_fuse: FuseFastToSlow
    s4_fuse: FuseFastToSlow
    pathway0_pool: nn.MaxPool3d
    pathway1_pool: nn.MaxPool3d

    @classmethod
    def describe(cls, cfg: CfgNode) -> ModelInfo:
        """Slow and fast pathways: clips need SLOWFAST.ALPHA frames at least."""
        alpha = cfg.SLOWFAST.ALPHA
        return resnet_info(
            cfg,
            min_frames=alpha,
            num_pathways=2,
            alpha=alpha,
            slow_sampling=cfg.SLOWFAST.SLOW_SAMPLING,
        )

    def __init__(self, cfg: CfgNode) -> None:
        super().__init__()
        arch, opts, width, inner, channels = resnet_setup(cfg, self.num_pathways)
        self.channels_last = False  # build_model sets the memory format
        beta_inv = cfg.SLOWFAST.BETA_INV
        if width // beta_inv < 1:
            raise ValueError(
                f"SLOWFAST.BETA_INV = {beta_inv}: leaves the fast pathway no "
                f"channels with RESNET.WIDTH_PER_GROUP = {width}"
            )

        def fuse(fast_dim: int) -> FuseFastToSlow:
            return FuseFastToSlow(
                fast_dim,
                cfg.SLOWFAST.FUSION_CONV_CHANNEL_RATIO,
                cfg.SLOWFAST.FUSION_KERNEL_SZ,
                cfg.SLOWFAST.ALPHA,
                opts.norm,
                opts.inplace_relu,
            )

        dims = [width, width // beta_inv]
        self.s1 = VideoModelStem(
            channels, dims, arch.stem_temp_kernels, opts.norm, opts.inplace_relu
        )
        self.s1_fuse = fuse(dims[1])
        fused = self.s1_fuse.dim_out
        for s in range(4):
            dim_out = width * 4 * 2**s
            outs = [dim_out, dim_out // beta_inv]
            inners = [inner * 2**s, inner * 2**s // beta_inv]
            specs = [
                PathwayStage(
                    dim_in=dims[p] + (fused if p == 0 else 0),
                    dim_out=outs[p],
                    dim_inner=inners[p],
                    temp_kernels=arch.block_temp_kernels[s][p],
                    stride=arch.spatial_strides[s][p],
                    dilation=arch.spatial_dilations[s][p],
                    nonlocal_inds=arch.nonlocal_inds[s][p],
                    nonlocal_group=arch.nonlocal_groups[s][p],
                    nonlocal_pool=arch.nonlocal_pools[s][p],
                )
                for p in range(self.num_pathways)
            ]
            self.add_module(f"s{s + 2}", ResStage(specs, opts))
            if s < 3:
                self.add_module(f"s{s + 2}_fuse", fuse(outs[1]))
                fused = getattr(self, f"s{s + 2}_fuse").dim_out
            if s == 0:
                for p, pool in enumerate(arch.pool_after_res2):
                    self.add_module(
                        f"pathway{p}_pool",
                        nn.MaxPool3d(kernel_size=tuple(pool), stride=tuple(pool)),
                    )
            dims = outs
        self.head = make_head(cfg, dims)
        init_weights(self, cfg.MODEL.FC_INIT_STD, cfg.RESNET.ZERO_INIT_FINAL_BN)

    def forward(self, x: List[torch.Tensor]) -> torch.Tensor:
        """Runs the network.

        Args:
            x: ``[slow, fast]`` tensors [N, C, T, H, W].

        Returns:
            torch.Tensor: [N, NUM_CLASSES] logits (training) or activated
            scores (eval).
        """
        x = prepare_pathways(x, self.num_pathways, self.channels_last)
        x = self.s1_fuse(self.s1(x))
        x = self.s2_fuse(self.s2(x))
        x = [self.pathway0_pool(x[0]), self.pathway1_pool(x[1])]
        x = self.s3_fuse(self.s3(x))
        x = self.s4_fuse(self.s4(x))
        return self.head(self.s5(x))
