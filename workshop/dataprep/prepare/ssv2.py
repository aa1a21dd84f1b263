"""Something-Something V2: the official JSON files and ``<id>.webm`` -> our format.

Annotations: ``something-something-v2-labels.json`` (template -> class id),
``something-something-v2-train.json`` and ``-validation.json`` (videos with
their template). Videos: ``<id>.webm`` (any video file named by its id)
anywhere under the videos folder. Output: JPEG frames at ``fps`` (the
reference's frame lists assume 30) in ``frames/<id>/<id>_000001.jpg``, the
frame lists ``train.csv`` / ``val.csv`` and the three JSON files (copied).
"""

import json
import os
import shutil
from typing import Sequence

from workshop.dataprep.prepare.common import (
    Prepared,
    index_files,
    run_items,
    video_to_frames,
)

VIDEO_EXTENSIONS = (".webm", ".mp4", ".mkv")
JSONS = {
    "labels": "something-something-v2-labels.json",
    "train": "something-something-v2-train.json",
    "val": "something-something-v2-validation.json",
}


def prepare(
    annotations: str,
    videos: str,
    out: str,
    fps: float,
    workers: int,
    renditions: Sequence[float] = (),
) -> Prepared:
    """Prepares SSv2: frames, frame lists, renditions and the JSON files."""
    from slowfast.datasets.renditions.files import write_renditions
    from workshop.dataprep.demo.writers import frame_list_rows, write_frame_list

    os.makedirs(out, exist_ok=True)
    for name in JSONS.values():
        src = os.path.join(annotations, name)
        if not os.path.exists(src):
            raise FileNotFoundError(f"{src} not found (the official SSv2 JSON files)")
        shutil.copyfile(src, os.path.join(out, name))
    found = index_files(videos, VIDEO_EXTENSIONS)
    failures, written = [], []
    attempted = broken = 0
    for split in ("train", "val"):
        with open(os.path.join(annotations, JSONS[split])) as f:
            entries = json.load(f)
        items = []
        for entry in entries:
            vid = str(entry["id"])
            if vid not in found:
                failures.append((vid, "video not found under the videos folder"))
                continue
            pattern = vid + "_{:06d}.jpg"
            items.append((vid, found[vid], out, fps, pattern, tuple(renditions)))
        results, failed = run_items(
            items, video_to_frames, workers, f"ssv2 {split} frames"
        )
        failures += failed
        attempted, broken = attempted + len(items), broken + len(failed)
        lines = []
        for index, (item, paths) in enumerate(zip(items, results)):
            if paths:
                lines += frame_list_rows(item[0], index, paths, [[]] * len(paths))
        write_frame_list(os.path.join(out, f"{split}.csv"), lines)
        written.append(split)
    write_renditions(out, renditions)
    notes = ["test reads the validation files (as the reference)"]
    return Prepared(written, failures, notes, attempted, broken)
