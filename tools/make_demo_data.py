#!/usr/bin/env python3
r"""Generates the Moving Digits demo datasets (Kinetics, SSv2 and Charades formats).

Examples:
    python tools/make_demo_data.py --out data/demo
    python tools/make_demo_data.py --out data/demo_bench --size bench
    python tools/make_demo_data.py --out data/study --size study --datasets ssv2
    python tools/make_demo_data.py --out data/study_large --size study_large \
        --datasets ssv2 --workers 16
    python tools/make_demo_data.py --out /tmp/d --size tiny --datasets kinetics
    python tools/make_demo_data.py --out data/footage --footage 24

``--footage N`` writes Kinetics-like downloads instead of Moving Digits (N
training and N/4 validation clips: short side 256, 10 s, 30 fps, textured,
moving camera, H.264 as downloaded; ``workshop/dataprep/demo/footage.py``) in
the official download's folder structure (``annotations/``, ``downloads/``), for
``tools/prepare_dataset.py kinetics`` and the loader benchmark, and the same
clips as JPEG frame folders with renditions (``frames/``, a Kinetics dataset
for ``DATA.DECODING_BACKEND frames``).
"""

import argparse
import logging
import os
import sys
from typing import List, Optional

# The workshop package is not installed: it lies at the repository root.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workshop.dataprep.demo import DATASETS, SIZES, make_demo_data
from workshop.dataprep.demo.specs import get_spec


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the command line.

    Args:
        argv: arguments (None: ``sys.argv[1:]``).

    Returns:
        argparse.Namespace: out, size, datasets, seed, workers.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/demo", help="output root folder")
    parser.add_argument("--size", default="small", choices=SIZES)
    parser.add_argument(
        "--datasets",
        default=",".join(DATASETS),
        help=f"comma-separated subset of {','.join(DATASETS)}",
    )
    # The option's former name, kept so that old commands still run.
    parser.add_argument("--layouts", dest="datasets", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes rendering videos (the files are the same for any number)",
    )
    parser.add_argument(
        "--footage",
        type=int,
        default=0,
        help="write N Kinetics-like training clips (+N/4 val) instead",
    )
    args = parser.parse_args(argv)
    args.datasets = [name.strip() for name in args.datasets.split(",") if name.strip()]
    unknown = [name for name in args.datasets if name not in DATASETS]
    if unknown or not args.datasets:
        parser.error(
            f"--datasets {unknown or '(empty)'}: expected names from {DATASETS}"
        )
    for dataset in args.datasets:
        try:
            get_spec(dataset, args.size)
        except ValueError as err:
            parser.error(f"--size {args.size}: {err}")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the generator and prints one summary line per dataset.

    Args:
        argv: arguments (None: ``sys.argv[1:]``).

    Returns:
        int: exit status: 0; 2 for a bad argument or an --out folder holding
        files the generator did not write (left untouched).
    """
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if args.footage > 0:
        from workshop.dataprep.demo.footage import make_footage

        files = make_footage(
            args.out, args.footage, max(1, args.footage // 4), args.seed
        )
        print(
            f"footage: {len(files)} clips in {args.out}/downloads, CSVs in "
            f"{args.out}/annotations"
        )
        return 0
    try:
        for summary in make_demo_data(
            args.out, args.size, args.datasets, args.seed, args.workers
        ):
            print(summary.line())
    except FileExistsError as err:  # a folder the generator did not write
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
