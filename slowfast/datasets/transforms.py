"""Spatial transforms and pathway packing with plain torch ops (no torchvision).

The geometry follows PySlowFast: resize the short side (random in a range at
training, fixed at test), crop (random at training; left/top, centre or
right/bottom at test), optional horizontal flip. For speed the crop window is
mapped back to the source frames and only that window is resized, in one
``interpolate`` call on uint8 channels-last data. Clips stay uint8: the models
normalise them (``slowfast/models/input_norm.py``), after the batch has left
the loader workers (normalisation commutes with bilinear resizing and
cropping).
"""

import math
import random
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F


def short_side_size(height: int, width: int, size: int) -> Tuple[int, int]:
    """(height, width) after scaling the short side to ``size`` (long side floored).

    Args:
        height: frame height.
        width: frame width.
        size: new short side.

    Returns:
        tuple: the new (height, width).
    """
    if width < height:
        return int(math.floor(height / width * size)), size
    if height < width:
        return size, int(math.floor(width / height * size))
    return size, size


def jitter_size(
    min_size: int, max_size: int, rng: random.Random, inverse_uniform: bool = False
) -> int:
    """Random short side in ``[min_size, max_size]``.

    Args:
        min_size: smallest short side.
        max_size: largest short side.
        rng: random source.
        inverse_uniform: draw ``1/size`` uniformly (DATA.INV_UNIFORM_SAMPLE),
            which favours small sizes, as the reference does.

    Returns:
        int: the short side.
    """
    if inverse_uniform:
        return int(round(1.0 / rng.uniform(1.0 / max_size, 1.0 / min_size)))
    return int(round(rng.uniform(min_size, max_size)))


def random_crop_offset(height: int, width: int, crop: int, rng: random.Random):
    """Uniform random (y, x) of a ``crop`` square inside ``height x width``."""
    y = rng.randint(0, height - crop) if height > crop else 0
    x = rng.randint(0, width - crop) if width > crop else 0
    return y, x


def uniform_crop_offset(height: int, width: int, crop: int, spatial_idx: int):
    """(y, x) of test crop ``spatial_idx`` along the long side.

    Args:
        height: frame height.
        width: frame width.
        crop: crop size.
        spatial_idx: 0 left/top, 1 centre, 2 right/bottom.

    Returns:
        tuple: (y, x) offsets.
    """
    if spatial_idx not in (0, 1, 2):
        raise ValueError(f"spatial_idx must be 0, 1 or 2, got {spatial_idx}")
    y = int(math.ceil((height - crop) / 2))
    x = int(math.ceil((width - crop) / 2))
    if height > width:
        y = {0: 0, 1: y, 2: height - crop}[spatial_idx]
    else:
        x = {0: 0, 1: x, 2: width - crop}[spatial_idx]
    return y, x


def _source_range(offset: int, crop: int, scaled: int, source: int) -> Tuple[int, int]:
    if scaled == source:
        return offset, offset + crop
    ratio = source / scaled
    lo = int(round(offset * ratio))
    hi = int(round((offset + crop) * ratio))
    lo = min(max(lo, 0), source - 1)
    return lo, min(max(hi, lo + 1), source)


def crop_resize(
    frames: torch.Tensor,
    short_side: int,
    crop: int,
    offset_fn,
    geometry: Optional[Tuple[int, int]] = None,
) -> torch.Tensor:
    """Scales the short side to ``short_side`` and crops a ``crop`` square.

    Only the source window under the crop is resized (one interpolate call).

    Args:
        frames: uint8 ``[T, H, W, C]``.
        short_side: short side after scaling (raised to ``crop`` if smaller).
        crop: output size.
        offset_fn: ``(scaled_h, scaled_w) -> (y, x)`` of the crop in the
            scaled frame.
        geometry: (height, width) the scaling and crop position refer to
            when ``frames`` are a lower-resolution rendition of a video of
            that size (the crop then covers the same field of view and takes
            the same random draws as on the original); None: the frames'.

    Returns:
        torch.Tensor: uint8 ``[T, C, crop, crop]`` (channels-last memory).
    """
    _, height, width, _ = frames.shape
    ref_h, ref_w = geometry or (height, width)
    new_h, new_w = short_side_size(ref_h, ref_w, max(short_side, crop))
    y, x = offset_fn(new_h, new_w)
    y0, y1 = _source_range(y, crop, new_h, height)
    x0, x1 = _source_range(x, crop, new_w, width)
    window = frames[:, y0:y1, x0:x1, :].permute(0, 3, 1, 2)
    if (y1 - y0, x1 - x0) == (crop, crop):
        return window
    window = window.contiguous(memory_format=torch.channels_last)
    return F.interpolate(
        window, size=(crop, crop), mode="bilinear", align_corners=False
    )


def to_clip_format(
    frames: torch.Tensor, reverse_channels: bool = False
) -> torch.Tensor:
    """uint8 ``[T, C, H, W]`` -> contiguous uint8 ``[C, T, H, W]``, the dimension order
    the models take (they normalise it: ``models/input_norm.py``).

    Args:
        frames: uint8 frames (any memory format), RGB.
        reverse_channels: return the channels in reverse order (BGR), as the
            reference's DATA.REVERSE_INPUT_CHANNEL; the models then normalise
            with the statistics reversed too.

    Returns:
        torch.Tensor: contiguous uint8 ``[C, T, H, W]``.
    """
    src = frames.permute(1, 0, 2, 3)
    if reverse_channels:
        src = src.flip(0)
    return src.contiguous()


def spatial_transform(
    frames: torch.Tensor,
    short_side: int,
    crop: int,
    spatial_idx: int,
    flip: bool,
    rng: Optional[random.Random],
    geometry: Optional[Tuple[int, int]] = None,
) -> torch.Tensor:
    """Resize, crop and (maybe) flip a clip.

    Args:
        frames: uint8 ``[T, H, W, C]``.
        short_side: scaled short side.
        crop: crop size.
        spatial_idx: -1 random crop (needs ``rng``); 0/1/2 test crop position.
        flip: flip horizontally with probability 0.5 (needs ``rng``).
        rng: random source for crop and flip.
        geometry: the original's (height, width) when ``frames`` are a
            rendition (see ``crop_resize``).

    Returns:
        torch.Tensor: uint8 ``[T, C, crop, crop]``.
    """
    if spatial_idx == -1:

        def offset_fn(h, w):
            return random_crop_offset(h, w, crop, rng)

    else:

        def offset_fn(h, w):
            return uniform_crop_offset(h, w, crop, spatial_idx)

    out = crop_resize(frames, short_side, crop, offset_fn, geometry)
    if flip:
        assert rng is not None, "flip needs rng"
        if rng.random() < 0.5:
            out = out.flip(-1)
    return out


def pack_pathways(
    frames: torch.Tensor, multi_pathway: bool, alpha: int, sampling: str = "linspace"
) -> List[torch.Tensor]:
    """Splits a clip into the model's pathway inputs.

    Args:
        frames: ``[C, T, H, W]``.
        multi_pathway: SlowFast-style two pathways.
        alpha: frame-rate ratio of the fast to the slow pathway.
        sampling: which ``T // alpha`` frames the slow pathway takes
            (SLOWFAST.SLOW_SAMPLING): "linspace", evenly spread from the first
            frame to the last (PySlowFast; 16 frames, alpha 4: 0, 5, 10, 15;
            8 frames: 0, 7); "stride", every alpha-th from the first (0, 4, 8,
            12; 0, 4), where the fast-to-slow fusion conv centres its outputs.

    Returns:
        list: ``[frames]`` for one pathway; ``[slow, fast]`` for two.

    Raises:
        ValueError: fewer than ``alpha`` frames for a two-pathway model.
    """
    if not multi_pathway:
        return [frames]
    num = frames.shape[1]
    if num < alpha:
        raise ValueError(
            f"SlowFast needs at least SLOWFAST.ALPHA={alpha} frames per clip, got {num}"
        )
    if sampling == "stride":
        index = torch.arange(num // alpha) * alpha
    else:
        index = torch.linspace(0, num - 1, num // alpha).long()
    return [torch.index_select(frames, 1, index), frames]
