"""Renditions: each video also stored at lower resolutions, for coarse grids.

Decoding costs about the same per frame whatever crop the loader takes from
it, so a multigrid batch of 4x the clips at half the resolution costs the
loader 4x a base batch when every clip is decoded at full resolution.
``tools/prepare_dataset.py`` therefore writes each video (or frame folder)
also at smaller short sides, by default 1/sqrt(2) and 1/2 of the full one
(182 and 128 for 256), and lists them in ``renditions.json`` in the dataset
folder::

    {"short_side": 256, "renditions": [182, 128]}

A rendition sits next to its full-resolution original: ``clip.mp4`` ->
``clip.s128.mp4``; a frame ``frames/vid/000001.jpg`` -> ``frames/vid.s128/
000001.jpg`` (a frame folder's rendition is a sibling folder).

A training grid reads the smallest rendition that is at least as large,
relative to the full short side, as the grid's largest jittered short side
is relative to the base grid's: the clip is then resized by the same factor
as a base-shape clip, so it shows the same field of view with the same
detail per output pixel (up to interpolation). Evaluation and the base grid
read the full resolution.
"""

import json
import math
import os
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

MANIFEST = "renditions.json"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")

# Relative sizes prepare_dataset writes by default: the multigrid grids'
# spatial factors (the short cycle's H/sqrt(2) and H/2; the long cycle's
# H/sqrt(2)).
DEFAULT_FACTORS = (2**-0.5, 0.5)


def rendition_sizes(short_side: int, factors: Sequence[float] = DEFAULT_FACTORS):
    """The renditions' short sides for a full ``short_side`` (even, rounded up).

    Args:
        short_side: the full-resolution short side.
        factors: relative sizes.

    Returns:
        tuple: short sides, largest first, without duplicates or the full size.
    """
    sizes = {2 * math.ceil(short_side * f / 2 - 1e-6) for f in factors}
    return tuple(sorted((s for s in sizes if 2 <= s < short_side), reverse=True))


@dataclass(frozen=True)
class Renditions:
    """What a dataset folder holds besides the full resolution.

    Attributes:
        short_side: the full resolution's short side.
        sizes: the renditions' short sides.
    """

    short_side: int
    sizes: Tuple[int, ...]

    def pick(self, scale: float) -> Optional[int]:
        """The rendition for a grid that needs ``scale`` x the full resolution.

        Args:
            scale: the grid's largest short side over the base grid's.

        Returns:
            int or None: the smallest rendition with ``size >= scale *
            short_side`` (0.5% tolerance for rounding); None: the full one.
        """
        need = scale * self.short_side * 0.995
        fits = [s for s in self.sizes if s >= need]
        return min(fits) if fits else None


def load_renditions(data_dir: str) -> Optional[Renditions]:
    """Reads ``data_dir/renditions.json`` (None when there is none).

    Raises:
        ValueError: the file exists but is malformed (names the file).
    """
    path = os.path.join(data_dir, MANIFEST)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as handle:
            raw = json.load(handle)
        sizes = tuple(sorted({int(s) for s in raw["renditions"]}, reverse=True))
        result = Renditions(int(raw["short_side"]), sizes)
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f'{path}: expected {{"short_side": N, "renditions": [n, ...]}} '
            f"({err}); rewrite it with tools/prepare_dataset.py or delete it"
        ) from err
    if any(s <= 0 or s >= result.short_side for s in sizes):
        raise ValueError(f"{path}: renditions {sizes} must lie in (0, short_side)")
    return result


def write_renditions(data_dir: str, short_side: int, sizes: Sequence[int]) -> str:
    """Writes the manifest (atomically); returns its path."""
    path = os.path.join(data_dir, MANIFEST)
    tmp = f"{path}.{os.getpid()}.part"
    with open(tmp, "w") as handle:
        payload = {"short_side": int(short_side), "renditions": sorted(sizes)[::-1]}
        json.dump(payload, handle)
        handle.write("\n")
    os.replace(tmp, path)
    return path


def rendition_path(path: str, size: int) -> str:
    """Where the ``size`` rendition of a video file or a frame is.

    Args:
        path: a video file, or an image (a frame of a frame folder).
        size: the rendition's short side.

    Returns:
        str: ``x.mp4`` -> ``x.s128.mp4``; ``dir/f.jpg`` -> ``dir.s128/f.jpg``
        (a frame folder's rendition is a sibling folder).
    """
    stem, ext = os.path.splitext(path)
    if ext.lower() in IMAGE_EXTENSIONS:
        folder, name = os.path.split(path)
        return os.path.join(folder + f".s{size}", name)
    return f"{stem}.s{size}{ext}"
