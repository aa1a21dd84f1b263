"""Normalisation of uint8 clips inside the model (DATA.MEAN, DATA.STD).

The datasets hand out uint8 clips and every model ``build_model`` returns
normalises them as its first step, on the device it runs on
(:func:`attach_input_norm`: an ``input_norm`` submodule and a forward pre-hook,
so a model class itself, ours or one registered from outside, takes
normalised float clips as the reference's do): a batch travels from the loader
workers to the trainer, and to the GPU, at a quarter of the float32 bytes, and
the workers do less. A float input is taken as already normalised and passed
through, so code that feeds normalised tensors (the reference's convention)
works unchanged.

The statistics are non-persistent buffers: checkpoints keep the reference's
keys, and a checkpoint loads into a model built with other statistics.
"""

from typing import Sequence, cast

import torch
from fvcore.common.config import CfgNode
from torch import nn


class InputNormalizer(nn.Module):
    """uint8 ``[N, C, T, H, W]`` -> float32 ``(x / 255 - mean) / std``.

    Args:
        mean: per-channel mean, pixels in [0, 1], in the order the channels
            arrive.
        std: per-channel standard deviation, same order.
        channels_last: return the result in ``torch.channels_last_3d`` (the
            model's memory format), saving the model a copy.
    """

    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(
        self, mean: Sequence[float], std: Sequence[float], channels_last: bool = False
    ) -> None:
        super().__init__()
        self.channels_last = channels_last
        if len(mean) != len(std):
            raise ValueError(f"{len(mean)} means but {len(std)} standard deviations")
        scale = torch.tensor([1.0 / (255.0 * s) for s in std], dtype=torch.float32)
        bias = torch.tensor([-m / s for m, s in zip(mean, std)], dtype=torch.float32)
        self.register_buffer("scale", scale.view(1, -1, 1, 1, 1), persistent=False)
        self.register_buffer("bias", bias.view(1, -1, 1, 1, 1), persistent=False)

    @classmethod
    def from_cfg(cls, cfg: CfgNode) -> "InputNormalizer":
        """The config's statistics (DATA.MEAN, DATA.STD; RGB order), reversed
        when DATA.REVERSE_INPUT_CHANNEL has the datasets hand out BGR clips
        (contiguous; ``build_model`` sets the model's memory format)."""
        mean, std = list(cfg.DATA.MEAN), list(cfg.DATA.STD)
        if cfg.DATA.REVERSE_INPUT_CHANNEL:
            mean, std = mean[::-1], std[::-1]
        return cls(mean, std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalises a uint8 clip batch; returns any other tensor as it is.

        Args:
            x: ``[N, C, T, H, W]``.

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
        fmt = torch.channels_last_3d if self.channels_last else torch.contiguous_format
        out = torch.empty(
            x.shape, dtype=torch.float32, device=x.device, memory_format=fmt
        )
        out.copy_(x)  # one pass: dtype and memory format
        return out.mul_(self.scale).add_(self.bias)


def _normalize_inputs(module: nn.Module, args: tuple):
    """Forward pre-hook: normalises the uint8 tensors of the input list."""
    if not args or not isinstance(args[0], (list, tuple)):
        return None
    norm = cast(InputNormalizer, module.input_norm)
    return ([norm(t) for t in args[0]], *args[1:])


def attach_input_norm(model: nn.Module, cfg: CfgNode) -> nn.Module:
    """Has ``model`` normalise the datasets' uint8 clips before its forward.

    Adds an ``input_norm`` submodule (:meth:`InputNormalizer.from_cfg`; no
    state-dict entries) and a forward pre-hook that passes each tensor of the
    input list through it. Normalised float inputs pass unchanged.

    Args:
        model: a freshly built model taking a list of pathway tensors.
        cfg: the run's config (DATA.MEAN, DATA.STD, REVERSE_INPUT_CHANNEL).

    Returns:
        nn.Module: the same model.

    Raises:
        ValueError: the model already has an ``input_norm`` attribute.
    """
    if hasattr(model, "input_norm"):
        raise ValueError(
            f"{type(model).__name__} has an attribute 'input_norm'; build_model "
            "adds the input normalisation itself: rename it"
        )
    model.add_module("input_norm", InputNormalizer.from_cfg(cfg))
    model.register_forward_pre_hook(_normalize_inputs)
    return model
