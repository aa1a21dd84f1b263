"""The sampling grid of a training batch: clip length, crop, stride and scale."""

import random
from dataclasses import dataclass
from typing import Optional

from fvcore.common.config import CfgNode

from slowfast.multigrid.shapes import jitter_scales, sampling_rate_range


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
    def from_iter_shape(cls, shape) -> "SamplingGrid":
        """The grid of a schedule's iteration shape (``multigrid.IterShape``)."""
        rates, scales = shape.sampling_rate, shape.jitter_scales
        return cls(shape.num_frames, shape.crop_size, *rates, *scales)

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
        The arithmetic lives in ``slowfast.multigrid.shapes``, shared with the
        schedule's per-iteration shapes.

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
