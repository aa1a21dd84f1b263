"""The three demo tasks as animated scenes.

* Kinetics format: one digit bounces around; the class is the digit (0-9),
  its motion is random, so appearance decides.
* SSv2 format: one random digit moves in one of eight ways; the class is the
  motion, so a single frame cannot tell it.
* Charades format: 1-3 different digits appear one after the other, each over
  its own span; the labels of a frame are the digits visible in it, those of a
  clip or video the union over its frames (multi-label).
"""

import math
from typing import List, Tuple

import numpy as np
import torch

from workshop.dataprep.demo.digits import NUM_DIGIT_CLASSES, DigitBank, upscale_digit
from workshop.dataprep.demo.render import (
    background,
    bounce,
    composite,
    contrasting_color,
    moving_blobs,
    place_sprite,
)
from workshop.dataprep.demo.specs import SSV2_TEMPLATES, DatasetSpec

Layer = Tuple[torch.Tensor, torch.Tensor]


def _sprite(
    rng: np.random.Generator, bank: DigitBank, pool: str, spec: DatasetSpec, digit=None
) -> Tuple[torch.Tensor, int, int]:
    """Draws a handwritten digit and upscales it to a random size."""
    image, digit = bank.sample(rng, pool, digit)
    low, high = spec.style.digit_size
    size = int(rng.integers(low, high + 1))
    return upscale_digit(image, size), digit, size


def _color(
    rng: np.random.Generator,
    backdrop: torch.Tensor,
    alpha: torch.Tensor,
    spec: DatasetSpec,
) -> torch.Tensor:
    """A colour standing out by the style's contrast where ``alpha`` is drawn."""
    contrast = float(rng.uniform(*spec.style.contrast))
    return contrasting_color(rng, backdrop, contrast, alpha, spec.style.polarity)


def _bouncing(
    rng: np.random.Generator, size: float, spec: DatasetSpec, speed=(0.5, 2.5), box=None
) -> np.ndarray:
    """A random start and direction, bouncing inside the frame (or ``box``)."""
    half = size / 2.0
    lo, hi = (half, half), (spec.width - half, spec.height - half)
    if box is not None:
        lo, hi = (box[0] + half, half), (max(box[0] + half, box[1] - half), hi[1])
    start = rng.uniform(lo, hi)
    angle = rng.uniform(0.0, 2.0 * math.pi)
    velocity = rng.uniform(*speed) * np.array([math.cos(angle), math.sin(angle)])
    return bounce(start, velocity, lo, hi, spec.num_frames)


def _clutter(rng: np.random.Generator, spec: DatasetSpec) -> List[Layer]:
    count = int(rng.integers(0, spec.style.blobs + 1))
    return moving_blobs(rng, count, spec.num_frames, spec.height, spec.width)


def kinetics_scene(
    rng: np.random.Generator, bank: DigitBank, pool: str, digit: int, spec: DatasetSpec
) -> np.ndarray:
    """Renders a video whose class is the identity of the moving digit.

    Args:
        rng: the video's random generator.
        bank: the handwritten digits.
        pool: digit pool ("train" or "heldout").
        digit: the class, 0-9.
        spec: geometry and style.

    Returns:
        np.ndarray: (T, H, W, 3) uint8 frames.
    """
    num, height, width = spec.num_frames, spec.height, spec.width
    backdrop = background(rng, height, width, spec.style.texture, spec.style.saturation)
    margin = spec.style.margin * width
    sprite, _, size = _sprite(rng, bank, pool, spec, digit)
    path = _bouncing(rng, size, spec, spec.style.speed, (margin, width - margin))
    angles = np.full(num, rng.uniform(-0.3, 0.3))
    alpha = place_sprite(sprite, path, np.full(num, size), angles, height, width)
    layers: List[Layer] = [(alpha, _color(rng, backdrop, alpha, spec))]
    layers.extend(_clutter(rng, spec))
    return composite(rng, backdrop, layers, spec.style.noise_std)


def ssv2_scene(
    rng: np.random.Generator, bank: DigitBank, pool: str, motion: int, spec: DatasetSpec
) -> Tuple[np.ndarray, int]:
    """Renders a video whose class is how a random digit moves.

    Args:
        rng: the video's random generator.
        bank: the handwritten digits.
        pool: digit pool ("train" or "heldout").
        motion: index into ``SSV2_TEMPLATES``.
        spec: geometry and style.

    Returns:
        (frames, digit): (T, H, W, 3) uint8 frames and the digit shown.
    """
    if not 0 <= motion < len(SSV2_TEMPLATES):
        raise ValueError(f"ssv2 motion class {motion} out of range")
    num, height, width = spec.num_frames, spec.height, spec.width
    backdrop = background(rng, height, width, spec.style.texture, spec.style.saturation)
    sprite, digit, size = _sprite(rng, bank, pool, spec)
    t = np.linspace(0.0, 1.0, num)[:, None]
    extent = np.array([width, height], dtype=np.float64)
    center = rng.uniform(0.4, 0.6, size=2) * extent
    drift = rng.uniform(-0.08, 0.08, size=2) * extent
    sizes = np.full(num, float(size))
    angle0 = rng.uniform(-0.3, 0.3)
    angles = np.full(num, angle0)
    if motion < 4:
        axis, sign = (0, 1.0) if motion < 2 else (1, 1.0)
        if motion in (1, 2):
            sign = -1.0
        travel = rng.uniform(0.35, 0.55) * extent[axis]
        step = np.zeros(2)
        step[axis] = sign * travel
        drift[axis] = 0.0
        start = center - step / 2.0
        path = start + t * step + (t - 0.5) * drift
    else:
        path = center + (t - 0.5) * drift
        if motion in (4, 5):
            small, big = rng.uniform(0.5, 0.7), rng.uniform(1.3, 1.6)
            grow = np.geomspace(small, big, num)
            sizes = size * (grow if motion == 4 else grow[::-1])
        else:
            turn = rng.uniform(0.5, 1.2) * math.pi
            sign = 1.0 if motion == 6 else -1.0
            angles = angle0 + sign * turn * t[:, 0]
    alpha = place_sprite(sprite, path, sizes, angles, height, width)
    layers = [(alpha, _color(rng, backdrop, alpha, spec))] + _clutter(rng, spec)
    return composite(rng, backdrop, layers, spec.style.noise_std), digit


def _sequential_spans(rng: np.random.Generator, count: int, num: int) -> List[range]:
    """``count`` disjoint spans of at least ``num // 4`` frames, in order, with gaps."""
    shortest = num // 4
    free = num - count * shortest
    # free frames shared among the count + 1 gaps and the count spans
    parts = rng.multinomial(free, np.full(2 * count + 1, 1.0 / (2 * count + 1)))
    spans, first = [], int(parts[0])
    for index in range(count):
        length = shortest + int(parts[1 + 2 * index])
        spans.append(range(first, first + length))
        first += length + int(parts[2 + 2 * index])
    return spans


def charades_scene(
    rng: np.random.Generator, bank: DigitBank, pool: str, spec: DatasetSpec
) -> Tuple[np.ndarray, List[List[int]]]:
    """Renders 1-3 different digits, one after the other, each over its own span.

    Like the actions of a Charades video, the digits are localised in time: each
    is visible over one span of at least a quarter of the video, with gaps of
    background between them, so a training clip (half the video) shows one or
    two of them and the video as a whole all of them.

    Args:
        rng: the video's random generator.
        bank: the handwritten digits.
        pool: digit pool ("train" or "heldout").
        spec: geometry and style.

    Returns:
        (frames, labels): (T, H, W, 3) uint8 frames and, per frame, the sorted
        digits visible in it (possibly empty).
    """
    num, height, width = spec.num_frames, spec.height, spec.width
    backdrop = background(rng, height, width, spec.style.texture, spec.style.saturation)
    count = int(rng.integers(1, 4))
    digits = rng.choice(NUM_DIGIT_CLASSES, size=count, replace=False)
    margin = spec.style.margin * width
    labels: List[List[int]] = [[] for _ in range(num)]
    layers: List[Layer] = []
    for digit, span in zip(digits, _sequential_spans(rng, count, num)):
        sprite, _, size = _sprite(rng, bank, pool, spec, int(digit))
        path = _bouncing(rng, size, spec, spec.style.speed, (margin, width - margin))
        visible = torch.zeros(num)
        visible[span.start : span.stop] = 1.0
        angles = np.full(num, rng.uniform(-0.3, 0.3))
        alpha = place_sprite(sprite, path, np.full(num, size), angles, height, width)
        alpha = alpha * visible[:, None, None]
        layers.append((alpha, _color(rng, backdrop, alpha, spec)))
        for frame in span:
            labels[frame].append(int(digit))
    layers.extend(_clutter(rng, spec))
    frames = composite(rng, backdrop, layers, spec.style.noise_std)
    return frames, [sorted(frame_labels) for frame_labels in labels]
