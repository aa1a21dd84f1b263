"""Kinetics: the official annotation CSVs and downloaded clips -> our format.

Annotations: ``train.csv``, ``validate.csv`` (or ``val.csv``) and ``test.csv``
with the columns ``label,youtube_id,time_start,time_end,split`` (and maybe
``is_cc``); a test file may lack labels. Clips are found by YouTube id
anywhere under the videos folder, named ``<id>_<start:06d>_<end:06d>.<ext>``
(as the download scripts name them) or ``<id>.<ext>``. Output:
``videos/<split>/<id>_<start>_<end>.mp4`` re-encoded to a short side (no audio,
a keyframe every second), ``train.csv`` / ``val.csv`` / ``test.csv`` list files
(``path label``, paths relative to the output folder) and ``classids.json``.
With renditions, each clip is also written at smaller scales (``<name>.r71.mp4``
and ``<name>.r50.mp4``: short sides 182 and 128 for 256) and ``renditions.json``
lists them (``slowfast/datasets/renditions/files.py``).
"""

import csv
import json
import os
from typing import Dict, List, Sequence, Tuple

from slowfast.datasets.renditions.files import rendition_path, write_renditions
from workshop.dataprep.prepare.common import (
    Prepared,
    index_files,
    reencode,
    run_items,
)

VIDEO_EXTENSIONS = (".mp4", ".mkv", ".webm", ".avi", ".mov")
SPLIT_FILES = {"train": ("train.csv",), "val": ("validate.csv", "val.csv")}
SPLIT_FILES["test"] = ("test.csv",)


def read_annotations(path: str) -> List[Dict[str, str]]:
    """The rows of an official Kinetics CSV (label may be missing)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    needed = {"youtube_id", "time_start", "time_end"}
    if rows and not needed <= set(rows[0]):
        raise ValueError(f"{path}: expected the columns {sorted(needed)} (and label)")
    return rows


def clip_name(row: Dict[str, str]) -> str:
    """``<id>_<start:06d>_<end:06d>``, the download scripts' clip name."""
    start, end = int(float(row["time_start"])), int(float(row["time_end"]))
    return f"{row['youtube_id']}_{start:06d}_{end:06d}"


def _convert(item: Tuple[str, str, str, int, Tuple[float, ...]]) -> str:
    name, src, dst, short, scales = item
    paths = [dst] + [rendition_path(dst, scale) for scale in scales]
    if all(os.path.exists(p) for p in paths):
        return "skipped"
    reencode(src, dst, short, renditions=scales)
    return "done"


def prepare(
    annotations: str,
    videos: str,
    out: str,
    short: int,
    workers: int,
    renditions: Sequence[float] = (),
) -> Prepared:
    """Prepares Kinetics: clips re-encoded, lists, class ids and renditions.

    Args:
        annotations: folder of the official CSVs.
        videos: folder searched for the clips.
        out: output dataset folder.
        short: short side of the re-encoded clips.
        workers: processes.
        renditions: scales (below 1) every clip is also written at.
    """
    renditions = tuple(sorted(set(renditions), reverse=True))
    found = index_files(videos, VIDEO_EXTENSIONS)
    tables: Dict[str, List[Dict[str, str]]] = {}
    for split, names in SPLIT_FILES.items():
        paths = [os.path.join(annotations, name) for name in names]
        path = next((p for p in paths if os.path.exists(p)), None)
        if path:
            tables[split] = read_annotations(path)
    if "train" not in tables:
        raise FileNotFoundError(f"{annotations}: no train.csv (the official CSVs)")
    classes = sorted({row["label"] for row in tables["train"] if row.get("label")})
    class_ids = {name: index for index, name in enumerate(classes)}
    notes, failures, written = [], [], []
    test_labelled = "test" in tables and all(
        row.get("label") in class_ids for row in tables["test"]
    )
    if "test" in tables and not test_labelled:
        notes.append("test.csv has no labels: our test.csv lists the val clips")
    items, rows_by_split = [], {}
    for split, rows in tables.items():
        if split == "test" and not test_labelled:
            continue
        entries = []
        for row in rows:
            name = clip_name(row)
            src = found.get(name) or found.get(row["youtube_id"])
            label = class_ids.get(row.get("label", ""))
            if src is None:
                failures.append((name, "clip not found under the videos folder"))
                continue
            if label is None:
                failures.append((name, f"unknown class {row.get('label')!r}"))
                continue
            relative = f"videos/{split}/{name}.mp4"
            items.append((name, src, os.path.join(out, relative), short, renditions))
            entries.append((name, relative, label))
        rows_by_split[split] = entries
    _, failed = run_items(items, _convert, workers, "kinetics clips")
    failures += failed
    bad = {name for name, _ in failed}
    for split, entries in rows_by_split.items():
        _write_list(out, split, [(p, lab) for n, p, lab in entries if n not in bad])
        written.append(split)
    if "test" not in rows_by_split and "val" in rows_by_split:
        val = [(p, lab) for n, p, lab in rows_by_split["val"] if n not in bad]
        _write_list(out, "test", val)
        written.append("test")
        if "test" not in tables:
            notes.append("no test.csv: our test.csv lists the val clips")
    with open(os.path.join(out, "classids.json"), "w") as f:
        json.dump(class_ids, f, indent=1)
    write_renditions(out, renditions)
    return Prepared(written, failures, notes, len(items), len(failed))


def _write_list(out: str, split: str, rows: List[Tuple[str, int]]) -> None:
    from workshop.dataprep.demo.writers import write_kinetics_list

    write_kinetics_list(os.path.join(out, f"{split}.csv"), rows)
