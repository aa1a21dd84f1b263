#!/usr/bin/env python3
"""Prints the resolved multigrid schedule of a config, without data or GPUs.

Usage:
    python tools/plan_multigrid.py --cfg X.yaml [--cfg Y.yaml] [KEY VALUE ...]
        [--num-procs N] [--dataset-size N] [--json] [--plot out.png] [--no-flops]

One row per long-cycle entry: LR stage, phase, global batch (and its
long-cycle factor), frames, crop, short-cycle crops, epochs, end epoch,
iterations for ``--dataset-size`` training clips, LR (no warm-up), BN splits,
BN sync group size and the cost of an iteration (relative to a baseline
iteration; unless ``--no-flops``, forward GFLOPs counted at each shape of its
short cycle); then totals, the iteration ratio and the compute ratio against
the configured baseline. Then the end-of-epoch work of the run and of its
baseline: checkpoints, validations and precise-BN passes (TRAIN.CHECKPOINT_PERIOD
and EVAL_PERIOD count baseline epochs of training, ``multigrid/periods.py``)
and the estimated share of precise BN and validation in each run's compute
(``--val-size`` val videos). ``--json`` prints one JSON object instead (no
GFLOPs).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from slowfast.config.derived import global_batch_size
from slowfast.engine.builders import build_schedule
from slowfast.launch.config import load_run_config
from slowfast.models.model_stats import clip_gflops_fn
from slowfast.multigrid import report
from slowfast.multigrid.periods import PeriodicWork, estimated_share
from slowfast.multigrid.report import format_table
from slowfast.utils import table
from slowfast.utils.distributed import num_processes

DEFAULT_DATASET_SIZE = 240000  # about Kinetics-400's training set
DEFAULT_VAL_SIZE = 20000  # about Kinetics-400's val set


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    """Parses the command line.

    Args:
        argv: arguments (default ``sys.argv[1:]``).

    Returns:
        argparse.Namespace: the options; ``opts`` holds the KEY VALUE pairs.
    """
    parser = argparse.ArgumentParser(
        prog="plan_multigrid",
        description="Print the resolved multigrid schedule of a config.",
    )
    parser.add_argument(
        "--cfg", dest="cfg_files", action="append", default=[], help="config file"
    )
    parser.add_argument(
        "--num-procs",
        type=int,
        default=None,
        help="training processes (default: from NUM_GPUS/NUM_CPU_PROCS x NUM_SHARDS)",
    )
    parser.add_argument(
        "--dataset-size",
        type=int,
        default=DEFAULT_DATASET_SIZE,
        help=f"training clips for iteration counts (default {DEFAULT_DATASET_SIZE})",
    )
    parser.add_argument(
        "--val-size",
        type=int,
        default=DEFAULT_VAL_SIZE,
        help=f"val videos for the cost of validation (default {DEFAULT_VAL_SIZE})",
    )
    parser.add_argument(
        "--min-crop",
        type=int,
        default=None,
        help="check against a larger smallest crop than the model's total stride",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--plot", default="", help="write a plot (PNG) here")
    parser.add_argument(
        "--no-flops",
        dest="flops",
        action="store_false",
        help="skip the GFLOPs column (counting builds the model: ~10 s at full size)",
    )
    parser.add_argument("opts", nargs="*", help="config overrides: KEY VALUE ...")
    return parser.parse_intermixed_args(argv)


def periodic_work(cfg, schedule, dataset_size: int, val_size: int) -> dict:
    """Checkpoints, validations and precise-BN passes of the run and of its
    baseline, with precise BN's and validation's estimated share of each.

    Returns:
        dict: ``{"unit_iters", "run": {...}, "baseline": {...}}``; each arm
        holds ``PeriodicWork.counts()``, ``iterations`` and ``share``
        (``periods.estimated_share``).
    """
    args = (cfg.TRAIN.CHECKPOINT_PERIOD, cfg.TRAIN.EVAL_PERIOD)
    precise = bool(cfg.BN.USE_PRECISE_STATS)
    crop_ratio = (cfg.DATA.TEST_CROP_SIZE / cfg.DATA.TRAIN_CROP_SIZE) ** 2
    val_iters = val_size / global_batch_size(cfg) * crop_ratio
    out = {}
    for arm, build, iters in (
        ("run", PeriodicWork.for_run, schedule.total_iters(dataset_size)),
        ("baseline", PeriodicWork.for_baseline, schedule.baseline_iters(dataset_size)),
    ):
        work = build(schedule, dataset_size, *args, precise)
        share = estimated_share(work, iters, cfg.BN.NUM_BATCHES_PRECISE, val_iters)
        out[arm] = dict(work.counts(), iterations=iters, share=share)
        out["unit_iters"] = work.unit_iters
    return out


def format_work(work: dict, cfg) -> str:
    """The ``periodic_work`` table: one row for the run, one for its baseline."""
    rows = []
    for arm in ("run", "baseline"):
        w = work[arm]
        share = w["share"]
        rows.append(
            [
                "this config" if arm == "run" else arm,
                w["epochs"],
                w["iterations"],
                w["checkpoints"],
                w["validations"],
                w["precise_bn"],
                f"{100 * share['precise_bn']:.1f}%",
                f"{100 * share['validation']:.1f}%",
            ]
        )
    head = ["arm", "epochs", "iters", "checkpoints", "validations", "precise BN"]
    head += ["precise BN share", "validation share"]
    return (
        f"end-of-epoch work: TRAIN.CHECKPOINT_PERIOD {cfg.TRAIN.CHECKPOINT_PERIOD} "
        f"and TRAIN.EVAL_PERIOD {cfg.TRAIN.EVAL_PERIOD} baseline epochs of "
        f"{work['unit_iters']} iterations, precise BN "
        f"{'on' if cfg.BN.USE_PRECISE_STATS else 'off'}\n"
        + table.format_table(head, rows)
        + "\nshares: estimated compute of the run, a forward pass at a third of a "
        "training iteration (--val-size videos per validation); checkpoint writing "
        "is not estimated"
    )


def main(argv: Optional[list] = None) -> int:
    """Runs the tool.

    Args:
        argv: arguments (default ``sys.argv[1:]``).

    Returns:
        int: exit status.
    """
    args = parse_args(argv)
    try:
        cfg = load_run_config(args.cfg_files, args.opts)
        num_procs = args.num_procs or num_processes(cfg)
        # The trainer's checks: the model's stride and fewest frames.
        schedule = build_schedule(cfg, num_procs)
        if args.min_crop is not None:
            schedule.validate(min_crop=args.min_crop)
    except ValueError as err:
        print(f"plan_multigrid: error: {err}", file=sys.stderr)
        return 2
    if args.plot:
        from slowfast.multigrid.plot import plot_schedule

        plot_schedule(schedule, args.plot, args.dataset_size)
    work = periodic_work(cfg, schedule, args.dataset_size, args.val_size)
    if args.json:
        out = report.to_dict(schedule, args.dataset_size)
        out["periodic_work"] = work
        print(json.dumps(out))
        return 0
    gflops_fn = clip_gflops_fn(cfg) if args.flops else None
    frames, crop = cfg.DATA.NUM_FRAMES, cfg.DATA.TRAIN_CROP_SIZE
    sources = ", ".join(args.cfg_files) or "defaults"
    print(f"config: {sources}" + (f" + {' '.join(args.opts)}" if args.opts else ""))
    print(
        f"base shape: {global_batch_size(cfg)} x {frames} x {crop}^2 "
        "(global batch x frames x crop), "
        f"{num_procs} process{'es' if num_procs != 1 else ''}, long cycle "
        f"{'on' if schedule.long_cycle else 'off'}, short cycle "
        f"{'on (' + schedule.short_mode + ' crops)' if schedule.short_cycle else 'off'}"
    )
    print(
        f"iterations for {args.dataset_size} training clips (--dataset-size); "
        "batch = global clips at the long-cycle shape; LR without warm-up"
        + (f"; {gflops_fn(frames, crop):.1f} GFLOPs per base clip" if gflops_fn else "")
    )
    print(format_table(schedule, args.dataset_size, gflops_fn))
    print()
    print(format_work(work, cfg))
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
