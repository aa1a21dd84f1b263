"""Sub-batch (split) batch norm through Triton kernels, for GPU batches.

:func:`split_batch_norm` computes what ``SubBatchNorm3d``'s other paths compute
(clip ``n`` in split ``n % k``, statistics per split, running statistics from
the mean of the split means and the total variance) in two kernels forward
and two backward, reading and writing contiguous and channels-last-3d
batches in place: no memory-format copies, no host synchronisation, and the
running statistics and batch count updated inside the kernels. See
``split_bn_kernels.py``.

The host's share of a call is small: the batch's geometry is cached per
shape, and the kernels' scratch buffers live in the calling layer's
:class:`SplitWorkspace`, so a call allocates only its outputs.

:func:`fused_split_ok` says when it applies: a CUDA tensor, Triton
importable, and a batch in one of the two dense 5-D memory formats. The kernels
also run on CPU tensors under ``TRITON_INTERPRET=1`` (Triton's interpreter),
which the tests use; the layer itself sends CPU batches elsewhere."""

import functools
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch

_TARGET_PROGRAMS_PER_SM = 4
_MAX_CHUNKS = 64


@functools.lru_cache(maxsize=None)
def _kernels():
    """The kernel module, or None when Triton cannot be imported."""
    try:
        from slowfast.models.kernels import split_bn_triton as split_bn_kernels
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
    """(rows, channels) of a tile: wide along the memory format's contiguous axis."""
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
    """How the kernels cover a batch: computed once per shape, reused backward."""

    channels: int
    positions: int  # T * H * W
    strides: Tuple[int, int, int]
    block_r: int
    block_c: int
    splits: int
    rows: int  # per split
    all_rows: int
    c_blocks: int
    chunks: int
    per_chunk: int
    part_numel: int  # chunk partials: [3, chunks, splits, C]
    stats_numel: int  # split statistics: [4, splits, C]

    @property
    def reduce_sizes(self) -> Tuple[int, int, int, int, int, int]:
        """The sizes the reduction (statistics) kernels take, in order."""
        return (
            self.channels,
            self.positions,
            self.rows,
            self.per_chunk,
            self.splits,
            self.chunks,
        )


def _geometry(x: torch.Tensor, splits: int) -> _Geometry:
    """The batch's geometry, worked out once per shape, memory format and split count
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
    chunks = _cdiv(rows, per_chunk)
    return _Geometry(
        channels,
        positions,
        strides,
        block_r,
        block_c,
        splits,
        rows,
        shape[0] * positions,
        c_blocks,
        chunks,
        per_chunk,
        3 * chunks * splits * channels,
        4 * splits * channels,
    )


class SplitWorkspace:
    """The buffers one sub-batch BN layer's kernels reuse from call to call.

    ``part`` (chunk partials), ``counts`` (one int32 per block of channels,
    zero between calls: the kernels reset them), ``stats`` (the split
    statistics a forward leaves for its backward) and ``coef`` (the backward's
    per-split terms). They grow when a batch needs more; a replaced buffer is
    kept, since a captured CUDA graph may still address it. ``generation``
    counts forwards, so that a backward knows whether ``stats`` are still its
    forward's. A copy or an unpickled workspace starts empty.
    """

    def __init__(self) -> None:
        self.device: Optional[torch.device] = None
        self.capacity = (0, 0, 0)  # part, stats, counts
        self.part: Optional[torch.Tensor] = None
        self.counts: Optional[torch.Tensor] = None
        self.stats: Optional[torch.Tensor] = None
        self.coef: Optional[torch.Tensor] = None
        self.generation = 0
        self._retired: list = []

    def __deepcopy__(self, memo: dict) -> "SplitWorkspace":
        return SplitWorkspace()

    def __reduce__(self):
        return SplitWorkspace, ()

    def reserve(self, g: _Geometry, device: torch.device) -> None:
        """Makes the buffers large enough for a batch of geometry ``g``."""
        part, stats, counts = self.capacity
        if device == self.device and (
            g.part_numel <= part and g.stats_numel <= stats and g.c_blocks <= counts
        ):
            return
        if device != self.device:
            part = stats = counts = 0
        self._retired += [self.part, self.counts, self.stats, self.coef]
        self.capacity = (
            max(part, g.part_numel),
            max(stats, g.stats_numel),
            max(counts, g.c_blocks),
        )
        f32: Dict[str, Any] = dict(dtype=torch.float32, device=device)
        self.part = torch.empty(self.capacity[0], **f32)
        self.stats = torch.empty(self.capacity[1], **f32)
        self.coef = torch.empty(self.capacity[1], **f32)
        self.counts = torch.zeros(self.capacity[2], dtype=torch.int32, device=device)
        self.device = device


def _launch_stats(x, g, ws, stats, affine, track, eps, momentum) -> None:
    """Runs the statistics kernel: into ``stats``, each split's statistics of
    ``x``; ``affine`` (weight, bias) or None; ``track`` (running mean,
    running variance, batch count), updated in place, or None."""
    weight, bias = affine if affine is not None else (stats, stats)
    rmean, rvar, tracked = track if track is not None else (stats, stats, stats)
    _kernels().split_stats[(g.chunks, g.splits, g.c_blocks)](
        x,
        ws.part,
        ws.counts,
        weight,
        bias,
        rmean,
        rvar,
        tracked,
        stats,
        *g.reduce_sizes,
        eps,
        momentum,
        *g.strides,
        TRACK=track is not None,
        AFFINE=affine is not None,
        BLOCK_R=g.block_r,
        BLOCK_C=g.block_c,
        BLOCK_K=_pow2(g.splits),
    )


class _SplitBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, rmean, rvar, tracked, ws, splits, eps, mom):
        g = _geometry(x, splits)
        ws.reserve(g, x.device)
        ws.generation += 1
        affine = (weight, bias) if weight is not None else None
        track = (rmean, rvar, tracked) if rmean is not None else None
        _launch_stats(x, g, ws, ws.stats, affine, track, eps, mom)
        y = torch.empty_like(x)
        _kernels().split_apply[(_cdiv(g.all_rows, g.block_r), g.c_blocks)](
            x,
            y,
            ws.stats,
            g.channels,
            g.positions,
            g.all_rows,
            splits,
            *g.strides,
            BLOCK_R=g.block_r,
            BLOCK_C=g.block_c,
        )
        ctx.save_for_backward(x, weight)
        ctx.geometry, ctx.workspace, ctx.generation = g, ws, ws.generation
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        g, ws = ctx.geometry, ctx.workspace
        if _flat_strides(dy) is None:
            channels_last = g.strides[1] == 1
            fmt = torch.channels_last_3d if channels_last else torch.contiguous_format
            dy = dy.contiguous(memory_format=fmt)
        stats = ws.stats
        if ctx.generation != ws.generation:
            # Another forward of the layer ran since this one and replaced its
            # statistics: they are computed again from the saved input.
            stats = torch.empty(g.stats_numel, dtype=torch.float32, device=x.device)
            _launch_stats(x, g, ws, stats, None, None, ctx.eps, 0.0)
        affine = weight is not None
        dw = torch.empty_like(weight) if affine else None
        db = torch.empty_like(weight) if affine else None
        # Both kernels take x's then dy's strides, and these constants.
        strides = (*g.strides, *_flat_strides(dy))
        consts = {"AFFINE": affine, "BLOCK_R": g.block_r, "BLOCK_C": g.block_c}
        _kernels().split_grad_stats[(g.chunks, g.splits, g.c_blocks)](
            x,
            dy,
            stats,
            ws.part,
            ws.counts,
            dw if affine else stats,
            db if affine else stats,
            ws.coef,
            *g.reduce_sizes,
            *strides,
            **consts,
            BLOCK_K=_pow2(g.splits),
        )
        dx = torch.empty_like(x)
        _kernels().split_grad_apply[(_cdiv(g.all_rows, g.block_r), g.c_blocks)](
            x,
            dy,
            dx,
            stats,
            ws.coef,
            weight if affine else stats,
            g.channels,
            g.positions,
            g.all_rows,
            g.splits,
            *strides,
            **consts,
        )
        need_w, need_b = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        return (dx, dw if need_w else None, db if need_b else None) + (None,) * 7


def split_batch_norm(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    running_mean: Optional[torch.Tensor],
    running_var: Optional[torch.Tensor],
    num_batches_tracked: Optional[torch.Tensor],
    splits: int,
    eps: float,
    momentum: float,
    workspace: Optional[SplitWorkspace] = None,
) -> torch.Tensor:
    """Training-mode batch norm of ``x`` with statistics per split of the batch.

    Args:
        x: [N, C, T, H, W], contiguous or channels-last-3d; N divisible by
            ``splits``; clip ``n`` is in split ``n % splits``.
        weight, bias: per-channel affine parameters, or both None.
        running_mean, running_var, num_batches_tracked: updated in place with
            ``momentum`` from the mean of the split means and the unbiased
            total variance, and counted; all three None to leave them out.
        splits: number of splits.
        eps: added to each split's biased variance.
        momentum: running-statistics factor.
        workspace: the calling layer's buffers, reused across calls; None
            for buffers of this call only.

    Returns:
        torch.Tensor: the normalised batch, same shape, dtype and memory format.
    """
    return _SplitBatchNorm.apply(
        x,
        weight,
        bias,
        running_mean,
        running_var,
        num_batches_tracked,
        workspace if workspace is not None else SplitWorkspace(),
        splits,
        eps,
        momentum,
    )
