"""Normalisation of uint8 clips inside the model (DATA.MEAN, DATA.STD).

The datasets hand out uint8 clips and the models normalise them as their
first step, on the device they run on: a batch travels from the loader
workers to the trainer, and to the GPU, at a quarter of the float32 bytes, and
the workers do less. A float input is taken as already normalised and passed
through, so code that feeds normalised tensors (the reference's convention)
works unchanged.

The statistics are non-persistent buffers: checkpoints keep the reference's
keys, and a checkpoint loads into a model built with other statistics.
"""

from typing import Sequence

import torch
from fvcore.common.config import CfgNode
from torch import nn


class InputNormalizer(nn.Module):
    """uint8 ``[N, C, T, H, W]`` -> float32 ``(x / 255 - mean) / std``.

    Args:
        mean: per-channel mean, pixels in [0, 1], in the order the channels
            arrive.
        std: per-channel standard deviation, same order.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        if len(mean) != len(std):
            raise ValueError(f"{len(mean)} means but {len(std)} standard deviations")
        scale = torch.tensor([1.0 / (255.0 * s) for s in std], dtype=torch.float32)
        bias = torch.tensor([-m / s for m, s in zip(mean, std)], dtype=torch.float32)
        self.register_buffer("scale", scale.view(1, -1, 1, 1, 1), persistent=False)
        self.register_buffer("bias", bias.view(1, -1, 1, 1, 1), persistent=False)

    @classmethod
    def from_cfg(cls, cfg: CfgNode) -> "InputNormalizer":
        """The config's statistics (DATA.MEAN, DATA.STD; RGB order), reversed
        when DATA.REVERSE_INPUT_CHANNEL has the datasets hand out BGR clips."""
        mean, std = list(cfg.DATA.MEAN), list(cfg.DATA.STD)
        if cfg.DATA.REVERSE_INPUT_CHANNEL:
            mean, std = mean[::-1], std[::-1]
        return cls(mean, std)

    def forward(self, x: torch.Tensor, channels_last: bool = False) -> torch.Tensor:
        """Normalises a uint8 clip batch; returns any other tensor as it is.

        Args:
            x: ``[N, C, T, H, W]``.
            channels_last: return the result in ``torch.channels_last_3d``.

        Returns:
            torch.Tensor: float32 (uint8 input) or ``x`` itself.
        """
        if x.dtype != torch.uint8:
            return x
        if x.shape[1] != self.scale.shape[1]:
            raise ValueError(
                f"input has {x.shape[1]} channels; DATA.MEAN and DATA.STD have "
                f"{self.scale.shape[1]}"
            )
        fmt = torch.channels_last_3d if channels_last else torch.contiguous_format
        out = torch.empty(
            x.shape, dtype=torch.float32, device=x.device, memory_format=fmt
        )
        out.copy_(x)  # one pass: type and layout
        return out.mul_(self.scale).add_(self.bias)
