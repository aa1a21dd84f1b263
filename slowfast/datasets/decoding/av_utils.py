"""Low-level PyAV helpers shared by the decoders: errors, opening, timing.

PyAV is imported where a video is opened, so that runs reading JPEG frame
folders (``frames.py``) need no PyAV.
"""

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np

if TYPE_CHECKING:
    from av.video.reformatter import VideoReformatter


class DecodeError(RuntimeError):
    """A video or frame could not be read; the message names path and reason."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class StreamInfo:
    """What the container says about its first video stream.

    Attributes:
        fps: average frame rate (frames per second).
        num_frames: number of frames (from the header, else duration * fps);
            0 when the container does not say.
        start: presentation time of the stream's start, in seconds.
        time_base: the stream's time base, in seconds per tick.
        original_size: for a rendition (``renditions.py``), the (height,
            width) of the video it was scaled from (container tag
            ``ORIGINAL_SIZE_TAG``); None otherwise.
    """

    fps: float
    num_frames: int
    start: float
    time_base: float
    original_size: Optional[Tuple[int, int]] = None


# The container comment a rendition carries: the size of its original, so
# that a clip read from it is cropped with the original's geometry.
ORIGINAL_SIZE_TAG = "slowfast original_size={height}x{width}"
_ORIGINAL_SIZE = re.compile(r"slowfast original_size=(\d+)x(\d+)")


# MP4/MOV headers (the "moov" box) hold the codec parameters, frame count and
# rate, so opening one need not probe the stream by decoding its first
# frames, which FFmpeg does by default (a large part of the cost of a clip of
# few frames at a coarse resolution).
_HEADER_FORMATS = (".mp4", ".m4v", ".mov")
_NO_PROBE = {
    "container_options": {
        "analyzeduration": "1",
        "probesize": "32",
        "fpsprobesize": "0",
    },
    "stream_options": [{"skip_frame": "all"}],
}


def open_video(path: str):
    """Opens a container, turning every way it can fail into ``DecodeError``.

    MP4/MOV files are opened from their header alone (no probing decode);
    when that leaves the video stream's size or rate unknown, the file is
    opened again with FFmpeg's probing.
    """
    if not os.path.exists(path):
        raise DecodeError(path, "file not found")
    if os.path.isdir(path):
        raise DecodeError(path, "is a directory, expected a video file")
    if os.path.getsize(path) == 0:
        raise DecodeError(path, "empty file (0 bytes)")
    container = None
    if path.lower().endswith(_HEADER_FORMATS):
        container = _open_from_header(path)
    if container is None:
        container = _open(path)
    if not container.streams.video:
        container.close()
        raise DecodeError(path, "no video stream")
    return container


def _open_from_header(path: str):
    """The container opened without probing, or None when that fails or
    leaves the video's size or rate unknown (e.g. MPEG-TS data named .mp4)."""
    try:
        container = _open(path, **_NO_PROBE)
    except DecodeError:
        return None
    video = container.streams.video
    if video and video[0].width and video[0].average_rate:
        return container
    container.close()
    return None


def _open(path: str, **options):
    import av

    try:
        return av.open(path, metadata_errors="ignore", **options)
    except (av.error.FFmpegError, OSError, ValueError) as err:
        raise DecodeError(path, f"cannot open ({err})") from err


def stream_info(stream, container) -> StreamInfo:
    """Reads frame rate, frame count and timing of a video stream.

    Args:
        stream: a PyAV video stream.
        container: its container (for the container-level duration).

    Returns:
        StreamInfo: the stream's timing (num_frames 0 when unknown).
    """
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    fps = float(rate) if rate else 0.0
    time_base = float(stream.time_base) if stream.time_base else 0.0
    duration = 0.0
    if stream.duration and time_base:
        duration = stream.duration * time_base
    elif container.duration:
        import av

        duration = container.duration / av.time_base
    num_frames = int(stream.frames or 0)
    if fps <= 0 and num_frames and duration:
        fps = num_frames / duration
    if not num_frames and duration and fps > 0:
        num_frames = int(round(duration * fps))
    start = stream.start_time * time_base if stream.start_time and time_base else 0.0
    match = _ORIGINAL_SIZE.search(container.metadata.get("comment", ""))
    return StreamInfo(
        fps=fps or 30.0,
        num_frames=num_frames,
        start=start,
        time_base=time_base,
        original_size=(int(match[1]), int(match[2])) if match else None,
    )


def configure_threads(stream, threads: Optional[int]) -> None:
    """``threads`` None: single-threaded; 0: FFmpeg's choice; n: n threads."""
    ctx = stream.codec_context
    if threads is None:
        ctx.thread_count = 1
    else:
        ctx.thread_type = "AUTO"
        ctx.thread_count = int(threads)


def frame_time(frame, info: StreamInfo, fallback: float) -> float:
    """Presentation time of a frame in seconds from the stream start."""
    if frame.pts is None or not info.time_base:
        return fallback
    return frame.pts * info.time_base - info.start


def to_array(frame, reformatter: "VideoReformatter") -> np.ndarray:
    """RGB uint8 ``[H, W, 3]`` of a frame (one reformatter reused per clip).

    The conversion runs on one thread: loader workers are the parallelism.
    PyAV's default (``threads=0``) gives every reformatter a pool of FFmpeg
    slice threads, one per core; a loader worker forked from a process that
    had such a reformatter hung when its garbage collector freed the inherited
    object (freeing the pool waits on threads that do not exist in the fork).
    Same pixels either way.
    """
    return reformatter.reformat(frame, format="rgb24", threads=1).to_ndarray()
