"""The model step of ``bench/model_step.py``, one (variant, shape) cell at a time.

Used by ``tools/dev/gpu_check.py``. Where ``benchmark.model_rows`` times every
variant and shape round-robin in one go, :func:`measure_cells` times each cell
on its own (``benchmark.time_steps`` with one step and one shape), so that a
shape that runs out of GPU memory is that cell's result ("oom") and the
others still run: after a cell that did not finish, the step is rebuilt.
Each cell also records which path its BN layers took
(``SubBatchNorm3d.forward_path``: "triton", "native", "generic", or
"batch_norm" with one group) and the peak GPU memory of its steps (the memory
the process holds included: the model, the optimizer and, with CUDA graphs,
the graphs of the shapes before).
"""

import gc
import statistics
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from fvcore.common.config import CfgNode
from torch import nn

from slowfast.models.model_stats import gflops
from slowfast.models.norm import SubBatchNorm3d
from workshop.bench.model_step import (
    Shape,
    TimedStep,
    Variant,
    compile_limits,
    format_cfg,
    time_steps,
)


@dataclass
class Cell:
    """One variant's step at one shape.

    Attributes:
        variant: how the step ran (memory format, BN, precision, step mode).
        shape: the batch shape.
        status: "ok", "oom" (out of GPU memory) or "failed" (``error`` says why).
        ms: median milliseconds per step ("ok" only).
        spread_pct: range of the step times in percent of ``ms``.
        gflop_per_clip: fvcore forward GFLOPs of one clip.
        peak_mib: peak GPU memory allocated during the cell (None on CPU).
        bn_paths: BN path -> number of BN layers that took it.
        bn_layers: for each path but the most common one, the layers that
            took it (which layers left the usual path).
        error: the error's first line ("oom" and "failed").
    """

    variant: Variant
    shape: Shape
    status: str = "ok"
    ms: Optional[float] = None
    spread_pct: Optional[float] = None
    gflop_per_clip: float = 0.0
    peak_mib: Optional[float] = None
    bn_paths: Dict[str, int] = field(default_factory=dict)
    bn_layers: Dict[str, List[str]] = field(default_factory=dict)
    error: str = ""

    @property
    def gflop_per_s(self) -> Optional[float]:
        """Training FLOP rate: forward + backward counted as 3 forwards."""
        if self.ms is None:
            return None
        return 3 * self.shape.batch * self.gflop_per_clip / (self.ms / 1000)

    def as_row(self, efficiency: Optional[float] = None) -> dict:
        """The cell as plain values (for JSON), with its ``efficiency``."""
        v, s = self.variant, self.shape
        bn = "plain" if v.plain_bn else "sub"
        row: Dict[str, Any] = {
            "variant": f"{bn} BN, {v.mode}",
            "bn": bn,
            "mode": v.mode,
        }
        row.update(shape=s.kind, clips=s.batch, frames=s.frames, crop=s.crop)
        row.update(bn_splits=1 if v.plain_bn else s.bn_splits, status=self.status)
        row.update(ms=self.ms, spread_pct=self.spread_pct)
        row.update(gflop_per_clip=self.gflop_per_clip, gflop_per_s=self.gflop_per_s)
        row.update(efficiency=efficiency, peak_mib=self.peak_mib)
        row["bn_paths"] = self.bn_paths
        row.update({"bn_layers": self.bn_layers} if self.bn_layers else {})
        return {**row, "error": self.error} if self.error else row


def _bn_path_hooks(model: nn.Module, paths: Dict[str, str]) -> list:
    """Forward pre-hooks recording each BN layer's path into ``paths``."""

    def hook(name: str):
        def record(module: nn.Module, args: tuple) -> None:
            if isinstance(module, SubBatchNorm3d):
                paths[name] = module.forward_path(args[0])
            else:
                paths[name] = "batch_norm"

        return record

    return [
        module.register_forward_pre_hook(hook(name))
        for name, module in model.named_modules()
        if isinstance(module, nn.modules.batchnorm._BatchNorm)
    ]


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _measure(cfg: CfgNode, step: TimedStep, cell: Cell, warmup: int, iters: int):
    """Times ``cell`` with ``step``; fills its status, times, memory, BN paths."""
    device = step.device
    paths: Dict[str, str] = {}
    hooks = [] if cell.variant.mode == "compile" else _bn_path_hooks(step.model, paths)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        times = time_steps(cfg, [step], [cell.shape], warmup, iters)[0, 0]
        cell.ms = 1000 * statistics.median(times)
        cell.spread_pct = 100 * (max(times) - min(times)) / statistics.median(times)
    except torch.cuda.OutOfMemoryError as err:
        cell.status, cell.error = "oom", _one_line(err)
    except Exception as err:  # a cell's failure is its result; the rest goes on
        cell.status, cell.error = "failed", _one_line(err)
    finally:
        for handle in hooks:
            handle.remove()
    if device.type == "cuda":
        cell.peak_mib = torch.cuda.max_memory_allocated(device) / 2**20
    for path in paths.values():
        cell.bn_paths[path] = cell.bn_paths.get(path, 0) + 1
    usual = max(cell.bn_paths, key=lambda p: cell.bn_paths[p], default=None)
    for name, path in paths.items():
        if path != usual:
            cell.bn_layers.setdefault(path, []).append(name)


def _variant_cells(cfg, variant, shapes, warmup, iters, flops, on_cell) -> list:
    """The cells of one variant; ``flops`` (per shape) is filled at the first."""
    cells, step = [], None
    for i, shape in enumerate(shapes):
        cell = Cell(variant, shape)
        try:
            if step is None:
                v = variant
                vcfg = format_cfg(cfg, v.memory_format)
                step = TimedStep(vcfg, v.plain_bn, v.precision, v.mode)
            if not flops:
                flops += [gflops(step.model, cfg, s.frames, s.crop) for s in shapes]
            _measure(cfg, step, cell, warmup, iters)
        except torch.cuda.OutOfMemoryError as err:  # building the step
            cell.status, cell.error = "oom", _one_line(err)
        except Exception as err:
            cell.status, cell.error = "failed", _one_line(err)
        cell.gflop_per_clip = flops[i] if flops else 0.0
        if cell.status != "ok" and step is not None:
            device, step = step.device, None
            _free(device)
        cells.append(cell)
        if on_cell is not None:
            on_cell(cell)
    return cells


def measure_cells(
    cfg: CfgNode,
    variants: Sequence[Variant],
    shapes: Sequence[Shape],
    warmup: int,
    iters: int,
    on_cell: Optional[Callable[[Cell], None]] = None,
) -> List[Cell]:
    """Times every variant at every shape, one cell at a time.

    Args:
        cfg: the config (its model, device and precision, as ``TimedStep``).
        variants: the steps to time; each is built once and rebuilt after a
            cell that did not finish.
        shapes: the batch shapes (``benchmark.multigrid_shapes``).
        warmup: untimed steps first (compile and capture happen there).
        iters: timed steps; ``Cell.ms`` is their median.
        on_cell: called with each cell when it is done (progress, partial
            results).

    Returns:
        list: the cells, variant by variant, shapes in order.
    """
    cells: List[Cell] = []
    flops: List[float] = []
    compiled = sum(v.mode == "compile" for v in variants)
    limits = compile_limits(max(8, 2 * len(shapes) * compiled))
    with limits if compiled else nullcontext():
        for variant in variants:
            cells += _variant_cells(cfg, variant, shapes, warmup, iters, flops, on_cell)
            _free(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    return cells


def efficiency(cells: Sequence[Cell], reference: Cell) -> List[Optional[float]]:
    """Each cell's FLOP rate relative to ``reference``'s (None without a time).

    Args:
        cells: the cells.
        reference: e.g. plain BN's graphed step at the base shape.

    Returns:
        list: ``gflop_per_s / reference.gflop_per_s`` per cell.
    """
    base = reference.gflop_per_s
    return [
        c.gflop_per_s / base if c.gflop_per_s is not None and base else None
        for c in cells
    ]
