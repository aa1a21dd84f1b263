"""Video decoding with PyAV (the JPEG-frames backend is in ``frames.py``).

Decoded clips are uint8 tensors ``[T, H, W, C]`` (RGB). ``decode_pyav`` reads
the stream's frame rate and length from the container, asks the caller's
sampler for the frame positions it wants and decodes only those (see
``span_decoder``: one seek per run of frames, unwanted non-reference frames
skipped, only picked frames converted). With a ``FrameCache`` it decodes each
video once, whole, and samples later clips from memory.

Every failure (missing, empty, truncated or undecodable input) raises
``DecodeError`` with the path and the reason, which the datasets' bad-data
logic catches.
"""

from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from slowfast.datasets.decoding.av_utils import (
    DecodeError,
    StreamInfo,
    configure_threads,
    frame_time,
    open_video,
    stream_info,
    to_array,
)
from slowfast.datasets.decoding.frame_cache import FrameCache
from slowfast.datasets.decoding.span_decoder import decode_span

if TYPE_CHECKING:  # PyAV is imported where a video is decoded (av_utils.py)
    from av.video.reformatter import VideoReformatter

# Frame positions (float, in source frames) wanted from a video of
# ``num_frames`` frames at ``fps``: ``sample_fn(num_frames, fps)``.
SampleFn = Callable[[int, float], np.ndarray]


def select_by_time(
    times: Sequence[float], targets: np.ndarray, fps: float
) -> np.ndarray:
    """For each target time, the index of the last frame shown at that time.

    Args:
        times: sorted presentation times of the available frames (seconds).
        targets: wanted times (seconds).
        fps: frame rate (a 1% frame tolerance absorbs rounding).

    Returns:
        np.ndarray: int indices into ``times`` (clamped to the valid range).
    """
    eps = 0.01 / fps
    idx = np.searchsorted(np.asarray(times), targets + eps, side="right") - 1
    return np.clip(idx, 0, len(times) - 1)


def decode_pyav(
    path: str,
    sample_fn: SampleFn,
    threads: Optional[int] = None,
    cache: Optional[FrameCache] = None,
    reformatter: Optional["VideoReformatter"] = None,
) -> torch.Tensor:
    """Decodes the frames of one clip from a video file (``decode_clip``
    without the stream information)."""
    return decode_clip(path, sample_fn, threads, cache, reformatter)[0]


def decode_clip(
    path: str,
    sample_fn: SampleFn,
    threads: Optional[int] = None,
    cache: Optional[FrameCache] = None,
    reformatter: Optional["VideoReformatter"] = None,
) -> Tuple[torch.Tensor, StreamInfo]:
    """Decodes the frames of one clip from a video file.

    Args:
        path: video file.
        sample_fn: ``(num_frames, fps) -> float frame positions`` of the clip,
            in source frames; positions past the end repeat the last frame.
        threads: decoder threads (None: one; 0: FFmpeg's choice).
        cache: when given, the whole video is decoded once and kept there.
        reformatter: RGB converter reused across calls (creating one per
            clip is costly); a fresh one when None.

    Returns:
        tuple: uint8 ``[T, H, W, C]`` frames, and the stream's ``StreamInfo``.

    Raises:
        DecodeError: the file is missing, empty, truncated or undecodable.
    """
    if cache is not None:
        frames, times, info = _cached_video(path, threads, cache, reformatter)
        fps = info.fps
        positions = np.asarray(sample_fn(frames.shape[0], fps), dtype=np.float64)
        idx = select_by_time(times, positions / fps, fps)
        return frames[torch.from_numpy(idx)], info
    import av

    container = open_video(path)
    try:
        stream = container.streams.video[0]
        configure_threads(stream, threads)
        info = stream_info(stream, container)
        if info.num_frames <= 0:
            # Length unknown: decode everything, then sample over what came out.
            frames, times = _decode_all(path, container, stream, info, reformatter)
            positions = np.asarray(sample_fn(len(frames), info.fps), dtype=np.float64)
            idx = select_by_time(times, positions / info.fps, info.fps)
            return torch.from_numpy(np.stack([frames[i] for i in idx])), info
        positions = np.asarray(sample_fn(info.num_frames, info.fps), dtype=np.float64)
        # Skipping frames needs a single-threaded decoder.
        selective = threads is None
        targets = positions / info.fps
        clip = decode_span(
            path, container, stream, info, targets, selective, reformatter
        )
        return clip, info
    except av.error.FFmpegError as err:
        raise DecodeError(path, f"decoding failed ({err})") from err
    finally:
        container.close()


def _decode_all(
    path, container, stream, info: StreamInfo, reformatter=None
) -> Tuple[list, list]:
    from av.video.reformatter import VideoReformatter

    frames, times = [], []
    reformatter = reformatter or VideoReformatter()
    prev_time = -1.0 / info.fps
    for frame in container.decode(stream):
        prev_time = frame_time(frame, info, prev_time + 1.0 / info.fps)
        frames.append(to_array(frame, reformatter))
        times.append(prev_time)
    if not frames:
        raise DecodeError(path, "no video frames could be decoded")
    # Some streams have out-of-order or missing timestamps; keep them sorted.
    if any(b < a for a, b in zip(times, times[1:])):
        times = [i / info.fps for i in range(len(frames))]
    return frames, times


def decode_video(
    path: str,
    threads: Optional[int] = None,
    reformatter: Optional["VideoReformatter"] = None,
):
    """Decodes a whole video.

    Args:
        path: video file.
        threads: decoder threads (None: one; 0: FFmpeg's choice).
        reformatter: RGB converter to reuse (a fresh one when None).

    Returns:
        (frames uint8 [N, H, W, C], times in seconds (np.ndarray), StreamInfo).

    Raises:
        DecodeError: the file is missing, empty or undecodable.
    """
    import av

    container = open_video(path)
    try:
        stream = container.streams.video[0]
        configure_threads(stream, threads)
        info = stream_info(stream, container)
        frames, times = _decode_all(path, container, stream, info, reformatter)
    except av.error.FFmpegError as err:
        raise DecodeError(path, f"decoding failed ({err})") from err
    finally:
        container.close()
    return torch.from_numpy(np.stack(frames)), np.asarray(times), info


def scan_video(path: str) -> Tuple[np.ndarray, StreamInfo]:
    """Decodes every frame of a video without converting it (for checks).

    Args:
        path: video file.

    Returns:
        (presentation times in seconds of the decoded frames, StreamInfo).

    Raises:
        DecodeError: the file is missing, empty or undecodable.
    """
    import av

    container = open_video(path)
    times: List[float] = []
    try:
        stream = container.streams.video[0]
        configure_threads(stream, None)
        info = stream_info(stream, container)
        for frame in container.decode(stream):
            fallback = times[-1] + 1.0 / info.fps if times else 0.0
            times.append(frame_time(frame, info, fallback))
    except av.error.FFmpegError as err:
        raise DecodeError(path, f"decoding failed ({err})") from err
    finally:
        container.close()
    if not times:
        raise DecodeError(path, "no video frames could be decoded")
    return np.asarray(times), info


def check_complete(
    path: str, times: Union[Sequence[float], np.ndarray], info: StreamInfo
) -> None:
    """Raises when fewer frames were decoded than the container announces.

    Args:
        path: the video (for the message).
        times: presentation times of all decoded frames (seconds).
        info: the stream's header information.

    Raises:
        DecodeError: the decoded frames stop more than 1.5 frames early.
    """
    if info.num_frames <= 0 or len(times) == 0:
        return
    expected_last = (info.num_frames - 1) / info.fps
    if times[-1] < expected_last - 1.5 / info.fps:
        raise DecodeError(
            path,
            f"truncated: {len(times)} frames decoded (up to {times[-1]:.2f}s) but "
            f"the container announces {info.num_frames} ({expected_last:.2f}s)",
        )


def _cached_video(path: str, threads, cache: FrameCache, reformatter):
    entry = cache.get(path)
    if entry is None:
        frames, times, info = decode_video(path, threads, reformatter)
        check_complete(path, times, info)
        entry = (frames, times, info)
        cache.put(path, entry, frames.numel())
    return entry


__all__ = [
    "DecodeError",
    "SampleFn",
    "check_complete",
    "StreamInfo",
    "decode_clip",
    "decode_pyav",
    "decode_video",
    "scan_video",
    "select_by_time",
    "stream_info",
]
