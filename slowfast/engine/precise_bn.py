"""Precise BN statistics that leave every BN layer its own buffer tensors."""

from typing import Iterable

import torch
from fvcore.nn.precise_bn import update_bn_stats
from torch import nn


@torch.no_grad()
def update_bn_stats_in_place(
    model: nn.Module, inputs: Iterable, num_batches: int
) -> None:
    """fvcore's ``update_bn_stats``, its statistics copied into the old tensors.

    fvcore assigns new running-statistics tensors to the BN layers. Whoever
    holds the old ones would go on reading and updating tensors the model no
    longer has: the CUDA graphs of TRAIN.CUDA_GRAPHS keep the addresses they
    saw at capture. So the new values are copied into the layers' original
    tensors, which stay the layers' buffers.

    Args:
        model: the model, its BN layers in training mode.
        inputs: an iterable of model inputs.
        num_batches: batches to use.
    """
    kept = [
        (module, name, buffer)
        for module in model.modules()
        if isinstance(module, nn.modules.batchnorm._NormBase)
        for name, buffer in module._buffers.items()
        if buffer is not None
    ]
    update_bn_stats(model, inputs, num_batches)
    for module, name, buffer in kept:
        new = module._buffers[name]
        assert new is not None  # fvcore replaces the statistics, never drops them
        if new is not buffer:
            buffer.copy_(new)
            module._buffers[name] = buffer
