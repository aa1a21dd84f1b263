#!/usr/bin/env python3
r"""Turns the official downloads of a dataset into the files the configs read.

Usage:
    python tools/prepare_dataset.py kinetics --annotations DIR --videos DIR --out DIR \
        [--short-side 256] [--renditions auto|none|0.7071,0.5] [--workers N] \
        [--cfg X.yaml]
    python tools/prepare_dataset.py ssv2 --annotations DIR --videos DIR --out DIR \
        [--fps 30]
    python tools/prepare_dataset.py charades --annotations DIR --videos DIR --out DIR \
        [--fps 24]

kinetics: the official CSVs (train.csv, validate.csv, test.csv) and the clips
found by YouTube id under --videos -> clips re-encoded to --short-side (H.264
settings chosen for decoding speed), by default also at 1/sqrt(2) and 1/2 of
it for multigrid's coarse grids (--renditions; DATASET.md, "Fast loading"),
list files and classids.json. ssv2: the three JSON files and <id>.webm -> JPEG
frames at --fps and frame lists. charades: Charades_v1_train.csv /
Charades_v1_test.csv with the videos, or the official frames folder
(Charades_v1_rgb) as --videos -> frame lists with per-frame labels.

The work runs in --workers processes with a progress line; it can be stopped
and run again (finished items are skipped). Items that failed are listed in
OUT/failed_<dataset>.txt with the reason; missing clips are not fatal. At the
end the result is checked as tools/verify_dataset.py checks it, with --cfg
(default: the dataset's SlowFast config) pointed at OUT. Exit status: 0; 1
when more than --max-failed (0.05) of the videos found fail to convert or
decode, or the check finds problems; 2 for a bad command line (a missing
folder).
"""

import argparse
import logging
import os
import sys
from typing import List, Optional

CONFIGS = {
    "kinetics": "configs/Kinetics/SLOWFAST_8x8_R50.yaml",
    "ssv2": "configs/SSv2/SLOWFAST_16x8_R50.yaml",
    "charades": "configs/Charades/SLOWFAST_16x8_R50.yaml",
}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The workshop package is not installed: it lies at the repository root.
sys.path.insert(0, REPO)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset", choices=sorted(CONFIGS))
    parser.add_argument("--annotations", required=True, help="the official files")
    parser.add_argument("--videos", required=True, help="the downloaded videos")
    parser.add_argument("--out", required=True, help="the dataset folder to write")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--short-side", type=int, default=256, help="kinetics")
    parser.add_argument(
        "--renditions",
        default="auto",
        help="also write the videos (frames) at these scales for multigrid's "
        "coarse grids (auto: 0.7071,0.5; none)",
    )
    parser.add_argument("--fps", type=float, default=None, help="ssv2 30, charades 24")
    parser.add_argument("--cfg", default=None, help="config for the final check")
    parser.add_argument("--no-verify", action="store_true", help="skip the check")
    parser.add_argument(
        "--max-failed",
        type=float,
        default=0.05,
        help="exit 1 when more than this fraction of the videos found fail to "
        "convert or decode (default 0.05; missing videos do not count)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.max_failed <= 1:
        parser.error(f"--max-failed {args.max_failed:g}: give a fraction in [0, 1]")
    args.renditions = _renditions(parser, args.renditions)
    return args


def _renditions(parser, text: str) -> List[float]:
    """The rendition scales of --renditions (auto, none, or a list)."""
    from slowfast.datasets.renditions.files import DEFAULT_SCALES

    if text == "auto":
        return list(DEFAULT_SCALES)
    if text == "none":
        return []
    try:
        scales = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        scales = []
    from slowfast.datasets.renditions.files import scales_problem

    problem = scales_problem(scales)
    if problem:
        parser.error(f"--renditions {text}: {problem} (or auto, none)")
    return scales


def verify(cfg_file: str, out: str, dataset: str, splits: List[str]) -> int:
    """Checks the prepared splits; returns the number of problems."""
    from slowfast.launch.config import load_run_config
    from workshop.dataprep.verify import print_reports, verify_split

    opts = ["DATA.PATH_TO_DATA_DIR", out, "DATA.PATH_PREFIX", out, "NUM_GPUS", "0"]
    opts += ["TRAIN.DATASET", dataset, "TEST.DATASET", dataset]
    cfg = load_run_config([cfg_file], opts)
    reports = [verify_split(cfg, split, allow_short=True) for split in splits]
    print_reports(reports)
    return sum(len(r.problems) for r in reports)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    from workshop.dataprep.prepare import charades, kinetics, ssv2
    from workshop.dataprep.prepare.common import write_failures

    for option, folder in (
        ("--annotations", args.annotations),
        ("--videos", args.videos),
    ):
        if not os.path.isdir(folder):
            print(f"error: {option} {folder}: no such folder", file=sys.stderr)
            return 2
    os.makedirs(args.out, exist_ok=True)
    try:
        if args.dataset == "kinetics":
            result = kinetics.prepare(
                args.annotations,
                args.videos,
                args.out,
                args.short_side,
                args.workers,
                args.renditions,
            )
        else:
            module = ssv2 if args.dataset == "ssv2" else charades
            fps = args.fps or (30.0 if args.dataset == "ssv2" else 24.0)
            result = module.prepare(
                args.annotations,
                args.videos,
                args.out,
                fps,
                args.workers,
                args.renditions,
            )
    except (FileNotFoundError, ValueError) as err:  # annotation files and columns
        print(f"error: {err}", file=sys.stderr)
        return 1
    failed_file = os.path.join(args.out, f"failed_{args.dataset}.txt")
    write_failures(failed_file, result.failures)
    print(f"{args.dataset}: wrote {', '.join(result.splits)} to {args.out}")
    for note in result.notes:
        print(f"note: {note}")
    if result.failures:
        print(
            f"{len(result.failures)} item(s) failed or are missing: see {failed_file}"
        )
    if result.broken > args.max_failed * result.attempted:
        print(
            f"error: {result.broken} of {result.attempted} videos failed to convert "
            f"or decode, more than --max-failed {args.max_failed:g} of them; their "
            f"reasons are in {failed_file}: fix them and run again (finished videos "
            "are skipped), or raise --max-failed to leave them out",
            file=sys.stderr,
        )
        return 1
    if args.no_verify:
        return 0
    cfg_file = args.cfg or os.path.join(REPO, CONFIGS[args.dataset])
    checked = result.splits if args.dataset == "kinetics" else ["train", "val"]
    return 1 if verify(cfg_file, args.out, args.dataset, checked) else 0


if __name__ == "__main__":
    sys.exit(main())
