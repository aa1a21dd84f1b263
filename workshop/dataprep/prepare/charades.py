"""Charades: the official CSVs with videos or frames -> frame lists with labels.

Annotations: ``Charades_v1_train.csv`` and ``Charades_v1_test.csv``; their
``actions`` column lists ``c092 11.90 21.20;c147 0.00 12.60`` (class, start and
end in seconds; classes ``c000``..``c156``). Frames: the official 24 fps
frames (``Charades_v1_rgb/<id>/<id>-000001.jpg``), used where they are, or
videos (``<id>.mp4``) decoded to frames at ``fps`` into ``frames/<id>/``.
Output: ``train.csv`` and ``val.csv`` frame lists, each frame labelled with
the actions whose interval holds its time.
"""

import csv
import os
from typing import Dict, List, Sequence, Tuple

from workshop.dataprep.prepare.common import (
    Prepared,
    index_files,
    run_items,
    video_to_frames,
)

CSVS = {"train": "Charades_v1_train.csv", "val": "Charades_v1_test.csv"}
VIDEO_EXTENSIONS = (".mp4", ".webm", ".mkv", ".avi")


def parse_actions(text: str) -> List[Tuple[int, float, float]]:
    """Parses an ``actions`` cell.

    ``"c092 11.90 21.20;c147 0.00 12.60"`` -> ``[(92, 11.9, 21.2), (147, 0.0, 12.6)]``.
    """
    actions = []
    for part in filter(None, (p.strip() for p in (text or "").split(";"))):
        name, start, end = part.split()
        if not name.startswith("c"):
            raise ValueError(f"action {part!r}: the class must be c000..c156")
        actions.append((int(name[1:]), float(start), float(end)))
    return actions


def frame_labels(
    actions: List[Tuple[int, float, float]], count: int, fps: float
) -> List[List[int]]:
    """Each frame's classes: the actions whose interval holds its time."""
    return [
        sorted({c for c, start, end in actions if start <= k / fps <= end})
        for k in range(count)
    ]


def _official_frames(frames_dir: str, video_id: str) -> List[str]:
    folder = os.path.join(frames_dir, video_id)
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if n.lower().endswith(".jpg"))
    return [os.path.join(folder, n) for n in names]


def prepare(
    annotations: str,
    videos: str,
    out: str,
    fps: float,
    workers: int,
    renditions: Sequence[float] = (),
) -> Prepared:
    """Prepares Charades from videos, or from the official frames when
    ``videos`` holds ``<id>/<id>-NNNNNN.jpg`` folders (then at 24 fps)."""
    from slowfast.datasets.renditions.files import write_renditions
    from workshop.dataprep.demo.writers import frame_list_rows, write_frame_list

    os.makedirs(out, exist_ok=True)
    found = index_files(videos, VIDEO_EXTENSIONS)
    failures, written, notes = [], [], []
    attempted = broken = 0
    used_official = False
    for split, name in CSVS.items():
        path = os.path.join(annotations, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not found (the official Charades CSVs)")
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        actions: Dict[str, list] = {}
        items, official = [], {}
        for row in rows:
            vid = row["id"]
            try:
                actions[vid] = parse_actions(row.get("actions", ""))
            except ValueError as err:
                failures.append((vid, str(err)))
                continue
            frames = _official_frames(videos, vid)
            if frames:
                official[vid] = [os.path.abspath(p) for p in frames]
            elif vid in found:
                pattern = vid + "-{:06d}.jpg"
                items.append((vid, found[vid], out, fps, pattern, tuple(renditions)))
            else:
                failures.append((vid, "neither frames nor a video under --videos"))
        results, failed = run_items(
            items, video_to_frames, workers, f"charades {split}"
        )
        failures += failed
        attempted, broken = attempted + len(items), broken + len(failed)
        decoded = {item[0]: paths for item, paths in zip(items, results) if paths}
        lines = []
        for index, vid in enumerate(
            v for v in actions if v in official or v in decoded
        ):
            paths = official.get(vid) or decoded[vid]
            rate = 24.0 if vid in official else fps
            labels = frame_labels(actions[vid], len(paths), rate)
            lines += frame_list_rows(vid, index, paths, labels)
        write_frame_list(os.path.join(out, f"{split}.csv"), lines)
        written.append(split)
        if official:
            notes.append(f"{split}: {len(official)} videos from the official frames")
            used_official = True
    write_renditions(out, [] if used_official else renditions)
    if used_official and renditions:
        notes.append("no renditions: the official frames have none")
    notes.append("test reads val.csv (Charades_v1_test.csv), as the reference")
    return Prepared(written, failures, notes, attempted, broken)
