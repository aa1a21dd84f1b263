"""Loss functions selected by MODEL.LOSS_FUNC."""

from typing import Callable

import torch
import torch.nn.functional as F


def _soft_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()


_LOSSES: dict = {
    "cross_entropy": F.cross_entropy,
    "bce_logit": F.binary_cross_entropy_with_logits,
    "bce": F.binary_cross_entropy,
    "soft_cross_entropy": _soft_cross_entropy,
}


def get_loss_func(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Returns the loss ``f(scores, targets) -> scalar`` named by MODEL.LOSS_FUNC.

    Args:
        name: "cross_entropy", "bce_logit", "bce" or "soft_cross_entropy".

    Returns:
        The loss function (mean over the batch).
    """
    if name not in _LOSSES:
        raise ValueError(f"MODEL.LOSS_FUNC = {name!r}: must be one of {list(_LOSSES)}")
    return _LOSSES[name]
