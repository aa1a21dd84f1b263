"""Residual transforms, residual blocks and residual stages (res2..res5)."""

import dataclasses
from typing import List, Optional, Sequence

import torch
from torch import nn

from slowfast.models.kernels.small_map_conv import SmallMapConv3d
from slowfast.models.kernels.time_trimmed_conv import TimeTrimmedConv3d
from slowfast.models.nonlocal_block import Nonlocal
from slowfast.models.norm import NormFactory


@dataclasses.dataclass(frozen=True)
class BlockOptions:
    """Options shared by all blocks of a network.

    Attributes:
        trans_func: "bottleneck_transform" or "basic_transform".
        norm: builds the norm layers.
        num_groups: groups of the 3x3 conv (bottleneck only).
        stride_1x1: put the spatial stride on the 1x1 conv (bottleneck only).
        inplace_relu: use in-place ReLUs.
        nonlocal_instantiation: "softmax" or "dot_product".
    """

    trans_func: str
    norm: NormFactory
    num_groups: int = 1
    stride_1x1: bool = False
    inplace_relu: bool = True
    nonlocal_instantiation: str = "softmax"


@dataclasses.dataclass(frozen=True)
class PathwayStage:
    """The structure of one stage in one pathway.

    Attributes:
        dim_in: input channels.
        dim_out: output channels.
        dim_inner: inner (bottleneck) channels.
        temp_kernels: temporal kernel size of each block.
        stride: spatial stride of the first block.
        dilation: spatial dilation of the 3x3 convs.
        nonlocal_inds: indices of the blocks followed by a non-local block.
        nonlocal_group: time groups of the non-local blocks.
        nonlocal_pool: [T, H, W] max-pool of phi and g in the non-local blocks.
    """

    dim_in: int
    dim_out: int
    dim_inner: int
    temp_kernels: Sequence[int]
    stride: int = 1
    dilation: int = 1
    nonlocal_inds: Sequence[int] = ()
    nonlocal_group: int = 1
    nonlocal_pool: Optional[Sequence[int]] = None


@dataclasses.dataclass(frozen=True)
class BlockShape:
    """The channels and kernels of one residual block.

    Attributes:
        dim_in: input channels.
        dim_out: output channels.
        dim_inner: inner (bottleneck) channels; the basic block has none.
        temp_kernel: temporal kernel size of its first conv.
        stride: spatial stride.
        dilation: spatial dilation of the 3x3 convs.
    """

    dim_in: int
    dim_out: int
    dim_inner: int
    temp_kernel: int
    stride: int
    dilation: int


def _temporal_conv(
    dim_in: int, dim_out: int, temp_kernel: int, size: int, stride: int
) -> TimeTrimmedConv3d:
    """A transform's first conv: kernel [temp_kernel, size, size], padded to
    keep the length and (stride 1) the size."""
    return TimeTrimmedConv3d(
        dim_in,
        dim_out,
        kernel_size=(temp_kernel, size, size),
        stride=(1, stride, stride),
        padding=(temp_kernel // 2, size // 2, size // 2),
        bias=False,
    )


def _spatial_conv(
    dim: int, stride: int, dilation: int, groups: int = 1
) -> SmallMapConv3d:
    """A transform's [1, 3, 3] conv of ``dim`` channels, padded by ``dilation``."""
    return SmallMapConv3d(
        dim,
        dim,
        kernel_size=(1, 3, 3),
        stride=(1, stride, stride),
        padding=(0, dilation, dilation),
        groups=groups,
        dilation=(1, dilation, dilation),
        bias=False,
    )


class BottleneckTransform(nn.Module):
    """Conv [t, 1, 1] -> conv [1, 3, 3] (grouped) -> conv 1x1x1, BN after each."""

    def __init__(self, shape: BlockShape, opts: BlockOptions) -> None:
        super().__init__()
        inner, stride = shape.dim_inner, shape.stride
        str1x1, str3x3 = (stride, 1) if opts.stride_1x1 else (1, stride)
        self.a = _temporal_conv(shape.dim_in, inner, shape.temp_kernel, 1, str1x1)
        self.a_bn = opts.norm(inner)
        self.a_relu = nn.ReLU(inplace=opts.inplace_relu)
        self.b = _spatial_conv(inner, str3x3, shape.dilation, opts.num_groups)
        self.b_bn = opts.norm(inner)
        self.b_relu = nn.ReLU(inplace=opts.inplace_relu)
        self.c = nn.Conv3d(inner, shape.dim_out, kernel_size=1, bias=False)
        self.c_bn = opts.norm(shape.dim_out)
        # Module.__setattr__ is typed for tensors and modules; any value works.
        self.c_bn.transform_final_bn = True  # type: ignore[assignment]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a_relu(self.a_bn(self.a(x)))
        x = self.b_relu(self.b_bn(self.b(x)))
        return self.c_bn(self.c(x))


class BasicTransform(nn.Module):
    """Conv [t, 3, 3] -> conv [1, 3, 3], BN after each (ResNet-18 style)."""

    def __init__(self, shape: BlockShape, opts: BlockOptions) -> None:
        super().__init__()
        dim_out, stride = shape.dim_out, shape.stride  # No bottleneck: no dim_inner.
        self.a = _temporal_conv(shape.dim_in, dim_out, shape.temp_kernel, 3, stride)
        self.a_bn = opts.norm(dim_out)
        self.a_relu = nn.ReLU(inplace=opts.inplace_relu)
        self.b = _spatial_conv(dim_out, 1, shape.dilation)
        self.b_bn = opts.norm(dim_out)
        # Module.__setattr__ is typed for tensors and modules; any value works.
        self.b_bn.transform_final_bn = True  # type: ignore[assignment]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a_relu(self.a_bn(self.a(x)))
        return self.b_bn(self.b(x))


TRANSFORMS = {
    "bottleneck_transform": BottleneckTransform,
    "basic_transform": BasicTransform,
}


class ResBlock(nn.Module):
    """Residual block: ReLU(shortcut(x) + transform(x)).

    The shortcut is a strided 1x1x1 conv + BN (``branch1``) when the shape
    changes, else the identity.
    """

    def __init__(self, shape: BlockShape, opts: BlockOptions) -> None:
        super().__init__()
        if opts.trans_func not in TRANSFORMS:
            raise ValueError(
                f"RESNET.TRANS_FUNC = {opts.trans_func!r}: must be one of "
                f"{sorted(TRANSFORMS)}"
            )
        dim_out, stride = shape.dim_out, shape.stride
        self.branch1: Optional[nn.Conv3d]
        if shape.dim_in != dim_out or stride != 1:
            self.branch1 = nn.Conv3d(
                shape.dim_in,
                dim_out,
                kernel_size=1,
                stride=(1, stride, stride),
                bias=False,
            )
            self.branch1_bn = opts.norm(dim_out)
        else:
            self.branch1 = None
        self.branch2 = TRANSFORMS[opts.trans_func](shape, opts)
        self.relu = nn.ReLU(inplace=opts.inplace_relu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.branch1 is None else self.branch1_bn(self.branch1(x))
        return self.relu(shortcut + self.branch2(x))


class ResStage(nn.Module):
    """One stage of residual blocks for every pathway.

    Blocks are named ``pathway{p}_res{i}``, the non-local block after block i
    ``pathway{p}_nonlocal{i}`` (the reference's state-dict names).

    Args:
        pathways: the structure of this stage in each pathway.
        opts: options shared by all blocks.
    """

    def __init__(self, pathways: Sequence[PathwayStage], opts: BlockOptions) -> None:
        super().__init__()
        self.order: List[List[str]] = []
        for p, spec in enumerate(pathways):
            names = []
            for i, temp_kernel in enumerate(spec.temp_kernels):
                shape = BlockShape(
                    spec.dim_in if i == 0 else spec.dim_out,
                    spec.dim_out,
                    spec.dim_inner,
                    temp_kernel,
                    spec.stride if i == 0 else 1,
                    spec.dilation,
                )
                block = ResBlock(shape, opts)
                names.append(f"pathway{p}_res{i}")
                self.add_module(names[-1], block)
                if i in spec.nonlocal_inds:
                    nonlocal_block = Nonlocal(
                        spec.dim_out,
                        spec.dim_out // 2,
                        spec.nonlocal_pool,
                        opts.nonlocal_instantiation,
                        spec.nonlocal_group,
                        opts.norm,
                    )
                    names.append(f"pathway{p}_nonlocal{i}")
                    self.add_module(names[-1], nonlocal_block)
            self.order.append(names)

    def forward(self, x: List[torch.Tensor]) -> List[torch.Tensor]:
        out = []
        for p, names in enumerate(self.order):
            y = x[p]
            for name in names:
                y = getattr(self, name)(y)
            out.append(y)
        return out
