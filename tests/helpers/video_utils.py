"""Helpers that write tiny test videos, JPEG frame folders and list files.

Frame ``i`` of every generated video is a flat grey image of value
``frame_value(i)``, so a test can read back which source frames a clip holds
with ``frame_index(value)`` (H.264/JPEG keep flat grey within +-2).
"""

import fractions
import json
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import av
import numpy as np
from PIL import Image

VALUE_STEP = 4
VALUE_OFFSET = 8
MAX_INDEX = (255 - VALUE_OFFSET) // VALUE_STEP


def frame_value(index: int) -> int:
    """Grey value of generated frame ``index`` (wraps after ``MAX_INDEX``)."""
    return VALUE_OFFSET + VALUE_STEP * (index % (MAX_INDEX + 1))


def frame_index(value: float) -> int:
    """Inverse of ``frame_value`` for a decoded (slightly noisy) grey value."""
    return int(round((float(value) - VALUE_OFFSET) / VALUE_STEP))


def _pick_codec() -> str:
    return "libx264" if "libx264" in av.codecs_available else "mpeg4"


def write_video(
    path: str,
    num_frames: int,
    width: int = 64,
    height: int = 48,
    fps: int = 30,
    audio: bool = False,
    gop: Optional[int] = None,
    pts: Optional[Sequence[int]] = None,
    pattern: bool = False,
) -> str:
    """Writes a small video whose frame ``i`` is grey ``frame_value(i)``.

    Args:
        path: output file (.mp4).
        num_frames: number of frames.
        width: frame width (odd sizes are written as yuv444p).
        height: frame height.
        fps: nominal frame rate.
        audio: also write a silent AAC audio stream.
        gop: keyframe interval (None: encoder default; large: one keyframe).
        pts: explicit presentation times in milliseconds (variable frame rate).
        pattern: add a horizontal ramp in the red channel (for flip tests).

    Returns:
        The path.
    """
    codec = _pick_codec()
    odd = width % 2 or height % 2
    with av.open(path, "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv444p" if (odd and codec == "libx264") else "yuv420p"
        if gop is not None:
            stream.codec_context.gop_size = gop
            if codec == "libx264":
                stream.options = {"sc_threshold": "0", "keyint_min": str(gop)}
        if pts is not None:
            stream.time_base = fractions.Fraction(1, 1000)
            stream.codec_context.time_base = fractions.Fraction(1, 1000)
        astream = None
        if audio:
            astream = container.add_stream("aac", rate=16000)
            astream.layout = "mono"
        for i in range(num_frames):
            img = np.full((height, width, 3), frame_value(i), np.uint8)
            if pattern:
                img[:, :, 0] = np.linspace(0, 255, width).astype(np.uint8)[None]
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            if pts is not None:
                frame.pts = int(pts[i])
                frame.time_base = fractions.Fraction(1, 1000)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        if astream is not None:
            samples = int(16000 * num_frames / fps)
            for start in range(0, samples, 1024):
                chunk = np.zeros((1, 1024), np.float32)
                aframe = av.AudioFrame.from_ndarray(chunk, format="fltp", layout="mono")
                aframe.sample_rate = 16000
                aframe.pts = start
                for packet in astream.encode(aframe):
                    container.mux(packet)
            for packet in astream.encode():
                container.mux(packet)
    return path


def write_frames(
    folder: str, num_frames: int, width: int = 64, height: int = 48
) -> List[str]:
    """Writes JPEG frames ``000001.jpg`` ... into ``folder``.

    Returns:
        The frame paths in order.
    """
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(num_frames):
        path = os.path.join(folder, f"{i + 1:06d}.jpg")
        img = np.full((height, width, 3), frame_value(i), np.uint8)
        Image.fromarray(img).save(path, quality=95)
        paths.append(path)
    return paths


def write_kinetics_list(path: str, rows: Iterable[Tuple[str, int]], sep=" ") -> str:
    """Writes a Kinetics list file with one ``path<sep>label`` per line."""
    with open(path, "w") as f:
        for video, label in rows:
            f.write(f"{video}{sep}{label}\n")
    return path


def write_frame_list(
    path: str, videos: Dict[str, List[Tuple[str, str]]], prefix: str = ""
) -> str:
    """Writes a frame list (``original_vido_id video_id frame_id path labels``).

    Args:
        path: output csv.
        videos: video name -> list of (frame path, labels field) in order.
        prefix: stripped from frame paths (they are stored relative to it).

    Returns:
        The path.
    """
    with open(path, "w") as f:
        f.write("original_vido_id video_id frame_id path labels\n")
        for vid, (name, frames) in enumerate(videos.items()):
            for fid, (frame, labels) in enumerate(frames):
                rel = os.path.relpath(frame, prefix) if prefix else frame
                f.write(f"{name} {vid} {fid} {rel} {labels}\n")
    return path


def write_json(path: str, data) -> str:
    """Writes ``data`` as JSON."""
    with open(path, "w") as f:
        json.dump(data, f)
    return path


def write_truncated_video(path: str, num_frames: int = 60, keep: int = 40) -> str:
    """Writes a faststart mp4 (index first) and cuts it after ``keep`` packets.

    The container still announces ``num_frames`` frames, but only the first
    ``keep`` (in decode order) can be decoded, like an interrupted download.
    """
    full = path + ".full.mp4"
    codec = _pick_codec()
    with av.open(full, "w", options={"movflags": "faststart"}) as container:
        stream = container.add_stream(codec, rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.codec_context.gop_size = 10
        for i in range(num_frames):
            img = np.full((48, 64, 3), frame_value(i), np.uint8)
            for packet in stream.encode(
                av.VideoFrame.from_ndarray(img, format="rgb24")
            ):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    with av.open(full) as container:
        offsets = [p.pos for p in container.demux(video=0) if p.pos is not None]
    with open(full, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: offsets[keep]])
    os.remove(full)
    return path


def make_kinetics(
    root: str, specs: Sequence[Tuple[str, int, int]], **video_kwargs
) -> str:
    """Writes videos and identical train/val/test lists under ``root``.

    Args:
        root: folder (created).
        specs: (file name, number of frames, label) per video.
        **video_kwargs: passed to ``write_video``.

    Returns:
        The folder (use it as DATA.PATH_TO_DATA_DIR and DATA.PATH_PREFIX).
    """
    os.makedirs(root, exist_ok=True)
    for name, frames, _ in specs:
        write_video(os.path.join(root, name), frames, **video_kwargs)
    for split in ("train", "val", "test"):
        rows = [(name, label) for name, _, label in specs]
        write_kinetics_list(os.path.join(root, f"{split}.csv"), rows)
    return root


def make_frame_videos(
    root: str, lengths: Dict[str, int], labels_fn=None
) -> Dict[str, List[Tuple[str, str]]]:
    """Writes one JPEG frame folder per video; returns frame-list rows.

    Args:
        root: folder holding ``frames/<video>/``.
        lengths: video name -> number of frames.
        labels_fn: ``(video, frame) -> labels field`` (default ``""``).

    Returns:
        dict: video name -> list of (frame path, labels field).
    """
    videos = {}
    for name, length in lengths.items():
        paths = write_frames(os.path.join(root, "frames", name), length, 32, 24)
        videos[name] = [
            (p, labels_fn(name, i) if labels_fn else '""') for i, p in enumerate(paths)
        ]
    return videos


SSV2_TEMPLATES = [
    "Pushing something from left to right",
    "Putting something on a surface",
    "Holding something next to something",
]


def make_ssv2(root: str, lengths: Dict[str, int]) -> str:
    """Writes an SSv2 dataset: label JSONs, frame folders and frame lists.

    Video ``name`` gets template ``SSV2_TEMPLATES[k % 3]`` (k: its position),
    so its class is ``k % 3``; train and validation hold the same videos.

    Returns:
        The folder (DATA.PATH_TO_DATA_DIR and DATA.PATH_PREFIX).
    """
    os.makedirs(root, exist_ok=True)
    write_json(
        os.path.join(root, "something-something-v2-labels.json"),
        {t: str(i) for i, t in enumerate(SSV2_TEMPLATES)},
    )
    entries = []
    for k, name in enumerate(lengths):
        template = SSV2_TEMPLATES[k % 3].replace("something", "[something]")
        entries.append(
            {"id": name, "label": "x", "template": template, "placeholders": ["a"]}
        )
    for split in ("train", "validation"):
        write_json(os.path.join(root, f"something-something-v2-{split}.json"), entries)
    videos = make_frame_videos(root, lengths)
    for name in ("train.csv", "val.csv"):
        write_frame_list(os.path.join(root, name), videos, prefix=root)
    return root


def make_charades(root: str, lengths: Dict[str, int], labels_fn) -> str:
    """Writes a Charades dataset: frame folders and train/val frame lists.

    Returns:
        The folder (DATA.PATH_TO_DATA_DIR and DATA.PATH_PREFIX).
    """
    os.makedirs(root, exist_ok=True)
    videos = make_frame_videos(root, lengths, labels_fn)
    for name in ("train.csv", "val.csv"):
        write_frame_list(os.path.join(root, name), videos, prefix=root)
    return root


def tiny_cfg(root: str, dataset: str = "kinetics", *opts):
    """A frozen config reading ``root`` with tiny clips (override with opts)."""
    from slowfast.config import load_config

    base = [
        "TRAIN.DATASET", dataset, "TEST.DATASET", dataset,
        "DATA.PATH_TO_DATA_DIR", root, "DATA.PATH_PREFIX", root,
        "MODEL.NUM_CLASSES", "3", "MODEL.ARCH", "slow", "MODEL.MODEL_NAME", "ResNet",
        "DATA.NUM_FRAMES", "4", "DATA.SAMPLING_RATE", "2",
        "DATA.TRAIN_JITTER_SCALES", "[24, 32]", "DATA.TRAIN_CROP_SIZE", "16",
        "DATA.TEST_CROP_SIZE", "20", "TEST.NUM_ENSEMBLE_VIEWS", "2",
        "TEST.NUM_SPATIAL_CROPS", "3", "TRAIN.BATCH_SIZE", "2", "TEST.BATCH_SIZE", "3",
        "DATA_LOADER.NUM_WORKERS", "0", "RNG_SEED", "7",
    ]  # fmt: skip
    return load_config([], base + [str(o) for o in opts])
