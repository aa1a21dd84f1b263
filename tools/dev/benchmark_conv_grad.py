#!/usr/bin/env python3
r"""Times the 3D convolutions' weight gradient two ways, per model and shape.

Runs each config's model (as a multigrid run builds it) forward at every
multigrid mini-batch shape, records every 3D convolution it computes (input,
kernel, stride, padding, dilation, groups; after TimeTrimmedConv3d's
trimming), and times the weight gradient of each distinct one on CPU in
float32: oneDNN's own (``aten.convolution_backward``) and the batch-reduced
one (``slowfast.models.kernels.small_map_conv.batch_reduced_weight_grad``, unit stride
and dilation only). The table groups the unit-stride, ungrouped convolutions
with a kernel larger than 1 x 1 x 1 by output positions per clip, which is
what ``small_map_conv.conv3d`` decides by (MAX_OUTPUT_POSITIONS); the other
convolutions are a row of their own, timed oneDNN's way only.

Example:
    python tools/dev/benchmark_conv_grad.py \
        --cfg configs/Demo/Kinetics_SLOWFAST_tiny_multigrid.yaml \
        configs/Demo/Kinetics_I3D_tiny_multigrid.yaml \
        configs/Demo/Kinetics_I3D_NLN_tiny_multigrid.yaml
"""

import argparse
import math
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

# The workshop package is not installed: it lies at the repository root.
sys.path.insert(
    0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)

import torch
from fvcore.common.config import CfgNode
from torch.utils._python_dispatch import TorchDispatchMode

from slowfast.config import load_config
from slowfast.models.kernels.small_map_conv import (
    MAX_OUTPUT_POSITIONS,
    batch_reduced_weight_grad,
)
from slowfast.utils.table import format_table
from workshop.bench.model_step import TimedStep, multigrid_shapes, synthetic_batch

Conv = Tuple[tuple, tuple, tuple, tuple, tuple, int]
BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024, 4096, math.inf)


class _RecordConvs(TorchDispatchMode):
    """Records the arguments of every 3D convolution dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.convs: Set[Conv] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.convolution.default and args[1].dim() == 5:
            x, w, _, stride, padding, dilation, transposed, _, groups = args
            if not transposed:
                conv = (x.shape, w.shape, stride, padding, dilation, groups)
                self.convs.add(tuple(tuple(v) if v != groups else v for v in conv))
        return func(*args, **(kwargs or {}))


def record_convs(cfg: CfgNode) -> Set[Conv]:
    """The distinct 3D convolutions of the config's model over its shapes."""
    step = TimedStep(cfg)
    recorder = _RecordConvs()
    for shape in multigrid_shapes(cfg):
        step.set_shape(shape)
        inputs = synthetic_batch(cfg, shape)[0]
        with torch.no_grad(), recorder:
            step.model(inputs)
    return recorder.convs


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[1:])


def time_conv(conv: Conv, repeats: int, batch_reduced: bool) -> Tuple[float, float]:
    """(oneDNN ms, batch-reduced ms or nan) for one convolution's weight gradient."""
    x_shape, w_shape, stride, padding, dilation, groups = conv
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    out = torch.nn.functional.conv3d(x, w, None, stride, padding, dilation, groups)
    grad = torch.randn_like(out)
    mask = (False, True, False)
    args = (grad, x, w, None, stride, padding, dilation, False, (0, 0, 0), groups, mask)
    onednn = _median_ms(lambda: torch.ops.aten.convolution_backward(*args), repeats)
    if not batch_reduced:
        return onednn, math.nan
    want = torch.ops.aten.convolution_backward(*args)[1]
    got = batch_reduced_weight_grad(x, grad, padding)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3 * want.abs().max())
    return onednn, _median_ms(
        lambda: batch_reduced_weight_grad(x, grad, padding), repeats
    )


def _positions(conv: Conv) -> int:
    out = torch.nn.functional.conv3d(
        torch.empty(conv[0], device="meta"),
        torch.empty(conv[1], device="meta"),
        None,
        *conv[2:],
    )
    return math.prod(out.shape[2:])


def _eligible(conv: Conv) -> bool:
    _, w_shape, stride, _, dilation, groups = conv
    unit = tuple(stride) == (1, 1, 1) and tuple(dilation) == (1, 1, 1)
    return unit and groups == 1 and math.prod(w_shape[2:]) > 1


def parse_args(argv=None) -> argparse.Namespace:
    """The command line: --cfg FILE [FILE ...] [--repeats N]."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cfg", nargs="+", required=True, help="config files")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls (+1)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    convs: Set[Conv] = set()
    for path in args.cfg:
        convs |= record_convs(load_config([path]))
    rows: List[list] = []
    groups: Dict[Optional[float], List[Tuple[float, float]]] = {}
    for conv in sorted(convs):
        eligible = _eligible(conv)
        key = next(b for b in BUCKETS if _positions(conv) <= b) if eligible else None
        groups.setdefault(key, []).append(time_conv(conv, args.repeats, eligible))
    low: float = 0
    for bucket in BUCKETS:
        timed = groups.get(bucket, [])
        if timed:
            rows.append(_row(f"{low + 1}-{bucket}", timed))
        low = bucket
    if None in groups:
        rows.append(_row("strided, dilated, grouped or 1x1x1", groups[None]))
    headers = [
        "output positions per clip",
        "convolutions",
        "oneDNN (ms)",
        "batch-reduced (ms)",
        "speed-up",
        "faster in",
    ]
    print(format_table(headers, rows))
    print(
        f"\nSums over the distinct convolutions of {', '.join(args.cfg)} at their "
        f"multigrid shapes; conv3d reduces over the batch up to "
        f"{MAX_OUTPUT_POSITIONS} positions."
    )


def _row(label: str, timed: List[Tuple[float, float]]) -> list:
    onednn = sum(t[0] for t in timed)
    reduced = sum(t[1] for t in timed)
    if math.isnan(reduced):
        return [label, len(timed), f"{onednn:.1f}", "-", "-", "-"]
    faster = sum(t[1] < t[0] for t in timed)
    return [
        label,
        len(timed),
        f"{onednn:.1f}",
        f"{reduced:.1f}",
        f"{onednn / reduced:.2f}x",
        f"{faster}/{len(timed)}",
    ]


if __name__ == "__main__":
    main()
