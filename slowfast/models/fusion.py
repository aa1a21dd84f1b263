"""Lateral fast-to-slow fusion of SlowFast (``s{n}_fuse``)."""

from typing import List

import torch
from torch import nn

from slowfast.models.norm import NormFactory


class FuseFastToSlow(nn.Module):
    """Time-strided conv of the fast features, concatenated to the slow ones.

    Args:
        dim_in: channels of the fast pathway.
        channel_ratio: output channels of the fusion conv relative to ``dim_in``
            (SLOWFAST.FUSION_CONV_CHANNEL_RATIO).
        kernel: temporal kernel size (SLOWFAST.FUSION_KERNEL_SZ).
        alpha: frame-rate ratio, the conv's temporal stride (SLOWFAST.ALPHA).
        norm: builds the norm layer.
        inplace_relu: use an in-place ReLU.
    """

    def __init__(
        self,
        dim_in: int,
        channel_ratio: int,
        kernel: int,
        alpha: int,
        norm: NormFactory,
        inplace_relu: bool = True,
    ) -> None:
        super().__init__()
        self.dim_out = dim_in * channel_ratio
        self.alpha = alpha
        self.conv_f2s = nn.Conv3d(
            dim_in,
            self.dim_out,
            kernel_size=(kernel, 1, 1),
            stride=(alpha, 1, 1),
            padding=(kernel // 2, 0, 0),
            bias=False,
        )
        self.bn = norm(self.dim_out)
        self.relu = nn.ReLU(inplace=inplace_relu)

    def forward(self, x: List[torch.Tensor]) -> List[torch.Tensor]:
        x_slow, x_fast = x
        fuse = self.relu(self.bn(self.conv_f2s(x_fast)))
        if fuse.shape[2:] != x_slow.shape[2:]:
            raise ValueError(
                f"SlowFast fusion: fast features {tuple(x_fast.shape)} strided by "
                f"ALPHA={self.alpha} give {tuple(fuse.shape[2:])}, slow features "
                f"are {tuple(x_slow.shape[2:])}; the fast pathway needs ALPHA "
                "times the slow pathway's frames"
            )
        return [torch.cat([x_slow, fuse], dim=1), x_fast]
