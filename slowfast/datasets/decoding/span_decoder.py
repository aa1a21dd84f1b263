"""Decoding the few frames of one clip from an open PyAV container.

Three savings over "decode everything from the start":

* Seek: decoding starts at the keyframe before the first wanted frame (the
  seek aims a few frames early, as B-frame reordering can put a keyframe's
  presentation time after its index time; when the decoder still starts late
  it re-seeks to the start of the file).
* Clusters: when the container's index shows a keyframe between two wanted
  frames, decoding jumps there with another seek instead of decoding through.
* Selective decoding, for constant-frame-rate streams whose index lists every
  frame (single-threaded decoder only): packets whose frame is not wanted are
  sent with ``skip_frame = NONREF``, so the decoder skips them unless other
  frames reference them, and a wanted frame is taken as soon as it is
  decoded. Only wanted frames are converted to RGB.

A wanted time ``t`` gets the frame shown at ``t`` (the last one with
presentation time <= t); times past the last frame repeat it.
"""

import bisect
import math
from typing import TYPE_CHECKING, List, Optional, Tuple

import numpy as np
import torch

from slowfast.datasets.decoding.av_utils import (
    DecodeError,
    StreamInfo,
    frame_time,
    to_array,
)

if TYPE_CHECKING:  # PyAV is imported where a video is decoded
    from av.video.reformatter import VideoReformatter

# The seek aims this much (in frames) before a wanted frame, on top of the
# stream's reordering delay.
SEEK_MARGIN_FRAMES = 0.5


def read_index(stream, info: StreamInfo) -> Tuple[List[float], Optional[float]]:
    """Keyframe times and the constant frame duration, from the container index.

    Args:
        stream: the video stream.
        info: its timing.

    Returns:
        (keyframes, frame_duration): sorted index (decode) times in seconds of
        the keyframes; the frame duration in seconds when the index lists
        every frame at one constant spacing (constant frame rate), else None.
    """
    if not info.time_base:
        return [], None
    try:
        entries = list(stream.index_entries)
    except (AttributeError, TypeError):
        return [], None
    stamps = np.array([e.timestamp for e in entries], dtype=np.float64)
    keyframes = sorted(
        float(ts) * info.time_base - info.start
        for ts, e in zip(stamps, entries)
        if e.is_keyframe
    )
    duration = None
    if len(stamps) >= 2 and len(stamps) == info.num_frames:
        steps = np.diff(np.sort(stamps))
        if steps.min() > 0 and steps.max() - steps.min() <= 1:
            step = float(steps.mean()) * info.time_base
            if abs(step * info.fps - 1.0) < 0.01:
                duration = step
    return keyframes, duration


def seek_margin(keyframes: List[float], fps: float) -> float:
    """How far (seconds) before a wanted time to seek.

    Index times are decode times; with B-frames a keyframe is shown later
    than it is decoded, by the delay the first keyframe shows (its index time
    is negative). Seeking that much earlier finds the keyframe shown before
    the wanted time.
    """
    delay = -keyframes[0] if keyframes and keyframes[0] < 0 else 0.0
    return delay + SEEK_MARGIN_FRAMES / fps


def runs_after_seeks(
    wanted: np.ndarray, keyframes: List[float], fps: float
) -> List[Tuple[int, int]]:
    """Splits sorted wanted times into runs decoded after their own seek.

    A new run starts at a wanted time when a seek there would land on a
    keyframe more than two frames past the previous wanted time.

    Returns:
        list: ``(lo, hi)`` index ranges into ``wanted``.
    """
    bounds = [0]
    margin = seek_margin(keyframes, fps)
    for j in range(1, len(wanted)):
        i = bisect.bisect_right(keyframes, wanted[j] - margin) - 1
        if i >= 0 and keyframes[i] > wanted[j - 1] + 2.0 / fps:
            bounds.append(j)
    bounds.append(len(wanted))
    return list(zip(bounds[:-1], bounds[1:]))


class _Run:
    """State of decoding one run of wanted frames."""

    def __init__(self):
        self.prev = None
        self.prev_array: Optional[np.ndarray] = None
        self.prev_time = -math.inf
        self.first_time: Optional[float] = None

    def array(self, reformatter) -> np.ndarray:
        if self.prev_array is None:
            self.prev_array = to_array(self.prev, reformatter)
        return self.prev_array


def _seek(container, stream, info: StreamInfo, seconds: float) -> None:
    offset = int(math.floor((max(seconds, 0.0) + info.start) / info.time_base))
    container.seek(offset, stream=stream, backward=True, any_frame=False)


def _needed(packet, info: StreamInfo, wanted: np.ndarray, duration: float) -> bool:
    """Whether a packet's frame is shown at one of the wanted times."""
    if packet.pts is None:
        return True
    eps = 0.01 * duration
    start = packet.pts * info.time_base - info.start
    j = bisect.bisect_left(wanted, start - eps)
    return j < len(wanted) and wanted[j] + eps < start + duration


def _decode_run(
    container, stream, info, wanted, span, out, reformatter, duration, skip
):
    """Decodes from the current position until ``wanted[lo:hi]`` are filled.

    With a known constant frame ``duration`` a frame fills the wanted times
    it covers at once, and with ``skip`` unwanted non-reference frames are
    not decoded.

    Returns:
        (next unfilled index, run state); the index is < hi only at the end
        of the stream.
    """
    lo, hi = span
    eps = 0.01 / info.fps
    ctx = stream.codec_context
    run = _Run()
    k = lo
    for packet in container.demux(stream):
        if skip and duration:
            needed = _needed(packet, info, wanted, duration)
            ctx.skip_frame = "DEFAULT" if needed else "NONREF"
        for frame in packet.decode():
            time = frame_time(frame, info, run.prev_time + 1.0 / info.fps)
            if run.first_time is None:
                run.first_time = time
            while k < hi and wanted[k] + eps < time:
                # Wanted time before this frame: the previous frame shows then
                # (this one when decoding started after that time).
                if run.prev is None:
                    run.prev = frame
                out[k] = run.array(reformatter)
                k += 1
            if run.prev is not frame:
                run.prev, run.prev_array = frame, None
            run.prev_time = time
            if duration:
                # Constant frame rate: the wanted times this frame covers are
                # filled now, without waiting for (and decoding) the next one.
                while k < hi and wanted[k] + eps < time + duration:
                    out[k] = run.array(reformatter)
                    k += 1
            if k == hi:
                return k, run
    return k, run


def decode_span(
    path: str,
    container,
    stream,
    info: StreamInfo,
    targets: np.ndarray,
    selective: bool = True,
    reformatter: Optional["VideoReformatter"] = None,
) -> torch.Tensor:
    """Decodes the frames shown at ``targets`` (seconds from the stream start).

    Args:
        path: the video (for error messages).
        container: the open PyAV container.
        stream: its video stream.
        info: the stream's timing.
        targets: wanted times in seconds (any order).
        selective: skip unwanted non-reference frames (needs a
            single-threaded decoder).
        reformatter: RGB converter to reuse (creating one per clip is costly).

    Returns:
        torch.Tensor: uint8 ``[len(targets), H, W, 3]`` in the targets' order.

    Raises:
        DecodeError: nothing could be decoded, or the stream ends before
            frames the container announces (truncated file).
    """
    order = np.argsort(targets, kind="stable")
    wanted = np.asarray(targets, dtype=np.float64)[order]
    fps, eps = info.fps, 0.01 / info.fps
    keyframes, duration = read_index(stream, info)
    margin = seek_margin(keyframes, fps)
    if reformatter is None:
        from av.video.reformatter import VideoReformatter

        reformatter = VideoReformatter()
    out: List[Optional[np.ndarray]] = [None] * len(wanted)

    def decode(span):  # fills out[lo:hi] from the current position
        return _decode_run(
            container, stream, info, wanted, span, out, reformatter, duration, selective
        )

    k, run, at_start = 0, None, True
    for lo, hi in runs_after_seeks(wanted, keyframes, fps):
        seek_to = wanted[lo] - margin
        if seek_to > 0 and info.time_base:
            _seek(container, stream, info, seek_to)
            at_start = False
        elif not at_start:
            _seek(container, stream, info, 0.0)
        k, run = decode((lo, hi))
        late = run.first_time is not None and run.first_time > wanted[lo] + eps
        if late and seek_to > 0 and info.time_base:
            # The keyframe found starts after the wanted time: start over.
            _seek(container, stream, info, 0.0)
            k, run = decode((lo, hi))
        if k < hi:
            break  # end of stream: the rest repeats the last frame
    if run is None or run.prev is None:
        raise DecodeError(
            path,
            f"truncated or corrupt: no frame decoded from {wanted[0]:.2f}s on, "
            f"though the container announces {info.num_frames} frames at {fps:g} fps",
        )
    if k < len(wanted):
        expected_last = (info.num_frames - 1) / fps
        missing = float(wanted[k])
        if missing > run.prev_time + 1.5 / fps and missing <= expected_last + eps:
            raise DecodeError(
                path,
                f"truncated: frames end at {run.prev_time:.2f}s but the container "
                f"announces {info.num_frames} frames ({expected_last:.2f}s)",
            )
        last = run.array(reformatter)
        for j in range(k, len(wanted)):
            out[j] = last
    frames = [frame for frame in out if frame is not None]
    assert len(frames) == len(out)  # every wanted time got a frame
    result = np.empty((len(wanted),) + frames[0].shape, dtype=np.uint8)
    result[order] = np.stack(frames)
    return torch.from_numpy(result)
