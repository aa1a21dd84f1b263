"""Model statistics: parameter count, fvcore FLOPs, network stride, inputs."""

import logging
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
from fvcore.common.config import CfgNode
from torch import nn

from slowfast.models.describe import ModelInfo, describe_model

logger = logging.getLogger(__name__)

# (num_frames, crop_size) -> forward GFLOPs of one clip (``clip_gflops_fn``).
GflopsFn = Callable[[int, int], float]


def params_count(model: nn.Module) -> int:
    """Counts the parameters of ``model`` (buffers excluded).

    Args:
        model: the model.

    Returns:
        int: the number of scalar parameters.
    """
    return sum(p.numel() for p in model.parameters())


def num_pathways(cfg: CfgNode) -> int:
    """Returns the number of input pathways of the configured model.

    Args:
        cfg: the run's config.

    Returns:
        int: the model's ``describe_model(cfg).num_pathways``.
    """
    return describe_model(cfg).num_pathways


def pathway_inputs(
    cfg: CfgNode,
    batch: int,
    num_frames: int,
    crop_size: Union[int, tuple],
    device: Union[str, torch.device] = "cpu",
    info: Optional[ModelInfo] = None,
) -> List[torch.Tensor]:
    """Makes random model inputs with the configured pathways.

    For SlowFast the slow pathway takes ``num_frames // SLOWFAST.ALPHA`` frames
    picked evenly from the fast pathway's ``num_frames`` (as the data loader
    does).

    Args:
        cfg: the run's config.
        batch: clips in the batch.
        num_frames: frames of the fast (or only) pathway.
        crop_size: spatial size, an int (square) or (height, width).
        device: where to create the tensors.
        info: the model's description (None: ``describe_model(cfg)``).

    Returns:
        list[torch.Tensor]: one [N, C, T, H, W] tensor per pathway.

    Raises:
        ValueError: too few frames for SlowFast's slow pathway.
    """
    height, width = (
        (crop_size, crop_size) if isinstance(crop_size, int) else tuple(crop_size)
    )
    channels = list(cfg.DATA.INPUT_CHANNEL_NUM)

    def clip(num_channels: int, frames: int) -> torch.Tensor:
        shape = (batch, num_channels, frames, height, width)
        return torch.rand(shape, device=device)

    info = describe_model(cfg) if info is None else info
    if info.num_pathways == 1:
        return [clip(channels[0], num_frames)]
    alpha = info.alpha
    if num_frames // alpha < 1:
        raise ValueError(
            f"{num_frames} frames give no slow-pathway frame with "
            f"SLOWFAST.ALPHA = {alpha}"
        )
    slow_channels, fast_channels = channels[0], channels[-1]
    fast = clip(fast_channels, num_frames)
    if slow_channels != fast_channels:
        return [clip(slow_channels, num_frames // alpha), fast]
    index = torch.linspace(0, num_frames - 1, num_frames // alpha).long()
    slow = fast.index_select(2, index.to(fast.device))
    return [slow, fast]


def gflops(
    model: nn.Module,
    cfg: CfgNode,
    num_frames: int,
    crop_size: int,
    info: Optional[ModelInfo] = None,
) -> float:
    """Counts the fvcore GFLOPs (multiply-adds) of one clip in eval mode.

    The model's training mode is restored afterwards.

    Args:
        model: the model (may be DDP-wrapped; its device is used).
        cfg: the run's config (pathways and SlowFast ALPHA).
        num_frames: frames of the fast (or only) pathway.
        crop_size: spatial size of the square crop.
        info: the model's description (None: ``describe_model(cfg)``).

    Returns:
        float: GFLOPs for batch size 1.
    """
    from fvcore.nn import FlopCountAnalysis

    model = getattr(model, "module", model)
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    inputs = pathway_inputs(cfg, 1, num_frames, crop_size, device, info)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            counter = FlopCountAnalysis(model, (inputs,))
            counter.unsupported_ops_warnings(False)
            counter.uncalled_modules_warnings(False)
            total = counter.total()
    finally:
        model.train(was_training)
    return total / 1e9


def clip_gflops_fn(cfg: CfgNode) -> GflopsFn:
    """Returns ``(num_frames, crop_size) -> GFLOPs of one clip`` for a config.

    The config's model is built once, on the CPU; each distinct shape is
    counted once (``gflops``, eval mode). A coarse multigrid shape does not
    cost its area: feature maps round up at each stride, so a 68 px crop
    gives a stride-32 network the same 3 x 3 last-stage maps as a 96 px one.

    Args:
        cfg: the run's config.

    Returns:
        GflopsFn: the counter.
    """
    from slowfast.models import build_model

    cfg = cfg.clone()
    cfg.defrost()
    cfg.NUM_GPUS = 0
    model = build_model(cfg)
    counted: Dict[Tuple[int, int], float] = {}

    def count(num_frames: int, crop_size: int) -> float:
        key = (num_frames, crop_size)
        if key not in counted:
            counted[key] = gflops(model, cfg, num_frames, crop_size)
        return counted[key]

    return count


def network_stride(cfg: CfgNode) -> int:
    """Returns the total spatial stride of the configured network.

    Stem (4) times the first-block stride of res2..res5 (slow pathway); 32
    for the standard ResNets. Crops smaller than this are rejected by the
    trainer.

    Args:
        cfg: the run's config.

    Returns:
        int: the spatial stride from input to final features.
    """
    return describe_model(cfg).spatial_stride


def log_model_info(
    model: nn.Module,
    cfg: CfgNode,
    flops: bool = True,
    info: Optional[ModelInfo] = None,
) -> None:
    """Logs the model's parameter count and test-view GFLOPs.

    Args:
        model: the model.
        cfg: the run's config (DATA.NUM_FRAMES and DATA.TEST_CROP_SIZE give
            the test view).
        flops: also count FLOPs (a traced forward pass at the test shape).
        info: the model's description (None: ``describe_model(cfg)``).
    """
    logger.info("Model: %s", type(getattr(model, "module", model)).__name__)
    logger.info("Params: %s", f"{params_count(model):,}")
    if flops:
        frames, crop = cfg.DATA.NUM_FRAMES, cfg.DATA.TEST_CROP_SIZE
        value = gflops(model, cfg, frames, crop, info)
        logger.info("FLOPs: %.2f G per view of %d x %d^2", value, frames, crop)
