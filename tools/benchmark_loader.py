#!/usr/bin/env python3
r"""Benchmarks the training data loader at every multigrid mini-batch shape.

Shapes: the long-cycle base shapes (MULTIGRID.LONG_CYCLE_FACTORS times the
config's NUM_FRAMES / TRAIN_CROP_SIZE) and the two short-cycle crops at the
config's shape, with one training process's multigrid batch (its share of
TRAIN.BATCH_SIZE among the machine's NUM_GPUS or NUM_CPU_PROCS processes,
times ``round(T S^2 / (t s^2))``) and BN splits; with ``--all-shapes`` also the
short cycle's crops at the other long-cycle shapes (every batch a multigrid run
trains). For each decoded-frame-cache setting and worker count the project's
own loader (``construct_loader`` with a per-shape ``batches_fn``) is timed after
warm-up batches; the tables give medians over the timed batches. With 0 workers a
sample of items is also timed in-process, split into decode and transform.
``--model`` adds the throughput of the trainer's step (forward, loss and its
statistics, backward, SGD update) per shape, alone and fed by the loader
(loader workers and model share the CPU); alone, with its FLOP rate and
efficiency relative to the base shape, eager, compiled or CUDA-graphed
(``--step``; see ``workshop/bench/model_step.py``). ``--model-only`` times the
model alone, on synthetic batches: no data needed. The model runs where the
trainer runs it (GPU 0 when NUM_GPUS > 0, with TRAIN.MIXED_PRECISION as in
training); ``--bn sub,plain`` compares multigrid's sub-batch BN with one BN
group per batch.

Example:
    python tools/benchmark_loader.py --cfg configs/Demo/Kinetics_I3D_tiny_bench.yaml \
        --workers 0,1,2 --iters 10 --warmup 3 --cache off,on --model
    python tools/benchmark_loader.py --model-only \
        --cfg configs/Demo/Kinetics_I3D_tiny_multigrid.yaml \
        --memory-format contiguous,channels_last_3d
    python tools/benchmark_loader.py --model-only --bn sub,plain \
        --cfg configs/Demo/SSv2_I3D_R50_study_gpu.yaml   # on a GPU
"""

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Dict, List, Optional, Sized, cast

# The workshop package is not installed: it lies at the repository root.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
from fvcore.common.config import CfgNode

from slowfast.datasets import SamplingGrid, construct_loader
from slowfast.datasets.renditions.files import suffix
from slowfast.launch.config import load_run_config
from slowfast.utils.table import format_table
from workshop.bench.capacity import (
    CAPACITY_HEADERS,
    ShapeLoad,
    capacity_rows,
    workers_needed,
)
from workshop.bench.loader_timing import (
    Batches,
    ShapeSwitch,
    prefill_cache,
    time_loader,
    time_stages,
    torch_threads,
)
from workshop.bench.model_step import (
    MEMORY_FORMATS,
    MODEL_HEADERS,
    PRECISIONS,
    STEP_MODES,
    Shape,
    TimedStep,
    base_shape_index,
    model_rows,
    multigrid_shapes,
    run_shapes,
)


def _int_list(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _name_list(text: str) -> List[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    """The options of the model rows (``--model``, ``--model-only``)."""
    parser.add_argument("--model", action="store_true", help="time the model too")
    parser.add_argument(
        "--model-only",
        action="store_true",
        help="time the model alone on synthetic batches (no data needed)",
    )
    parser.add_argument(
        "--memory-format",
        type=lambda text: [f.strip() for f in text.split(",") if f.strip()],
        default=["default"],
        help="model memory formats, compared round-robin: " + ", ".join(MEMORY_FORMATS),
    )
    parser.add_argument(
        "--bn",
        type=lambda text: [v.strip() for v in text.split(",") if v.strip()],
        default=["sub"],
        help="BN of the model rows, compared round-robin: sub (the shape's "
        "multigrid BN splits), plain (one group per batch), or sub,plain",
    )
    parser.add_argument(
        "--precision",
        type=_name_list,
        default=[],
        help="autocast of the model rows, compared round-robin: fp32, fp16, bf16 "
        "(default: the config's TRAIN.MIXED_PRECISION)",
    )
    parser.add_argument(
        "--step",
        type=_name_list,
        default=["eager"],
        help="how the model rows run the trainer's step, compared round-robin: "
        "eager, compile (torch.compile, static shapes; each shape compiles in "
        "the warm-up), graphs (one CUDA graph per shape; GPU only), e.g. "
        "eager,compile,graphs",
    )
    parser.add_argument(
        "--all-shapes",
        action="store_true",
        help="every batch shape a long + short cycle run trains (the short "
        "cycle's crops at every long-cycle shape too), not only the long-cycle "
        "shapes and the short cycle's crops at the base shape",
    )
    parser.add_argument(
        "--model-clips-per-s",
        type=float,
        default=0.0,
        help="estimate the loader's capacity for a model that trains this many clips "
        "per second at the base shape (e.g. measured on the GPU); without it, "
        "--model's speeds measured here are used",
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="model threads (0: torch's)"
    )


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the command line (config overrides may sit among the options)."""
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cfg", required=True, help="config file")
    parser.add_argument("opts", nargs="*", help="config overrides: KEY VALUE ...")
    parser.add_argument("--workers", type=_int_list, default=[0, 1, 2], help="0,1,2")
    parser.add_argument("--iters", type=int, default=10, help="timed batches")
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches first")
    parser.add_argument("--split", default="train", choices=["train"])
    parser.add_argument("--cache", default="off", help="frame cache: off, on, off,on")
    parser.add_argument(
        "--stage-items",
        type=int,
        default=24,
        help="items for decode/transform (0: skip)",
    )
    _add_model_options(parser)
    parser.add_argument("--json", default="", help="also write the results here")
    args = parser.parse_intermixed_args(argv)
    _check_args(parser, args)
    args.model = args.model or args.model_only
    return args


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Rejects option values the benchmark cannot run (``parser.error``)."""
    args.cache = [c.strip() for c in args.cache.split(",") if c.strip()]
    if not args.cache or any(c not in ("off", "on") for c in args.cache):
        parser.error(f"--cache {args.cache}: use off, on or off,on")
    if args.iters < 1 or args.warmup < 0 or not args.workers:
        parser.error("--iters must be >= 1, --warmup >= 0, --workers non-empty")
    bad = [f for f in args.memory_format if f not in MEMORY_FORMATS]
    if bad or not args.memory_format:
        parser.error(f"--memory-format {bad}: use {', '.join(MEMORY_FORMATS)}")
    bad = [v for v in args.bn if v not in ("sub", "plain")]
    if bad or not args.bn:
        parser.error(f"--bn {bad}: use sub, plain or sub,plain")
    bad = [p for p in args.precision if p not in PRECISIONS]
    if bad:
        parser.error(f"--precision {bad}: use {', '.join(PRECISIONS)}")
    bad = [m for m in args.step if m not in STEP_MODES]
    if bad or not args.step:
        parser.error(f"--step {bad}: use some of {','.join(STEP_MODES)}")
    if args.warmup < 1 and set(args.step) & {"compile", "graphs"}:
        parser.error(
            "--step compile/graphs: --warmup 1 or more (the first step of "
            "each shape compiles or captures)"
        )


def distinct_clips(shapes: List[Shape]) -> List[Shape]:
    """The first shape of each (frames, crop, batch): shapes that differ only
    in BN splits load alike."""
    seen, kept = set(), []
    for shape in shapes:
        if (shape.frames, shape.crop, shape.batch) not in seen:
            seen.add((shape.frames, shape.crop, shape.batch))
            kept.append(shape)
    return kept


def measure_setting(args, cache: str, workers: int, shapes, step) -> tuple:
    """Stage rows (0 workers only) and loader rows of one cache/worker setting.

    Loading alone runs with 1 torch thread in this process (as in a worker);
    the loader feeding the model runs with the model's threads.
    """
    opts = list(args.opts) + ["DATA_LOADER.NUM_WORKERS", str(workers)]
    opts += ["DATA_LOADER.FRAME_CACHE", str(cache == "on")]
    cfg = load_run_config([args.cfg], opts)
    switch = ShapeSwitch(cfg, min(shapes, key=lambda s: s.batch))
    loader = construct_loader(cfg, args.split, batches_fn=switch)
    stage_rows, loader_rows = [], []
    grids = [SamplingGrid.from_shape(cfg, s.frames, s.crop) for s in shapes]
    if cache == "on":
        fill = prefill_cache(loader.dataset, cfg.RNG_SEED, grids)
        print(f"(cache on, {workers} workers: prefill took {fill:.1f} s)", flush=True)
    if workers == 0 and args.stage_items > 0:
        dataset = loader.dataset
        timings = time_stages(dataset, grids, args.stage_items, cfg.RNG_SEED)
        for shape, grid, ms in zip(shapes, grids, timings):
            scale = dataset.rendition(grid) if hasattr(dataset, "rendition") else None
            source = suffix(scale)[1:] if scale else "full"
            row = [cache, shape.kind, shape.frames, shape.crop, shape.batch, source]
            row += [ms["decode"], ms["transform"], ms["total"], 1000 / ms["total"]]
            row += [ms["total"] * shape.batch]
            stage_rows.append(row)
        base = stage_rows[-len(shapes) + base_shape_index(cfg, shapes)][-1]
        for row in stage_rows[-len(shapes) :]:
            row.append(f"{row[-1] / base:.2f}x")
    batches = Batches(loader)
    for shape in shapes:
        row = [cache, workers, shape.kind, shape.frames, shape.crop, shape.batch]
        if shape.batch > len(cast(Sized, loader.dataset)):
            loader_rows.append(row + ["(batch > dataset)"])
            continue
        switch.shape = shape
        with torch_threads(1):
            res = time_loader(batches, shape, args.warmup, args.iters)
        row += [res["ms_per_batch"], res["clips_per_s"], res["clips_per_s_overall"]]
        if step is not None:
            fed = time_loader(batches, shape, args.warmup, args.iters, step)
            row += [fed["clips_per_s"], fed["data_wait_pct"]]
        loader_rows.append(row)
    return stage_rows, loader_rows


STAGE_HEADERS = ["cache", "shape", "t", "crop", "batch", "source"]
STAGE_HEADERS += ["decode ms", "transform ms", "total ms", "clips/s/core"]
STAGE_HEADERS += ["ms/iter", "vs base"]
LOADER_HEADERS = ["cache", "workers", "shape", "t", "crop", "batch", "ms/batch"]
LOADER_HEADERS += ["clips/s", "clips/s all"]


def _model_cells(row: list) -> list:
    """A model row for printing (GFLOP/clip with 3 significant digits)."""
    return row[:9] + [f"{row[9]:.3g}"] + row[10:]


def _device_name(cfg, precisions: list) -> str:
    """Where the model steps run, in words; the config's autocast unless the
    rows name their own ``precisions``."""
    on_gpu = cfg.NUM_GPUS > 0 and torch.cuda.is_available()
    name = torch.cuda.get_device_name(0) if on_gpu else "CPU"
    if cfg.TRAIN.MIXED_PRECISION and not precisions:
        name += ", fp16 autocast" if on_gpu else ", bf16 autocast"
    return name


def print_capacity(args, cfg, shapes, results) -> list:
    """Prints whether DATA_LOADER.NUM_WORKERS keep up at every shape.

    The loader's cost per clip is the first cache setting's stage rows (one
    core); the model's speed is the measured one (--model) or
    --model-clips-per-s at the base shape, scaled by each shape's compute.
    """
    stages = results["stages"][: len(shapes)]
    measured = {}
    if args.model and args.model_clips_per_s <= 0:
        first_variant = results["model"][: len(results["shapes"])]
        measured = {row[1]: row[8] for row in first_variant}
    loads = [
        ShapeLoad(s.kind, s.frames, s.crop, s.batch, row[8], measured.get(s.kind))
        for s, row in zip(shapes, stages)
    ]
    workers = cfg.DATA_LOADER.NUM_WORKERS
    base = base_shape_index(cfg, shapes)
    rows = capacity_rows(loads, base, workers, args.model_clips_per_s or None)
    source = (
        "measured above (--model)"
        if measured
        else f"{args.model_clips_per_s:g} clips/s at the base shape, an "
        "iteration's time following its compute (batch x frames x crop^2)"
    )
    print(
        f"\nLoader capacity per training process (model speed: {source}; "
        f"loader: per-clip cost above on one core each; workers: "
        f"DATA_LOADER.NUM_WORKERS {workers}):"
    )
    print(format_table(CAPACITY_HEADERS, rows))
    print(
        f"{workers_needed(rows)} loader workers (cores) per training process keep "
        "every shape free of data wait."
    )
    return rows


def config_and_shapes(args: argparse.Namespace) -> tuple:
    """The config and the shapes to time (ValueError: one line, a bad config)."""
    base = load_run_config([args.cfg], args.opts)
    return base, run_shapes(base) if args.all_shapes else multigrid_shapes(base)


def run(args: argparse.Namespace, base: CfgNode, shapes: list) -> Dict[str, list]:
    """Runs every measurement and prints the tables; returns the raw results."""
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    clips = distinct_clips(shapes)  # what the loader rows need
    results: Dict[str, list] = {"shapes": [asdict(s) for s in shapes]}
    if args.model:
        results["model"] = model_rows(
            base,
            shapes,
            args.warmup,
            args.iters,
            args.memory_format,
            args.bn,
            args.precision or [None],
            args.step,
        )
        device = _device_name(base, args.precision)
        print(
            f"\nModel alone ({base.MODEL.MODEL_NAME} on {device}, "
            "synthetic batches, the trainer's step: forward, loss and its "
            f"statistics, backward, SGD; {torch.get_num_threads()} threads, shapes "
            f"round-robin, median of {args.iters} steps after {args.warmup}; "
            "GFLOP/clip: fvcore forward; GFLOP/s: 3 x forward; efficiency: "
            "FLOP rate relative to the base shape's):"
        )
        print(format_table(MODEL_HEADERS, [_model_cells(r) for r in results["model"]]))
    step = TimedStep(base) if args.model and not args.model_only else None
    results["stages"], results["loader"] = [], []
    for cache in [] if args.model_only else args.cache:
        for workers in args.workers:
            stages, rows = measure_setting(args, cache, workers, clips, step)
            results["stages"] += stages
            results["loader"] += rows
    if results["stages"]:
        print(
            "\nPer-clip cost in one process, 1 thread (median over "
            f"{args.stage_items} items; source: what was read, the 'full' "
            "resolution or a rendition (r71: scaled by 0.71); ms/iter: loader "
            "CPU per iteration = total x batch; "
            "vs base: relative to the base shape's):"
        )
        print(format_table(STAGE_HEADERS, results["stages"]))
    if not args.model_only:
        headers = LOADER_HEADERS + (["fed clips/s", "data wait %"] if step else [])
        print(
            f"\nLoader ({args.warmup} warm-up + {args.iters} timed batches per row; "
            "medians; 'all' includes epoch starts; loading alone with 1 thread in "
            "this process"
            + (", 'fed': the model trains on the loader's batches" if step else "")
            + "):"
        )
        print(format_table(headers, results["loader"]))
    if results["stages"] and (args.model_clips_per_s > 0 or args.model):
        results["capacity"] = print_capacity(args, base, clips, results)
    results["load_average"] = [load_before, os.getloadavg()[0]]
    print(
        f"\n1-minute load average before / after: {load_before:.2f} / "
        f"{results['load_average'][1]:.2f} on {os.cpu_count()} cores"
    )
    return results


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    try:
        base, shapes = config_and_shapes(args)
    except ValueError as err:  # ConfigError, or a batch the processes cannot share
        print(f"error: {err}", file=sys.stderr)
        return 2
    results = run(args, base, shapes)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), **results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
