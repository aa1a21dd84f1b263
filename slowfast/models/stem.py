"""The stem (res1): conv, BN, ReLU and spatial max-pool, one per pathway."""

from typing import List, Sequence

import torch
from torch import nn

from slowfast.models.kernels.time_trimmed_conv import TimeTrimmedConv3d
from slowfast.models.norm import NormFactory


class ResNetBasicStem(nn.Module):
    """Conv [t, 7, 7] with spatial stride 2, BN, ReLU, max-pool [1, 3, 3] / 2.

    Args:
        dim_in: input channels.
        dim_out: output channels.
        temp_kernel: temporal kernel size of the conv.
        norm: builds the norm layer.
        inplace_relu: use an in-place ReLU.
    """

    def __init__(
        self,
        dim_in: int,
        dim_out: int,
        temp_kernel: int,
        norm: NormFactory,
        inplace_relu: bool = True,
    ) -> None:
        super().__init__()
        self.conv = TimeTrimmedConv3d(
            dim_in,
            dim_out,
            kernel_size=(temp_kernel, 7, 7),
            stride=(1, 2, 2),
            padding=(temp_kernel // 2, 3, 3),
            bias=False,
        )
        self.bn = norm(dim_out)
        self.relu = nn.ReLU(inplace=inplace_relu)
        self.pool_layer = nn.MaxPool3d(
            kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool_layer(self.relu(self.bn(self.conv(x))))


class VideoModelStem(nn.Module):
    """One :class:`ResNetBasicStem` per pathway (``pathway{i}_stem``).

    Args:
        dim_in: input channels per pathway.
        dim_out: output channels per pathway.
        temp_kernels: temporal kernel size per pathway.
        norm: builds the norm layers.
        inplace_relu: use in-place ReLUs.
    """

    def __init__(
        self,
        dim_in: Sequence[int],
        dim_out: Sequence[int],
        temp_kernels: Sequence[int],
        norm: NormFactory,
        inplace_relu: bool = True,
    ) -> None:
        super().__init__()
        if not len(dim_in) == len(dim_out) == len(temp_kernels):
            raise ValueError(
                f"stem: pathway counts differ (dim_in {list(dim_in)}, dim_out "
                f"{list(dim_out)}, temporal kernels {list(temp_kernels)})"
            )
        self.num_pathways = len(dim_in)
        for p in range(self.num_pathways):
            stem = ResNetBasicStem(
                dim_in[p], dim_out[p], temp_kernels[p], norm, inplace_relu
            )
            self.add_module(f"pathway{p}_stem", stem)

    def forward(self, x: List[torch.Tensor]) -> List[torch.Tensor]:
        return [
            getattr(self, f"pathway{p}_stem")(x[p]) for p in range(self.num_pathways)
        ]


def prepare_pathways(
    x: Sequence[torch.Tensor], num_pathways: int, channels_last: bool
) -> List[torch.Tensor]:
    """Checks a model's input list and sets its memory format.

    Args:
        x: the pathway tensors, each [N, C, T, H, W].
        num_pathways: how many the model takes.
        channels_last: convert them to ``torch.channels_last_3d``.

    Returns:
        list[torch.Tensor]: the inputs, ready for the stem.

    Raises:
        TypeError: ``x`` is not a list or tuple of tensors.
        ValueError: wrong number of pathways or of dimensions.
    """
    if not isinstance(x, (list, tuple)):
        raise TypeError(
            f"model input must be a list of {num_pathways} pathway tensor(s), "
            f"got {type(x).__name__}"
        )
    if len(x) != num_pathways:
        raise ValueError(
            f"model input has {len(x)} pathway tensor(s), the model takes "
            f"{num_pathways}"
        )
    for p, t in enumerate(x):
        if t.dim() != 5:
            raise ValueError(
                f"pathway {p} input has shape {tuple(t.shape)}; expected "
                "[N, C, T, H, W]"
            )
    if channels_last:
        return [t.contiguous(memory_format=torch.channels_last_3d) for t in x]
    return list(x)
