"""Running preparation items: worker processes, progress, resuming, failures."""

import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

import av
import numpy as np
from av.video.stream import VideoStream

# An item's work returns ("done" | "skipped", result) or raises; failures are
# (item id, reason) pairs.
Failure = Tuple[str, str]


@dataclass(frozen=True)
class Prepared:
    """What preparing a dataset wrote and what failed.

    Attributes:
        splits: the list files written.
        failures: (item id, reason) of every video left out: missing from the
            downloads, or failed to convert or decode.
        notes: lines for the user.
        attempted: videos found and converted or decoded.
        broken: of those, how many failed (bad data, as against missing).
    """

    splits: List[str]
    failures: List[Failure]
    notes: List[str]
    attempted: int
    broken: int


def _call(job):
    fn, item = job
    try:
        return item[0], fn(item), None
    except Exception as err:  # reported per item, the run goes on
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return item[0], None, f"{type(err).__name__}: {reason}"


class ProgressLine:
    """The progress of ``total`` items on a stream.

    On a terminal the line is rewritten after every item. Elsewhere (a log
    file, a SLURM job's output) a full line is written after about every tenth
    of the work, after the first item to finish once ``interval_s`` have passed
    since the last line, and at the end, so that the log stays readable.
    """

    def __init__(self, stream, label: str, total: int, interval_s: float = 60.0):
        self.stream, self.label, self.total = stream, label, total
        self.live = _is_terminal(stream)
        self.step = max(1, -(-total // 10))
        self.interval_s = interval_s
        self.start = self.last = time.monotonic()

    def update(self, count: int, failed: int) -> None:
        """Reports ``count`` (at least 1) items done, ``failed`` of them failed."""
        now = time.monotonic()
        due = count == self.total or count % self.step == 0
        if not self.live and not due and now - self.last < self.interval_s:
            return
        self.last = now
        elapsed = now - self.start
        eta = elapsed / count * (self.total - count)
        text = (
            f"{self.label}: {count}/{self.total} ({failed} failed), "
            f"{elapsed:.0f} s, about {eta:.0f} s left"
        )
        self.stream.write(f"\r{text}   " if self.live else text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Ends a live line."""
        if self.live:
            self.stream.write("\n")
            self.stream.flush()


_Result = TypeVar("_Result")


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    if isatty is None:
        return False
    try:
        return bool(isatty())
    except ValueError:  # a closed file: no terminal to rewrite
        return False


def run_items(
    items: Sequence[tuple],
    fn: Callable[[tuple], _Result],
    workers: int,
    label: str,
    stream=sys.stderr,
) -> Tuple[List[Optional[_Result]], List[Failure]]:
    """Runs ``fn(item)`` for every item (``item[0]`` is its id) with a progress line.

    Args:
        items: the work; picklable tuples whose first element names the item.
        fn: a module-level function; it skips an item whose output exists.
        workers: processes (0 or 1: in this process).
        label: what the progress line calls the work.
        stream: where the progress goes.

    Returns:
        tuple: the results in item order (None for failed items) and the
        failures as (item id, reason).
    """
    results, failures = {}, []
    progress = ProgressLine(stream, label, len(items))
    jobs = [(fn, item) for item in items]
    if workers > 1:
        pool = mp.get_context("spawn").Pool(workers)
        outputs: Iterable = pool.imap_unordered(_call, jobs, chunksize=4)
    else:
        pool, outputs = None, map(_call, jobs)
    try:
        for count, (item_id, result, error) in enumerate(outputs, start=1):
            results[item_id] = result
            if error:
                failures.append((item_id, error))
            progress.update(count, len(failures))
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    progress.close()
    return [results.get(item[0]) for item in items], failures


def write_failures(path: str, failures: Sequence[Failure]) -> None:
    """Writes the failed items, one ``id<TAB>reason`` line each (or removes the
    file when nothing failed)."""
    if not failures:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path, "w") as f:
        for item_id, reason in sorted(failures):
            f.write(f"{item_id}\t{reason}\n")


def even(value: float) -> int:
    """The nearest even integer >= 2 (yuv420p needs even sizes)."""
    return max(2, int(round(value / 2.0)) * 2)


def even_scaled_size(width: int, height: int, short: int) -> Tuple[int, int]:
    """(width, height) scaled so that the short side is ``short``, each rounded
    to an even size for the encoder (unlike ``datasets.transforms.short_side_size``,
    the loader's resize, which floors the long side)."""
    scale = short / min(width, height)
    return even(width * scale), even(height * scale)


def decode_rgb(path: str, fps: Optional[float] = None) -> Tuple[np.ndarray, float]:
    """All frames of a video as (T, H, W, 3) uint8 RGB, and their rate.

    With ``fps``, frames are resampled in time: frame ``k`` is the last frame
    shown at ``k / fps`` seconds.
    """
    with av.open(path) as container:
        stream = container.streams.video[0]
        rate = float(stream.average_rate or stream.guessed_rate or 30)
        frames, times = [], []
        for frame in container.decode(stream):
            frames.append(frame.to_ndarray(format="rgb24"))
            times.append(
                float(frame.time) if frame.time is not None else len(times) / rate
            )
    if not frames:
        raise ValueError(f"{path}: no video frames")
    if fps is None:
        return np.stack(frames), rate
    elapsed = np.asarray(times) - times[0]
    count = max(1, int(np.floor(elapsed[-1] * fps + 1e-6)) + 1)
    picks = np.searchsorted(elapsed, np.arange(count) / fps + 1e-6, side="right") - 1
    return np.stack([frames[max(0, i)] for i in picks]), float(fps)


# x264 settings of prepared clips, chosen for decoding speed: "fastdecode"
# (CAVLC entropy coding, no deblocking filter, no weighted prediction) and
# B-frames that no other frame references ("b-pyramid=none"), which the
# loader's selective decoding skips unless it needs them. Same quality as
# x264's defaults at CRF 20, a little larger, much faster to decode
# (docs/benchmarks/loader.md, "Loader per multigrid shape on Kinetics-like video").
PREPARED_X264 = {
    "crf": "20",
    "preset": "veryfast",
    "tune": "fastdecode",
    "x264-params": "b-pyramid=none",
    "threads": "1",
}


def _open_output(path: str, codec: str, rate, size, gop: int, original=None):
    out = av.open(path, mode="w", format="mp4")
    if original is not None:  # a rendition names its original's (w, h)
        from slowfast.datasets.decoding.av_utils import ORIGINAL_SIZE_TAG

        width, height = original
        out.metadata["comment"] = ORIGINAL_SIZE_TAG.format(height=height, width=width)
    options = {"g": str(max(1, gop))}
    if codec == "libx264":
        options.update(PREPARED_X264)
    stream = out.add_stream(codec, rate=rate, options=options)
    assert isinstance(stream, VideoStream)  # codec is a video codec
    stream.width, stream.height = size
    stream.pix_fmt = "yuv420p"
    return out, stream


def _encode_all(src: str, codec: str, outputs: list, targets) -> int:
    """Decodes ``src`` once and encodes every output ``targets(width, height)``
    lists as ``(path, (width, height), gop_seconds, original size or None)``;
    the outputs are appended to ``outputs`` as they are opened. Returns the
    number of frames."""
    try:
        with av.open(src) as source:
            video = source.streams.video[0]
            rate = video.average_rate or video.guessed_rate or Fraction(30)
            for path, dims, gop, original in targets(video.width, video.height):
                tmp = f"{path}.{os.getpid()}.part"
                frames = int(round(float(rate) * gop))
                out = _open_output(tmp, codec, rate, dims, frames, original)
                outputs.append((path, tmp, dims, *out))
            count = 0
            for frame in source.decode(video):
                for _, _, (width, height), out, stream in outputs:
                    scaled = frame.reformat(
                        width=width, height=height, format="yuv420p"
                    )
                    scaled.pts, scaled.time_base = count, 1 / Fraction(rate)
                    out.mux(stream.encode(scaled))
                count += 1
            for _, _, _, out, stream in outputs:
                out.mux(stream.encode(None))
    finally:
        for _, _, _, out, _ in outputs:
            out.close()
    return count


def _write_outputs(src: str, targets) -> None:
    """Encodes the outputs ``targets`` lists from ``src`` and moves them in place, the
    first listed last (once it exists, the others do); no partial files are
    left behind."""
    from workshop.dataprep.demo.writers import pick_codec

    outputs: list = []
    try:
        count = _encode_all(src, pick_codec(), outputs, targets)
    except BaseException:
        for _, tmp, *_ in outputs:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    if count == 0:
        for _, tmp, *_ in outputs:
            os.remove(tmp)
        raise ValueError(f"{src}: no video frames")
    for path, tmp, *_ in outputs[::-1]:
        os.replace(tmp, path)


def reencode(
    src: str,
    dst: str,
    short: int,
    gop_seconds: float = 1.0,
    renditions: Sequence[float] = (),
    rendition_gop_seconds: float = 0.25,
) -> None:
    """Re-encodes a video with PyAV: short side ``short``, no audio, H.264
    (``PREPARED_X264``; MPEG-4 where PyAV has no libx264) with a keyframe
    every ``gop_seconds``; written atomically.

    Args:
        src: the source video.
        dst: the output file.
        short: its short side.
        gop_seconds: keyframe interval of ``dst``.
        renditions: also write the video at these scales, each to
            ``rendition_path(dst, scale)``, from the same decode of ``src``.
        rendition_gop_seconds: keyframe interval of the renditions (short:
            their frames are small, and coarse grids read few frames a clip).
    """
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)

    def targets(width: int, height: int):
        full = even_scaled_size(width, height, short)
        rest = _rendition_targets(dst, full, renditions, rendition_gop_seconds)
        return [(dst, full, gop_seconds, None)] + rest

    _write_outputs(src, targets)


def add_video_renditions(
    path: str, scales: Sequence[float], gop_seconds: float = 0.25
) -> None:
    """Writes the renditions of an already prepared video next to it.

    The renditions are encoded at a constant frame rate from time 0, as
    ``reencode`` writes videos: an original that starts later is refused,
    and one with a variable frame rate gets renditions whose frames line up
    with its own only approximately (re-prepare such videos with
    ``tools/prepare_dataset.py``).

    Args:
        path: the video (its size is the original's).
        scales: the renditions' scales.
        gop_seconds: their keyframe interval.

    Raises:
        ValueError: the original does not start at time 0.
    """
    with av.open(path) as container:
        start = container.streams.video[0].start_time or 0
    if start:
        raise ValueError(f"{path}: starts at pts {start}, not 0; re-prepare it")
    _write_outputs(
        path,
        lambda width, height: _rendition_targets(
            path, (width, height), scales, gop_seconds
        ),
    )


def _rendition_targets(
    dst: str, full: Tuple[int, int], scales: Sequence[float], gop_seconds: float
) -> list:
    from slowfast.datasets.renditions.files import rendition_path, scaled_size

    return [
        (rendition_path(dst, scale), scaled_size(*full, scale), gop_seconds, full)
        for scale in scales
    ]


def index_files(root: str, extensions: Sequence[str]) -> dict:
    """Every file under ``root`` with one of ``extensions``, by its name
    without extension (the first found wins)."""
    found: Dict[str, str] = {}
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            stem, ext = os.path.splitext(name)
            if ext.lower() in extensions:
                found.setdefault(stem, os.path.join(folder, name))
    return found


def video_to_frames(item: tuple) -> List[str]:
    """Writes a video's JPEG frames at a rate (unless done); returns their paths.

    Args:
        item: (video id, source video, output folder, fps, file-name pattern
            with one ``{}`` for the 1-based frame number, rendition scales).
            The frames go to ``frames/<id>/`` of the output folder, renditions
            to ``frames/<id>.r71/`` and so on; a ``.complete`` file in the
            first lists the frames once all are written, so a rerun skips the
            video.

    Returns:
        list[str]: the frame paths relative to the output folder.
    """
    from workshop.dataprep.demo.writers import write_jpeg_frames

    video_id, src, out, fps, pattern, scales = item
    folder = f"frames/{video_id}"
    done = os.path.join(out, folder, ".complete")
    if os.path.exists(done):
        with open(done) as f:
            paths = f.read().split()
        if scales:  # extracted before renditions were asked for
            add_frame_renditions([os.path.join(out, p) for p in paths], scales)
        return paths
    frames, _ = decode_rgb(src, fps)
    paths = write_jpeg_frames(out, folder, pattern, frames, scales=scales)
    with open(done, "w") as f:
        f.write("\n".join(paths))
    return paths


def add_frame_renditions(
    paths: Sequence[str], scales: Sequence[float], quality: int = 90
) -> str:
    """Writes the renditions of a video's JPEG frames (``frames/<id>.r71/...``).

    Args:
        paths: the frame files.
        scales: the renditions' scales.
        quality: JPEG quality.

    Returns:
        str: "skipped" when every rendition frame exists, else "done".
    """
    from PIL import Image

    from slowfast.datasets.decoding.frames import load_image
    from slowfast.datasets.renditions.files import rendition_path
    from workshop.dataprep.demo.writers import save_jpeg_rendition

    todo = [
        (p, s)
        for p in paths
        for s in scales
        if not os.path.exists(rendition_path(p, s))
    ]
    if not todo:
        return "skipped"
    for path, scale in todo:
        image = Image.fromarray(load_image(path))
        save_jpeg_rendition(image, rendition_path(path, scale), scale, quality)
    return "done"
