"""Training-step throughput of a model at the multigrid mini-batch shapes.

Used by ``tools/benchmark_loader.py``. The shapes are the long-cycle shapes
and the short-cycle crops at the config's shape, with the multigrid batch and
BN split count; a step is the trainer's (forward, loss, statistics, backward
and an SGD update) on a synthetic batch, with sub-batch BN as a multigrid run
has it, eager, compiled or replayed from CUDA graphs. Shapes (and
memory formats, when several are compared) are timed round-robin, one step
each per round, so that a change in the machine's load hits them alike.

Efficiency compares a shape's FLOP rate with the base shape's: with ``F`` the
fvcore forward FLOPs of one clip and ``c`` clips/s, ``(c / c_base) / (F_base
/ F)``, i.e. the throughput reached relative to the one the FLOPs promise.
"""

import statistics
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, ContextManager, Dict, List, Optional, Sequence, cast

import torch
from fvcore.common.config import CfgNode

from slowfast.config.derived import per_process_batch
from slowfast.engine.bn_grouping import convert_to_sub_bn
from slowfast.engine.graphed_step import GraphedTrainStep
from slowfast.engine.precision import autocast_factory, make_grad_scaler
from slowfast.engine.step import TrainStep as Step
from slowfast.models import build_model, describe_model
from slowfast.models.memory_format import choose_channels_last
from slowfast.models.model_stats import gflops
from slowfast.models.norm import set_bn_splits
from slowfast.multigrid.from_config import short_cycle_factors
from slowfast.multigrid.shapes import (
    batch_factor,
    bn_splits_and_sync,
    long_cycle_shapes,
    short_cycle_crops,
)
from slowfast.solver.losses import get_loss_func
from slowfast.utils.distributed import (
    RunContext,
    get_device,
    num_processes,
    procs_per_machine,
)

# Memory formats for ``model_rows``: "default" is what a run picks
# (``models.memory_format.choose_channels_last``).
MEMORY_FORMATS = ("default", "contiguous", "channels_last_3d")


@dataclass(frozen=True)
class Shape:
    """A mini-batch shape: kind ("long k/n" or "short k"), frames per clip (fast
    pathway for SlowFast), spatial crop, clips per batch and BN splits (groups
    of about MULTIGRID.BN_BASE_SIZE clips with their own statistics)."""

    kind: str
    frames: int
    crop: int
    batch: int
    bn_splits: int = 1


def process_batch(cfg: CfgNode, factor: int) -> int:
    """Clips one training process takes at a batch factor: its share of the
    base batch (TRAIN.BATCH_SIZE over the processes of a machine) x ``factor``,
    as the multigrid schedule divides it.

    Raises:
        ValueError: the batch does not divide among the processes (one line).
    """
    share = per_process_batch(
        cfg.TRAIN.BATCH_SIZE, procs_per_machine(cfg), where=" per machine"
    )
    return share * factor


def multigrid_shapes(cfg: CfgNode) -> List[Shape]:
    """The long-cycle shapes (config order), then the short-cycle crops at the
    base shape; batches follow eq. 1 of the multigrid paper, rounded to an
    integer factor of the base batch as the multigrid schedule does. Batches
    and BN splits are those of one training process (:func:`process_batch`;
    splits set per long-cycle shape); where a process's batch is smaller than
    MULTIGRID.BN_BASE_SIZE a run syncs BN over processes, which one process
    cannot show (1 split here)."""
    base_t, base_s = cfg.DATA.NUM_FRAMES, cfg.DATA.TRAIN_CROP_SIZE
    mg = cfg.MULTIGRID

    def splits(long_batch: int) -> int:
        return bn_splits_and_sync(long_batch, num_processes(cfg), mg.BN_BASE_SIZE)[0]

    long = long_cycle_shapes(base_t, base_s, mg.LONG_CYCLE_FACTORS)
    shapes = []
    for i, (t, s) in enumerate(long):
        size = process_batch(cfg, batch_factor(t, s, base_t, base_s))
        shapes.append(Shape(f"long {i + 1}/{len(long)}", t, s, size, splits(size)))
    crops = short_cycle_crops(
        short_cycle_factors(cfg, describe_model(cfg).spatial_stride),
        "absolute",
        base_s,
        base_s,
    )
    base_splits = splits(process_batch(cfg, 1))
    for i, s in enumerate(crops):
        size = process_batch(cfg, batch_factor(base_t, s, base_t, base_s))
        shapes.append(Shape(f"short {i + 1}", base_t, s, size, base_splits))
    return shapes


def run_shapes(cfg: CfgNode) -> List[Shape]:
    """Every (clips, frames, crop, BN splits) a long + short cycle run trains
    in one of its processes (batches and splits as in
    :func:`multigrid_shapes`).

    :func:`multigrid_shapes` first, then the short-cycle crops at the other
    long-cycle shapes ("long k/n short j"), each new (frames, crop, batch,
    splits) once: the batches a CUDA-graphed run captures a graph for. The
    short cycle's crops follow MULTIGRID.SHORT_CYCLE_CROP_MODE; a long-cycle
    shape's BN splits hold for its short-cycle batches too, as in training.
    """
    shapes = multigrid_shapes(cfg)
    base_t, base_s = cfg.DATA.NUM_FRAMES, cfg.DATA.TRAIN_CROP_SIZE
    mg = cfg.MULTIGRID
    seen = {(s.frames, s.crop, s.batch, s.bn_splits) for s in shapes}
    factors = short_cycle_factors(cfg, describe_model(cfg).spatial_stride)
    for long in shapes[: len(mg.LONG_CYCLE_FACTORS)]:
        crops = short_cycle_crops(factors, mg.SHORT_CYCLE_CROP_MODE, base_s, long.crop)
        for j, crop in enumerate(crops):
            size = process_batch(cfg, batch_factor(long.frames, crop, base_t, base_s))
            key = (long.frames, crop, size, long.bn_splits)
            if key not in seen:
                seen.add(key)
                kind = f"{long.kind} short {j + 1}"
                shapes.append(Shape(kind, long.frames, crop, size, long.bn_splits))
    return shapes


def base_shape_index(cfg: CfgNode, shapes: Sequence[Shape]) -> int:
    """Index of the shape at the config's NUM_FRAMES and TRAIN_CROP_SIZE."""
    for i, shape in enumerate(shapes):
        key = (shape.frames, shape.crop, shape.kind.startswith("long"))
        if key == (cfg.DATA.NUM_FRAMES, cfg.DATA.TRAIN_CROP_SIZE, True):
            return i
    raise ValueError("no shape at the config's NUM_FRAMES and TRAIN_CROP_SIZE")


PRECISIONS = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


# How ``TimedStep`` runs forward and backward (``--step`` of the benchmark tool).
STEP_MODES = ("eager", "compile", "graphs")


def compile_limits(graphs: int) -> ContextManager:
    """A context in which torch.compile keeps ``graphs`` graphs of a forward.

    Past them it fails, where it would run eager silently. Dynamo counts the
    graphs of one code object (``forward``) over every compiled model of the
    process: one per batch shape, BN split count, memory format and precision
    (torch's default keeps 8).
    """
    config = torch._dynamo.config
    limits: Dict[str, Any] = {"cache_size_limit": graphs}
    more = {"accumulated_cache_size_limit": max(graphs, 256)}
    more["fail_on_cache_limit_hit"] = True
    limits.update((k, v) for k, v in more.items() if hasattr(config, k))  # older torch
    return config.patch(limits)


class TimedStep:
    """The trainer's training step on the config's model, for timing.

    The model is built by ``build_model`` (its memory format included) with
    sub-batch BN layers, as the trainer builds it for a multigrid run, on the
    trainer's device (GPU 0 when NUM_GPUS > 0) and with its precision
    (TRAIN.MIXED_PRECISION and TRAIN.MIXED_PRECISION_DTYPE; fp16 with a GradScaler)
    unless ``precision`` names another. A step is the trainer's own
    (``engine/step.py``: forward, loss, statistics, backward, SGD update; with
    ``mode="graphs"`` ``engine/graphed_step.py``) on a batch of this process.

    Args:
        cfg: the run's config.
        plain_bn: one BN group per batch at every shape (what a baseline run
            has) instead of the shape's multigrid BN splits.
        precision: "fp32", "fp16" or "bf16" autocast; None: the config's.
        mode: "eager"; "compile" (the model through ``torch.compile`` with
            static shapes: each batch shape compiles at its first step); or
            "graphs" (forward and backward replayed from one CUDA graph per
            shape, as TRAIN.CUDA_GRAPHS; GPU only).
    """

    def __init__(
        self,
        cfg: CfgNode,
        plain_bn: bool = False,
        precision: Optional[str] = None,
        mode: str = "eager",
    ) -> None:
        if mode not in STEP_MODES:
            raise ValueError(f"step mode {mode!r}: use one of {', '.join(STEP_MODES)}")
        self.device = get_device(cfg)
        if mode == "graphs" and self.device.type != "cuda":
            raise ValueError("CUDA graphs need a GPU (NUM_GPUS > 0)")
        self.model = convert_to_sub_bn(
            build_model(cfg, choose_channels_last(cfg, describe_model(cfg))).train()
        ).to(self.device)
        optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3, momentum=0.9)
        if precision is None:
            autocast = autocast_factory(cfg, self.device)
            scaler = make_grad_scaler(cfg, self.device)
        else:
            dtype = PRECISIONS[precision]
            on = dtype is not None
            autocast = partial(torch.autocast, self.device.type, dtype, enabled=on)
            fp16_gpu = dtype == torch.float16 and self.device.type == "cuda"
            scaler = torch.amp.GradScaler("cuda") if fp16_gpu else None
        compiled = mode == "compile"
        # torch.compile of a module returns a module (its stubs say a callable).
        net = (
            cast(torch.nn.Module, torch.compile(self.model, dynamic=False))
            if compiled
            else self.model
        )
        step_class = GraphedTrainStep if mode == "graphs" else Step
        self.step = step_class(
            net,
            optimizer,
            get_loss_func(cfg.MODEL.LOSS_FUNC),
            RunContext(device=self.device),
            autocast,
            scaler=scaler,
            clip_grad_norm=cfg.SOLVER.CLIP_GRAD_L2NORM,
            multi_label=cfg.DATA.MULTI_LABEL,
        )
        self.plain_bn = plain_bn

    def set_shape(self, shape: Shape) -> None:
        """Sets the BN splits of ``shape`` (1 with plain BN) for the next steps."""
        set_bn_splits(self.model, 1 if self.plain_bn else shape.bn_splits)

    def synchronize(self) -> None:
        """Waits for the device's queued work (a no-op on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __call__(self, inputs: Sequence[torch.Tensor], labels: torch.Tensor) -> None:
        """One training step on the batch.

        Raises:
            RuntimeError: the loss was not finite, so the step skipped its
                update (its time would not be a step's).
        """
        stats = self.step((inputs, labels, None, {"num_failed": 0}))
        if not stats.applied:
            raise RuntimeError(
                f"non-finite training loss ({stats.loss}) on a synthetic batch of "
                f"{tuple(inputs[-1].shape)}: the step skipped its update"
            )


def synthetic_batch(cfg: CfgNode, shape: Shape) -> tuple:
    """Random inputs and labels of a shape, packed like the loader's."""
    size = (shape.batch, 3, shape.frames, shape.crop, shape.crop)
    fast = torch.randn(size)
    info = describe_model(cfg)
    if info.num_pathways > 1:
        slow_t = max(1, shape.frames // info.alpha)
        inputs = [torch.randn(size[:2] + (slow_t,) + size[3:]), fast]
    else:
        inputs = [fast]
    if cfg.DATA.MULTI_LABEL:
        labels = (torch.rand(shape.batch, cfg.MODEL.NUM_CLASSES) < 0.2).float()
    else:
        labels = torch.randint(cfg.MODEL.NUM_CLASSES, (shape.batch,))
    return inputs, labels


@dataclass(frozen=True)
class Variant:
    """One way of running the step: memory format, BN, precision, step mode."""

    memory_format: str = "default"
    plain_bn: bool = False
    precision: Optional[str] = None
    mode: str = "eager"

    def label(self, picked: str) -> str:
        """How a row names it (``picked``: the default memory format)."""
        text = self.memory_format.replace("default", f"default: {picked}")
        text += ", plain BN" if self.plain_bn else ""
        text += f", {self.precision}" if self.precision else ""
        modes = {"eager": "", "compile": ", torch.compile", "graphs": ", CUDA graphs"}
        return text + modes[self.mode]


def format_cfg(cfg: CfgNode, memory_format: str) -> CfgNode:
    """The config with MODEL.CHANNELS_LAST_3D set for ``memory_format``."""
    if memory_format == "default":
        return cfg
    cfg = cfg.clone()
    cfg.defrost()
    cfg.MODEL.CHANNELS_LAST_3D = memory_format == "channels_last_3d"
    return cfg


def time_steps(
    cfg: CfgNode,
    steps: Sequence[TimedStep],
    shapes: Sequence[Shape],
    warmup: int,
    iters: int,
) -> Dict[tuple, List[float]]:
    """Times training steps round-robin over shapes and steps.

    On a GPU each step is timed from an idle device to the end of its work.

    Returns:
        dict: seconds of each timed step by (shape index, step index).
    """
    device = steps[0].device
    batches = []
    for shape in shapes:
        inputs, labels = synthetic_batch(cfg, shape)
        batches.append(([x.to(device) for x in inputs], labels.to(device)))
    times: Dict[tuple, List[float]] = {}
    for k in range(warmup + iters):
        for i, (shape, (inputs, labels)) in enumerate(zip(shapes, batches)):
            for j, step in enumerate(steps):
                step.set_shape(shape)
                step.synchronize()
                start = time.perf_counter()
                step(inputs, labels)
                step.synchronize()
                if k >= warmup:
                    times.setdefault((i, j), []).append(time.perf_counter() - start)
    return times


MODEL_HEADERS = ["format", "shape", "t", "crop", "batch", "bn splits", "ms/step"]
MODEL_HEADERS += ["spread %", "clips/s", "GFLOP/clip", "GFLOP/s", "efficiency %"]


def model_rows(
    cfg: CfgNode,
    shapes: Sequence[Shape],
    warmup: int,
    iters: int,
    formats: Sequence[str] = ("default",),
    bn_variants: Sequence[str] = ("sub",),
    precisions: Sequence[Optional[str]] = (None,),
    step_modes: Sequence[str] = ("eager",),
) -> List[list]:
    """Model-alone rows, one per variant and shape (see MODEL_HEADERS).

    The variants are every memory format with every BN variant ("sub": the
    shape's multigrid BN splits; "plain": one BN group per batch), precision
    (None: the config's) and step mode (``STEP_MODES``, see ``TimedStep``).

    ms/step is the median over ``iters`` steps, spread its range (max - min)
    in percent of it; GFLOP/clip the fvcore forward count of one clip (eval
    mode, as ``model_stats.gflops``); GFLOP/s counts forward + backward as 3
    forwards; efficiency is relative to the base shape in the same variant.
    """
    variants = [
        Variant(f, bn == "plain", p, mode)
        for f in formats
        for p in precisions
        for mode in step_modes
        for bn in bn_variants
    ]
    steps = [
        TimedStep(format_cfg(cfg, v.memory_format), v.plain_bn, v.precision, v.mode)
        for v in variants
    ]
    flops = [gflops(steps[0].model, cfg, s.frames, s.crop) for s in shapes]
    compiled = sum(v.mode == "compile" for v in variants)
    with compile_limits(max(8, 2 * len(shapes) * compiled)):
        times = time_steps(cfg, steps, shapes, warmup, iters)
    base = base_shape_index(cfg, shapes)
    fast = choose_channels_last(cfg, describe_model(cfg))
    picked = "channels_last_3d" if fast else "contiguous"
    rows = []
    for j, variant in enumerate(variants):
        base_rate = shapes[base].batch * flops[base] / statistics.median(times[base, j])
        for i, shape in enumerate(shapes):
            seconds = statistics.median(times[i, j])
            spread = 100 * (max(times[i, j]) - min(times[i, j])) / seconds
            clips = shape.batch / seconds
            row = [variant.label(picked), shape.kind, shape.frames, shape.crop]
            splits = 1 if variant.plain_bn else shape.bn_splits
            row += [shape.batch, splits, 1000 * seconds, spread, clips, flops[i]]
            row += [3 * clips * flops[i], 100 * clips * flops[i] / base_rate]
            rows.append(row)
    return rows
