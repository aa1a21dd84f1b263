"""Compares kept study results across studies: one table, arms paired by seed.

    python projects/multigrid/compare.py BASELINE_DIR NAME=DIR [NAME=DIR ...]
        [--reference ARM]

BASELINE_DIR is a folder of kept results (``results/multigrid_study/<study>``)
holding the baseline's runs; each ``NAME=DIR`` adds another folder's runs
under the arm name ``NAME`` (for example the same recipe with one key changed:
a sweep of ``MULTIGRID.SHORT_CYCLE_FACTORS`` run as one study per value). The
table is the study's own (``multigrid_study.results.markdown_table``): each arm's
mean with its 95% interval over seeds, and its difference to the baseline
paired by seed (same seed, same test videos). Runs made with another test set
than the baseline's are refused, so that only paired results are compared.

``--reference ARM`` pairs the arms with another arm of BASELINE_DIR than its
baseline: ``--reference long_short`` compares a variant of default multigrid
(with renditions, say) with default multigrid, seed by seed.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from multigrid_study.archive import load_kept  # noqa: E402
from multigrid_study.results import aggregate, markdown_table, metric_key  # noqa: E402


def combine(
    baseline_dir: str, arms: List[str], reference: str = "baseline"
) -> List[dict]:
    """The ``reference`` arm's runs of ``baseline_dir`` as the baseline, and each
    ``NAME=DIR``'s runs (all arms but the baseline) renamed ``NAME``."""
    results = [
        dict(r, arm="baseline")
        for r in load_kept(baseline_dir)
        if r["arm"] == reference and r["budget"] == 1
    ]
    if not results:
        raise ValueError(f"{baseline_dir}: holds no {reference} run at budget 1")
    videos = {r["test_videos"] for r in results}
    for spec in arms:
        name, sep, folder = spec.partition("=")
        if not sep or not name or not folder:
            raise ValueError(f"{spec!r}: give arms as NAME=DIR")
        for result in load_kept(folder):
            if result["arm"] == "baseline":
                continue
            if result["test_videos"] not in videos:
                raise ValueError(
                    f"{folder}: {result['arm']} seed {result['seed']} was tested "
                    f"on {result['test_videos']} videos, the baseline on "
                    f"{sorted(videos)}: not paired"
                )
            results.append(dict(result, arm=name))
    return results


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("baseline", help="folder of kept results with the baseline")
    parser.add_argument("arms", nargs="+", help="NAME=DIR: a folder's runs as arm NAME")
    parser.add_argument(
        "--reference",
        default="baseline",
        help="the arm of the first folder the others are paired with",
    )
    return parser.parse_args(argv)


def main(argv: Optional[list] = None) -> int:
    args = parse_args(argv)
    try:
        results = combine(args.baseline, args.arms, args.reference)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    multi_label = any(r.get("test_map") is not None for r in results)
    rows = aggregate(results, metric_key(multi_label))
    print(markdown_table(rows, multi_label, args.reference), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
