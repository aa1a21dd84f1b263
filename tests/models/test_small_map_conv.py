"""SmallMapConv3d: the weight gradient over the batch equals nn.Conv3d's."""

import pytest
import torch
from torch import nn

from slowfast.models.kernels.small_map_conv import (
    MAX_OUTPUT_POSITIONS,
    SmallMapConv3d,
    batch_reduced_weight_grad_applies,
)

# (input shape, kernel, padding): res5-like maps of multigrid's coarse shapes.
SMALL = {
    "2x2x2, 3x3x3": ((6, 8, 2, 2, 2), (3, 3, 3), (1, 1, 1)),
    "1x3x3, 1x3x3": ((5, 8, 1, 3, 3), (1, 3, 3), (0, 1, 1)),
    "4x4x4, 3x3x3": ((3, 8, 4, 4, 4), (3, 3, 3), (1, 1, 1)),
    "unpadded": ((4, 8, 3, 5, 5), (3, 3, 3), (0, 0, 0)),
    "uneven padding": ((4, 8, 2, 4, 3), (3, 1, 3), (1, 0, 1)),
}


def _pair(kernel, padding, bias, **kwargs):
    torch.manual_seed(0)
    ref = nn.Conv3d(8, 12, kernel, padding=padding, bias=bias, **kwargs)
    conv = SmallMapConv3d(8, 12, kernel, padding=padding, bias=bias, **kwargs)
    conv.load_state_dict(ref.state_dict())
    return ref, conv


def _outputs_and_grads(conv, x, grad):
    x = x.clone().requires_grad_()
    y = conv(x)
    (y * grad).sum().backward()
    grads = [x.grad, conv.weight.grad]
    if conv.bias is not None:
        grads.append(conv.bias.grad)
    return y, grads


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("memory_format", ["contiguous", "channels_last_3d"])
@pytest.mark.parametrize("case", list(SMALL))
def test_batch_reduced_weight_gradient_equals_conv3d(case, memory_format, bias):
    shape, kernel, padding = SMALL[case]
    ref, conv = _pair(kernel, padding, bias)
    x = torch.randn(shape)
    if memory_format == "channels_last_3d":
        x = x.contiguous(memory_format=torch.channels_last_3d)
    assert batch_reduced_weight_grad_applies(
        x, conv.weight, conv.stride, conv.padding, conv.dilation, conv.groups
    )
    with torch.no_grad():
        grad = torch.randn_like(ref(x))
    y_ref, grads_ref = _outputs_and_grads(ref, x, grad)
    y, grads = _outputs_and_grads(conv, x, grad)
    assert "BatchReduced" in type(conv(x).grad_fn).__name__
    torch.testing.assert_close(y, y_ref)
    for got, want in zip(grads, grads_ref):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert list(conv.state_dict()) == list(ref.state_dict())


def test_frozen_input_gets_no_gradient_but_the_weight_does():
    shape, kernel, padding = SMALL["2x2x2, 3x3x3"]
    ref, conv = _pair(kernel, padding, True)
    x = torch.randn(shape)
    (conv(x) ** 2).sum().backward()
    (ref(x) ** 2).sum().backward()
    torch.testing.assert_close(conv.weight.grad, ref.weight.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(conv.bias.grad, ref.bias.grad, rtol=1e-4, atol=1e-5)


def _applies(conv, x):
    return batch_reduced_weight_grad_applies(
        x, conv.weight, conv.stride, conv.padding, conv.dilation, conv.groups
    )


@pytest.mark.parametrize(
    "why, kernel, kwargs, shape",
    [
        ("strided", (3, 3, 3), dict(padding=1, stride=(1, 2, 2)), (2, 8, 2, 4, 4)),
        ("dilated", (3, 3, 3), dict(padding=2, dilation=2), (2, 8, 2, 2, 2)),
        ("grouped", (3, 3, 3), dict(padding=1, groups=2), (2, 8, 2, 2, 2)),
        ("1x1x1 kernel", (1, 1, 1), dict(), (2, 8, 2, 2, 2)),
        ("large maps", (3, 3, 3), dict(padding=1), (2, 8, 2, 8, 8)),
    ],
)
def test_other_convolutions_keep_conv3d_own_gradient(why, kernel, kwargs, shape):
    conv = SmallMapConv3d(8, 12, kernel, **kwargs)
    x = torch.randn(shape)
    assert not _applies(conv, x), why
    assert "BatchReduced" not in type(conv(x).grad_fn).__name__


def test_limit_is_output_positions_per_clip():
    conv = SmallMapConv3d(8, 12, (1, 3, 3), padding=(0, 1, 1))
    at_limit = torch.randn(2, 8, 1, 8, MAX_OUTPUT_POSITIONS // 8)
    past_limit = torch.randn(2, 8, 1, 8, MAX_OUTPUT_POSITIONS // 8 + 1)
    assert _applies(conv, at_limit)
    assert not _applies(conv, past_limit)


def test_no_grad_bf16_and_autocast_keep_conv3d():
    conv = SmallMapConv3d(8, 12, 3, padding=1)
    x = torch.randn(2, 8, 2, 2, 2)
    with torch.no_grad():
        assert not _applies(conv, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not _applies(conv, x)
    assert not _applies(conv.to(torch.bfloat16), x.to(torch.bfloat16))
