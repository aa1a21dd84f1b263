#!/usr/bin/env python3
r"""Adds renditions to a dataset prepared elsewhere (DATASET.md, "Fast loading").

``tools/prepare_dataset.py`` writes renditions while it prepares a dataset
from the official downloads. For data prepared another way (for example with
PySlowFast's instructions), this writes them next to the training videos or
frames the config's training split lists, without touching the originals, and
then ``renditions.json`` in DATA.PATH_TO_DATA_DIR, so that training reads
them.

Usage:
    python tools/add_renditions.py --cfg configs/Kinetics/I3D_8x8_R50_multigrid.yaml \
        DATA.PATH_TO_DATA_DIR /data/kinetics DATA.PATH_PREFIX /data/kinetics \
        [--renditions auto|0.7071,0.5] [--workers N]

The work runs in --workers processes with a progress line and can be stopped
and run again (finished videos are skipped). Videos that fail are listed with
the reason in DATA.PATH_TO_DATA_DIR/failed_renditions.txt, and the manifest is
written only when none failed. Exit status: 0, or 1 when some failed.
"""

import argparse
import logging
import os
import sys
from typing import List, Optional

# The workshop package is not installed: it lies at the repository root.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the command line (config overrides may sit among the options)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cfg", required=True, help="config of the training run")
    parser.add_argument("opts", nargs="*", help="config overrides: KEY VALUE ...")
    parser.add_argument("--renditions", default="auto", help="auto or 0.7071,0.5")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_intermixed_args(argv)
    try:
        if args.renditions == "auto":
            from slowfast.datasets.renditions.files import DEFAULT_SCALES

            args.renditions = list(DEFAULT_SCALES)
        else:
            args.renditions = [float(v) for v in args.renditions.split(",") if v]
    except ValueError:
        args.renditions = []
    from slowfast.datasets.renditions.files import scales_problem

    problem = scales_problem(args.renditions)
    if problem:
        parser.error(f"--renditions: {problem}")
    return args


def training_items(cfg, scales) -> list:
    """One work item per training video: (id, kind, paths, scales)."""
    from slowfast.datasets.build import dataset_name
    from slowfast.datasets.charades import Charades
    from slowfast.datasets.kinetics import Kinetics
    from slowfast.datasets.ssv2 import Ssv2

    name = dataset_name(cfg, "train").lower()
    items = []
    if name == "kinetics":
        _, entries, _ = Kinetics.read_list(cfg, "train")
        for path in dict.fromkeys(e[0] for e in entries):  # each video once
            if cfg.DATA.DECODING_BACKEND == "frames":
                items.append((path, "folder", (path,), scales))
            else:
                items.append((path, "video", (path,), scales))
    elif name == "ssv2":
        _, _, labelled, videos, _ = Ssv2.read_lists(cfg, "train")
        for vid, _ in labelled:
            if vid in videos and videos[vid].paths:
                items.append((vid, "frames", tuple(videos[vid].paths), scales))
    elif name == "charades":
        _, videos, _ = Charades.read_list(cfg, "train")
        for video in videos.values():
            items.append((video.name, "frames", tuple(video.paths), scales))
    else:
        raise ValueError(f"TRAIN.DATASET {name!r}: no renditions for this dataset")
    return items


def _add(item) -> str:
    from slowfast.datasets.decoding.frames import list_frame_dir
    from slowfast.datasets.renditions.files import rendition_path
    from workshop.dataprep.prepare.common import (
        add_frame_renditions,
        add_video_renditions,
    )

    _, kind, paths, scales = item
    if kind == "folder":  # listed here: a bad folder fails this item only
        return add_frame_renditions(list_frame_dir(paths[0]), scales)
    if kind == "frames":
        return add_frame_renditions(paths, scales)
    if all(os.path.exists(rendition_path(paths[0], s)) for s in scales):
        return "skipped"
    if not os.path.exists(paths[0]):
        raise FileNotFoundError(f"{paths[0]}: no such file")
    add_video_renditions(paths[0], scales)
    return "done"


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    from slowfast.datasets.lists import DataError
    from slowfast.datasets.renditions.files import write_renditions
    from slowfast.launch.config import load_run_config
    from workshop.dataprep.prepare.common import run_items, write_failures

    cfg = load_run_config([args.cfg], args.opts)
    data_dir = cfg.DATA.PATH_TO_DATA_DIR
    try:
        items = training_items(cfg, tuple(args.renditions))
    except (DataError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    _, failures = run_items(items, _add, args.workers, "renditions")
    failed_file = os.path.join(data_dir, "failed_renditions.txt")
    write_failures(failed_file, failures)
    if failures:
        print(
            f"{len(failures)} of {len(items)} videos failed (see {failed_file}); "
            "renditions.json not written: fix them and run again"
        )
        return 1
    path = write_renditions(data_dir, args.renditions)
    print(f"renditions {args.renditions} of {len(items)} training videos; {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
