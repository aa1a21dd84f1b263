"""Validation and multi-view testing: run views, gather, ensemble, score."""

import logging
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, List, Protocol, cast

import torch
from fvcore.common.config import CfgNode
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from slowfast.datasets import EvalShardSampler
from slowfast.engine.metrics import mean_average_precision, topk_errors
from slowfast.utils import distributed as du

logger = logging.getLogger(__name__)


class ViewDataset(Protocol):
    """What evaluation reads of a val/test dataset (``VideoDataset`` has it):
    its views (``len``), videos and their labels."""

    num_videos: int

    def __len__(self) -> int: ...

    def video_labels(self) -> List[Any]: ...


@torch.inference_mode()
def run_views(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device,
    autocast: Callable[[], ContextManager],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores this process's views, leaving out the sampler's padding.

    With several processes the loader's ``EvalShardSampler`` pads the view
    list by repeating its first views so that every process gets as many;
    those duplicates are dropped here.

    Args:
        model: the model in eval mode (its head applies MODEL.HEAD_ACT).
        loader: a val/test loader yielding (inputs, labels, indices, extras).
        device: where the model runs.
        autocast: returns the autocast context to run the forward pass in.

    Returns:
        (video index [V], scores [V, K]) of this process's views, on CPU.
    """
    sampler = loader.sampler
    if isinstance(sampler, DistributedSampler):
        raise ValueError("evaluation loaders shard with EvalShardSampler")
    model.eval()
    videos, scores = [], []
    for inputs, _labels, _index, extras in loader:
        inputs = [x.to(device, non_blocking=True) for x in inputs]
        with autocast():
            out = model(inputs)
        scores.append(out.float().cpu())
        videos.append(extras["video_idx"].view(-1).cpu())
    video, score = torch.cat(videos), torch.cat(scores)
    if isinstance(sampler, EvalShardSampler):
        keep = ~sampler.padded(len(video))
        video, score = video[keep], score[keep]
    return video, score


def ensemble_views(
    video_idx: torch.Tensor, scores: torch.Tensor, num_videos: int, method: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Combines the views of each video by DATA.ENSEMBLE_METHOD.

    Under torch.distributed each process passes its own views and the
    per-video results are reduced over processes (sum, or max), so only
    ``[num_videos, K]`` tensors travel.

    Args:
        video_idx: [V] video of each view.
        scores: [V, K] scores of each view.
        num_videos: number of videos in the split.
        method: "sum" or "max".

    Returns:
        ([num_videos, K] video scores, [num_videos] number of views seen);
        a video without views scores 0.
    """
    num_classes = scores.shape[1]
    counts = torch.bincount(video_idx, minlength=num_videos).double()
    index = video_idx.view(-1, 1).expand(-1, num_classes)
    if method == "sum":
        out = torch.zeros(num_videos, num_classes).scatter_add_(0, index, scores)
        op = "sum"
    elif method == "max":
        out = torch.full((num_videos, num_classes), float("-inf"))
        out = out.scatter_reduce(0, index, scores, reduce="amax")
        op = "max"
    else:
        raise ValueError(f"DATA.ENSEMBLE_METHOD = {method!r}: must be 'sum' or 'max'")
    out = du.all_reduce(out, op)
    counts = du.all_reduce(counts, "sum")
    out[counts == 0] = 0.0
    return out, counts.long()


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
    device: torch.device,
    autocast: Callable[[], ContextManager],
    ensemble_method: str,
    multi_label: bool,
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Runs every view of a val/test loader and scores the videos.

    Args:
        model: the model.
        loader: the val or test loader (its dataset has ``num_videos`` and
            ``video_labels()``).
        device: where the model runs.
        autocast: returns the autocast context for the forward pass.
        ensemble_method: how views combine (DATA.ENSEMBLE_METHOD).
        multi_label: mAP instead of top-k errors (DATA.MULTI_LABEL).

    Returns:
        (metrics, video scores [N, K], video labels).
    """
    dataset = cast(ViewDataset, loader.dataset)
    video_idx, scores = run_views(model, loader, device, autocast)
    num_videos = dataset.num_videos
    video_scores, counts = ensemble_views(
        video_idx, scores, num_videos, ensemble_method
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
    metrics = video_metrics(video_scores, labels, multi_label)
    metrics["num_videos"] = num_videos
    metrics["views_per_video"] = expected
    return metrics, video_scores, labels


@dataclass(frozen=True)
class Evaluator:
    """One model scored on one val/test loader, as often as asked.

    Attributes:
        model: the model (unwrapped: evaluation is not a collective forward).
        loader: the val or test loader.
        device: where the model runs.
        autocast: returns the autocast context for the forward pass.
        ensemble_method: how views combine (DATA.ENSEMBLE_METHOD).
        multi_label: mAP instead of top-k errors (DATA.MULTI_LABEL).
    """

    model: nn.Module
    loader: DataLoader
    device: torch.device
    autocast: Callable[[], ContextManager]
    ensemble_method: str
    multi_label: bool

    @classmethod
    def from_cfg(
        cls,
        cfg: CfgNode,
        model: nn.Module,
        loader: DataLoader,
        device: torch.device,
        autocast: Callable[[], ContextManager],
    ) -> "Evaluator":
        """The evaluator of ``model`` on ``loader`` with the config's DATA settings."""
        return cls(
            model,
            loader,
            device,
            autocast,
            cfg.DATA.ENSEMBLE_METHOD,
            cfg.DATA.MULTI_LABEL,
        )

    def run(self) -> tuple[dict, torch.Tensor, torch.Tensor]:
        """Scores every view; returns (metrics, video scores, video labels)."""
        return evaluate(
            self.model,
            self.loader,
            self.device,
            self.autocast,
            self.ensemble_method,
            self.multi_label,
        )
