"""Skipping a non-finite training step without waiting for the device.

A step whose loss or gradients are not finite must leave the weights, the
optimizer state and the BN running statistics as they were. Reading the
verdict on the host would make the host wait for the device at every step,
so on a GPU the step keeps it on the device:

* the update: a fused optimizer (``torch.optim.SGD(fused=True)``, the trainer's
  SGD on GPUs) takes ``found_inf`` and skips on the device, as it does under
  a GradScaler;
* BN statistics, which the forward pass already updated: ``BufferSnapshot``
  copies every buffer of the model into one flat tensor per dtype before the
  step and, after it, keeps the new values or the old ones with one
  ``torch.where``: a few kernel launches whatever the number of BN layers.

Elsewhere (CPU, other optimizers, and every step until one update has been
applied, which writes the optimizer's state) the step reads the verdict on
the host and skips the update there, as it always could. A fused optimizer
must not skip its first step on the device: PyTorch's ``SGD(fused=True)``
creates its momentum buffers with ``empty_like`` in that step and leaves them
unwritten when ``found_inf`` skips it, and the next step would fold that
memory into the weights (``tests/engine/test_skipped_steps.py``).

Under a GradScaler the scaler skips the update on an overflow; the BN
statistics of that step are put back all the same.
"""

from typing import Dict, List, Sequence, Tuple

import torch
from torch import nn


def grads_finite(params: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """A one-element bool tensor on ``device``: every gradient is finite.

    One multi-tensor kernel (the one a GradScaler uses) checks them all.
    """
    grads = [p.grad for p in params if p.grad is not None]
    found = torch.zeros(1, device=device)
    if grads:
        one = torch.ones(1, device=device)
        for group in _by_dtype(grads).values():
            torch._amp_foreach_non_finite_check_and_unscale_(group, found, one)
    return found == 0


def skips_on_device(optimizer: torch.optim.Optimizer, device: torch.device) -> bool:
    """Whether ``optimizer`` can skip its update on ``device`` (``found_inf``):
    a fused implementation on a GPU, with its state already created."""
    fused = all(group.get("fused") for group in optimizer.param_groups)
    return device.type == "cuda" and fused and bool(optimizer.state)


def _by_dtype(tensors: List[torch.Tensor]) -> Dict[Tuple, List[torch.Tensor]]:
    groups: Dict[Tuple, List[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    return groups


class BufferSnapshot:
    """The model's buffers (BN running statistics and batch counts) as they
    were before a step, to be kept or put back after it.

    Args:
        model: the model; its buffers must stay the same tensors (they are
            updated in place, as CUDA graphs also need).
    """

    def __init__(self, model: nn.Module) -> None:
        buffers = [b for b in model.buffers() if b.is_contiguous()]
        self.groups = list(_by_dtype([b.view(-1) for b in buffers]).values())
        self.sizes = [[b.numel() for b in group] for group in self.groups]
        self.saved = [
            torch.empty(sum(sizes), dtype=g[0].dtype, device=g[0].device)
            for g, sizes in zip(self.groups, self.sizes)
        ]

    def take(self) -> None:
        """Copies the buffers (one kernel per dtype)."""
        for group, saved in zip(self.groups, self.saved):
            torch.cat(group, out=saved)

    def keep_if(self, ok: torch.Tensor) -> None:
        """Keeps the buffers' new values where ``ok`` (a one-element bool
        tensor), else puts the copied ones back, without reading ``ok``."""
        for group, saved, sizes in zip(self.groups, self.saved, self.sizes):
            now = torch.cat(group)
            torch.where(ok, now, saved, out=now)
            torch._foreach_copy_(group, list(now.split(sizes)))

    def restore(self) -> None:
        """Puts the copied values back."""
        for group, saved, sizes in zip(self.groups, self.saved, self.sizes):
            torch._foreach_copy_(group, list(saved.split(sizes)))
