"""Writers of the on-disk formats: mp4 (PyAV), JPEG frames (PIL), csv and json.

PyAV is imported by the mp4 writers only: frame folders need none.

The list files follow the formats the dataset classes read (PySlowFast's):
``path label`` lines for Kinetics, and frame lists with the header
``original_vido_id video_id frame_id path labels`` for SSv2 and Charades.
"""

import json
import os
from fractions import Fraction
from typing import Iterable, List, Sequence, Tuple

import numpy as np
from PIL import Image

FRAME_LIST_HEADER = "original_vido_id video_id frame_id path labels"


def pick_codec() -> str:
    """Returns "libx264" when this PyAV build can encode H.264, else "mpeg4"."""
    import av

    try:
        av.codec.Codec("libx264", "w")
    except av.codec.codec.UnknownCodecError:
        return "mpeg4"
    return "libx264"


def write_mp4(
    path: str, frames: np.ndarray, fps: int, codec: str, gop: int = 16
) -> None:
    """Encodes RGB frames into an mp4 file (yuv420p, keyframe every ``gop``).

    Encoding is single-threaded so the same frames always give the same bytes.

    Args:
        path: output file; parent folders are created.
        frames: (T, H, W, 3) uint8, H and W even.
        fps: frame rate.
        codec: "libx264" or "mpeg4" (see ``pick_codec``).
        gop: frames between keyframes (short, so seeking is cheap).
    """
    import av
    from av.video.stream import VideoStream

    num, height, width, _ = frames.shape
    if height % 2 or width % 2:
        raise ValueError(
            f"{path}: yuv420p needs even frame sizes, got {height}x{width}"
        )
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    options = {"g": str(gop), "threads": "1"}
    if codec == "libx264":
        options.update({"crf": "18", "preset": "superfast"})
    with av.open(path, mode="w", format="mp4") as container:
        stream = container.add_stream(codec, rate=fps, options=options)
        assert isinstance(stream, VideoStream)  # codec is a video codec
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        if codec != "libx264":
            stream.bit_rate = 2_000_000
        for index in range(num):
            frame = av.VideoFrame.from_ndarray(frames[index], format="rgb24")
            frame.pts = index
            frame.time_base = Fraction(1, fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def write_jpeg_frames(
    root: str,
    folder: str,
    pattern: str,
    frames: np.ndarray,
    quality: int = 90,
    scales: Sequence[float] = (),
) -> List[str]:
    """Writes one JPEG per frame (and per rendition).

    Args:
        root: dataset folder the returned paths are relative to.
        folder: sub-folder of ``root`` for this video.
        pattern: file name with one ``{}`` for the 1-based frame number.
        frames: (T, H, W, 3) uint8.
        quality: JPEG quality.
        scales: also write the frames resized by these factors (antialiased
            bilinear) into the sibling folders ``folder + suffix(scale)``
            (``slowfast/datasets/renditions/files.py``).

    Returns:
        list: frame paths relative to ``root``, in order (of ``folder``).
    """
    from slowfast.datasets.renditions.files import rendition_path

    os.makedirs(os.path.join(root, folder), exist_ok=True)
    paths = []
    for index, frame in enumerate(frames):
        image = Image.fromarray(frame)
        relative = f"{folder}/{pattern.format(index + 1)}"
        image.save(os.path.join(root, relative), quality=quality)
        for scale in scales:
            path = rendition_path(os.path.join(root, relative), scale)
            save_jpeg_rendition(image, path, scale, quality)
        paths.append(relative)
    return paths


def save_jpeg_rendition(image: Image.Image, path: str, scale: float, quality: int):
    """Saves ``image`` scaled by ``scale`` (antialiased bilinear, the size of
    ``renditions.scaled_size``) as a JPEG, atomically; creates its folder."""
    from slowfast.datasets.renditions.files import scaled_size

    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.part"
    size = scaled_size(image.width, image.height, scale)
    image.resize(size, Image.Resampling.BILINEAR).save(
        tmp, format="JPEG", quality=quality
    )
    os.replace(tmp, path)


def write_kinetics_list(path: str, rows: Iterable[Tuple[str, int]]) -> None:
    """Writes a Kinetics list file: one ``relative/path.mp4 label`` per line.

    Args:
        path: the csv file.
        rows: (relative path, label) pairs.
    """
    with open(path, "w") as handle:
        for video, label in rows:
            handle.write(f"{video} {label}\n")


def frame_list_rows(
    video_name: str, video_index: int, paths: Sequence[str], labels: Sequence[list]
) -> List[str]:
    """Formats the frame-list lines of one video.

    Args:
        video_name: original video id (first column).
        video_index: running integer index of the video in the file.
        paths: frame paths relative to the dataset folder.
        labels: per frame, the class ids (empty lists allowed).

    Returns:
        list: one line (without newline) per frame.
    """
    lines = []
    for frame_id, (path, frame_labels) in enumerate(zip(paths, labels)):
        joined = ",".join(str(int(label)) for label in frame_labels)
        lines.append(f'{video_name} {video_index} {frame_id} {path} "{joined}"')
    return lines


def write_frame_list(path: str, lines: Iterable[str]) -> None:
    """Writes a frame-list csv (space separated, with the reference header).

    Args:
        path: the csv file.
        lines: rows from ``frame_list_rows``.
    """
    with open(path, "w") as handle:
        handle.write(FRAME_LIST_HEADER + "\n")
        for line in lines:
            handle.write(line + "\n")


def write_json(path: str, payload: object) -> None:
    """Writes JSON with indentation, keys in insertion order (stable bytes).

    Args:
        path: the json file.
        payload: anything ``json`` serialises.
    """
    with open(path, "w") as handle:
        json.dump(payload, handle, indent=1)
        handle.write("\n")
