"""TimeTrimmedConv3d: same outputs and gradients as nn.Conv3d, fewer taps."""

import pytest
import torch
from torch import nn

from slowfast.models.kernels.time_trimmed_conv import (
    TimeTrimmedConv3d,
    useful_temporal_taps,
)

VARIANTS = {
    "strided": dict(stride=(1, 2, 2), padding=(0, 1, 1)),
    "dilated": dict(dilation=(1, 2, 2), padding=(0, 2, 2)),
    "grouped": dict(groups=2, padding=(0, 1, 1)),
    "channels_last": dict(padding=(0, 1, 1)),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("kernel", [1, 3, 5])
@pytest.mark.parametrize("frames", [1, 2, 3, 8])
def test_same_outputs_and_gradients_as_conv3d(kernel, frames, variant):
    torch.manual_seed(0)
    args = dict(VARIANTS[variant], kernel_size=(kernel, 3, 3), bias=True)
    args["padding"] = (kernel // 2,) + args["padding"][1:]
    ref = nn.Conv3d(4, 6, **args)
    conv = TimeTrimmedConv3d(4, 6, **args)
    conv.load_state_dict(ref.state_dict())
    assert list(conv.state_dict()) == list(ref.state_dict())
    x = torch.randn(2, 4, frames, 9, 9)
    if variant == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last_3d)
    x_ref, x_conv = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ref, y_conv = ref(x_ref), conv(x_conv)
    torch.testing.assert_close(y_conv, y_ref)
    grad = torch.randn_like(y_ref)
    (y_ref * grad).sum().backward()
    (y_conv * grad).sum().backward()
    torch.testing.assert_close(x_conv.grad, x_ref.grad)
    torch.testing.assert_close(conv.weight.grad, ref.weight.grad)
    torch.testing.assert_close(conv.bias.grad, ref.bias.grad)
    taps = useful_temporal_taps(kernel, frames)
    first = (kernel - taps) // 2
    outer = torch.ones(kernel, dtype=torch.bool)
    outer[first : first + taps] = False
    assert (conv.weight.grad[:, :, outer] == 0).all()


@pytest.mark.parametrize("memory_format", ["contiguous", "channels_last_3d"])
@pytest.mark.parametrize("kernel", [3, 5])
@pytest.mark.parametrize("frames", [1, 2, 3, 4, 8])
def test_bf16_autocast_weight_gradient_is_right_on_clips_shorter_than_the_kernel(
    kernel, frames, memory_format
):
    # oneDNN's bf16 3D convolution gets this gradient wrong at 1 < frames <
    # kernel with temporal padding; the module pads time itself there.
    torch.manual_seed(0)
    conv = TimeTrimmedConv3d(8, 16, (kernel, 3, 3), padding=(kernel // 2, 1, 1))
    x = torch.randn(4, 8, frames, 10, 10)
    if memory_format == "channels_last_3d":
        x = x.contiguous(memory_format=torch.channels_last_3d)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = conv(x)
    grad = torch.randn(y.shape)
    (y.float() * grad).sum().backward()
    exact = nn.Conv3d(8, 16, (kernel, 3, 3), padding=(kernel // 2, 1, 1)).double()
    exact.load_state_dict(conv.state_dict())
    y_exact = exact(x.double())
    (y_exact * grad.double()).sum().backward()
    assert torch.isfinite(conv.weight.grad).all()
    error = (conv.weight.grad.double() - exact.weight.grad).norm()
    assert error / exact.weight.grad.norm() < 0.02  # bf16 rounding: about 0.003
    torch.testing.assert_close(y.double(), y_exact, rtol=0.05, atol=0.05)


def test_taps_that_can_see_a_frame():
    assert useful_temporal_taps(5, 2) == 3
    assert useful_temporal_taps(3, 1) == 1
    assert useful_temporal_taps(5, 4) == 5


def test_fvcore_counts_the_convolution_as_defined():
    # fvcore traces the model: the trace applies the full kernel.
    from fvcore.nn import FlopCountAnalysis

    args = dict(kernel_size=(5, 3, 3), padding=(2, 1, 1), bias=False)
    x = torch.randn(1, 3, 2, 5, 5)
    counts = []
    for conv in (nn.Conv3d(3, 4, **args), TimeTrimmedConv3d(3, 4, **args)):
        counter = FlopCountAnalysis(conv, (x,))
        counter.unsupported_ops_warnings(False)
        counts.append(counter.total())
    assert counts[0] == counts[1] == 4 * 3 * 5 * 3 * 3 * 2 * 5 * 5
