"""Rendering of demo videos: textured backgrounds, sprites, clutter, compositing.

Every function draws its randomness from the numpy ``Generator`` it is given,
so a video is a pure function of its generator's seed. Images are float32
torch tensors in [0, 1]; ``composite`` returns the final uint8 frames.
"""

import math
from typing import List, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

BACKGROUND_KINDS = ("noise", "gradient", "stripes")
_LUMA = torch.tensor([0.299, 0.587, 0.114])

Layer = Tuple[torch.Tensor, torch.Tensor]  # (alpha (T, H, W), color (3,))


def _random_color(rng: np.random.Generator, lo: float, hi: float) -> torch.Tensor:
    return torch.from_numpy(rng.uniform(lo, hi, size=3).astype(np.float32))


def background(
    rng: np.random.Generator,
    height: int,
    width: int,
    texture: float,
    saturation: float,
) -> torch.Tensor:
    """Draws a static textured background: smooth noise, a gradient or stripes.

    Args:
        rng: the video's random generator.
        height: frame height in pixels.
        width: frame width in pixels.
        texture: amplitude of the texture around the base colour (0: flat).
        saturation: how far each channel of the base colour may stray from a
            random grey (0: grey backgrounds only).

    Returns:
        torch.Tensor: (3, height, width) float32 image in [0, 1].
    """
    kind = BACKGROUND_KINDS[int(rng.integers(len(BACKGROUND_KINDS)))]
    grey = float(rng.uniform(0.3, 0.7))
    base = (grey + saturation * _random_color(rng, -1.0, 1.0))[:, None, None]
    if kind == "noise":
        grid_h, grid_w = (int(v) for v in rng.integers(3, 9, size=2))
        coarse = torch.from_numpy(
            rng.uniform(-1.0, 1.0, size=(1, 3, grid_h, grid_w)).astype(np.float32)
        )
        pattern = F.interpolate(
            coarse, size=(height, width), mode="bicubic", align_corners=False
        )[0]
    else:
        ys = torch.linspace(-0.5, 0.5, height)[:, None]
        xs = torch.linspace(-0.5, 0.5, width)[None, :] * (width / height)
        angle = float(rng.uniform(0.0, 2.0 * math.pi))
        along = math.cos(angle) * xs + math.sin(angle) * ys
        if kind == "gradient":
            ramp = 2.0 * along
        else:
            periods = float(rng.uniform(3.0, 10.0))
            ramp = torch.sin(2.0 * math.pi * periods * along)
        tint = _random_color(rng, -1.0, 1.0)[:, None, None]
        pattern = tint * ramp[None]
    return (base + texture * pattern).clamp_(0.0, 1.0)


def contrasting_color(
    rng: np.random.Generator,
    backdrop: torch.Tensor,
    contrast: float,
    where: torch.Tensor,
    polarity: int = 0,
) -> torch.Tensor:
    """Picks a colour whose luminance differs from the backdrop's by ``contrast``.

    Args:
        rng: the video's random generator.
        backdrop: (3, H, W) image the colour must stand out against.
        contrast: wanted luminance difference in [0, 1].
        where: (T, H, W) alpha of the sprite: the backdrop's luminance is
            averaged where the sprite is drawn.
        polarity: -1 darker than the backdrop, +1 brighter, 0 either (random
            where both fit).

    Returns:
        torch.Tensor: (3,) float32 colour in [0, 1].
    """
    weight = where.sum(0)
    luma = (_LUMA[:, None, None] * backdrop).sum(0)
    level = float((luma * weight).sum() / weight.sum().clamp_min(1e-6))
    if polarity == 0:
        fits_up, fits_down = level + contrast <= 1.0, level - contrast >= 0.0
        polarity = 1 if fits_up and (not fits_down or rng.random() < 0.5) else -1
    target = min(1.0, max(0.0, level + polarity * contrast))
    chroma = torch.from_numpy(rng.uniform(-0.15, 0.15, size=3).astype(np.float32))
    chroma -= float((_LUMA * chroma).sum())
    return (target + chroma).clamp_(0.0, 1.0)


def place_sprite(
    sprite: torch.Tensor,
    centers: np.ndarray,
    sizes: np.ndarray,
    angles: np.ndarray,
    height: int,
    width: int,
) -> torch.Tensor:
    """Renders a sprite at one pose per frame (bilinear, zero outside).

    Positive angles turn the sprite clockwise on screen (y points down).

    Args:
        sprite: (h, w) alpha mask in [0, 1].
        centers: (T, 2) sprite centres (x, y) in pixels.
        sizes: (T,) displayed side length in pixels.
        angles: (T,) rotation in radians.
        height: frame height in pixels.
        width: frame width in pixels.

    Returns:
        torch.Tensor: (T, height, width) alpha in [0, 1].
    """
    num = len(sizes)
    cos = torch.from_numpy(np.cos(angles).astype(np.float32))
    sin = torch.from_numpy(np.sin(angles).astype(np.float32))
    inv = 2.0 / torch.from_numpy(np.asarray(sizes, dtype=np.float32))
    # Output pixel p maps to sprite coordinates (2 / size) * R(-angle) (p - c),
    # with p = (W / 2, H / 2) * (o + 1) for normalised output coordinates o.
    offset_x = torch.from_numpy((width / 2.0 - centers[:, 0]).astype(np.float32))
    offset_y = torch.from_numpy((height / 2.0 - centers[:, 1]).astype(np.float32))
    theta = torch.empty(num, 2, 3)
    theta[:, 0, 0] = inv * cos * (width / 2.0)
    theta[:, 0, 1] = inv * sin * (height / 2.0)
    theta[:, 0, 2] = inv * (cos * offset_x + sin * offset_y)
    theta[:, 1, 0] = -inv * sin * (width / 2.0)
    theta[:, 1, 1] = inv * cos * (height / 2.0)
    theta[:, 1, 2] = inv * (-sin * offset_x + cos * offset_y)
    grid = F.affine_grid(theta, [num, 1, height, width], align_corners=False)
    source = sprite[None, None].expand(num, 1, *sprite.shape)
    alpha = F.grid_sample(
        source, grid, mode="bilinear", padding_mode="zeros", align_corners=False
    )
    return alpha[:, 0].clamp_(0.0, 1.0)


def moving_blobs(
    rng: np.random.Generator, count: int, num_frames: int, height: int, width: int
) -> List[Layer]:
    """Draws soft round clutter spots that drift across the frame.

    Args:
        rng: the video's random generator.
        count: number of spots.
        num_frames: frames in the video.
        height: frame height in pixels.
        width: frame width in pixels.

    Returns:
        list: one (alpha (T, H, W), colour (3,)) layer per spot.
    """
    ys = torch.arange(height, dtype=torch.float32)[None, :, None]
    xs = torch.arange(width, dtype=torch.float32)[None, None, :]
    steps = np.arange(num_frames, dtype=np.float32)
    layers = []
    for _ in range(count):
        start = rng.uniform([0.0, 0.0], [width, height])
        velocity = rng.uniform(-1.5, 1.5, size=2)
        radius = float(rng.uniform(2.0, 6.0))
        strength = float(rng.uniform(0.3, 0.8))
        cx = torch.from_numpy(start[0] + velocity[0] * steps)[:, None, None].float()
        cy = torch.from_numpy(start[1] + velocity[1] * steps)[:, None, None].float()
        dist2 = (xs - cx) ** 2 + (ys - cy) ** 2
        alpha = strength * torch.exp(-dist2 / (2.0 * radius**2))
        layers.append((alpha, _random_color(rng, 0.0, 1.0)))
    return layers


def composite(
    rng: np.random.Generator,
    backdrop: torch.Tensor,
    layers: Sequence[Layer],
    noise_std: float,
) -> np.ndarray:
    """Paints layers over a static backdrop, adds pixel noise, quantises.

    Args:
        rng: the video's random generator.
        backdrop: (3, H, W) background in [0, 1].
        layers: (alpha (T, H, W), colour (3,)) pairs, painted in order.
        noise_std: std of the Gaussian noise added to every pixel.

    Returns:
        np.ndarray: (T, H, W, 3) uint8 frames.
    """
    if not layers:
        raise ValueError("composite needs at least one layer to know the length")
    num = layers[0][0].shape[0]
    frames = backdrop[None].expand(num, *backdrop.shape).clone()
    for alpha, color in layers:
        a = alpha[:, None]
        frames.mul_(1.0 - a).add_(a * color[None, :, None, None])
    frames = frames.permute(0, 2, 3, 1)
    if noise_std > 0:
        # torch draws Gaussians faster than numpy; seed it from the video's rng.
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
        frames = frames + noise_std * torch.randn(frames.shape, generator=gen)
    return (frames.clamp(0.0, 1.0) * 255.0 + 0.5).to(torch.uint8).numpy()


def bounce(start: np.ndarray, velocity: np.ndarray, lo, hi, steps: int) -> np.ndarray:
    """Moves a point at constant velocity, reflecting off the box [lo, hi].

    Args:
        start: (2,) start position (x, y).
        velocity: (2,) pixels per frame.
        lo: (2,) lower corner of the box the point stays in.
        hi: (2,) upper corner.
        steps: number of frames.

    Returns:
        np.ndarray: (steps, 2) positions.
    """
    lo = np.asarray(lo, dtype=np.float64)
    span = np.maximum(np.asarray(hi, dtype=np.float64) - lo, 1e-6)
    free = start - lo + np.arange(steps)[:, None] * velocity[None]
    folded = np.mod(free, 2.0 * span)
    return lo + np.where(folded > span, 2.0 * span - folded, folded)
