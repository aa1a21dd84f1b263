"""Top-k errors and mean average precision."""

import logging
from typing import Sequence

import numpy as np
import torch

logger = logging.getLogger(__name__)


def topk_errors(
    scores: torch.Tensor, labels: torch.Tensor, ks: Sequence[int]
) -> list[float]:
    """Top-k error rates in percent.

    Args:
        scores: [N, K] class scores.
        labels: [N] class indices.
        ks: the k values (each is capped at K).

    Returns:
        One error rate (0-100) per k.
    """
    return topk_error_tensor(scores, labels, ks).tolist()


def topk_error_tensor(
    scores: torch.Tensor, labels: torch.Tensor, ks: Sequence[int]
) -> torch.Tensor:
    """``topk_errors`` as a float64 tensor on the scores' device (nothing is
    read back to the host)."""
    maxk = min(max(ks), scores.shape[1])
    top = scores.topk(maxk, dim=1).indices
    hits = top.eq(labels.view(-1, 1))
    n = max(labels.numel(), 1)
    found = torch.stack([hits[:, : min(k, maxk)].any(1).sum() for k in ks])
    return 100.0 * (1.0 - found.double() / n)


def chance_map(targets: torch.Tensor) -> float:
    """The mAP that random scores get in expectation: the mean positive rate.

    A class's average precision under random scores is, in expectation, the
    share of its positives; classes without positives are left out, as in
    :func:`mean_average_precision`.

    Args:
        targets: [N, K] multi-hot targets.

    Returns:
        float: in [0, 1].
    """
    rate = targets.float().mean(0)
    present = targets.float().sum(0) > 0
    return float(rate[present].mean()) if present.any() else 0.0


def mean_average_precision(scores: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean over classes of the average precision, as the reference computes it.

    Classes without any positive example are left out.

    Args:
        scores: [N, K] scores.
        targets: [N, K] multi-hot targets.

    Returns:
        mAP in [0, 1].
    """
    scores_np = scores.float().cpu().numpy()
    targets_np = targets.float().cpu().numpy()
    keep = np.any(targets_np > 0, axis=0)
    if not keep.any():
        raise ValueError("mean average precision: no class has a positive example")
    dropped = int((~keep).sum())
    if dropped:
        logger.info("mAP: %d classes without positives left out", dropped)
    # Imported here, not at the top: only the mAP of multi-label data needs
    # scikit-learn (with SciPy), so other processes skip its import at start-up
    # (docs/benchmarks/loader.md, "Start-up of a training process").
    from sklearn.metrics import average_precision_score

    per_class = average_precision_score(
        targets_np[:, keep], scores_np[:, keep], average=None
    )
    return float(np.atleast_1d(per_class).mean())  # a float for one class
