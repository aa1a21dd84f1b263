"""The GPU kernels of sub-batch BN, run on CPU through Triton's interpreter.

``TRITON_INTERPRET=1`` (set by conftest.py) makes ``split_bn_kernels`` run its
Triton kernels on CPU tensors. The fused path must give the reference
computation's outputs, gradients and running statistics (clip ``i`` in split
``i % k``) in both memory formats, and keep the input's layout. The layer
sends CPU batches to the native path (unchanged); the tests route them to the
kernels.
"""

import copy
import os

import pytest
import torch

from slowfast.models import norm, split_bn
from slowfast.models.norm import SubBatchNorm3d

FORMATS = [torch.contiguous_format, torch.channels_last_3d]


@pytest.fixture
def interpreted(monkeypatch):
    """The layer's fused path on CPU tensors (conftest sets TRITON_INTERPRET)."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    pytest.importorskip("triton", reason="triton is a dev dependency (setup.py)")
    monkeypatch.setattr(norm, "fused_split_ok", lambda x: True)


def _layers(channels, splits, momentum=0.3, affine=True):
    fused = SubBatchNorm3d(channels, momentum=momentum, affine=affine)
    if affine:
        with torch.no_grad():
            fused.weight.uniform_(0.5, 1.5)
            fused.bias.uniform_(-1.0, 1.0)
    fused.num_splits = splits
    reference = copy.deepcopy(fused)
    reference._forward_split = reference._forward_split_generic
    return fused, reference


@pytest.mark.parametrize("memory_format", FORMATS)
@pytest.mark.parametrize(
    "splits,channels",
    [
        (2, 3),
        pytest.param(4, 5, marks=pytest.mark.slow),
        pytest.param(3, 20, marks=pytest.mark.slow),
    ],
)
def test_fused_split_matches_the_reference(
    interpreted, memory_format, splits, channels
):
    torch.manual_seed(splits)
    fused, reference = _layers(channels, splits)
    x = torch.randn(2 * splits, channels, 2, 3, 5) * 2.0 + 1.5
    x[1::splits] += 3.0  # the splits' statistics differ
    x = x.contiguous(memory_format=memory_format)
    x_f, x_r = x.clone().requires_grad_(), x.clone().requires_grad_()
    assert fused._fused_split_ok(x_f)
    grad = torch.randn_like(x)
    for _ in range(2):
        y_f, y_r = fused(x_f), reference(x_r)
        torch.testing.assert_close(y_f, y_r)
    assert y_f.is_contiguous(memory_format=memory_format)
    (y_f * grad).sum().backward()
    (y_r * grad).sum().backward()
    assert x_f.grad.is_contiguous(memory_format=memory_format)
    torch.testing.assert_close(x_f.grad, x_r.grad)
    torch.testing.assert_close(fused.weight.grad, reference.weight.grad)
    torch.testing.assert_close(fused.bias.grad, reference.bias.grad)
    torch.testing.assert_close(fused.running_mean, reference.running_mean)
    torch.testing.assert_close(fused.running_var, reference.running_var)
    assert int(fused.num_batches_tracked) == 2


def test_fused_split_takes_a_gradient_in_the_other_format(interpreted):
    fused, reference = _layers(4, 2)
    x = torch.randn(4, 4, 2, 3, 3).contiguous(memory_format=torch.channels_last_3d)
    x_f, x_r = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.randn(x.shape)  # contiguous, unlike the input
    fused(x_f).backward(grad)
    reference(x_r).backward(grad)
    torch.testing.assert_close(x_f.grad, x_r.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_split_half_input_has_float32_statistics(interpreted, dtype):
    fused, reference = _layers(6, 4, momentum=0.5)
    x = torch.randn(8, 6, 2, 4, 4) * 3.0 - 1.0
    y = fused(x.to(dtype).contiguous(memory_format=torch.channels_last_3d))
    assert y.dtype == dtype
    assert y.is_contiguous(memory_format=torch.channels_last_3d)
    assert fused.running_mean.dtype == torch.float32
    expected = reference(x.to(dtype).float())
    torch.testing.assert_close(y.float(), expected, atol=0.05, rtol=0.02)
    torch.testing.assert_close(fused.running_mean, reference.running_mean)
    torch.testing.assert_close(fused.running_var, reference.running_var)


def test_fused_split_without_affine_or_running_stats(interpreted):
    fused, reference = _layers(3, 2, affine=False)
    fused.track_running_stats = reference.track_running_stats = False
    fused.running_mean = fused.running_var = None
    reference.running_mean = reference.running_var = None
    x = torch.randn(4, 3, 2, 3, 3)
    torch.testing.assert_close(fused(x), reference(x))


def test_cpu_batches_do_not_reach_the_kernels():
    layer, _ = _layers(3, 2)
    x = torch.randn(4, 3, 2, 3, 3)
    assert not split_bn.fused_split_ok(x)
    assert not layer._fused_split_ok(x)
    assert layer._native_split_ok(x)
