"""The training compute of a run: clips trained at each shape x FLOPs per clip.

A multigrid run trains fewer iterations than its baseline, but an iteration
at a coarse shape does not always cost what the base shape's does: the shapes
keep B x T x H x W, while the FLOPs of a clip fall less than T x H x W where a
feature map's side is rounded up at a stride (a 68 px crop gives the same
3 x 3 maps in the last stage of a stride-32 network as a 96 px one). The
ratio of two runs' compute is the wall-clock speedup a perfectly efficient
machine would show; the study reports it next to the measured one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Mapping, Tuple

if TYPE_CHECKING:
    from slowfast.models.model_stats import GflopsFn


def parse_shape(shape: str) -> Tuple[int, int, int]:
    """``"32x4x68"`` (global clips x frames x crop, as the logs name an
    iteration's shape) -> ``(32, 4, 68)``.

    Raises:
        ValueError: not three positive integers joined by ``x``.
    """
    parts = shape.split("x")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) <= 0:
        raise ValueError(f"shape {shape!r}: expected CLIPSxFRAMESxCROP, e.g. 32x4x68")
    return values  # type: ignore[return-value]


def training_gflops(clips_per_shape: Mapping[str, int], gflops_fn: GflopsFn) -> float:
    """Forward GFLOPs of all clips a run trained (backward: about twice that,
    at every shape alike, so ratios of this are ratios of training compute).

    Args:
        clips_per_shape: shape string (see ``parse_shape``) -> clips trained.
        gflops_fn: ``(num_frames, crop_size) -> GFLOPs of one clip``; called
            once per distinct (frames, crop).

    Returns:
        float: the sum over shapes of clips x GFLOPs per clip.
    """
    per_clip: Dict[Tuple[int, int], float] = {}
    total = 0.0
    for shape, clips in clips_per_shape.items():
        _, frames, crop = parse_shape(shape)
        if (frames, crop) not in per_clip:
            per_clip[frames, crop] = gflops_fn(frames, crop)
        total += clips * per_clip[frames, crop]
    return total
