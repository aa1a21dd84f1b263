"""Gradients in one flat buffer per dtype, averaged over processes at once.

The graphed step (``engine/graphed_step.py``) replays forward and backward of
the model itself, not of its DistributedDataParallel wrapper, whose
gradient hooks run host code. With several processes it then averages the
gradients here, outside the graph: every parameter's ``.grad`` is a view into
one flat buffer, so zeroing them is one kernel and averaging them one
all-reduce (NCCL queues it on the device: the host does not wait). The
average is DDP's: each gradient divided by the number of processes, then
summed over them.
"""

from typing import Dict, List, Tuple

import torch

from slowfast.utils import distributed as du


class FlatGrads:
    """The gradients of ``params`` as views into one buffer per dtype.

    Args:
        params: the parameters that take gradients, each dense in memory (any
            memory format); their ``.grad`` is replaced by a view, zeroed.
    """

    def __init__(self, params: List[torch.nn.Parameter]) -> None:
        groups: Dict[Tuple, List[torch.nn.Parameter]] = {}
        for param in params:
            groups.setdefault((param.device, param.dtype), []).append(param)
        self.params = list(params)
        self.buffers: List[torch.Tensor] = []
        self.views: List[torch.Tensor] = []
        for (device, dtype), group in groups.items():
            flat = torch.zeros(
                sum(p.numel() for p in group), dtype=dtype, device=device
            )
            offset = 0
            for param in group:
                # The parameter's own strides (channels-last weights keep
                # channels-last gradients, as the fused update expects).
                view = flat[offset:].as_strided(param.shape, param.stride())
                self.views.append(view)
                offset += param.numel()
            self.buffers.append(flat)
        self.order = [p for group in groups.values() for p in group]
        self.attach()

    def attach(self) -> None:
        """Points each parameter's ``.grad`` at its view (anything that set
        it to None or replaced it is undone)."""
        for param, view in zip(self.order, self.views):
            if param.grad is not view:
                param.grad = view

    def zero(self) -> None:
        """Zeroes every gradient (one kernel per buffer)."""
        self.attach()
        for flat in self.buffers:
            flat.zero_()

    def average(self, world_size: int) -> None:
        """Averages the gradients over the processes (one all-reduce per
        buffer; with one process nothing happens)."""
        if world_size == 1:
            return
        for flat in self.buffers:
            flat.div_(world_size)
            du.all_reduce(flat, "sum")
