#!/usr/bin/env python3
"""Checks a dataset before training: list/label files, missing and undecodable
files, videos shorter than the clip span and labels outside the class range.

Usage:
    python tools/verify_dataset.py --cfg configs/X.yaml [--split S] [KEY VALUE ...]

Prints a summary per split and every bad entry (path and reason); exits 1 when
anything is wrong, 0 when the data is clean (2 on a config error).
"""

import argparse
import logging
import os
import sys
from typing import Optional, Sequence

# The workshop package is not installed: it lies at the repository root.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from slowfast.config import ConfigError
from slowfast.launch.config import load_run_config
from slowfast.launch.parser import reject_options_among_overrides
from workshop.dataprep.verify import default_splits, print_reports, verify_split


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cfg",
        dest="cfg_files",
        action="append",
        default=[],
        help="config file (repeatable; later files win)",
    )
    parser.add_argument(
        "--split",
        choices=("train", "val", "test", "all"),
        default="all",
        help="split to check (default: all splits with their own files)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="decoding processes (default 0: in this process)",
    )
    parser.add_argument(
        "--allow-short",
        action="store_true",
        help="report videos shorter than the clip span as warnings only",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="decode every frame of frame lists (default: 3 per video)",
    )
    parser.add_argument(
        "opts",
        nargs=argparse.REMAINDER,
        default=[],
        help="config overrides as KEY VALUE pairs (after the options)",
    )
    args = parser.parse_args(argv)
    reject_options_among_overrides(parser, args.opts)
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the verification; returns the exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        cfg = load_run_config(args.cfg_files, args.opts)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    splits = default_splits(cfg) if args.split == "all" else [args.split]
    reports = [
        verify_split(
            cfg, s, workers=args.workers, allow_short=args.allow_short, full=args.full
        )
        for s in splits
    ]
    print_reports(reports)
    bad = sum(len(r.problems) for r in reports)
    entries = sum(r.entries for r in reports)
    status = "FAILED" if bad else "OK"
    print(
        f"{status}: {bad} bad of {entries} entries in {len(reports)} split(s) "
        f"({os.path.abspath(cfg.DATA.PATH_TO_DATA_DIR or '.')})"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
