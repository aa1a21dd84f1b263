"""Kinetics-like footage for loader benchmarks: clips as they come from YouTube.

Moving Digits videos are small and flat; decoding them says little about
Kinetics. These clips have what makes real video expensive to decode: a short
side of 256, 10 s at 30 fps, fine texture at every scale (1/f noise plus
hard-edged shapes), a camera that pans and zooms, objects moving on their
own, sensor noise, and the encoder settings of a download (H.264, x264's
default preset and quality, a keyframe every 250 frames, B-frames, no audio).

``make_footage`` writes them in the folder structure of the official Kinetics download
(``annotations/{train,validate}.csv`` and ``downloads/<id>_<start>_<end>.mp4``),
so that ``tools/prepare_dataset.py kinetics`` prepares them as it prepares
Kinetics, and the same clips as a Kinetics dataset of JPEG frame folders
(``frames/``: list files, one folder of 30 fps frames per clip, renditions, for
``DATA.DECODING_BACKEND frames``). The pixels depend only on the seed.
``make_frame_footage`` writes only such a frame-folder dataset, rendered
straight to JPEGs (no video files, no PyAV).
"""

import csv
import json
import os
from dataclasses import asdict, dataclass
from fractions import Fraction
from functools import partial
from typing import Any, Dict, List, Sequence

import numpy as np
import torch
import torch.nn.functional as F

# The encoder settings of a typical download (x264's defaults: keyint 250,
# 3 B-frames with a pyramid, CRF 23, preset medium).
DOWNLOAD_OPTIONS = {"g": "250", "crf": "23", "preset": "medium", "threads": "1"}


@dataclass(frozen=True)
class FootageSpec:
    """What one clip looks like.

    Attributes:
        width: frame width (340 for a 256 short side at 4:3).
        height: frame height.
        seconds: duration.
        fps: frame rate.
        noise_std: sensor noise (grey levels, per pixel and frame).
    """

    width: int = 340
    height: int = 256
    seconds: float = 10.0
    fps: int = 30
    noise_std: float = 2.0


def _pink_noise(rng: np.random.Generator, size: int) -> np.ndarray:
    """A ``size x size x 3`` image of 1/f noise (natural images' spectrum)."""
    freq = np.fft.fftfreq(size)
    radius = np.sqrt(freq[:, None] ** 2 + freq[None, :] ** 2)
    radius[0, 0] = 1.0
    out = []
    for _ in range(3):
        phase = rng.uniform(0, 2 * np.pi, (size, size))
        spectrum = np.exp(1j * phase) / radius
        spectrum[0, 0] = 0
        channel = np.real(np.fft.ifft2(spectrum))
        out.append((channel - channel.mean()) / (channel.std() + 1e-8))
    image = np.stack(out, -1)
    mix = rng.normal(0, 0.35, (3, 3)) + np.eye(3)  # correlated colour channels
    return image @ mix


def _world(rng: np.random.Generator, size: int) -> np.ndarray:
    """The scene the camera films: textured background with hard-edged shapes."""
    image = 128 + 40 * _pink_noise(rng, size)
    yy, xx = np.mgrid[0:size, 0:size]
    for _ in range(int(rng.integers(20, 40))):
        cy, cx = rng.uniform(0, size, 2)
        ry, rx = rng.uniform(size / 60, size / 8, 2)
        colour = rng.uniform(20, 235, 3)
        if rng.random() < 0.5:
            mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 < 1
        else:
            mask = (abs(yy - cy) < ry) & (abs(xx - cx) < rx)
        image[mask] = 0.6 * colour + 0.4 * image[mask]
    return np.clip(image, 0, 255).astype(np.float32)


def render(seed: int, spec: FootageSpec = FootageSpec()) -> np.ndarray:
    """Renders one clip.

    Args:
        seed: the clip's seed (same seed, same pixels).
        spec: size, length and noise.

    Returns:
        np.ndarray: uint8 ``[T, H, W, 3]`` RGB frames.
    """
    rng = np.random.default_rng(seed)
    size = int(min(1024, 4 * max(spec.width, spec.height)))
    world = torch.from_numpy(_world(rng, size)).permute(2, 0, 1)[None]
    sprite = torch.from_numpy(_world(rng, 256)).permute(2, 0, 1)[None]
    count = int(round(spec.seconds * spec.fps))
    t = np.arange(count) / spec.fps

    # Camera: smooth pan (sums of slow sinusoids) and a slow zoom, in world
    # units of [-1, 1]; the view covers about a third of the world.
    def wave(amp):
        freqs, phases = rng.uniform(0.03, 0.25, 3), rng.uniform(0, 2 * np.pi, 3)
        weights = rng.uniform(0.3, 1.0, 3)
        return (
            amp
            * (
                weights[:, None]
                * np.sin(2 * np.pi * freqs[:, None] * t + phases[:, None])
            ).sum(0)
            / weights.sum()
        )

    cx, cy = wave(0.45), wave(0.3)
    zoom = 0.33 * np.exp(wave(0.25))
    aspect = spec.width / spec.height
    theta = torch.zeros(count, 2, 3)
    theta[:, 0, 0] = torch.from_numpy(zoom * aspect)
    theta[:, 1, 1] = torch.from_numpy(zoom)
    theta[:, 0, 2] = torch.from_numpy(cx)
    theta[:, 1, 2] = torch.from_numpy(cy)
    out = np.empty((count, spec.height, spec.width, 3), dtype=np.uint8)
    # An object crossing the view on its own path, rotating slightly.
    ox, oy = wave(0.8), wave(0.6)
    angle = wave(0.6)
    for start in range(0, count, 30):
        end = min(start + 30, count)
        grid = F.affine_grid(
            theta[start:end],
            [end - start, 3, spec.height, spec.width],
            align_corners=False,
        )
        frames = F.grid_sample(
            world.expand(end - start, -1, -1, -1),
            grid,
            mode="bilinear",
            align_corners=False,
        )
        obj = torch.zeros(end - start, 2, 3)
        scale = 2.5
        cos, sin = np.cos(angle[start:end]), np.sin(angle[start:end])
        obj[:, 0, 0] = torch.from_numpy(scale * cos * aspect)
        obj[:, 0, 1] = torch.from_numpy(-scale * sin)
        obj[:, 1, 0] = torch.from_numpy(scale * sin * aspect)
        obj[:, 1, 1] = torch.from_numpy(scale * cos)
        obj[:, 0, 2] = torch.from_numpy(-scale * ox[start:end] * 1.2)
        obj[:, 1, 2] = torch.from_numpy(-scale * oy[start:end] * 1.2)
        grid = F.affine_grid(obj, list(frames.shape), align_corners=False)
        sprites = F.grid_sample(
            sprite.expand(end - start, -1, -1, -1),
            grid,
            mode="bilinear",
            align_corners=False,
        )
        inside = (grid.abs() <= 1).all(-1)[:, None]
        frames = torch.where(inside, sprites, frames)
        noise = torch.from_numpy(
            rng.normal(0, spec.noise_std, frames.shape).astype(np.float32)
        )
        frames = (frames + noise).clamp(0, 255).round().to(torch.uint8)
        out[start:end] = frames.permute(0, 2, 3, 1).numpy()
    return out


def write_download(path: str, frames: np.ndarray, fps: int) -> None:
    """Encodes frames as a download would be (``DOWNLOAD_OPTIONS``)."""
    import av

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with av.open(path, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps, options=DOWNLOAD_OPTIONS)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        for index, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = index, Fraction(1, fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def write_frame_folder(out: str, video: str, name: str, scales) -> str:
    """Writes a video's frames as JPEGs (and renditions) under ``out/videos``.

    Returns:
        str: the folder, relative to ``out``.
    """
    import av

    from workshop.dataprep.demo.writers import write_jpeg_frames

    folder = f"videos/{name}"
    done = os.path.join(out, folder, ".complete")
    if not os.path.exists(done):
        with av.open(video) as container:
            frames = np.stack(
                [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
            )
        write_jpeg_frames(out, folder, "{:06d}.jpg", frames, scales=scales)
        open(done, "w").close()
    return folder


def make_footage(
    out: str,
    num_train: int,
    num_val: int,
    seed: int = 0,
    classes: int = 4,
    frames: bool = True,
    spec: FootageSpec = FootageSpec(),
) -> List[str]:
    """Writes Kinetics-like downloads and their official-style CSVs.

    Args:
        out: folder; gets ``annotations/``, ``downloads/`` and (with
            ``frames``) ``frames/``.
        num_train: training clips.
        num_val: validation clips.
        seed: base seed.
        classes: number of (meaningless) class names.
        frames: also write the frame-folder dataset.
        spec: the clips' size, length and noise.

    Returns:
        list: the clip files written (existing ones are kept).
    """
    from slowfast.datasets.renditions.files import DEFAULT_SCALES, write_renditions
    from workshop.dataprep.demo.writers import write_kinetics_list

    written = []
    frame_root = os.path.join(out, "frames")
    os.makedirs(os.path.join(out, "annotations"), exist_ok=True)
    for split, count, offset in (
        ("train", num_train, 0),
        ("validate", num_val, num_train),
    ):
        rows, listed = [], []
        for k in range(count):
            youtube_id = f"footage{offset + k:05d}"
            label = f"class_{(offset + k) % classes}"
            rows.append([label, youtube_id, "0", "10", split])
            path = os.path.join(out, "downloads", f"{youtube_id}_000000_000010.mp4")
            if not os.path.exists(path):
                tmp = path + ".part.mp4"
                write_download(tmp, render(seed * 100003 + offset + k, spec), spec.fps)
                os.replace(tmp, path)
            written.append(path)
            if frames:
                name = os.path.splitext(os.path.basename(path))[0]
                folder = write_frame_folder(frame_root, path, name, DEFAULT_SCALES)
                listed.append((folder, (offset + k) % classes))
        with open(
            os.path.join(out, "annotations", f"{split}.csv"), "w", newline=""
        ) as f:
            writer = csv.writer(f)
            writer.writerow(["label", "youtube_id", "time_start", "time_end", "split"])
            writer.writerows(rows)
        if frames:
            lists = ("train",) if split == "train" else ("val", "test")
            for name in lists:
                write_kinetics_list(os.path.join(frame_root, f"{name}.csv"), listed)
    if frames:
        write_renditions(frame_root, DEFAULT_SCALES)
    return written


def _frame_clip(out: str, spec: FootageSpec, scales, seed: int, index: int) -> str:
    """Renders clip ``index`` into ``out/videos/footageNNNNN`` (and renditions)."""
    from workshop.dataprep.demo.writers import write_jpeg_frames

    folder = f"videos/footage{index:05d}"
    frames = render(seed * 100003 + index, spec)
    write_jpeg_frames(out, folder, "{:06d}.jpg", frames, scales=scales)
    return folder


def make_frame_footage(
    out: str,
    num_clips: int,
    repeats: int = 1,
    seed: int = 0,
    classes: int = 4,
    spec: FootageSpec = FootageSpec(),
    scales: Sequence[float] = (),
    workers: int = 1,
) -> int:
    """Writes a Kinetics training split of footage clips as JPEG frame folders.

    Clip ``k`` has the pixels of ``make_footage``'s clip ``k`` before encoding.
    ``out/train.csv`` lists every clip ``repeats`` times (a larger training
    set from the same rendering), ``val.csv`` and ``test.csv`` once, for
    ``DATA.DECODING_BACKEND frames`` with ``DATA.PATH_TO_DATA_DIR`` and
    ``DATA.PATH_PREFIX`` set to ``out``. A folder this function already wrote
    with the same arguments is kept as it is.

    Args:
        out: the dataset folder.
        num_clips: clips rendered.
        repeats: times each clip is listed.
        seed: base seed.
        classes: labels cycle over this many classes.
        spec: the clips' size, length and noise.
        scales: renditions written beside each folder (``renditions.py``).
        workers: processes rendering clips (the files do not depend on it).

    Returns:
        int: the clips listed in ``train.csv``.
    """
    from slowfast.datasets.renditions.files import write_renditions
    from workshop.dataprep.demo.generate import _map_videos
    from workshop.dataprep.demo.writers import write_kinetics_list

    manifest = os.path.join(out, "footage.json")
    params: Dict[str, Any] = {"num_clips": num_clips, "repeats": repeats, "seed": seed}
    params.update(classes=classes, spec=asdict(spec), scales=list(scales))
    if os.path.isfile(manifest):
        with open(manifest) as handle:
            if json.load(handle) == params:
                return num_clips * repeats
        os.remove(manifest)
    os.makedirs(out, exist_ok=True)
    render_clip = partial(_frame_clip, out, spec, tuple(scales), seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensor ops, one process per clip
    try:
        folders = _map_videos(render_clip, num_clips, workers)
    finally:
        torch.set_num_threads(threads)
    clips = [(folder, k % classes) for k, folder in enumerate(folders)]
    write_kinetics_list(os.path.join(out, "train.csv"), clips * repeats)
    for split in ("val", "test"):
        write_kinetics_list(os.path.join(out, f"{split}.csv"), clips)
    write_renditions(out, scales)
    with open(manifest, "w") as handle:
        json.dump(params, handle)
    return len(clips) * repeats
