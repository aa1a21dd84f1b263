"""Batch norm layers: plain, sub-batch (split) and synchronised statistics.

``batchnorm`` is ``nn.BatchNorm3d``; one class, :class:`SubBatchNorm3d`, serves
both ``sub_batchnorm`` and ``sync_batchnorm``. It has the parameters and
state-dict keys of a plain ``BatchNorm3d`` plus two runtime attributes:

* ``num_splits``: at training, the local batch is split into this many
  groups, each normalised with its own statistics. Clip ``i`` of the batch
  belongs to split ``i % num_splits`` (the reference's order). This is the
  multigrid trick that keeps BN statistics over a fixed number of clips when
  the batch grows at small shapes; it is a plain attribute, so it can change
  at every iteration without rebuilding the model or the optimizer.
* ``process_group``: ``None``, or a ``torch.distributed`` group over which the
  per-split statistics are summed (synchronised BN, works with gloo on CPU).

Running statistics are updated with the mean of the split means and the total
variance (mean of split variances plus variance of split means, made unbiased
over all elements as BN does). At eval the layer is a plain ``BatchNorm3d``.

A training forward with several splits takes one of three paths, with the
same maths: on a GPU, Triton kernels that read either memory format in place
(``split_bn.py``); elsewhere one native batch norm over ``k * C`` channels of
a contiguous view (``_forward_split_native``); with a process group (or a
single value per split) ``var_mean`` and elementwise ops, which the sync
all-reduce needs (``_forward_split_generic``).

On a GPU the Triton kernels check themselves against the native computation
before their first use for each dtype and memory format, and give way to it
when they fail or cannot be built (``kernels/self_check.py``); the attribute
``split_kernels`` (BN.SPLIT_KERNELS) forces either path.

A deep copy of the layer shares its process group; a pickled layer drops it.
"""

import copy
import functools
from typing import Callable, Optional

import torch
import torch.distributed as dist
from fvcore.common.config import CfgNode
from torch import nn

from slowfast.models.kernels.self_check import KernelVerdict, split_kernels_verdict
from slowfast.models.kernels.split_bn import (
    SplitWorkspace,
    fused_split_ok,
    split_batch_norm,
)

BN_EPS = 1e-5
BN_MOMENTUM = 0.1

NormFactory = Callable[[int], nn.Module]


class SubBatchNorm3d(nn.BatchNorm3d):
    """BatchNorm3d with per-split and optionally cross-process statistics.

    Args:
        num_features: number of channels.
        eps: added to the variance.
        momentum: running-statistics momentum (``None``: cumulative average).
        affine: learn a per-channel scale and shift.
        track_running_stats: keep running statistics.
        num_splits: initial number of splits of the local batch.
        process_group: initial group for synchronised statistics.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = BN_EPS,
        momentum: Optional[float] = BN_MOMENTUM,
        affine: bool = True,
        track_running_stats: bool = True,
        num_splits: int = 1,
        process_group: Optional[dist.ProcessGroup] = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            num_features,
            eps=eps,
            momentum=momentum,
            affine=affine,
            track_running_stats=track_running_stats,
            device=device,
            dtype=dtype,
        )
        self.num_splits = _check_splits(num_splits)
        self.process_group = process_group
        # BN.SPLIT_KERNELS: "auto" (the Triton kernels where they pass their
        # check on the device), "triton" (no check) or "native" (never).
        self.split_kernels = "auto"

    def __deepcopy__(self, memo: dict) -> "SubBatchNorm3d":
        # A process group is a communicator handle: copies share it.
        if self.process_group is not None:
            memo[id(self.process_group)] = self.process_group
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["process_group"] = None  # Process groups do not pickle.
        return state

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_splits={self.num_splits}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalises ``x`` of shape [N, C, T, H, W].

        Args:
            x: the input batch.

        Returns:
            torch.Tensor: the normalised batch, same shape (and memory format).
        """
        if self.forward_path(x) == "batch_norm":
            return super().forward(x)
        self._check_input_dim(x)
        return self._forward_split(x)

    def forward_path(self, x: torch.Tensor) -> str:
        """The path :meth:`forward` takes for ``x``: "batch_norm" (one group,
        ``BatchNorm3d``'s), "triton", "native" or "generic" (see the module doc)."""
        if not self.training or (self.num_splits == 1 and self.process_group is None):
            return "batch_norm"
        if self._fused_split_ok(x):
            return "triton"
        return "native" if self._native_split_ok(x) else "generic"

    def _forward_split(self, x: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        if batch % self.num_splits:
            raise ValueError(
                f"SubBatchNorm3d: batch of {batch} clips is not divisible by "
                f"num_splits={self.num_splits}"
            )
        path = self.forward_path(x)
        if path == "triton":
            return self._forward_split_fused(x)
        if path == "native":
            return self._forward_split_native(x)
        return self._forward_split_generic(x)

    def _fused_split_ok(self, x: torch.Tensor) -> bool:
        """Whether the Triton kernels of ``split_bn.py`` compute this forward:
        GPU batches (contiguous or channels-last-3d) with local statistics, a
        momentum and more than one value per split and channel, once the
        kernels passed their check on the device for this dtype and memory format
        (``kernels/self_check.py``), unless ``split_kernels`` says otherwise."""
        ok = (
            self.split_kernels != "native"
            and self.process_group is None
            and self.momentum is not None
            and x.numel() // (self.num_splits * x.shape[1]) > 1
            and fused_split_ok(x)
        )
        if not ok or self.split_kernels == "triton":
            return ok
        channels_last = not x.is_contiguous()  # fused_split_ok: one of the two
        return check_split_kernels(x.device, x.dtype, channels_last).ok

    def _forward_split_fused(self, x: torch.Tensor) -> torch.Tensor:
        """The split forward in Triton kernels that read either memory format
        in place and update the running statistics and batch count themselves,
        with scratch buffers kept in the layer from call to call."""
        workspace = self.__dict__.get("_split_workspace")
        if workspace is None:
            workspace = self.__dict__["_split_workspace"] = SplitWorkspace()
        track = self.track_running_stats
        assert self.momentum is not None  # _fused_split_ok requires one
        return split_batch_norm(
            x,
            self.weight,
            self.bias,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.num_batches_tracked if track else None,
            self.num_splits,
            self.eps,
            self.momentum,
            workspace,
        )

    def _forward_split_generic(self, x: torch.Tensor) -> torch.Tensor:
        """The split forward from ``var_mean`` and elementwise ops (any group)."""
        batch, channels = x.shape[0], x.shape[1]
        splits = self.num_splits
        # [N, C, ...] -> [N / k, k, C, ...]: clip i goes to split i % k (a view).
        xs = x.unflatten(0, (batch // splits, splits))
        dims = [0] + list(range(3, xs.dim()))
        stats_in = xs if xs.dtype in (torch.float32, torch.float64) else xs.float()
        var, mean = torch.var_mean(stats_in, dim=dims, correction=0)
        per_split = xs.numel() // (splits * channels)
        total = float(per_split * splits)
        if self.process_group is not None:
            count = torch.full_like(mean[:, :1], per_split)
            mean, var, _ = _reduce_stats(mean, var, count, self.process_group)
            # Every process of a group trains a batch of the same shape: the
            # count is known on the host, with no read-back of the reduced one.
            total *= dist.get_world_size(self.process_group)
        if self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach(), total)

        scale = torch.rsqrt(var + self.eps)
        shift = -mean * scale
        if self.affine:
            scale = scale * self.weight
            shift = shift * self.weight + self.bias
        shape = (1, splits, channels) + (1,) * (xs.dim() - 3)
        scale = scale.to(x.dtype).view(shape)
        shift = shift.to(x.dtype).view(shape)
        return (xs * scale + shift).flatten(0, 1)

    def _native_split_ok(self, x: torch.Tensor) -> bool:
        """Whether :meth:`_forward_split_native` computes this forward.

        It needs local statistics (no process group) and more than one value
        per split and channel (native batch norm rejects a single one).
        """
        return (
            self.process_group is None
            and x.numel() // (self.num_splits * x.shape[1]) > 1
        )

    def _forward_split_native(self, x: torch.Tensor) -> torch.Tensor:
        """The split forward as one native batch norm over ``k * C`` channels.

        A contiguous [N, C, ...] batch viewed as [N / k, k * C, ...] puts clip
        i's channel c at channel ``(i % k) * C + c``: split ``i % k`` becomes
        a block of C channels, normalised by the fused batch-norm kernels
        (forward and backward) instead of a chain of elementwise ops. Other
        memory formats (channels-last) are made contiguous for it and the
        output is given back in the input's format. The split statistics come
        back through scratch buffers (float32 for half-precision inputs, as
        mixed-precision batch norm wants) updated with momentum 1 (they then
        hold the split mean and unbiased variance). Same math as the generic
        path, up to float rounding; nothing here waits for the GPU.

        """
        batch, channels = x.shape[0], x.shape[1]
        splits = self.num_splits
        channels_last = not x.is_contiguous() and x.is_contiguous(
            memory_format=torch.channels_last_3d
        )
        xc = x.contiguous()
        xs = xc.view((batch // splits, splits * channels) + x.shape[2:])
        half = x.dtype in (torch.float16, torch.bfloat16)
        stats_dtype = torch.float32 if half else x.dtype
        mean = torch.zeros(splits * channels, dtype=stats_dtype, device=x.device)
        var = torch.zeros_like(mean)
        weight = self.weight.repeat(splits) if self.affine else None
        bias = self.bias.repeat(splits) if self.affine else None
        out = nn.functional.batch_norm(
            xs, mean, var, weight, bias, True, 1.0, self.eps
        ).view(x.shape)
        if self.track_running_stats:
            count = x.numel() // (splits * channels)
            mean, var = mean.view(splits, channels), var.view(splits, channels)
            var = var * ((count - 1) / count)  # biased, as var_mean gives it
            self._update_running_stats(mean, var, float(count * splits))
        if channels_last:
            out = out.contiguous(memory_format=torch.channels_last_3d)
        return out

    @torch.no_grad()
    def _update_running_stats(
        self, mean: torch.Tensor, var: torch.Tensor, total: float
    ) -> None:
        """Folds per-split (mean, biased variance) of ``total`` values in all."""
        batches = self.num_batches_tracked
        running_mean, running_var = self.running_mean, self.running_var
        # Called with track_running_stats, which gives the layer all three.
        assert batches is not None
        assert running_mean is not None and running_var is not None
        batches.add_(1)
        if self.momentum is None:
            factor = 1.0 / float(batches)
        else:
            factor = self.momentum
        total_mean = mean.mean(0)
        total_var = var.mean(0) + ((mean - total_mean) ** 2).mean(0)
        total_var = total_var * (total / max(total - 1.0, 1.0))
        dtype = running_mean.dtype
        running_mean.mul_(1 - factor).add_(total_mean.to(dtype), alpha=factor)
        running_var.mul_(1 - factor).add_(total_var.to(dtype), alpha=factor)


class _AllReduceSum(torch.autograd.Function):
    """Differentiable sum over a process group (its gradient is summed too)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        out = tensor.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple:
        return _AllReduceSum.apply(grad, ctx.group), None


# Tolerances of the kernels' check against the native computation, by dtype.
_TOLERANCES = {
    torch.float32: (1e-4, 1e-5),
    torch.float16: (2e-2, 2e-3),
    torch.bfloat16: (5e-2, 1e-2),
}
# The checked batch: 4 clips in 2 splits, 3 channels, 2 x 3 x 3 positions.
_CHECK_SHAPE, _CHECK_SPLITS = (4, 3, 2, 3, 3), 2


def check_split_kernels(
    device: torch.device, dtype: torch.dtype, channels_last: bool
) -> KernelVerdict:
    """The Triton kernels' verdict for batches of this device, dtype and
    memory format: checked once per process against :func:`compare_with_native`."""
    return split_kernels_verdict(device, dtype, channels_last, compare_with_native)


def _split_results(layer: SubBatchNorm3d, x: torch.Tensor, grad, fused: bool):
    """Output, gradients and running statistics of one split forward."""
    xi = x.clone(memory_format=torch.preserve_format).requires_grad_()
    y = layer._forward_split_fused(xi) if fused else layer._forward_split_generic(xi)
    (y.float() * grad.float()).sum().backward()
    tensors = dict(
        output=y, input_grad=xi.grad, weight_grad=layer.weight.grad,
        bias_grad=layer.bias.grad, running_mean=layer.running_mean,
        running_var=layer.running_var,
    )  # fmt: skip
    return {k: v.detach().float() for k, v in tensors.items() if v is not None}


def compare_with_native(
    device: torch.device, dtype: torch.dtype, channels_last: bool
) -> str:
    """Runs the Triton kernels and the generic path on one small batch of
    this device, dtype and memory format; returns the first difference, or ""."""
    gen = torch.Generator().manual_seed(0)
    channels = _CHECK_SHAPE[1]
    layer = SubBatchNorm3d(channels, num_splits=_CHECK_SPLITS)
    with torch.no_grad():
        layer.weight.copy_(torch.rand(channels, generator=gen) + 0.5)
        layer.bias.copy_(torch.randn(channels, generator=gen))
    layer = layer.to(device).train()
    native = copy.deepcopy(layer)
    fmt = torch.channels_last_3d if channels_last else torch.contiguous_format
    x = (torch.randn(_CHECK_SHAPE, generator=gen) * 2 + 1).to(device, dtype)
    x = x.contiguous(memory_format=fmt)
    grad = torch.randn(_CHECK_SHAPE, generator=gen).to(device, dtype)
    # The check may first run inside a forward under no_grad (precise BN) or
    # autocast: it needs gradients, and the batch's own dtype.
    with torch.enable_grad(), torch.autocast(device.type, enabled=False):
        got = _split_results(layer, x, grad, fused=True)
        want = _split_results(native, x, grad, fused=False)
    rtol, atol = _TOLERANCES.get(dtype, _TOLERANCES[torch.float32])
    for name, value in want.items():
        if not torch.allclose(got[name], value, rtol=rtol, atol=atol):
            diff = (got[name] - value).abs().max().item()
            return f"the kernels' {name} differs from the native one by {diff:.3g}"
    return ""


def _reduce_stats(
    mean: torch.Tensor,
    var: torch.Tensor,
    count: torch.Tensor,
    group: dist.ProcessGroup,
) -> tuple:
    """Sums per-split counts, sums and sums of squares over a process group.

    The local statistics come in as (mean, biased variance, count) per split;
    they are combined in float64 with a differentiable all-reduce, so the
    backward pass also flows across processes.

    Returns:
        tuple: global (mean, biased variance, count) per split, in the input
        dtype (count in float64).
    """
    dtype = mean.dtype
    mean64, var64, count64 = mean.double(), var.double(), count.double()
    local = torch.cat(
        [mean64 * count64, (var64 + mean64 * mean64) * count64, count64], dim=1
    )
    total = _AllReduceSum.apply(local, group)
    channels = mean.shape[1]
    count_all = total[:, 2 * channels :]
    mean_all = total[:, :channels] / count_all
    var_all = (
        total[:, channels : 2 * channels] / count_all - mean_all * mean_all
    ).clamp(min=0.0)
    return mean_all.to(dtype), var_all.to(dtype), count_all.detach()


def _check_splits(num_splits: int) -> int:
    if isinstance(num_splits, bool) or not isinstance(num_splits, int):
        raise TypeError(f"num_splits must be an int, got {num_splits!r}")
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    return num_splits


def get_norm(cfg: CfgNode) -> NormFactory:
    """Returns the constructor of the norm layer chosen by BN.NORM_TYPE.

    ``batchnorm`` builds ``nn.BatchNorm3d``; ``sub_batchnorm`` and
    ``sync_batchnorm`` build :class:`SubBatchNorm3d` with BN.NUM_SPLITS splits
    (the trainer sets the sync group). All use eps 1e-5 and momentum 0.1.

    Args:
        cfg: the run's config.

    Returns:
        Callable[[int], nn.Module]: builds a norm layer for a channel count.

    Raises:
        ValueError: an unknown BN.NORM_TYPE.
    """
    norm_type = cfg.BN.NORM_TYPE
    if norm_type == "batchnorm":
        return functools.partial(nn.BatchNorm3d, eps=BN_EPS, momentum=BN_MOMENTUM)
    if norm_type in ("sub_batchnorm", "sync_batchnorm"):
        return functools.partial(
            SubBatchNorm3d,
            eps=BN_EPS,
            momentum=BN_MOMENTUM,
            num_splits=cfg.BN.NUM_SPLITS,
        )
    raise ValueError(
        f"BN.NORM_TYPE = {norm_type!r}: must be one of "
        "['batchnorm', 'sub_batchnorm', 'sync_batchnorm']"
    )


def _set_on_sub_bn(model: nn.Module, name: str, value, needed: bool) -> int:
    layers = [m for m in model.modules() if isinstance(m, SubBatchNorm3d)]
    if needed and not layers:
        plain = any(
            isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()
        )
        if plain:
            raise ValueError(
                f"cannot set {name}={value!r}: the model has plain BatchNorm layers; "
                "build it with BN.NORM_TYPE sub_batchnorm or sync_batchnorm"
            )
    for layer in layers:
        setattr(layer, name, value)
    return len(layers)


def set_bn_splits(model: nn.Module, num_splits: int) -> int:
    """Sets the number of BN splits of every SubBatchNorm3d in ``model``.

    Args:
        model: the model (DDP wrappers included).
        num_splits: statistics are computed per ``batch / num_splits`` clips.

    Returns:
        int: the number of layers changed.

    Raises:
        ValueError: ``num_splits`` > 1 on a model with only plain BN layers.
    """
    num_splits = _check_splits(num_splits)
    return _set_on_sub_bn(model, "num_splits", num_splits, num_splits > 1)


SPLIT_KERNEL_MODES = ("auto", "triton", "native")


def set_bn_split_kernels(model: nn.Module, mode: str) -> int:
    """Sets how every SubBatchNorm3d of ``model`` picks the Triton kernels.

    Args:
        model: the model (DDP wrappers included).
        mode: one of SPLIT_KERNEL_MODES (BN.SPLIT_KERNELS).

    Returns:
        int: the number of layers changed.
    """
    if mode not in SPLIT_KERNEL_MODES:
        raise ValueError(f"split kernels {mode!r}: one of {SPLIT_KERNEL_MODES}")
    return _set_on_sub_bn(model, "split_kernels", mode, False)


def set_bn_process_group(model: nn.Module, group: Optional[dist.ProcessGroup]) -> int:
    """Sets the group over which every SubBatchNorm3d syncs its statistics.

    Args:
        model: the model (DDP wrappers included).
        group: a ``torch.distributed`` process group, or None for local stats.

    Returns:
        int: the number of layers changed.

    Raises:
        ValueError: a group is given for a model with only plain BN layers.
    """
    return _set_on_sub_bn(model, "process_group", group, group is not None)
