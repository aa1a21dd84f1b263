"""The split-BN Triton kernels check themselves on the device before first use.

Before a process first sends a batch of some device, dtype and memory format
to the kernels of ``split_bn.py``, :func:`split_kernels_verdict` checks:

1. that Triton imports and can build its launcher: a C compiler (``$CC``,
   ``cc``, ``gcc`` or ``clang``) and Python's headers (``Python.h``), which
   Triton compiles against at first use; without them the first split-BN
   forward would raise mid-run;
2. that one small forward and backward of that dtype and memory format
   through the kernels equals the native computation (``SubBatchNorm3d``'s
   generic path) on that device: outputs, gradients and running statistics.

On any failure the layers use the native path for the rest of the process,
and one warning line gives the reason. The verdict is kept per (device,
dtype, memory format) for the process's life: what the run's JSON statistics
record (``engine/builders.py``: a ``kernel_check`` line). ``BN.SPLIT_KERNELS``
forces either path (``triton``: no check; ``native``: no kernels).

Under ``TRITON_INTERPRET=1`` (the tests, on CPU tensors) no launcher is
built; the numerical check still runs.
"""

import functools
import logging
import os
import shutil
import sysconfig
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KernelVerdict:
    """Whether the Triton kernels compute split BN for one kind of batch.

    Attributes:
        ok: the kernels passed (the layers use them).
        reason: why not, when they did not.
        seconds: what the check cost.
    """

    ok: bool
    reason: str = ""
    seconds: float = 0.0


def launcher_problem() -> Optional[str]:
    """Why Triton cannot build its launcher in this process, or None."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None  # the interpreter builds nothing
    compilers = [os.environ.get("CC", ""), "cc", "gcc", "clang"]
    if not any(c and shutil.which(c) for c in compilers):
        return (
            "no C compiler ($CC, cc, gcc or clang), which Triton needs to build "
            "its launcher; install one (e.g. gcc)"
        )
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return (
            f"no Python headers ({include}/Python.h), which Triton needs to build "
            "its launcher; install them (e.g. python3-dev)"
        )
    return None


def _format_name(channels_last: bool) -> str:
    return "channels-last" if channels_last else "contiguous"


Compare = Callable[[torch.device, torch.dtype, bool], str]


@functools.lru_cache(maxsize=None)
def split_kernels_verdict(
    device: torch.device, dtype: torch.dtype, channels_last: bool, compare: Compare
) -> KernelVerdict:
    """Checks the kernels once per process and kind of batch (module doc).

    Args:
        device: the batches' device.
        dtype: their dtype.
        channels_last: channels-last-3d batches (else contiguous).
        compare: ``compare(device, dtype, channels_last)`` runs the kernels and
            the native computation on one small batch and returns the first
            difference, or "" (``models/norm.py``'s ``compare_with_native``).

    Returns:
        KernelVerdict: the kernels' verdict; a failure is logged once.
    """
    from slowfast.models.kernels.split_bn import _kernels

    start = time.perf_counter()
    reason = "Triton cannot be imported" if _kernels() is None else launcher_problem()
    if reason is None:
        try:
            reason = compare(device, dtype, channels_last)
        except Exception as err:  # a compile or launch error: the reason
            reason = f"the kernels failed: {type(err).__name__}: {err}".splitlines()[0]
    seconds = time.perf_counter() - start
    what = (
        f"{device}, {str(dtype).removeprefix('torch.')}, {_format_name(channels_last)}"
    )
    if reason:
        logger.warning(
            "split-BN Triton kernels off (%s): %s; sub-batch BN runs the native "
            "path instead (BN.SPLIT_KERNELS triton forces the kernels)",
            what,
            reason,
        )
        return KernelVerdict(False, reason, seconds)
    logger.info("split-BN Triton kernels checked (%s) in %.2f s", what, seconds)
    return KernelVerdict(True, "", seconds)
