"""Numeric precision of training and testing: autocast, the gradient scaler."""

import contextlib
import logging
from typing import Callable, ContextManager, Optional

import torch
from fvcore.common.config import CfgNode

logger = logging.getLogger(__name__)


def mixed_precision_dtype(cfg: CfgNode, device: torch.device) -> Optional[torch.dtype]:
    """The autocast dtype of a run: None without TRAIN.MIXED_PRECISION, else
    TRAIN.MIXED_PRECISION_DTYPE ("auto": bf16 on CPUs and on GPUs with bf16
    kernels, compute capability 8.0 and newer; fp16 on older GPUs)."""
    if not cfg.TRAIN.MIXED_PRECISION:
        return None
    name = cfg.TRAIN.MIXED_PRECISION_DTYPE
    if name == "auto":
        gpu_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported(
            including_emulation=False
        )
        name = "bf16" if device.type != "cuda" or gpu_bf16 else "fp16"
    return torch.bfloat16 if name == "bf16" else torch.float16


def autocast_factory(
    cfg: CfgNode, device: torch.device
) -> Callable[[], ContextManager]:
    """Returns a callable giving the forward pass's precision context.

    TRAIN.MIXED_PRECISION selects autocast to ``mixed_precision_dtype``. bf16
    on a CPU without oneDNN's bf16 kernels logs a warning, since the step
    there is slower than in fp32 (docs/benchmarks/model-step.md, "bf16 autocast
    on an AVX2 CPU").

    Args:
        cfg: the config.
        device: the device of the model.

    Returns:
        A zero-argument callable returning a context manager.
    """
    dtype = mixed_precision_dtype(cfg, device)
    if dtype is None:
        return contextlib.nullcontext
    if device.type == "cpu" and dtype == torch.bfloat16 and cpu_has_bf16() is False:
        logger.warning(
            "TRAIN.MIXED_PRECISION True: bf16 autocast on a CPU without oneDNN's "
            "bf16 kernels (%s; they need AVX512 or AMX) is slower than fp32; "
            "set TRAIN.MIXED_PRECISION False "
            "(docs/benchmarks/model-step.md, 'bf16 autocast on an AVX2 CPU')",
            torch.backends.cpu.get_cpu_capability(),
        )
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def cpu_has_bf16() -> Optional[bool]:
    """Whether oneDNN has bf16 kernels for this CPU (it needs AVX512 or AMX);
    None where torch cannot tell."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return None if probe is None else bool(probe())


def make_grad_scaler(cfg: CfgNode, device: torch.device):
    """A GradScaler for fp16 training on GPU, else None (bf16 needs none)."""
    if mixed_precision_dtype(cfg, device) == torch.float16:
        return torch.amp.GradScaler(device.type)
    return None
