"""Writes the Moving Digits datasets in the Kinetics, SSv2 and Charades formats.

Every video is rendered from its own ``numpy`` generator seeded with
``(seed, dataset, split, index)``, so regenerating gives identical files and a
video does not depend on which other videos or datasets were generated.
"""

import logging
import multiprocessing
import os
import shutil
import time
from dataclasses import dataclass
from functools import partial
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from workshop.dataprep.demo.digits import DigitBank, load_digit_bank
from workshop.dataprep.demo.scenes import charades_scene, kinetics_scene, ssv2_scene
from workshop.dataprep.demo.specs import (
    DATASETS,
    NUM_CLASSES,
    SSV2_TEMPLATES,
    DatasetSpec,
    get_spec,
)
from workshop.dataprep.demo.writers import (
    frame_list_rows,
    pick_codec,
    write_frame_list,
    write_jpeg_frames,
    write_json,
    write_kinetics_list,
    write_mp4,
)

logger = logging.getLogger(__name__)

MANIFEST = "demo_manifest.json"
_DATASET_IDS = {"kinetics": 0, "ssv2": 1, "charades": 2}
_SPLIT_IDS = {"train": 0, "val": 1, "test": 2}


@dataclass(frozen=True)
class DatasetSummary:
    """What one dataset's generation wrote.

    Attributes:
        dataset: "kinetics", "ssv2" or "charades".
        folder: the dataset's folder.
        videos: split -> number of videos.
        num_classes: number of classes.
        seconds: wall time of the generation.
    """

    dataset: str
    folder: str
    videos: Dict[str, int]
    num_classes: int
    seconds: float

    def line(self) -> str:
        """One-line human summary."""
        counts = ", ".join(f"{split} {n}" for split, n in self.videos.items())
        total = sum(self.videos.values())
        return (
            f"{self.dataset:9s} {total:5d} videos ({counts}), {self.num_classes} "
            f"classes, {self.seconds:.1f} s -> {self.folder}"
        )


def video_rng(seed: int, dataset: str, split: str, index: int) -> np.random.Generator:
    """The generator of one video (independent of every other video).

    Args:
        seed: the dataset seed.
        dataset: dataset name.
        split: "train", "val" or "test".
        index: the video's index within its split.

    Returns:
        np.random.Generator: seeded from (seed, dataset, split, index).
    """
    return np.random.default_rng(
        [seed, _DATASET_IDS[dataset], _SPLIT_IDS[split], index]
    )


def _pool(split: str) -> str:
    return "train" if split == "train" else "heldout"


def _prepare_folder(folder: str) -> None:
    """Empties a folder this generator wrote before; refuses any other folder."""
    if os.path.isdir(folder) and os.listdir(folder):
        if not os.path.isfile(os.path.join(folder, MANIFEST)):
            raise FileExistsError(
                f"{folder}: not empty and has no {MANIFEST}; refusing to overwrite "
                "a folder the demo generator did not write: pass another --out, "
                "or empty the folder"
            )
        shutil.rmtree(folder)
    os.makedirs(folder, exist_ok=True)


def _map_videos(render, count: int, workers: int) -> list:
    """``[render(index) for index in range(count)]``, in ``workers`` processes.

    Every video has its own generator, so the files do not depend on
    ``workers``; results come back in index order.
    """
    if workers <= 1 or count <= 1:
        return [render(index) for index in range(count)]
    context = multiprocessing.get_context("fork")
    with context.Pool(min(workers, count)) as pool:
        return pool.map(render, range(count), chunksize=max(1, count // (8 * workers)))


def _kinetics_video(folder, spec, bank, seed, codec, split, index):
    digit = index % NUM_CLASSES["kinetics"]
    rng = video_rng(seed, "kinetics", split, index)
    frames = kinetics_scene(rng, bank, _pool(split), digit, spec)
    relative = f"videos/{split}/{digit}/{split}_{index:05d}.mp4"
    write_mp4(os.path.join(folder, relative), frames, spec.fps, codec)
    return relative, digit


def _write_kinetics(
    folder: str, spec: DatasetSpec, bank: DigitBank, seed: int, workers: int
) -> None:
    codec = pick_codec()
    for split, count in spec.videos.items():
        render = partial(_kinetics_video, folder, spec, bank, seed, codec, split)
        rows = _map_videos(render, count, workers)
        write_kinetics_list(os.path.join(folder, f"{split}.csv"), rows)


def _ssv2_video(folder, spec, bank, seed, split, index):
    motion = index % len(SSV2_TEMPLATES)
    rng = video_rng(seed, "ssv2", split, index)
    frames, digit = ssv2_scene(rng, bank, _pool(split), motion, spec)
    video_id = str((_SPLIT_IDS[split] + 1) * 100000 + index)
    paths = write_jpeg_frames(
        folder, f"frames/{video_id}", video_id + "_{:06d}.jpg", frames
    )
    lines = frame_list_rows(video_id, index, paths, [[]] * len(paths))
    thing = f"digit {digit}"
    label = SSV2_TEMPLATES[motion].replace("[something]", thing)
    entry = {
        "id": video_id,
        "label": label[0].lower() + label[1:],
        "template": SSV2_TEMPLATES[motion],
        "placeholders": [thing],
    }
    return lines, entry


def _write_ssv2(
    folder: str, spec: DatasetSpec, bank: DigitBank, seed: int, workers: int
) -> None:
    plain = [template.replace("[", "").replace("]", "") for template in SSV2_TEMPLATES]
    write_json(
        os.path.join(folder, "something-something-v2-labels.json"),
        {name: str(index) for index, name in enumerate(plain)},
    )
    json_names = {"train": "train", "val": "validation"}
    for split, count in spec.videos.items():
        render = partial(_ssv2_video, folder, spec, bank, seed, split)
        videos = _map_videos(render, count, workers)
        name = f"something-something-v2-{json_names[split]}.json"
        write_json(os.path.join(folder, name), [entry for _, entry in videos])
        lines = [line for video_lines, _ in videos for line in video_lines]
        write_frame_list(os.path.join(folder, f"{split}.csv"), lines)


def _charades_video(folder, spec, bank, seed, split, index):
    rng = video_rng(seed, "charades", split, index)
    frames, labels = charades_scene(rng, bank, _pool(split), spec)
    video_id = f"{split[:2].upper()}{index:04d}"
    paths = write_jpeg_frames(
        folder, f"frames/{video_id}", video_id + "-{:06d}.jpg", frames
    )
    return frame_list_rows(video_id, index, paths, labels)


def _write_charades(
    folder: str, spec: DatasetSpec, bank: DigitBank, seed: int, workers: int
) -> None:
    for split, count in spec.videos.items():
        render = partial(_charades_video, folder, spec, bank, seed, split)
        videos = _map_videos(render, count, workers)
        lines = [line for video_lines in videos for line in video_lines]
        write_frame_list(os.path.join(folder, f"{split}.csv"), lines)


_WRITERS = {
    "kinetics": _write_kinetics,
    "ssv2": _write_ssv2,
    "charades": _write_charades,
}


def make_dataset(
    out: str,
    dataset: str,
    size: str,
    seed: int = 0,
    bank: Optional[DigitBank] = None,
    workers: int = 1,
) -> DatasetSummary:
    """Generates one dataset into ``<out>/<dataset>`` (replacing an earlier run).

    Args:
        out: the demo data root.
        dataset: "kinetics", "ssv2" or "charades".
        size: one of SIZES.
        seed: dataset seed.
        bank: the digits (loaded when None).
        workers: processes rendering videos (the files do not depend on it).

    Returns:
        DatasetSummary: counts and timing.
    """
    spec = get_spec(dataset, size)
    bank = bank if bank is not None else load_digit_bank()
    folder = os.path.join(out, dataset)
    start = time.perf_counter()
    _prepare_folder(folder)
    manifest = {
        "generator": "workshop.dataprep.demo",
        "layout": dataset,
        "size": size,
        "seed": seed,
        "num_classes": NUM_CLASSES[dataset],
        "videos": dict(spec.videos),
        "num_frames": spec.num_frames,
        "height": spec.height,
        "width": spec.width,
        "fps": spec.fps,
        "complete": False,
    }
    if dataset == "kinetics":
        manifest["codec"] = pick_codec()
    write_json(os.path.join(folder, MANIFEST), manifest)
    _WRITERS[dataset](folder, spec, bank, seed, workers)
    write_json(os.path.join(folder, MANIFEST), {**manifest, "complete": True})
    summary = DatasetSummary(
        dataset=dataset,
        folder=folder,
        videos=dict(spec.videos),
        num_classes=NUM_CLASSES[dataset],
        seconds=time.perf_counter() - start,
    )
    logger.info(summary.line())
    return summary


def make_demo_data(
    out: str,
    size: str = "small",
    datasets: Sequence[str] = DATASETS,
    seed: int = 0,
    workers: int = 1,
) -> List[DatasetSummary]:
    """Generates the requested datasets of the Moving Digits data.

    Args:
        out: the demo data root (one sub-folder per dataset).
        size: one of SIZES.
        datasets: any of "kinetics", "ssv2", "charades".
        seed: dataset seed.
        workers: processes rendering videos (the files do not depend on it).

    Returns:
        list: one DatasetSummary per dataset, in the order given.
    """
    for dataset in datasets:
        get_spec(dataset, size)
    bank = load_digit_bank()
    # Rendering is many small tensor ops: intra-op threads only add contention.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [
            make_dataset(out, dataset, size, seed, bank, workers)
            for dataset in datasets
        ]
    finally:
        torch.set_num_threads(threads)
