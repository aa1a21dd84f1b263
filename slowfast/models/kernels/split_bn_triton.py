"""Triton kernels of sub-batch (split) batch norm on the GPU.

A batch ``x`` of shape [N, C, T, H, W] is read as [N, C, P] (P = T * H * W)
through its strides, so contiguous and channels-last-3d batches are read in
place: no format copies. Clip ``n`` belongs to split ``n % k`` (the reference's
order). Statistics are kept in float32 whatever the input's dtype.

Two kernels forward, two backward. ``split_stats`` reduces a chunk of rows of
one split to a Welford mean and M2 per channel; the last program to finish a
block of channels (counted by an atomic per block) combines the chunks and
writes each split's mean, inverse std, scale and shift, folds the running
statistics in place, counts the batch in ``num_batches_tracked`` and resets
its counter for the next call. ``split_apply`` computes y = x * scale + shift.
Backward, ``split_grad_stats`` sums dy and dy * x_hat per chunk, and its last
program per block writes the weight and bias gradients and the per-split terms
of dx; ``split_grad_apply`` computes dx. Chunks are combined in a fixed order,
so results do not depend on scheduling.

This module imports Triton; ``slowfast.models.kernels.split_bn`` loads it only for CUDA
tensors (or with ``TRITON_INTERPRET=1``, which runs the kernels on CPU tensors
for the tests).
"""

import triton
import triton.language as tl


@triton.jit
def _welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    n = n_a + n_b
    w_b = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    delta = mean_b - mean_a
    return mean_a + delta * w_b, m2_a + m2_b + delta * delta * n_a * w_b, n


@triton.jit
def _last_to_finish(count_ptr, programs):
    """Whether this program is the last of ``programs`` to reach this point
    for its block of channels; its partial results are stored before."""
    tl.debug_barrier()  # every thread's stores precede the release below
    arrived = tl.atomic_add(count_ptr + tl.program_id(2), 1, sem="acq_rel")
    return arrived == programs - 1


@triton.jit
def _finalize_stats(
    part_ptr,
    w_ptr,
    b_ptr,
    rmean_ptr,
    rvar_ptr,
    tracked_ptr,
    stats_ptr,
    cs,
    C,
    k,
    chunks,
    eps,
    momentum,
    TRACK: tl.constexpr,
    AFFINE: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    ks = tl.arange(0, BLOCK_K)
    c_ok = cs < C
    ok = (ks < k)[:, None] & c_ok[None, :]
    at = ks[:, None] * C + cs[None, :]
    step = chunks * k * C
    mean = tl.zeros(at.shape, tl.float32)
    m2 = tl.zeros(at.shape, tl.float32)
    n = tl.zeros(at.shape, tl.float32)
    chunk = tl.full((), 0, tl.int32)
    while chunk < chunks:  # other programs' results: loaded past L1
        here = part_ptr + chunk * k * C + at
        chunk += 1
        mean_b = tl.load(here, mask=ok, other=0.0, cache_modifier=".cg")
        m2_b = tl.load(here + step, mask=ok, other=0.0, cache_modifier=".cg")
        n_b = tl.load(here + 2 * step, mask=ok, other=0.0, cache_modifier=".cg")
        mean, m2, n = _welford_combine(mean, m2, n, mean_b, m2_b, n_b)
    var = m2 / tl.maximum(n, 1.0)
    invstd = 1.0 / tl.sqrt(var + eps)
    scale = invstd
    shift = -mean * invstd
    if AFFINE:
        w = tl.load(w_ptr + cs, mask=c_ok, other=1.0).to(tl.float32)[None, :]
        b = tl.load(b_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        scale = invstd * w
        shift = b - mean * scale
    tl.store(stats_ptr + at, mean, mask=ok)
    tl.store(stats_ptr + k * C + at, invstd, mask=ok)
    tl.store(stats_ptr + 2 * k * C + at, scale, mask=ok)
    tl.store(stats_ptr + 3 * k * C + at, shift, mask=ok)
    if TRACK:
        # Mean of the split means; mean of the split variances plus the
        # variance of the split means; made unbiased over all values.
        all_mean = tl.sum(mean, 0) / k
        spread = tl.where(ok, mean - all_mean[None, :], 0.0)
        total_var = (tl.sum(var, 0) + tl.sum(spread * spread, 0)) / k
        count = tl.sum(n, 0)
        total_var = total_var * count / tl.maximum(count - 1.0, 1.0)
        rmean = tl.load(rmean_ptr + cs, mask=c_ok, other=0.0)
        rvar = tl.load(rvar_ptr + cs, mask=c_ok, other=0.0)
        rmean_new = rmean.to(tl.float32) * (1.0 - momentum) + all_mean * momentum
        rvar_new = rvar.to(tl.float32) * (1.0 - momentum) + total_var * momentum
        tl.store(rmean_ptr + cs, rmean_new.to(rmean.dtype), mask=c_ok)
        tl.store(rvar_ptr + cs, rvar_new.to(rvar.dtype), mask=c_ok)
        if tl.program_id(2) == 0:
            tl.store(tracked_ptr, tl.load(tracked_ptr) + 1)


@triton.jit(do_not_specialize=["rows", "rows_per_chunk", "k", "chunks"])
def split_stats(
    x_ptr,
    part_ptr,
    count_ptr,
    w_ptr,
    b_ptr,
    rmean_ptr,
    rvar_ptr,
    tracked_ptr,
    stats_ptr,
    C,
    P,
    rows,
    rows_per_chunk,
    k,
    chunks,
    eps,
    momentum,
    s_n,
    s_c,
    s_p,
    TRACK: tl.constexpr,
    AFFINE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Grid (chunks, k, channel blocks). part: float32 [3, chunks, k, C]
    (mean, M2, count); stats: float32 [4, k, C] (mean, invstd, scale, shift);
    count: int32 per channel block, zero between calls."""
    chunk = tl.program_id(0)
    split = tl.program_id(1)
    cs = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cs < C
    # Welford per row lane (one value per lane and step: one count per row),
    # then the lanes combined.
    mean = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    m2 = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    cnt = tl.zeros((BLOCK_R,), tl.float32)
    start = chunk * rows_per_chunk
    r0 = start
    while r0 < start + rows_per_chunk:  # (a while loop: Triton's interpreter
        r = r0 + tl.arange(0, BLOCK_R)  # takes no runtime range bounds)
        r0 += BLOCK_R
        r_ok = r < rows
        clip = (r // P) * k + split
        offs = clip.to(tl.int64)[:, None] * s_n + (r % P)[:, None] * s_p
        offs += cs[None, :] * s_c
        ok = r_ok[:, None] & c_ok[None, :]
        v = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        cnt += r_ok.to(tl.float32)
        inv = (r_ok.to(tl.float32) / tl.maximum(cnt, 1.0))[:, None]
        delta = v - mean
        mean += delta * inv
        m2 += tl.where(ok, delta * (v - mean), 0.0)
    counts = tl.broadcast_to(cnt[:, None], (BLOCK_R, BLOCK_C))
    mean, m2, cnt = tl.reduce((mean, m2, counts), 0, _welford_combine)
    out = (chunk * k + split) * C + cs
    step = chunks * k * C
    tl.store(part_ptr + out, mean, mask=c_ok)
    tl.store(part_ptr + step + out, m2, mask=c_ok)
    tl.store(part_ptr + 2 * step + out, cnt, mask=c_ok)
    if _last_to_finish(count_ptr, chunks * k):
        _finalize_stats(
            part_ptr,
            w_ptr,
            b_ptr,
            rmean_ptr,
            rvar_ptr,
            tracked_ptr,
            stats_ptr,
            cs,
            C,
            k,
            chunks,
            eps,
            momentum,
            TRACK,
            AFFINE,
            BLOCK_K,
        )
        tl.atomic_xchg(count_ptr + tl.program_id(2), 0)


@triton.jit(do_not_specialize=["rows", "k"])
def split_apply(
    x_ptr,
    y_ptr,
    stats_ptr,
    C,
    P,
    rows,
    k,
    s_n,
    s_c,
    s_p,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """Grid (row blocks over the whole batch, channel blocks)."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    clip = r // P
    ok = (r < rows)[:, None] & (cs < C)[None, :]
    offs = clip.to(tl.int64)[:, None] * s_n + (r % P)[:, None] * s_p
    offs += cs[None, :] * s_c
    at = (clip % k)[:, None] * C + cs[None, :]
    scale = tl.load(stats_ptr + 2 * k * C + at, mask=ok, other=0.0)
    shift = tl.load(stats_ptr + 3 * k * C + at, mask=ok, other=0.0)
    v = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    y = v * scale + shift
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _finalize_grads(
    part_ptr,
    dw_ptr,
    db_ptr,
    coef_ptr,
    cs,
    C,
    k,
    chunks,
    count,
    AFFINE: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    ks = tl.arange(0, BLOCK_K)
    c_ok = cs < C
    ok = (ks < k)[:, None] & c_ok[None, :]
    at = ks[:, None] * C + cs[None, :]
    step = chunks * k * C
    sum_dy = tl.zeros(at.shape, tl.float32)
    sum_dyx = tl.zeros(at.shape, tl.float32)
    chunk = tl.full((), 0, tl.int32)
    while chunk < chunks:  # other programs' results: loaded past L1
        here = part_ptr + chunk * k * C + at
        chunk += 1
        sum_dy += tl.load(here, mask=ok, other=0.0, cache_modifier=".cg")
        sum_dyx += tl.load(here + step, mask=ok, other=0.0, cache_modifier=".cg")
    tl.store(coef_ptr + at, sum_dy / count, mask=ok)
    tl.store(coef_ptr + k * C + at, sum_dyx / count, mask=ok)
    if AFFINE:
        dw = tl.sum(sum_dyx, 0)
        db = tl.sum(sum_dy, 0)
        tl.store(dw_ptr + cs, dw.to(dw_ptr.dtype.element_ty), mask=c_ok)
        tl.store(db_ptr + cs, db.to(db_ptr.dtype.element_ty), mask=c_ok)


@triton.jit(do_not_specialize=["rows", "rows_per_chunk", "k", "chunks"])
def split_grad_stats(
    x_ptr,
    dy_ptr,
    stats_ptr,
    part_ptr,
    count_ptr,
    dw_ptr,
    db_ptr,
    coef_ptr,
    C,
    P,
    rows,
    rows_per_chunk,
    k,
    chunks,
    s_n,
    s_c,
    s_p,
    d_n,
    d_c,
    d_p,
    AFFINE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Grid (chunks, k, channel blocks). part: float32 [2, chunks, k, C];
    coef: float32 [2, k, C] (mean of dy, mean of dy * x_hat, per split)."""
    chunk = tl.program_id(0)
    split = tl.program_id(1)
    cs = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cs < C
    mean = tl.load(stats_ptr + split * C + cs, mask=c_ok, other=0.0)
    invstd = tl.load(stats_ptr + (k + split) * C + cs, mask=c_ok, other=0.0)
    sum_dy = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    sum_dyx = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    start = chunk * rows_per_chunk
    r0 = start
    while r0 < start + rows_per_chunk:  # (a while loop: Triton's interpreter
        r = r0 + tl.arange(0, BLOCK_R)  # takes no runtime range bounds)
        r0 += BLOCK_R
        clip = ((r // P) * k + split).to(tl.int64)[:, None]
        p = (r % P)[:, None]
        ok = (r < rows)[:, None] & c_ok[None, :]
        v = tl.load(
            x_ptr + clip * s_n + p * s_p + cs[None, :] * s_c, mask=ok, other=0.0
        )
        g = tl.load(
            dy_ptr + clip * d_n + p * d_p + cs[None, :] * d_c, mask=ok, other=0.0
        )
        v = v.to(tl.float32)
        g = g.to(tl.float32)
        sum_dy += g
        sum_dyx += g * (v - mean[None, :]) * invstd[None, :]
    out = (chunk * k + split) * C + cs
    tl.store(part_ptr + out, tl.sum(sum_dy, 0), mask=c_ok)
    tl.store(part_ptr + chunks * k * C + out, tl.sum(sum_dyx, 0), mask=c_ok)
    if _last_to_finish(count_ptr, chunks * k):
        _finalize_grads(
            part_ptr,
            dw_ptr,
            db_ptr,
            coef_ptr,
            cs,
            C,
            k,
            chunks,
            rows.to(tl.float32),
            AFFINE,
            BLOCK_K,
        )
        tl.atomic_xchg(count_ptr + tl.program_id(2), 0)


@triton.jit(do_not_specialize=["rows", "k"])
def split_grad_apply(
    x_ptr,
    dy_ptr,
    dx_ptr,
    stats_ptr,
    coef_ptr,
    w_ptr,
    C,
    P,
    rows,
    k,
    s_n,
    s_c,
    s_p,
    d_n,
    d_c,
    d_p,
    AFFINE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """Grid (row blocks over the whole batch, channel blocks)."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cs < C
    clip = r // P
    p = (r % P)[:, None]
    ok = (r < rows)[:, None] & c_ok[None, :]
    clip64 = clip.to(tl.int64)[:, None]
    offs = clip64 * s_n + p * s_p + cs[None, :] * s_c
    at = (clip % k)[:, None] * C + cs[None, :]
    mean = tl.load(stats_ptr + at, mask=ok, other=0.0)
    invstd = tl.load(stats_ptr + k * C + at, mask=ok, other=0.0)
    mean_dy = tl.load(coef_ptr + at, mask=ok, other=0.0)
    proj = tl.load(coef_ptr + k * C + at, mask=ok, other=0.0)
    factor = invstd
    if AFFINE:
        w = tl.load(w_ptr + cs, mask=c_ok, other=1.0).to(tl.float32)[None, :]
        factor = invstd * w
    v = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    g = tl.load(dy_ptr + clip64 * d_n + p * d_p + cs[None, :] * d_c, mask=ok)
    g = g.to(tl.float32)
    dx = factor * (g - mean_dy - (v - mean) * invstd * proj)
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=ok)
