"""Renditions: each video also stored at lower resolutions, for coarse grids.

Decoding costs about the same per frame whatever crop the loader takes from
it, so a multigrid batch of 4x the clips at half the resolution costs the
loader 4x a base batch when every clip is decoded at full resolution.
``tools/prepare_dataset.py`` therefore writes each video (or frame folder)
also scaled by 1/sqrt(2) and 1/2 (short side 182 and 128 for 256), and lists
the scales in ``renditions.json`` in the dataset folder::

    {"scales": [0.7071, 0.5]}

A rendition's short side is the original's times its scale, rounded up to an
even number, and it sits next to the original: ``clip.mp4`` ->
``clip.r71.mp4``; a frame ``frames/vid/000001.jpg`` -> ``frames/vid.r71/
000001.jpg`` (a frame folder's rendition is a sibling folder).

A training grid reads the smallest rendition whose scale is at least the
grid's largest jittered short side over the base grid's: the clip is then
resized by the same factor as a base-shape clip, so it shows the same field
of view with the same detail per output pixel (up to interpolation).
Evaluation and the base grid read the originals.
"""

import json
import math
import os
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

MANIFEST = "renditions.json"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")

# The scales prepare_dataset writes by default: the multigrid grids' spatial
# factors (the long cycle's and short cycle's H/sqrt(2), the short cycle's H/2).
DEFAULT_SCALES = (0.7071, 0.5)


def scaled_size(width: int, height: int, scale: float) -> Tuple[int, int]:
    """(width, height) of a rendition: short side ``scale`` x the original's,
    rounded up to even, the long side in proportion (rounded to even)."""
    short = min(width, height)
    new_short = max(2, 2 * math.ceil(short * scale / 2 - 1e-6))
    new_long = max(2, int(round(max(width, height) * new_short / short / 2)) * 2)
    return (new_short, new_long) if width <= height else (new_long, new_short)


def suffix(scale: float) -> str:
    """The file-name tag of a rendition: ``.r71`` for 0.7071, ``.r50`` for 0.5."""
    return f".r{int(round(100 * scale))}"


def scales_problem(scales: Sequence[float]) -> str:
    """What is wrong with a list of rendition scales ("" when nothing)."""
    if not scales or any(not 0.1 <= s < 1 for s in scales):
        return f"scales {list(scales)}: use values in [0.1, 1), e.g. 0.7071,0.5"
    names = [suffix(s) for s in scales]
    if len(set(names)) < len(names):
        return f"scales {list(scales)} share file names ({', '.join(names)})"
    return ""


@dataclass(frozen=True)
class Renditions:
    """The scales a dataset folder holds besides the originals (largest first)."""

    scales: Tuple[float, ...]

    def pick(self, scale: float) -> Optional[float]:
        """The rendition for a grid that needs ``scale`` x the original size.

        Args:
            scale: the grid's largest short side over the base grid's.

        Returns:
            float or None: the smallest stored scale >= ``scale``, or up to
            2% below it (crops and jitter sizes are rounded to pixels: a
            grid 40/56 of the base needs 0.714); None: the original.
        """
        fits = [s for s in self.scales if s >= scale * 0.98]
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
            scales = tuple(sorted({float(s) for s in json.load(handle)["scales"]}))
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f'{path}: expected {{"scales": [0.7071, 0.5]}} ({err}); rewrite it '
            "with tools/prepare_dataset.py or delete it"
        ) from err
    problem = scales_problem(scales)
    if problem:
        raise ValueError(f"{path}: {problem}")
    return Renditions(scales[::-1])


def write_renditions(data_dir: str, scales: Sequence[float]) -> str:
    """Writes the manifest atomically (or removes it when ``scales`` is empty).

    Returns:
        str: the manifest's path.
    """
    path = os.path.join(data_dir, MANIFEST)
    if not scales:
        if os.path.exists(path):
            os.remove(path)
        return path
    tmp = f"{path}.{os.getpid()}.part"
    with open(tmp, "w") as handle:
        json.dump({"scales": sorted((float(s) for s in scales), reverse=True)}, handle)
        handle.write("\n")
    os.replace(tmp, path)
    return path


def rendition_path(path: str, scale: float) -> str:
    """Where the ``scale`` rendition of a video file or a frame is.

    Args:
        path: a video file, or an image (a frame of a frame folder).
        scale: the rendition's scale.

    Returns:
        str: ``x.mp4`` -> ``x.r50.mp4``; ``dir/f.jpg`` -> ``dir.r50/f.jpg``
        (a frame folder's rendition is a sibling folder).
    """
    stem, ext = os.path.splitext(path)
    if ext.lower() in IMAGE_EXTENSIONS:
        folder, name = os.path.split(path)
        return os.path.join(folder + suffix(scale), name)
    return f"{stem}{suffix(scale)}{ext}"
