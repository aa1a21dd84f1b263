"""Tests of the PyAV and JPEG-frames decoding backends and the frame cache."""

import os

import av
import numpy as np
import pytest
import torch
from av.video.reformatter import VideoReformatter

from slowfast.datasets.decoding.decoder import DecodeError, decode_pyav, decode_video
from slowfast.datasets.decoding.frame_cache import FrameCache
from slowfast.datasets.decoding.frames import list_frame_dir, load_frames
from tests.helpers.video_utils import (
    frame_index,
    write_frames,
    write_truncated_video,
    write_video,
)


def _indices(frames: torch.Tensor):
    """Source frame index of each decoded (flat grey) frame."""
    return [frame_index(v) for v in frames.float().mean(dim=(1, 2, 3))]


def _fixed(positions):
    return lambda num_frames, fps: np.asarray(positions, dtype=np.float64)


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoder")
    return {
        "audio_odd": write_video(str(root / "a.mp4"), 40, 67, 45, audio=True),
        "plain": write_video(str(root / "p.mp4"), 50, 64, 48, gop=10),
        "one_key": write_video(str(root / "k.mp4"), 45, 64, 48, gop=1000),
        "vfr": write_video(
            str(root / "v.mp4"), 20, pts=[i * 33 + (i % 3) * 10 for i in range(20)]
        ),
        "root": str(root),
    }


def test_audio_stream_and_odd_size(videos):
    frames = decode_pyav(videos["audio_odd"], _fixed([3, 5, 7, 9, 20, 21]))
    assert frames.dtype == torch.uint8
    assert frames.shape == (6, 45, 67, 3)
    assert _indices(frames) == [3, 5, 7, 9, 20, 21]


def test_seek_into_middle_of_gop_and_single_keyframe(videos):
    for key in ("plain", "one_key"):
        frames = decode_pyav(videos[key], _fixed([23.4, 25.9, 31, 38]))
        assert _indices(frames) == [23, 25, 31, 38], key


def test_sampler_sees_frame_count_and_rate(videos):
    seen = {}

    def sample(num_frames, fps):
        seen.update(n=num_frames, fps=fps)
        return np.array([0.0])

    decode_pyav(videos["plain"], sample)
    assert seen == {"n": 50, "fps": 30.0}


def test_unsorted_positions_keep_their_order(videos):
    frames = decode_pyav(videos["plain"], _fixed([30, 2, 17]))
    assert _indices(frames) == [30, 2, 17]


def test_variable_frame_rate_selects_by_time(videos):
    # Frames at 0, 43, 86, 99, 142 ms ...; the average rate is 20 frames in
    # 0.67 s. Position p means time p / fps: the frame shown at that time.
    with av.open(videos["vfr"]) as container:
        container_fps = float(container.streams.video[0].average_rate)
    times = [i * 33 + (i % 3) * 10 for i in range(20)]
    wanted = [0.0, 3.5, 10.2]
    frames = decode_pyav(videos["vfr"], _fixed(wanted))
    expect = []
    for p in wanted:
        t_ms = p / container_fps * 1000
        expect.append(max(i for i, t in enumerate(times) if t <= t_ms + 0.5))
    assert _indices(frames) == expect


def test_short_video_repeats_last_frame(videos):
    frames = decode_pyav(videos["audio_odd"], _fixed([36, 38, 40, 45, 60]))
    assert _indices(frames) == [36, 38, 39, 39, 39]


def test_decoder_threads_give_same_frames(videos):
    a = decode_pyav(videos["plain"], _fixed([4, 12, 40]))
    b = decode_pyav(videos["plain"], _fixed([4, 12, 40]), threads=0)
    c = decode_pyav(videos["plain"], _fixed([4, 12, 40]), threads=2)
    assert torch.equal(a, b) and torch.equal(a, c)


def _native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="counts threads in /proc (Linux)"
)
def test_decoding_leaves_no_native_threads_behind(videos):
    """A thread pool owned by a decoding object is inherited, without its
    threads, by forked loader workers: freeing it there hung a worker."""
    decode_pyav(videos["plain"], _fixed([0]))  # first use: lazy library setup
    before = _native_threads()
    reformatter = VideoReformatter()
    frames = decode_pyav(videos["plain"], _fixed([4, 12, 40]), reformatter=reformatter)
    assert frames.shape[0] == 3 and _native_threads() == before
    with av.open(videos["plain"]) as container:
        frame = next(container.decode(video=0))
    pooled = VideoReformatter()
    pooled.reformat(frame, format="rgb24", threads=2)
    assert _native_threads() > before  # the count sees such a pool
    del pooled


def test_cache_gives_same_frames_and_hits(videos):
    cache = FrameCache(64 * 2**20)
    positions = _fixed([1.5, 10, 33, 49, 70])
    direct = decode_pyav(videos["plain"], positions)
    first = decode_pyav(videos["plain"], positions, cache=cache)
    second = decode_pyav(videos["plain"], positions, cache=cache)
    assert torch.equal(direct, first) and torch.equal(first, second)
    assert (cache.misses, cache.hits, len(cache)) == (1, 1, 1)


def test_decode_video_whole(videos):
    frames, times, info = decode_video(videos["audio_odd"])
    assert frames.shape == (40, 45, 67, 3)
    assert info.num_frames == 40 and info.fps == 30.0
    assert np.allclose(times, np.arange(40) / 30.0)


def test_missing_empty_and_garbage_files(tmp_path):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    garbage = tmp_path / "garbage.mp4"
    # Fixed bytes: random ones opened as a video-less file 1% of the time.
    garbage.write_bytes(b"not a video file\n" * 180)
    cases = {
        str(tmp_path / "missing.mp4"): "file not found",
        str(empty): "empty file",
        str(garbage): "cannot open",
    }
    for path, reason in cases.items():
        with pytest.raises(DecodeError) as info:
            decode_pyav(path, _fixed([0]))
        assert info.value.path == path
        assert reason in str(info.value) and path in str(info.value)


def test_truncated_files(tmp_path):
    # Index at the end, data cut: the container cannot be opened.
    plain = write_video(str(tmp_path / "p.mp4"), 30)
    cut = tmp_path / "cut.mp4"
    data = open(plain, "rb").read()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DecodeError, match="cannot open"):
        decode_pyav(str(cut), _fixed([0]))
    # Index first, data cut after 40 of 60 frames: decodable up to there.
    path = write_truncated_video(str(tmp_path / "t.mp4"), 60, keep=40)
    assert _indices(decode_pyav(path, _fixed([5, 20]))) == [5, 20]
    for positions in ([30, 45], [44, 50]):
        with pytest.raises(DecodeError, match="truncated"):
            decode_pyav(path, _fixed(positions))
    with pytest.raises(DecodeError, match="truncated"):
        decode_pyav(path, _fixed([5]), cache=FrameCache(2**30))


def test_frames_backend(tmp_path):
    paths = write_frames(str(tmp_path / "vid"), 6, 31, 17)
    assert list_frame_dir(str(tmp_path / "vid")) == paths
    frames = load_frames([paths[i] for i in (0, 2, 2, 5)])
    assert frames.shape == (4, 17, 31, 3) and frames.dtype == torch.uint8
    assert _indices(frames) == [0, 2, 2, 5]
    cache = FrameCache(2**20)
    assert torch.equal(load_frames(paths[:3], cache), load_frames(paths[:3], cache))
    assert cache.hits == 3
    os.remove(paths[3])
    with pytest.raises(DecodeError, match="frame file not found") as info:
        load_frames(paths)
    assert info.value.path == paths[3]
    open(paths[4], "wb").close()
    with pytest.raises(DecodeError, match="cannot decode image"):
        load_frames([paths[4]])
    with pytest.raises(DecodeError, match="frame folder not found"):
        list_frame_dir(str(tmp_path / "nope"))


def test_frame_cache_lru_bound():
    cache = FrameCache(100)
    cache.put("a", 1, 40)
    cache.put("b", 2, 40)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3, 40)  # evicts b
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    assert cache.num_bytes == 80
    cache.put("huge", 4, 101)  # larger than the bound: not kept
    assert cache.get("huge") is None and len(cache) == 2


def test_span_decoder_runs_index_and_seek_fallback(tmp_path, monkeypatch):
    from slowfast.datasets.decoding import span_decoder
    from slowfast.datasets.decoding.av_utils import open_video, stream_info

    path = write_video(str(tmp_path / "g5.mp4"), 60, gop=5)
    with open_video(path) as container:
        stream = container.streams.video[0]
        info = stream_info(stream, container)
        keyframes, duration = span_decoder.read_index(stream, info)
    assert duration == pytest.approx(1 / 30) and len(keyframes) >= 10
    wanted = np.array([2, 30, 31, 57]) / 30
    assert span_decoder.runs_after_seeks(wanted, keyframes, 30.0) == [
        (0, 1),
        (1, 3),
        (3, 4),
    ]
    positions = [57, 2, 31, 30]
    expect = [57, 2, 31, 30]
    assert _indices(decode_pyav(path, _fixed(positions))) == expect
    assert _indices(decode_pyav(path, _fixed(positions), threads=0)) == expect
    # A seek that lands after the wanted frame restarts from the beginning.
    monkeypatch.setattr(span_decoder, "seek_margin", lambda keyframes, fps: -0.2)
    assert _indices(decode_pyav(path, _fixed(positions))) == expect


def test_variable_frame_rate_index_has_no_constant_duration(videos):
    from slowfast.datasets.decoding import span_decoder
    from slowfast.datasets.decoding.av_utils import open_video, stream_info

    with open_video(videos["vfr"]) as container:
        stream = container.streams.video[0]
        _, duration = span_decoder.read_index(stream, stream_info(stream, container))
    assert duration is None
