#!/usr/bin/env python3
r"""Checks TRAIN.CUDA_GRAPHS on this machine's GPU against the eager step.

Two copies of the config's model train side by side on the same synthetic
batches, one with the eager step and one with the graphed step, at every batch
shape a multigrid run trains, in another order each round; the tool prints
per shape how far the graphed step's loss, gradients, BN statistics, weight
updates and GradScaler scale are from the eager step's (how:
``workshop/bench/graph_check.py``). The header says whether sub-batch BN ran
in the Triton kernels (without Triton: native BN).

Exit status: 0 when every step agrees, 1 when one differs (a step that fails
outright stops the tool with its traceback), 2 without a GPU or with a bad
config.

Example (on a GPU):
    python tools/dev/check_cuda_graphs.py \
        --cfg configs/Demo/SSv2_I3D_R50_study_gpu_5k.yaml
"""

import argparse
import os
import sys
from typing import List, Optional, Sequence

# The workshop package is not installed: it lies at the repository root.
sys.path.insert(
    0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)

import torch

from slowfast.launch.config import load_run_config
from slowfast.models.kernels.split_bn import fused_split_ok
from workshop.bench.graph_check import (
    TOLERANCE,
    ShapeResult,
    check,
    failures,
    table,
)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the command line (``--cfg``, ``--rounds``, KEY VALUE overrides)."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Trailing KEY VALUE config overrides apply to both copies.",
    )
    parser.add_argument("--cfg", required=True, help="config file")
    parser.add_argument("--rounds", type=int, default=3, help="visits of each shape")
    parser.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE ...")
    return parser.parse_args(argv)


def header(
    rounds: int,
    gpu: str,
    tolerance: float,
    results: Sequence[ShapeResult],
    triton: bool,
) -> str:
    """The tool's first line: the GPU, what ran sub-batch BN, the tolerance.

    Args:
        rounds: visits of each shape.
        gpu: the GPU's name.
        tolerance: the largest relative difference that passes.
        results: the check's results (their shapes' BN splits).
        triton: whether the Triton kernels take GPU batches (``fused_split_ok``).

    Returns:
        str: the line.
    """
    if not any(r.shape.bn_splits > 1 for r in results):
        split_bn = "no sub-batch BN (no shape splits its batch)"
    else:
        split_bn = "sub-batch BN in " + (
            "Triton kernels" if triton else "native BN (no Triton)"
        )
    return (
        f"{rounds} rounds on {gpu}, {split_bn}; relative L2 differences, graphed "
        f"against eager (tolerance {tolerance:.0e}):"
    )


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the check; returns the exit status."""
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("error: CUDA graphs need a GPU; none is visible", file=sys.stderr)
        return 2
    try:
        opts = args.opts + ["NUM_GPUS", "1"]
        cfg = load_run_config([args.cfg], opts)
    except (ValueError, KeyError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    results = check(cfg, args.rounds)
    tolerance = TOLERANCE["mixed" if cfg.TRAIN.MIXED_PRECISION else "fp32"]
    probe = torch.zeros(2, 1, 1, 1, 2, device="cuda")  # a batch split in two
    gpu = torch.cuda.get_device_name()
    print(header(args.rounds, gpu, tolerance, results, fused_split_ok(probe)))
    print(table(results))
    bad = failures(results, tolerance)
    for line in bad:
        print(f"FAILED {line}")
    if not bad:
        print("graphed and eager steps agree at every shape")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
