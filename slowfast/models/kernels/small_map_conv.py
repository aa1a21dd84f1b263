"""A CPU 3D convolution whose weight gradient is one convolution over the batch.

oneDNN (PyTorch 2.13) computes a 3D convolution's weight gradient on CPU as an
im2col and a matrix product per clip, each of inner size the clip's output
positions. On small feature maps that size is tiny (res5 of a multigrid
coarse shape: 2 x 2 x 2 = 8 positions), so the gradient is bound by writing
the [C_out, C_in x kernel] product once per clip, not by its arithmetic.

The same gradient is a single forward convolution with the batch as the
reduction axis: dW[o, c, k] = sum over clips n and positions p of
x[n, c, p + k] g[n, o, p], i.e. ``conv3d(x^T, g^T)`` with x^T = x as
[C_in, N, ...] and g^T = g as [C_out, N, ...] (the output gradient is the
kernel, the kernel's taps the output). oneDNN's forward kernels run it at
their usual speed. :func:`conv3d` takes this path where it pays off
(docs/benchmarks/model-step.md, "Weight gradient on small feature maps"): CPU,
float32 without autocast, no groups, unit stride and dilation, a kernel
larger than 1 x 1 x 1 and at most :data:`MAX_OUTPUT_POSITIONS` output
positions per clip.
Elsewhere, and for the input gradient always, it is ``F.conv3d``'s own.
"""

from typing import Optional, Sequence

import torch
from torch import nn
from torch.nn import functional as F

# Above this many output positions per clip oneDNN's own weight gradient is
# kept: the batch-reduced one does not pay off there
# (docs/benchmarks/model-step.md, "Weight gradient on small feature maps").
MAX_OUTPUT_POSITIONS = 64


def cpu_autocast_enabled() -> bool:
    """Whether CPU autocast is on (any PyTorch version)."""
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()


def batch_reduced_weight_grad_applies(
    x: torch.Tensor,
    weight: torch.Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> bool:
    """Whether :func:`conv3d` computes the weight gradient over the batch.

    Args:
        x: the input, [N, C_in, T, H, W].
        weight: the kernel, [C_out, C_in, kT, kH, kW].
        stride: the convolution's stride (3 ints).
        padding: its padding (3 ints; a string never applies).
        dilation: its dilation (3 ints).
        groups: its groups.

    Returns:
        bool: True where the batch-reduced weight gradient is used.
    """
    if isinstance(padding, str) or groups != 1:
        return False
    if _triple(stride) != (1, 1, 1) or _triple(dilation) != (1, 1, 1):
        return False
    if x.device.type != "cpu" or x.dim() != 5 or weight.dim() != 5:
        return False
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        return False
    if not (torch.is_grad_enabled() and weight.requires_grad) or cpu_autocast_enabled():
        return False
    if torch.jit.is_tracing() or torch.jit.is_scripting():
        return False
    kernel = weight.shape[2:]
    if kernel.numel() == 1:
        return False
    positions = 1
    for size, k, pad in zip(x.shape[2:], kernel, _triple(padding)):
        positions *= max(0, size + 2 * pad - k + 1)
    return positions <= MAX_OUTPUT_POSITIONS


def _triple(value) -> tuple:
    return (value,) * 3 if isinstance(value, int) else tuple(value)


def batch_reduced_weight_grad(
    x: torch.Tensor, grad: torch.Tensor, padding: Sequence[int]
) -> torch.Tensor:
    """The weight gradient of a unit-stride 3D convolution, reduced over the batch.

    Args:
        x: the convolution's input, [N, C_in, T, H, W].
        grad: the gradient of its output, [N, C_out, T', H', W'].
        padding: its padding (3 ints).

    Returns:
        torch.Tensor: [C_out, C_in, kT, kH, kW], the gradient of the kernel.
    """
    # Clips become the reduced channels, the output gradient the kernel.
    return F.conv3d(
        x.transpose(0, 1), grad.transpose(0, 1), None, 1, padding
    ).transpose(0, 1)


class _BatchReducedConv3d(torch.autograd.Function):
    """conv3d at unit stride and dilation, the weight gradient a batch reduction."""

    @staticmethod
    def forward(ctx, x, weight, bias, padding):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        ctx.padding = padding
        return F.conv3d(x, weight, bias, 1, padding)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.ops.aten.convolution_backward(
                grad, x, weight, None, (1, 1, 1), ctx.padding, (1, 1, 1),
                False, (0, 0, 0), 1, (True, False, False),
            )[0]  # fmt: skip
        if ctx.needs_input_grad[1]:
            grad_w = batch_reduced_weight_grad(x, grad, ctx.padding)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(dim=(0, 2, 3, 4))
        return grad_x, grad_w, grad_b, None


def conv3d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    stride: Sequence[int],
    padding,
    dilation: Sequence[int],
    groups: int,
) -> torch.Tensor:
    """``F.conv3d``, with the weight gradient over the batch where faster.

    Args:
        x: the input, [N, C_in, T, H, W].
        weight: the kernel.
        bias: the bias or None.
        stride: as ``F.conv3d``'s.
        padding: as ``F.conv3d``'s.
        dilation: as ``F.conv3d``'s.
        groups: as ``F.conv3d``'s.

    Returns:
        torch.Tensor: ``F.conv3d(x, weight, bias, stride, padding, dilation,
        groups)``; its gradients are the same up to float rounding.
    """
    if batch_reduced_weight_grad_applies(x, weight, stride, padding, dilation, groups):
        return _BatchReducedConv3d.apply(x, weight, bias, _triple(padding))
    return F.conv3d(x, weight, bias, stride, padding, dilation, groups)


class SmallMapConv3d(nn.Conv3d):
    """``nn.Conv3d`` computed by :func:`conv3d` (same parameters and keys)."""

    def _conv_forward(
        self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]
    ) -> torch.Tensor:
        if self.padding_mode != "zeros":
            return super()._conv_forward(x, weight, bias)
        return conv3d(
            x, weight, bias, self.stride, self.padding, self.dilation, self.groups
        )
