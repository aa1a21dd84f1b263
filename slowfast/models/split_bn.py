"""Sub-batch (split) batch norm through Triton kernels, for GPU batches.

:func:`split_batch_norm` computes what ``SubBatchNorm3d``'s other paths compute
(clip ``n`` in split ``n % k``, statistics per split, running statistics from
the mean of the split means and the total variance) in three kernels forward
and three backward, reading and writing contiguous and channels-last-3d
batches in place: no memory-format copies, no host synchronisation, and the
running statistics updated inside the kernels. See ``split_bn_kernels.py``.

:func:`fused_split_ok` says when it applies: a CUDA tensor, Triton
importable, and a batch in one of the two dense 5-D layouts. The kernels
also run on CPU tensors under ``TRITON_INTERPRET=1`` (Triton's interpreter),
which the tests use; the layer itself sends CPU batches elsewhere.
"""

import functools
from typing import NamedTuple, Optional, Tuple

import torch

_TARGET_PROGRAMS_PER_SM = 4
_MAX_CHUNKS = 64


@functools.lru_cache(maxsize=None)
def _kernels():
    """The kernel module, or None when Triton cannot be imported."""
    try:
        from slowfast.models import split_bn_kernels
    except ImportError:
        return None
    return split_bn_kernels


def _flat_strides(x: torch.Tensor) -> Optional[Tuple[int, int, int]]:
    """Strides of ``x`` read as [N, C, P], or None when P is not one stride."""
    if x.dim() != 5:
        return None
    if x.is_contiguous():
        return x.stride(0), x.stride(1), 1
    if x.is_contiguous(memory_format=torch.channels_last_3d):
        return x.stride(0), 1, x.shape[1]
    return None


def fused_split_ok(x: torch.Tensor) -> bool:
    """Whether :func:`split_batch_norm` can normalise ``x``."""
    if not x.is_cuda:
        return False
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return False
    return _flat_strides(x) is not None and _kernels() is not None


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _blocks(strides: Tuple[int, int, int], channels: int) -> Tuple[int, int]:
    """(rows, channels) of a tile: wide along the layout's contiguous axis."""
    if strides[1] == 1:  # channels-last: channels are contiguous
        block_c = min(64, _pow2(channels))
        return max(16, 2048 // block_c), block_c
    return 256, min(8, _pow2(channels))


@functools.lru_cache(maxsize=None)
def _multiprocessors(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def _chunks(rows: int, block_r: int, programs: int, device: torch.device) -> int:
    """How many chunks of rows the reduction kernels split each split into."""
    sms = _multiprocessors(device)
    want = max(1, sms * _TARGET_PROGRAMS_PER_SM // programs)
    return max(1, min(want, _MAX_CHUNKS, _cdiv(rows, block_r)))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Geometry(NamedTuple):
    """How the kernels cover a batch: computed once in forward, reused backward."""

    channels: int
    positions: int  # T * H * W
    strides: Tuple[int, int, int]
    block_r: int
    block_c: int
    rows: int  # per split
    all_rows: int
    c_blocks: int
    chunks: int
    per_chunk: int
    fin_c: int  # channels per program of the finalize kernels


def _geometry(x: torch.Tensor, splits: int) -> _Geometry:
    """The batch's geometry, worked out once per shape, layout and split count
    (a step calls every BN layer with a handful of shapes)."""
    return _geometry_of(tuple(x.shape), _flat_strides(x), splits, x.device)


@functools.lru_cache(maxsize=4096)
def _geometry_of(
    shape: Tuple[int, ...],
    strides: Tuple[int, int, int],
    splits: int,
    device: torch.device,
) -> _Geometry:
    channels, positions = shape[1], shape[2] * shape[3] * shape[4]
    block_r, block_c = _blocks(strides, channels)
    rows = shape[0] // splits * positions
    c_blocks = _cdiv(channels, block_c)
    chunks = _chunks(rows, block_r, splits * c_blocks, device)
    per_chunk = _cdiv(_cdiv(rows, chunks), block_r) * block_r
    return _Geometry(
        channels,
        positions,
        strides,
        block_r,
        block_c,
        rows,
        shape[0] * positions,
        c_blocks,
        _cdiv(rows, per_chunk),
        per_chunk,
        min(64, _pow2(channels)),
    )


class _SplitBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, splits, eps, momentum):
        kern = _kernels()
        g = _geometry(x, splits)
        channels, positions, strides = g.channels, g.positions, g.strides
        block_r, block_c, c_blocks = g.block_r, g.block_c, g.c_blocks
        rows, per_chunk, chunks = g.rows, g.per_chunk, g.chunks
        f32 = dict(dtype=torch.float32, device=x.device)
        part = torch.empty((3, chunks, splits, channels), **f32)
        kern.split_stats[(chunks, splits, c_blocks)](
            x,
            part,
            channels,
            positions,
            rows,
            per_chunk,
            splits,
            chunks,
            *strides,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
        )
        stats = torch.empty((4, splits, channels), **f32)
        track = running_mean is not None
        kern.split_finalize[(_cdiv(channels, g.fin_c),)](
            part,
            weight,
            bias,
            running_mean if track else stats,
            running_var if track else stats,
            stats,
            channels,
            splits,
            chunks,
            eps,
            momentum,
            TRACK=track,
            BLOCK_K=_pow2(splits),
            BLOCK_C=g.fin_c,
        )
        y = torch.empty_like(x)
        kern.split_apply[(_cdiv(g.all_rows, block_r), c_blocks)](
            x,
            y,
            stats,
            channels,
            positions,
            g.all_rows,
            splits,
            *strides,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
        )
        ctx.save_for_backward(x, weight, stats)
        ctx.splits, ctx.geometry = splits, g
        return y

    @staticmethod
    def backward(ctx, dy):
        kern = _kernels()
        x, weight, stats = ctx.saved_tensors
        splits = ctx.splits
        if _flat_strides(dy) is None:
            fmt = (
                torch.contiguous_format if x.is_contiguous() else torch.channels_last_3d
            )
            dy = dy.contiguous(memory_format=fmt)
        g = ctx.geometry
        channels, positions, strides = g.channels, g.positions, g.strides
        block_r, block_c, c_blocks = g.block_r, g.block_c, g.c_blocks
        rows, per_chunk, chunks = g.rows, g.per_chunk, g.chunks
        d_strides = _flat_strides(dy)
        f32 = dict(dtype=torch.float32, device=x.device)
        part = torch.empty((2, chunks, splits, channels), **f32)
        kern.split_grad_stats[(chunks, splits, c_blocks)](
            x,
            dy,
            stats,
            part,
            channels,
            positions,
            rows,
            per_chunk,
            splits,
            chunks,
            *strides,
            *d_strides,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
        )
        coef = torch.empty((2, splits, channels), **f32)
        dw = torch.empty_like(weight)
        db = torch.empty_like(weight)
        kern.split_grad_finalize[(_cdiv(channels, g.fin_c),)](
            part,
            dw,
            db,
            coef,
            channels,
            splits,
            chunks,
            float(rows),
            BLOCK_K=_pow2(splits),
            BLOCK_C=g.fin_c,
        )
        dx = torch.empty_like(x)
        kern.split_grad_apply[(_cdiv(g.all_rows, block_r), c_blocks)](
            x,
            dy,
            dx,
            stats,
            coef,
            weight,
            channels,
            positions,
            g.all_rows,
            splits,
            *strides,
            *d_strides,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
        )
        need_w, need_b = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        return (
            dx,
            dw if need_w else None,
            db if need_b else None,
            None,
            None,
            None,
            None,
            None,
        )


def split_batch_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    running_mean: Optional[torch.Tensor],
    running_var: Optional[torch.Tensor],
    splits: int,
    eps: float,
    momentum: float,
) -> torch.Tensor:
    """Training-mode batch norm of ``x`` with statistics per split of the batch.

    Args:
        x: [N, C, T, H, W], contiguous or channels-last-3d; N divisible by
            ``splits``; clip ``n`` is in split ``n % splits``.
        weight, bias: per-channel affine parameters (ones and zeros when the
            layer has none).
        running_mean, running_var: updated in place with ``momentum`` from the
            mean of the split means and the unbiased total variance; None to
            leave them out.
        splits: number of splits.
        eps: added to each split's biased variance.
        momentum: running-statistics factor.

    Returns:
        torch.Tensor: the normalised batch, same shape, dtype and layout.
    """
    return _SplitBatchNorm.apply(
        x, weight, bias, running_mean, running_var, splits, eps, momentum
    )
