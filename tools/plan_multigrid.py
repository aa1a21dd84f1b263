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
(``--val-size`` val videos). Then each arm's training time on one process,
from per-shape step times: measured ones from the GPU check's JSON
(``--step-times gpu_check.json``, ``tools/dev/gpu_check.py``), where a shape was
not measured the base shape's time scaled by the shape's compute, marked
"est." (``--base-step-ms`` gives that base time without a check). ``--json``
prints one JSON object instead (no GFLOPs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, Optional

from slowfast.config.derived import global_batch_size
from slowfast.launch.config import load_run_config
from slowfast.models.model_stats import clip_gflops_fn
from slowfast.multigrid import MultigridSchedule, report
from slowfast.multigrid.periods import PeriodicWork, estimated_share
from slowfast.multigrid.report import schedule_table
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
    parser.add_argument(
        "--step-times",
        default="",
        help="the GPU check's JSON (tools/dev/gpu_check.py): measured step times",
    )
    parser.add_argument(
        "--step-config",
        default="",
        help="its config's results (default: the last --cfg's file name)",
    )
    parser.add_argument(
        "--base-step-ms",
        type=float,
        default=None,
        help="one process's step at the base shape, ms (estimates without a check)",
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
    out: Dict[str, Any] = {}
    for arm, iters in (
        ("run", schedule.total_iters(dataset_size)),
        ("baseline", schedule.baseline_iters(dataset_size)),
    ):
        work = PeriodicWork.for_schedule(
            schedule, dataset_size, *args, precise, baseline=arm == "baseline"
        )
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


TIME_HINT = (
    "training time: not estimated; give --step-times (the JSON of "
    "tools/dev/gpu_check.py) or --base-step-ms"
)


def step_time_fn(cfg, schedule, args):
    """``shape -> (ms, measured)`` from the check's JSON and/or
    ``--base-step-ms``; None when neither is given.

    The configuration's step (sub-batch BN, CUDA graphs when TRAIN.CUDA_GRAPHS)
    for its shapes, plain BN at the baseline's base shape (one BN group);
    a shape without a measurement: the base shape's time of the same kind
    times the shape's compute over the base shape's.
    """
    measured = {}
    if args.step_times:
        name = args.step_config
        if not name and args.cfg_files:
            name = os.path.splitext(os.path.basename(args.cfg_files[-1]))[0]
        measured = measured_steps(args.step_times, name)
    elif args.base_step_ms is None:
        return None
    mode = "graphs" if cfg.TRAIN.CUDA_GRAPHS else "eager"
    s = schedule
    base = (s.base_batch // s.num_procs, s.num_frames, s.crop_size)

    def step_ms(shape):
        clips, frames, crop, splits = shape
        kind = "plain" if shape[:3] == base and splits == 1 else "sub"
        if (kind, mode, shape[:3]) in measured:
            return measured[(kind, mode, shape[:3])], True
        anchor = measured.get((kind, mode, base), args.base_step_ms)
        if anchor is None:
            raise ValueError(
                f"{args.step_times} has no {kind} BN {mode} step at the base "
                f"shape {base}; give --base-step-ms"
            )
        cost = clips * frames * crop**2 / (base[0] * base[1] * base[2] ** 2)
        return anchor * cost, False

    return step_ms


def measured_steps(path: str, name: str) -> dict:
    """``(bn kind, mode, (clips, frames, crop)) -> ms`` of a config's cells in
    the GPU check's JSON (``stages.model_step.configs``)."""
    with open(path) as f:
        check = json.load(f)
    configs = check.get("stages", {}).get("model_step", {}).get("configs", {})
    if name not in configs:
        raise ValueError(
            f"{path} has no model_step results for {name!r} (it has "
            f"{sorted(configs) or 'none'}); pick one with --step-config"
        )
    return {
        (c["bn"], c["mode"], (c["clips"], c["frames"], c["crop"])): c["ms"]
        for c in configs[name].get("cells", [])
        if c.get("status") == "ok" and c.get("ms")
    }


def format_time(timing: dict, work: dict) -> str:
    """Each arm's training time, with precise BN and validation by their
    estimated shares (``periodic_work``), and the step times used."""
    lines = ["training time on one process (steps; + precise BN and validation):"]
    hours = {}
    for arm in ("run", "baseline"):
        t, share = timing[arm], work[arm]["share"]
        total = t["seconds"] / (1 - share["precise_bn"] - share["validation"])
        hours[arm] = total / 3600
        measured = sum(s["measured"] for s in t["shapes"])
        label = "this config" if arm == "run" else "baseline"
        lines.append(
            f"  {label}: {t['seconds'] / 3600:.1f} h of steps, {hours[arm]:.1f} h "
            f"in all ({measured} of {len(t['shapes'])} shapes measured)"
        )
    ratio = hours["baseline"] / hours["run"] if hours["run"] else float("nan")
    lines.append(f"  {ratio:.2f}x less than the baseline")
    rows = [
        [
            arm,
            "x".join(map(str, s["shape"][:3])),
            s["shape"][3],
            s["iterations"],
            f"{s['ms']:.1f}" + ("" if s["measured"] else " est."),
        ]
        for arm in ("run", "baseline")
        for s in timing[arm]["shapes"]
    ]
    head = ["arm", "clips x frames x crop", "BN splits", "iters", "ms/step"]
    return "\n".join(lines) + "\n" + table.format_table(head, rows)


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
        schedule = MultigridSchedule.from_cfg(cfg, num_procs)
        if args.min_crop is not None:
            schedule.validate(min_crop=args.min_crop)
    except ValueError as err:
        print(f"plan_multigrid: error: {err}", file=sys.stderr)
        return 2
    if args.plot:
        from slowfast.multigrid.plot import plot_schedule

        plot_schedule(schedule, args.plot, args.dataset_size)
    work = periodic_work(cfg, schedule, args.dataset_size, args.val_size)
    try:
        times = step_time_fn(cfg, schedule, args)
    except (OSError, ValueError, KeyError) as err:
        print(f"plan_multigrid: error: {err}", file=sys.stderr)
        return 2
    timing = None
    if times is not None:
        timing = report.training_time(schedule, args.dataset_size, times)
    if args.json:
        out = report.to_dict(schedule, args.dataset_size)
        out["periodic_work"] = work
        out["training_time"] = timing
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
    print(schedule_table(schedule, args.dataset_size, gflops_fn))
    print()
    print(format_work(work, cfg))
    print()
    print(format_time(timing, work) if timing else TIME_HINT)
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
