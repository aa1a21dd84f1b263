"""Validation and multi-view testing: run views, gather, ensemble, score."""

import logging
from typing import Callable, ContextManager

import torch
import torch.distributed as dist
from fvcore.common.config import CfgNode
from torch import nn
from torch.utils.data import DataLoader

from slowfast.engine.metrics import mean_average_precision, topk_errors

logger = logging.getLogger(__name__)


@torch.inference_mode()
def run_views(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device,
    autocast: Callable[[], ContextManager],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores every view of the loader, gathered over all processes.

    Padded duplicates that a DistributedSampler adds are removed by the
    dataset index, so each view counts once.

    Args:
        model: the model in eval mode (its head applies MODEL.HEAD_ACT).
        loader: a val/test loader yielding (inputs, labels, indices, extras).
        device: where the model runs.
        autocast: returns the autocast context to run the forward pass in.

    Returns:
        (indices [V], video indices [V], scores [V, K]) on CPU, sorted by index.
    """
    model.eval()
    indices, videos, scores = [], [], []
    for inputs, _labels, index, extras in loader:
        inputs = [x.to(device, non_blocking=True) for x in inputs]
        with autocast():
            out = model(inputs)
        scores.append(out.float().cpu())
        indices.append(index.view(-1).cpu())
        videos.append(extras["video_idx"].view(-1).cpu())
    local = (torch.cat(indices), torch.cat(videos), torch.cat(scores))
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, local)
        local = tuple(torch.cat([p[i] for p in parts]) for i in range(3))
    index, video, score = local
    order = torch.argsort(index, stable=True)
    index, video, score = index[order], video[order], score[order]
    keep = torch.ones_like(index, dtype=torch.bool)
    keep[1:] = index[1:] != index[:-1]
    return index[keep], video[keep], score[keep]


def ensemble_views(
    video_idx: torch.Tensor, scores: torch.Tensor, num_videos: int, method: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Combines the views of each video by DATA.ENSEMBLE_METHOD.

    Args:
        video_idx: [V] video of each view.
        scores: [V, K] scores of each view.
        num_videos: number of videos in the split.
        method: "sum" or "max".

    Returns:
        ([num_videos, K] video scores, [num_videos] number of views seen).
    """
    num_classes = scores.shape[1]
    counts = torch.bincount(video_idx, minlength=num_videos)
    index = video_idx.view(-1, 1).expand(-1, num_classes)
    if method == "sum":
        out = torch.zeros(num_videos, num_classes).scatter_add_(0, index, scores)
    elif method == "max":
        out = torch.full((num_videos, num_classes), float("-inf"))
        out = out.scatter_reduce(0, index, scores, reduce="amax")
        out[counts == 0] = 0.0
    else:
        raise ValueError(f"DATA.ENSEMBLE_METHOD = {method!r}: must be 'sum' or 'max'")
    return out, counts


def video_metrics(
    scores: torch.Tensor, labels: torch.Tensor, multi_label: bool
) -> dict:
    """Top-1/top-5 error (single-label) or mAP (multi-label) of video scores.

    Args:
        scores: [N, K] video scores.
        labels: [N] class indices, or [N, K] multi-hot targets.
        multi_label: which of the two.

    Returns:
        {"top1_err", "top5_err"} in percent, or {"map"} in [0, 1].
    """
    if multi_label:
        return {"map": mean_average_precision(scores, labels)}
    top1, top5 = topk_errors(scores, labels, (1, 5))
    return {"top1_err": top1, "top5_err": top5}


def stack_labels(labels: list) -> torch.Tensor:
    """Stacks per-video labels (ints or multi-hot tensors) into one tensor."""
    if labels and torch.is_tensor(labels[0]):
        return torch.stack([torch.as_tensor(x).float() for x in labels])
    return torch.as_tensor(labels, dtype=torch.long)


def evaluate(
    model: nn.Module,
    loader: DataLoader,
    cfg: CfgNode,
    device: torch.device,
    autocast: Callable[[], ContextManager],
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Runs every view of a val/test loader and scores the videos.

    Args:
        model: the model.
        loader: the val or test loader (its dataset has ``num_videos`` and
            ``video_labels()``).
        cfg: the config (DATA.ENSEMBLE_METHOD, DATA.MULTI_LABEL).
        device: where the model runs.
        autocast: returns the autocast context for the forward pass.

    Returns:
        (metrics, video scores [N, K], video labels).
    """
    dataset = loader.dataset
    _, video_idx, scores = run_views(model, loader, device, autocast)
    num_videos = dataset.num_videos
    video_scores, counts = ensemble_views(
        video_idx, scores, num_videos, cfg.DATA.ENSEMBLE_METHOD
    )
    labels = stack_labels(dataset.video_labels())
    missing = int((counts == 0).sum())
    if missing:
        raise RuntimeError(f"evaluation: {missing} of {num_videos} videos got no view")
    expected = len(dataset) // max(num_videos, 1)
    if int(counts.min()) != expected or int(counts.max()) != expected:
        raise RuntimeError(
            f"evaluation: views per video range {int(counts.min())}.."
            f"{int(counts.max())}, expected {expected}"
        )
    metrics = video_metrics(video_scores, labels, cfg.DATA.MULTI_LABEL)
    metrics["num_videos"] = num_videos
    metrics["views_per_video"] = expected
    return metrics, video_scores, labels
