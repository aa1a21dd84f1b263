"""The "frames" backend: clips read from folders or lists of JPEG frames.

Returns uint8 tensors ``[T, H, W, C]`` (RGB) like the PyAV backend; a missing
or unreadable frame raises ``DecodeError`` with the frame's path. JPEGs are
decoded by libjpeg-turbo through ``simplejpeg`` (the same pixels as Pillow,
faster: docs/benchmarks/loader.md, "Loader per multigrid shape on Kinetics-like
video"); other images, and JPEGs it cannot read, through Pillow.
"""

import io
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import simplejpeg
import torch
from PIL import Image

from slowfast.datasets.decoding.decoder import DecodeError
from slowfast.datasets.decoding.frame_cache import FrameCache

_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def frame_names(path: str) -> List[str]:
    """The image file names of a frame folder, sorted.

    Raises:
        DecodeError: the folder is missing or holds no images.
    """
    try:
        entries = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError) as err:
        raise DecodeError(path, "frame folder not found") from err
    # Lower-case extensions tested first: this runs once per training clip.
    names = [
        n
        for n in entries
        if n.endswith(_IMAGE_EXTENSIONS) or n.lower().endswith(_IMAGE_EXTENSIONS)
    ]
    if not names:
        raise DecodeError(path, "frame folder holds no images")
    names.sort()
    return names


def list_frame_dir(path: str) -> List[str]:
    """The image files of a frame folder, sorted by name.

    Raises:
        DecodeError: the folder is missing or holds no images.
    """
    folder = path.rstrip("/") + "/"
    return [folder + n for n in frame_names(path)]


def _read(path: str, size: int = -1) -> bytes:
    """The first ``size`` bytes of a file (all with -1), as ``DecodeError``s."""
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except FileNotFoundError as err:
        raise DecodeError(path, "frame file not found") from err
    except OSError as err:
        raise DecodeError(path, f"cannot read image ({err})") from err


def load_image(path: str) -> np.ndarray:
    """Reads one RGB image as a uint8 ``[H, W, 3]`` array.

    Raises:
        DecodeError: the file is missing, empty or not a readable image.
    """
    data = _read(path)
    if data[:2] == b"\xff\xd8":  # a JPEG
        try:
            return simplejpeg.decode_jpeg(data, colorspace="RGB")
        except ValueError:
            pass  # a JPEG variant libjpeg-turbo's fast path rejects: Pillow
    try:
        with Image.open(io.BytesIO(data)) as img:
            return np.asarray(img.convert("RGB"))
    except (OSError, ValueError, SyntaxError) as err:
        raise DecodeError(path, f"cannot decode image ({err})") from err


def image_size(path: str) -> Tuple[int, int]:
    """(height, width) of an image, from its header (nothing is decoded).

    Raises:
        DecodeError: the file is missing or not a readable image.
    """
    head = _read(path, 65536)
    if head[:2] == b"\xff\xd8":
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(head)
            return height, width
        except ValueError:
            head = _read(path)  # a header beyond 64 KiB (large metadata)
    try:
        with Image.open(io.BytesIO(head)) as img:
            return img.height, img.width
    except (OSError, ValueError, SyntaxError) as err:
        raise DecodeError(path, f"cannot read image ({err})") from err


def load_frames(
    paths: Sequence[str], cache: Optional[FrameCache] = None
) -> torch.Tensor:
    """Reads a clip's frames from image files (each distinct file read once).

    Args:
        paths: image files in clip order (repeats allowed).
        cache: optional per-worker cache of decoded images.

    Returns:
        torch.Tensor: uint8 ``[T, H, W, C]``.

    Raises:
        DecodeError: a frame is missing or unreadable, or sizes differ.
    """
    arrays = {}
    for p in paths:
        if p in arrays:
            continue
        img = cache.get(p) if cache is not None else None
        if img is None:
            img = load_image(p)
            if cache is not None:
                cache.put(p, img, img.nbytes)
        arrays[p] = img
    shape = arrays[paths[0]].shape
    for p, img in arrays.items():
        if img.shape != shape:
            raise DecodeError(p, f"frame size {img.shape[:2]} differs from {shape[:2]}")
    out = np.empty((len(paths),) + shape, dtype=np.uint8)
    for i, p in enumerate(paths):
        out[i] = arrays[p]
    return torch.from_numpy(out)
