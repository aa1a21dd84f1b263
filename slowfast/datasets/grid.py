"""The sampling grid of a training batch: clip length, crop, stride and scale."""

import random
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from fvcore.common.config import CfgNode

from slowfast.config.validate import JITTER_SCALE_MODES


@dataclass(frozen=True)
class SamplingGrid:
    """How the clips of one training batch are sampled (all share it).

    Attributes:
        num_frames: frames per clip (fast pathway for SlowFast).
        crop_size: spatial crop (square).
        min_rate: lower bound of the temporal stride.
        max_rate: upper bound (inclusive); the stride of each clip is drawn
            uniformly in ``[min_rate, max_rate]``.
        jitter_min: lower bound of the random short side before cropping.
        jitter_max: upper bound of the random short side.
    """

    num_frames: int
    crop_size: int
    min_rate: int
    max_rate: int
    jitter_min: int
    jitter_max: int

    def __post_init__(self):
        if self.num_frames <= 0 or self.crop_size <= 0:
            raise ValueError(f"SamplingGrid: frames and crop must be positive: {self}")
        if not 0 < self.min_rate <= self.max_rate:
            raise ValueError(f"SamplingGrid: need 0 < min_rate <= max_rate: {self}")
        if not 0 < self.jitter_min <= self.jitter_max:
            raise ValueError(f"SamplingGrid: need 0 < jitter_min <= jitter_max: {self}")

    def draw_rate(self, rng: Optional[random.Random]) -> int:
        """The temporal stride of one clip: uniform in [min_rate, max_rate].

        Args:
            rng: the clip's generator; None (evaluation) gives ``min_rate``.

        Returns:
            int: the stride.
        """
        if rng is None or self.max_rate == self.min_rate:
            return self.min_rate
        return rng.randint(self.min_rate, self.max_rate)

    @classmethod
    def from_shape(
        cls, cfg: CfgNode, num_frames: int, crop_size: int
    ) -> "SamplingGrid":
        """The grid of a (frames, crop) shape, relative to the config's shape.

        As in the multigrid paper, fewer frames ``t < T`` cover a comparable
        span: the stride is drawn from ``[SAMPLING_RATE, SAMPLING_RATE * T / t]``
        (or up to MULTIGRID.LONG_CYCLE_SAMPLING_RATE when that is set); a
        smaller crop ``s < S`` scales the short-side jitter by ``s / S``
        (both ends, or only the lower one: MULTIGRID.JITTER_SCALE_MODE).
        The arithmetic is ``sampling_rate_range`` and ``jitter_scales``
        below, shared with the schedule's per-iteration shapes.

        Args:
            cfg: the run's config (T = DATA.NUM_FRAMES, S = DATA.TRAIN_CROP_SIZE).
            num_frames: frames per clip of this shape.
            crop_size: crop of this shape.

        Returns:
            SamplingGrid: the grid.
        """
        min_rate, max_rate = sampling_rate_range(
            num_frames,
            cfg.DATA.NUM_FRAMES,
            cfg.DATA.SAMPLING_RATE,
            cfg.MULTIGRID.LONG_CYCLE_SAMPLING_RATE,
        )
        jitter_min, jitter_max = jitter_scales(
            cfg.DATA.TRAIN_JITTER_SCALES,
            crop_size,
            cfg.DATA.TRAIN_CROP_SIZE,
            cfg.MULTIGRID.JITTER_SCALE_MODE,
        )
        return cls(
            num_frames=int(num_frames),
            crop_size=int(crop_size),
            min_rate=int(min_rate),
            max_rate=int(max_rate),
            jitter_min=int(jitter_min),
            jitter_max=int(jitter_max),
        )


def sampling_rate_range(
    num_frames: int, base_frames: int, sampling_rate: int, long_cycle_rate: int = 0
) -> Tuple[int, int]:
    """Returns the range of the temporal stride for ``num_frames`` frames.

    A clip of ``t < T`` frames is drawn with a stride picked uniformly in the
    range, up to the stride that spans as many frames as the base clip.

    Args:
        num_frames: frames ``t`` of the shape.
        base_frames: DATA.NUM_FRAMES.
        sampling_rate: DATA.SAMPLING_RATE.
        long_cycle_rate: MULTIGRID.LONG_CYCLE_SAMPLING_RATE (0: derive the
            upper end as ``sampling_rate * T / t``).

    Returns:
        tuple: ``(low, high)`` inclusive; ``(rate, rate)`` at ``t >= T``.
    """
    if num_frames >= base_frames:
        return (sampling_rate, sampling_rate)
    if long_cycle_rate > 0:
        high = long_cycle_rate
    else:
        high = int(round(sampling_rate * base_frames / num_frames))
    return (sampling_rate, max(sampling_rate, high))


def jitter_scales(
    scales: Sequence[int], crop: int, base_crop: int, mode: str = "resample"
) -> Tuple[int, int]:
    """Returns the short-side jitter range for a crop.

    A smaller crop of the same field of view comes from a smaller frame. In
    "resample" mode (the paper's sampling grid: the same span at a coarser
    stride) both ends of the jitter shrink by ``crop / base_crop``, so every
    shape sees the base shape's fields of view at its own resolution. In
    "lower_bound" mode (the reference implementation) only the lower end
    shrinks, so smaller crops also see smaller parts of the frame (down to
    ``crop / max`` of its short side). Neither end goes below the crop, which
    must fit in the frame.

    Args:
        scales: DATA.TRAIN_JITTER_SCALES ``[min, max]``.
        crop: crop of the shape.
        base_crop: DATA.TRAIN_CROP_SIZE.
        mode: MULTIGRID.JITTER_SCALE_MODE, "resample" or "lower_bound".

    Returns:
        tuple: ``(low, high)``; the configured range when ``crop >= base_crop``.
    """
    if mode not in JITTER_SCALE_MODES:
        raise ValueError(
            f"MULTIGRID.JITTER_SCALE_MODE = {mode!r}: must be one of "
            f"{JITTER_SCALE_MODES}"
        )
    low, high = int(scales[0]), int(scales[1])
    if crop < base_crop:
        low = max(int(round(low * crop / base_crop)), int(crop))
        if mode == "resample":
            high = int(round(high * crop / base_crop))
    return (low, max(low, high))
