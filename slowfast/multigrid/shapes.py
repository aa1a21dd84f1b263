"""Mini-batch shape arithmetic of multigrid training (Wu et al., CVPR 2020).

A clip of ``T`` frames and ``S x S`` pixels is the video resampled on a
sampling grid; a coarser grid gives ``t x s x s`` and the batch grows so that
``b * t * s^2 = B * T * S^2`` (eq. 1 of the paper), rounded to an integer
factor of the base batch. Everything here is a pure function of numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from slowfast.datasets.grid import SamplingGrid


@dataclass(frozen=True)
class IterShape:
    """One of the epoch's batches: everything about one iteration's batch.

    The loader's batch sampler cuts the batch by ``per_proc_batch`` and hands
    its clips ``grid``; the schedule hook sets the BN groups from
    ``bn_splits`` and the LR from ``epoch`` and ``iteration``; the meters
    name the shape. All read this one object
    (``multigrid.epoch_batches.epoch_batches``).

    Attributes:
        epoch: epoch index.
        iteration: iteration within the epoch.
        batch_size: global clips in the iteration (all processes).
        per_proc_batch: clips per process.
        grid: the clips' sampling grid (frames, crop, stride and jitter ranges).
        long_factor: long-cycle batch factor of the current entry.
        short_index: short-cycle shape 0 or 1, 2 for the entry's base shape,
            -1 when the short cycle is off.
        bn_splits: BN groups per process (sub-batch-norm splits).
    """

    epoch: int
    iteration: int
    batch_size: int
    per_proc_batch: int
    grid: SamplingGrid
    long_factor: int
    short_index: int
    bn_splits: int

    @property
    def num_frames(self) -> int:
        """Frames per clip."""
        return self.grid.num_frames

    @property
    def crop_size(self) -> int:
        """Spatial crop."""
        return self.grid.crop_size

    @property
    def sampling_rate(self) -> tuple:
        """``(low, high)`` range of the temporal stride."""
        return (self.grid.min_rate, self.grid.max_rate)

    @property
    def jitter_scales(self) -> tuple:
        """``(low, high)`` range of the random short side."""
        return (self.grid.jitter_min, self.grid.jitter_max)


def batch_factor(num_frames: int, crop: int, base_frames: int, base_crop: int) -> int:
    """Returns the batch factor of a ``t x s x s`` shape (eq. 1, rounded).

    Args:
        num_frames: frames ``t`` of the shape.
        crop: spatial size ``s`` of the shape.
        base_frames: frames ``T`` of the base shape (DATA.NUM_FRAMES).
        base_crop: spatial size ``S`` of the base shape (DATA.TRAIN_CROP_SIZE).

    Returns:
        int: ``round(T * S^2 / (t * s^2))``, at least 1.
    """
    return max(
        1, int(round(exact_batch_factor(num_frames, crop, base_frames, base_crop)))
    )


def exact_batch_factor(
    num_frames: int, crop: int, base_frames: int, base_crop: int
) -> float:
    """Returns ``T * S^2 / (t * s^2)`` without rounding (eq. 1 of the paper).

    Args:
        num_frames: frames ``t`` of the shape.
        crop: spatial size ``s`` of the shape.
        base_frames: frames ``T`` of the base shape.
        base_crop: spatial size ``S`` of the base shape.

    Returns:
        float: the ideal batch factor.
    """
    return base_frames * base_crop**2 / float(num_frames * crop**2)


def long_cycle_shapes(
    base_frames: int, base_crop: int, factors: Sequence[Sequence[float]]
) -> list[tuple[int, int]]:
    """Returns the long-cycle base shapes ``(t, s)``.

    Args:
        base_frames: DATA.NUM_FRAMES.
        base_crop: DATA.TRAIN_CROP_SIZE.
        factors: MULTIGRID.LONG_CYCLE_FACTORS, ``(temporal, spatial)`` pairs.

    Returns:
        list: ``(round(T * tf), round(S * sf))`` per pair, in order.

    Raises:
        ValueError: a shape with fewer than one frame or pixel.
    """
    shapes = []
    for t_factor, s_factor in factors:
        frames = int(round(base_frames * t_factor))
        crop = int(round(base_crop * s_factor))
        if frames < 1 or crop < 1:
            raise ValueError(
                f"MULTIGRID.LONG_CYCLE_FACTORS = {[list(f) for f in factors]}: "
                f"({t_factor}, {s_factor}) gives a {frames}x{crop} shape for "
                f"DATA.NUM_FRAMES = {base_frames}, DATA.TRAIN_CROP_SIZE = "
                f"{base_crop} (needs at least 1 frame and 1 pixel)"
            )
        shapes.append((frames, crop))
    return shapes


def resolve_short_factors(
    factors: Sequence[float], min_map: float, spatial_stride: int, crop: int
) -> tuple[float, ...]:
    """Returns the short-cycle factors after the feature-map rule.

    The paper's smallest short-cycle view, 112 px at a 224 px base and a total
    spatial stride of 32, leaves the last feature map 3.5 px wide (before
    rounding up). A smaller crop or stride shrinks that map: the demos' 64 px
    at stride 16 leave 2 px at the factor 0.5. The rule raises the smallest
    factor to ``min_map * spatial_stride / crop`` where it is below (at most
    to 1) and moves the other factor with it geometrically (``f ** (log s' /
    log s)``: 0.707 = 0.5 ** 0.5 stays the square root of the smallest).
    Where the map is already that wide (224 px at stride 32, or larger) the
    factors are unchanged.

    Args:
        factors: MULTIGRID.SHORT_CYCLE_FACTORS.
        min_map: MULTIGRID.SHORT_CYCLE_MIN_MAP; 0 turns the rule off.
        spatial_stride: input pixels per pixel of the model's last feature map.
        crop: DATA.TRAIN_CROP_SIZE.

    Returns:
        tuple: the factors to train with, in the order given.
    """
    smallest = min(factors)
    wanted = min(1.0, min_map * spatial_stride / float(crop))
    if min_map <= 0 or smallest >= wanted:
        return tuple(float(f) for f in factors)
    if wanted >= 1.0:
        return tuple(1.0 for _ in factors)
    power = math.log(wanted) / math.log(smallest)
    return tuple(round(float(f) ** power, 6) for f in factors)


def short_cycle_crops(
    factors: Sequence[float], mode: str, train_crop: int, long_crop: int
) -> tuple[int, ...]:
    """Returns the crops of the two short-cycle shapes.

    Args:
        factors: MULTIGRID.SHORT_CYCLE_FACTORS.
        mode: MULTIGRID.SHORT_CYCLE_CROP_MODE, ``"absolute"`` (factors of
            ``train_crop``, the reference) or ``"relative"`` (factors of
            ``long_crop``, the paper).
        train_crop: DATA.TRAIN_CROP_SIZE.
        long_crop: crop of the current long-cycle shape.

    Returns:
        tuple: one crop per factor, at most ``long_crop``.

    Raises:
        ValueError: an unknown mode or a crop below one pixel.
    """
    if mode == "absolute":
        ref = train_crop
    elif mode == "relative":
        ref = long_crop
    else:
        raise ValueError(
            f"MULTIGRID.SHORT_CYCLE_CROP_MODE = {mode!r}: must be 'absolute' "
            "or 'relative'"
        )
    # A view is never larger than the long-cycle shape it shrinks (at a 224 px
    # base the reference's absolute crops never are: 112 and 158 <= 158).
    crops = tuple(min(int(round(f * ref)), long_crop) for f in factors)
    if min(crops) < 1:
        raise ValueError(
            f"MULTIGRID.SHORT_CYCLE_FACTORS = {list(factors)}: gives crops "
            f"{list(crops)} from {ref} (needs at least 1 pixel)"
        )
    return crops


def bn_splits_and_sync(
    per_proc_batch: int, num_procs: int, bn_base_size: int
) -> tuple[int, int]:
    """Returns how BN statistics are grouped at a long-cycle shape.

    Args:
        per_proc_batch: clips per process at the long-cycle shape.
        num_procs: number of training processes.
        bn_base_size: MULTIGRID.BN_BASE_SIZE, clips per BN group.

    Returns:
        tuple: ``(splits, sync_size)``. ``splits = per_proc_batch //
        bn_base_size`` when at least 1 (``sync_size`` 1). Otherwise
        ``splits`` is 1 and statistics are synced over ``sync_size``
        processes: the smallest divisor of ``num_procs`` that is at least
        ``ceil(bn_base_size / per_proc_batch)`` (so the groups tile the
        processes), capped at ``num_procs``.
    """
    splits = per_proc_batch // bn_base_size
    if splits >= 1:
        return splits, 1
    need = min(num_procs, math.ceil(bn_base_size / per_proc_batch))
    sync = next(d for d in range(need, num_procs + 1) if num_procs % d == 0)
    return 1, sync
