#!/usr/bin/env python3
r"""Checks and times sub-batch BN's Triton kernels on this machine's GPU.

Check: for fp32, fp16 and bf16 inputs in both memory formats, the fused
kernels (``slowfast/models/kernels/split_bn.py``) against the reference computation
(``SubBatchNorm3d._forward_split_generic``, float32 statistics): outputs,
input / weight / bias gradients and running statistics. Exits 1 when one
differs by more than the dtype's tolerance.

Warm-up (``--part I/N``): only the cases whose index modulo N is I, then one
JSON line: cases run and failed, Triton kernel variants built (compiled, or
loaded from Triton's on-disk cache) and seconds. ``gpu_check.py`` runs N of
these side by side to fill a cold cache before the check times anything.

Timing (``--bench``): forward + backward of one BN layer at the layer shapes
of an I3D R50's stem and res2-res5 (channels, frames, size), for each
multigrid batch shape of the study config (clips per batch, BN splits):
plain ``BatchNorm3d`` (one group), the fused split kernels, and the split
path through native batch norm (the format round trip). CUDA events, median of
``--iters`` after ``--warmup``.

Examples (on a GPU):
    python tools/dev/check_split_bn.py --bench
    python tools/dev/check_split_bn.py --part 0/8
"""

import argparse
import contextlib
import json
import statistics
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence

import torch
from torch import nn

from slowfast.models.kernels.split_bn import fused_split_ok
from slowfast.models.norm import SubBatchNorm3d

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
FORMATS = {
    "contiguous": torch.contiguous_format,
    "channels_last_3d": torch.channels_last_3d,
}
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 6e-2}
# (clips, BN splits, channels, map size) compared: odd channel counts and
# splits, the most splits and channels on a 3 x 3 map (res5 at the coarsest
# shape), and a split of about 55k rows per channel (several chunks).
SIZES = [(16, 4, 64, 9), (12, 3, 200, 5), (256, 16, 2048, 3), (32, 2, 64, 34)]
# Every case: (dtype, format, size); 72 kernel variants to build on a cold cache
# (4 kernels, 2 channel-count classes, 3 split-count blocks, per dtype and format).
CASES = [(d, f, size) for d in DTYPES for f in FORMATS for size in SIZES]
# (clips, BN splits, frames, crop) of the R50 study config's multigrid shapes.
BATCHES = [(256, 32, 4, 68), (128, 16, 8, 68), (64, 8, 8, 96), (32, 4, 16, 96)]
# (channels, frame divisor, spatial stride) of the layers, I3D R50.
LAYERS = [(64, 1, 2), (256, 1, 4), (512, 1, 8), (1024, 1, 16), (2048, 1, 32)]


def _pair(channels: int, splits: int, device: torch.device):
    ref = SubBatchNorm3d(channels, num_splits=splits).to(device)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-1.0, 1.0)
    new = SubBatchNorm3d(channels, num_splits=splits).to(device)
    new.load_state_dict(ref.state_dict())
    return ref, new


class CompileCounter:
    """Counts the Triton kernel variants built while active (compiled, or
    loaded from Triton's on-disk cache); ``count`` is None where this Triton
    has no post-compile hook."""

    def __init__(self) -> None:
        self.count: Optional[int] = None

    @contextlib.contextmanager
    def active(self) -> Iterator["CompileCounter"]:
        """Counts while inside the ``with`` block."""
        try:
            from triton import knobs
        except ImportError:  # no Triton, or one without knobs
            yield self
            return
        previous = knobs.runtime.jit_post_compile_hook
        self.count = 0

        def hook(*args, **kwargs) -> bool:
            assert self.count is not None  # set above, for this block
            self.count += 1
            return previous(*args, **kwargs) if previous else False

        knobs.runtime.jit_post_compile_hook = hook
        try:
            yield self
        finally:
            knobs.runtime.jit_post_compile_hook = previous


def _errors(ref, new, xr, xn, y_ref, y_new) -> dict:
    """The largest differences of the fused layer from the reference one."""
    errors = {
        "y": (y_ref - y_new.float()).detach().abs().max(),
        "dx": (xr.grad - xn.grad.float()).abs().max(),
        "dw": (ref.weight.grad - new.weight.grad).abs().max()
        / ref.weight.grad.abs().max(),
        "db": (ref.bias.grad - new.bias.grad).abs().max() / ref.bias.grad.abs().max(),
        "mean": (ref.running_mean - new.running_mean).abs().max(),
        "var": (ref.running_var - new.running_var).abs().max(),
    }
    return {k: float(v) for k, v in errors.items()}


def check_cases(
    device: torch.device, only: Optional[Sequence[int]] = None
) -> Iterator[dict]:
    """Compares the fused kernels with the reference computation, case by case.

    Args:
        device: a CUDA device.
        only: indices into :data:`CASES` to run (default: all).

    Yields:
        dict: one case: ``dtype``, ``format``, ``shape``, ``splits``,
        ``errors`` (name -> largest difference: outputs ``y``, gradients
        ``dx``, ``dw`` and ``db`` (relative), running ``mean`` and ``var``),
        ``tolerance``, ``layout_kept``, ``ok`` and ``seconds`` (the case's
        wall time, kernel builds included); or, when the fused path does not
        take the batch, ``ok`` False and ``error``, and no more.
    """
    for index, (dname, fname, (batch, splits, channels, size)) in enumerate(CASES):
        if only is not None and index not in only:
            continue
        start = time.perf_counter()
        dtype, fmt = DTYPES[dname], FORMATS[fname]
        gen = torch.Generator(device="cpu").manual_seed(index)
        shape = (batch, channels, 3, size, size)
        case: Dict[str, Any] = {"dtype": dname, "format": fname, "shape": list(shape)}
        case["splits"] = splits
        x = torch.randn(shape, generator=gen) * 2 + 0.5
        x = x.to(device, dtype).contiguous(memory_format=fmt)
        ref, new = _pair(channels, splits, device)
        xr = x.detach().float().requires_grad_()
        xn = x.detach().clone().requires_grad_()
        if not fused_split_ok(xn):
            yield {**case, "ok": False, "error": "fused path not available"}
            return
        y_ref = ref._forward_split_generic(xr)
        y_new = new(xn)
        grad = torch.randn(shape, generator=gen).to(device)
        (y_ref * grad).sum().backward()
        (y_new.float() * grad).sum().backward()
        errors = _errors(ref, new, xr, xn, y_ref, y_new)
        assert xn.grad is not None  # backward() filled it
        same_format = y_new.is_contiguous(memory_format=fmt) and (
            xn.grad.is_contiguous(memory_format=fmt)
        )
        tolerance = TOLERANCE[dname] * 4
        good = max(errors.values()) <= tolerance and same_format
        case.update(errors=errors, tolerance=tolerance, ok=good)
        case["seconds"] = time.perf_counter() - start  # the errors synchronised
        yield {**case, "layout_kept": same_format}


def warm(device: torch.device, part: int, parts: int) -> dict:
    """Runs every ``parts``-th case from ``part`` on (building its kernels).

    Args:
        device: a CUDA device.
        part: this process's share, 0 <= part < parts.
        parts: how many processes share the cases.

    Returns:
        dict: ``part``, ``cases`` run, ``failed``, ``compiles`` (kernel
        variants built, None where Triton cannot count them) and ``seconds``.
    """
    start, cases = time.perf_counter(), []
    with CompileCounter().active() as counter:
        cases = list(check_cases(device, range(part, len(CASES), parts)))
    return {
        "part": f"{part}/{parts}",
        "cases": len(cases),
        "failed": sum(not c["ok"] for c in cases),
        "compiles": counter.count,
        "seconds": round(time.perf_counter() - start, 3),
    }


def check(device: torch.device) -> bool:
    """Compares the fused kernels with the reference computation; prints a
    line per case (:func:`check_cases`) and returns whether all passed."""
    ok = True
    for case in check_cases(device):
        ok &= case["ok"]
        name = f"{case['dtype']} {case['format']}"
        if "error" in case:
            print(f"{name}: {case['error']}")
            continue
        text = " ".join(f"{k} {v:.2e}" for k, v in case["errors"].items())
        print(
            f"{'ok  ' if case['ok'] else 'FAIL'} {name} {tuple(case['shape'])} "
            f"k={case['splits']}: {text}, memory format kept: {case['layout_kept']}"
        )
    return ok


def _time(fn, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bench(device: torch.device, dtype: torch.dtype, warmup: int, iters: int) -> None:
    """Prints forward + backward ms of plain, fused-split and native-split BN."""
    print(f"\nBN layer forward + backward, {dtype}, ms (median of {iters}):")
    print(
        "format            clips x frames x crop  k  channels  size   plain  fused"
        "  native  fused/plain"
    )
    ratios = []
    for fname, fmt in FORMATS.items():
        for clips, splits, frames, crop in BATCHES:
            for channels, tdiv, stride in LAYERS:
                size = max(1, -(-crop // stride))
                shape = (clips, channels, frames // tdiv, size, size)
                x = torch.randn(shape, device=device, dtype=dtype)
                x = x.contiguous(memory_format=fmt).requires_grad_()
                grad = torch.randn_like(x)
                plain = nn.BatchNorm3d(channels).to(device)
                split = SubBatchNorm3d(channels, num_splits=splits).to(device)

                def run(layer, native=False, x=x, grad=grad):
                    def fn():
                        forward = layer._forward_split_native if native else layer
                        forward(x).backward(grad)

                    return fn

                t_plain = _time(run(plain), warmup, iters)
                t_fused = _time(run(split), warmup, iters)
                t_native = _time(run(split, native=True), warmup, iters)
                ratios.append(t_fused / t_plain)
                print(
                    f"{fname:17s} {clips:4d} x {frames:2d} x {crop:3d}        "
                    f"{splits:2d}  {channels:8d}  {size:4d}  {t_plain:6.3f} "
                    f"{t_fused:6.3f}  {t_native:6.3f}  {t_fused / t_plain:6.2f}"
                )
    print(
        f"fused / plain: median {statistics.median(ratios):.2f}, "
        f"range {min(ratios):.2f}-{max(ratios):.2f}"
    )


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the command line: ``--bench``, ``--dtypes``, ``--warmup``, ``--iters``."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bench", action="store_true", help="also time the layers")
    parser.add_argument("--dtypes", default="fp16,bf16", help="for --bench")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument(
        "--part", help="I/N: warm the Triton cache with every N-th case from I"
    )
    args = parser.parse_args(argv)
    if args.part:
        part, _, parts = args.part.partition("/")
        if not (part.isdigit() and parts.isdigit() and int(part) < int(parts)):
            parser.error(f"--part {args.part}: give I/N with 0 <= I < N, e.g. 0/8")
        args.part = (int(part), int(parts))
    return args


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("check_split_bn.py: no CUDA device; the kernels run on GPUs only")
        return 2
    device = torch.device("cuda", 0)
    if args.part:
        result = warm(device, *args.part)
        print(json.dumps(result))
        return 1 if result["failed"] else 0
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    ok = check(device)
    if args.bench:
        for name in args.dtypes.split(","):
            bench(device, DTYPES[name.strip()], args.warmup, args.iters)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
