"""Temporal sampling: which source frames make up a clip, for each dataset.

The rules follow PySlowFast's datasets:

* Kinetics: a clip of ``num_frames`` frames spanning
  ``num_frames * rate * fps / target_fps`` source frames, at a random position
  (training) or at clip ``i`` of ``n`` evenly spread over the video (test:
  start = (length - span) * i / n). Positions past the end of a short video
  repeat its last frame.
* SSv2: the video is cut into ``num_frames`` equal segments; one frame per
  segment, random in training, the middle one otherwise.
* Charades: ``num_frames`` frames ``rate`` apart from a random start
  (training) or from start ``round(i * (length - clip) / (n - 1))`` (test).

A ``fraction`` of None means "random"; otherwise it places the clip at that
fraction of the free room (0: start of the video, 0.5: centre, 1: end).
"""

import random
from typing import List, Optional

import numpy as np


def kinetics_positions(
    video_frames: int,
    fps: float,
    num_frames: int,
    rate: int,
    target_fps: float,
    fraction: Optional[float],
    rng: Optional[random.Random],
) -> np.ndarray:
    """Source-frame positions of a Kinetics clip.

    Args:
        video_frames: number of frames of the video.
        fps: the video's frame rate.
        num_frames: frames in the clip.
        rate: sampling stride, in frames at ``target_fps``.
        target_fps: frame rate the stride refers to (DATA.TARGET_FPS).
        fraction: clip position within the free room (None: random).
        rng: random source when ``fraction`` is None.

    Returns:
        np.ndarray: ``num_frames`` float positions (may exceed the video end).
    """
    span = num_frames * rate * fps / target_fps
    delta = max(video_frames - span, 0.0)
    if fraction is None:
        assert rng is not None, "a random clip position needs rng"
        start = rng.uniform(0.0, delta)
    else:
        start = delta * fraction
    return np.linspace(start, start + span - 1.0, num_frames)


def kinetics_fraction(clip_idx: int, num_clips: int) -> float:
    """Position of Kinetics test clip ``clip_idx`` of ``num_clips`` (reference rule)."""
    return clip_idx / num_clips


def positions_to_indices(positions: np.ndarray, video_frames: int) -> List[int]:
    """Rounds positions down to frame indices clamped to the video.

    Args:
        positions: float source-frame positions.
        video_frames: number of frames available.

    Returns:
        list[int]: indices in ``[0, video_frames - 1]``.
    """
    idx = np.clip(np.floor(positions), 0, video_frames - 1).astype(np.int64)
    return idx.tolist()


def ssv2_indices(
    video_frames: int, num_frames: int, rng: Optional[random.Random]
) -> List[int]:
    """Segment-based SSv2 frame indices.

    Args:
        video_frames: number of frames of the video.
        num_frames: frames (= segments) in the clip.
        rng: random source (training); None takes each segment's middle.

    Returns:
        list[int]: ``num_frames`` indices.
    """
    seg_size = float(video_frames - 1) / num_frames
    seq = []
    for i in range(num_frames):
        start = int(np.round(seg_size * i))
        end = int(np.round(seg_size * (i + 1)))
        seq.append(rng.randint(start, end) if rng is not None else (start + end) // 2)
    return seq


def charades_fraction(clip_idx: int, num_clips: int) -> float:
    """Position of Charades test clip ``clip_idx`` of ``num_clips`` (both ends used)."""
    return clip_idx / (num_clips - 1) if num_clips > 1 else 0.5


def charades_indices(
    video_frames: int,
    num_frames: int,
    rate: int,
    fraction: Optional[float],
    rng: Optional[random.Random],
) -> List[int]:
    """Charades frame indices: ``num_frames`` frames ``rate`` apart.

    Args:
        video_frames: number of frames of the video.
        num_frames: frames in the clip.
        rate: stride between frames.
        fraction: clip position within the free room (None: random).
        rng: random source when ``fraction`` is None.

    Returns:
        list[int]: indices clamped to the video (a short video repeats its
        first/last frames).
    """
    clip_length = (num_frames - 1) * rate + 1
    if fraction is None:
        assert rng is not None, "a random clip position needs rng"
        if clip_length > video_frames:
            start = rng.randint(video_frames - clip_length, 0)
        else:
            start = rng.randint(0, video_frames - clip_length)
    else:
        start = int(round(max(video_frames - clip_length, 0) * fraction))
    return [max(min(start + i * rate, video_frames - 1), 0) for i in range(num_frames)]
