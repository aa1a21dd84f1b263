"""The GPU kernels of sub-batch BN, run on CPU through Triton's interpreter.

``TRITON_INTERPRET=1`` (set by conftest.py) makes ``split_bn_kernels`` run its
Triton kernels on CPU tensors. The fused path must give the reference
computation's outputs, gradients and running statistics (clip ``i`` in split
``i % k``) in both memory formats, and keep the input's memory format. The layer
sends CPU batches to the native path (unchanged); the tests route them to the
kernels.
"""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from slowfast.models import norm
from slowfast.models.kernels import split_bn
from slowfast.models.norm import SubBatchNorm3d
from tests.helpers.norm_utils import assert_trained_alike

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
    assert_trained_alike(fused, reference, 2)


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


class _Launches:
    """The kernel module, recording the name of every kernel launched (and
    hiding the interpreter's own tensor ops from :class:`_Ops`)."""

    def __init__(self, kernels):
        self.kernels, self.names = kernels, []

    def __getattr__(self, name):
        kernel, names = getattr(self.kernels, name), self.names

        class _Launcher:
            def __getitem__(self, grid):
                names.append(name)

                def launch(*args, **kwargs):
                    with _disable_current_modes():
                        return kernel[grid](*args, **kwargs)

                return launch

        return _Launcher()


class _Ops(TorchDispatchMode):
    """Records the aten ops run under it."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_a_step_launches_four_kernels_and_allocates_only_its_outputs(
    interpreted, monkeypatch
):
    fused, reference = _layers(4, 4)
    launches = _Launches(split_bn._kernels())
    monkeypatch.setattr(split_bn, "_kernels", lambda: launches)
    x = torch.randn(8, 4, 1, 2, 2).contiguous(memory_format=torch.channels_last_3d)
    fused(x.clone().requires_grad_()).sum().backward()  # buffers reserved here
    launches.names.clear()
    scratch = [t.data_ptr() for t in (fused._split_workspace.part,)]
    x_f, x_r = x.clone().requires_grad_(), x.clone().requires_grad_()
    with _Ops() as forward_ops:
        y = fused(x_f)
    with _Ops() as backward_ops:
        y.sum().backward()
    assert launches.names == [
        "split_stats",
        "split_apply",
        "split_grad_stats",
        "split_grad_apply",
    ]
    assert forward_ops.names == ["empty_like"]  # the output; the count in-kernel
    assert backward_ops.names.count("empty_like") == 3  # dx, dw, db
    assert "empty" not in backward_ops.names and "zeros" not in backward_ops.names
    assert [fused._split_workspace.part.data_ptr()] == scratch
    assert int(fused._split_workspace.counts.abs().sum()) == 0  # reset for the next
    reference(x_r.detach())
    reference(x_r).sum().backward()
    assert int(fused.num_batches_tracked) == 2
    torch.testing.assert_close(fused.running_var, reference.running_var)
    torch.testing.assert_close(x_f.grad, x_r.grad)


def test_a_backward_after_another_forward_uses_its_own_statistics(interpreted):
    fused, reference = _layers(5, 2)
    first, second = torch.randn(4, 5, 2, 3, 3), torch.randn(4, 5, 2, 3, 3) * 3 + 2
    grads = {}
    for layer, name in ((fused, "fused"), (reference, "reference")):
        a, b = first.clone().requires_grad_(), second.clone().requires_grad_()
        y_a, y_b = layer(a), layer(b)  # b's forward replaces a's statistics
        (y_a * 2.0).sum().backward()  # the first backward after both forwards
        (y_b * y_b).sum().backward()
        grads[name] = (a.grad, b.grad, layer.weight.grad, layer.bias.grad)
    for got, want in zip(grads["fused"], grads["reference"]):
        torch.testing.assert_close(got, want)


def test_fused_split_without_affine_takes_gradients(interpreted):
    fused, reference = _layers(6, 3, affine=False)
    x = torch.randn(6, 6, 2, 2, 3) * 2 - 1
    x_f, x_r = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.randn_like(x)
    fused(x_f).backward(grad)
    reference(x_r).backward(grad)
    torch.testing.assert_close(x_f.grad, x_r.grad)
    torch.testing.assert_close(fused.running_mean, reference.running_mean)
    assert int(fused.num_batches_tracked) == 1


def test_a_copied_layer_gets_its_own_workspace(interpreted):
    fused, _ = _layers(4, 2)
    fused(torch.randn(4, 4, 2, 3, 3))
    twin = copy.deepcopy(fused)
    assert twin._split_workspace.part is None
    twin(torch.randn(4, 4, 2, 3, 3))
    assert twin._split_workspace.part is not fused._split_workspace.part


_COMPILE = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from slowfast.models.kernels import split_bn_triton as kernels

DATA = ("x_ptr", "y_ptr", "dy_ptr", "dx_ptr")
TYPES = {"count_ptr": "*i32", "tracked_ptr": "*i64", "eps": "fp32",
         "momentum": "fp32"}
for arch in (80, 90):
    for data in ("*fp32", "*bf16"):
        for flags in ((True, 64), (False, 8)):
            const = {"TRACK": flags[0], "AFFINE": flags[0], "BLOCK_R": 32,
                     "BLOCK_C": flags[1], "BLOCK_K": 4}
            for name in ("split_stats", "split_apply", "split_grad_stats",
                         "split_grad_apply"):
                fn = getattr(kernels, name)
                sig = {a: "constexpr" if a in const else TYPES.get(
                    a, data if a in DATA else "*fp32" if a.endswith("_ptr")
                    else "i32") for a in fn.arg_names}
                src = ASTSource(fn=fn, signature=sig, constexprs={
                    a: const[a] for a in fn.arg_names if a in const})
                triton.compile(src, target=GPUTarget("cuda", arch, 32))
print("compiled")
"""


@pytest.mark.slow
def test_the_kernels_compile_for_gpus():
    """What the interpreter does not check: the kernels lower to GPU code
    (Ampere and Hopper), compiled here without a GPU."""
    pytest.importorskip("triton", reason="triton is a dev dependency (setup.py)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_COMPILE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "compiled"


def test_cpu_batches_do_not_reach_the_kernels():
    layer, _ = _layers(3, 2)
    x = torch.randn(4, 3, 2, 3, 3)
    assert not split_bn.fused_split_ok(x)
    assert not layer._fused_split_ok(x)
    assert layer._native_split_ok(x)
