"""Loss functions selected by MODEL.LOSS_FUNC, by registry.

A new loss is one function ``f(scores, targets) -> scalar`` decorated with
``@LOSS_REGISTRY.register()``; its name is the MODEL.LOSS_FUNC value.
"""

from typing import Callable

import torch
import torch.nn.functional as F
from fvcore.common.config import CfgNode
from fvcore.common.registry import Registry

from slowfast.utils.registry import check_registered

LOSS_REGISTRY = Registry("LOSS")
LOSS_REGISTRY.__doc__ = "Loss functions ``f(scores, targets) -> scalar`` by name."


@LOSS_REGISTRY.register()
def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Softmax cross-entropy with integer class targets."""
    return F.cross_entropy(logits, target)


@LOSS_REGISTRY.register()
def bce_logit(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy on logits (multi-label)."""
    return F.binary_cross_entropy_with_logits(logits, target)


@LOSS_REGISTRY.register()
def bce(probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy on probabilities (multi-label)."""
    return F.binary_cross_entropy(probs, target)


@LOSS_REGISTRY.register()
def soft_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against soft (probability) targets."""
    return torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()


def get_loss_func(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Returns the loss ``f(scores, targets) -> scalar`` named by MODEL.LOSS_FUNC.

    Args:
        name: a name registered in ``LOSS_REGISTRY``.

    Returns:
        The loss function (mean over the batch).
    """
    check_registered("MODEL.LOSS_FUNC", name, [k for k, _ in LOSS_REGISTRY])
    return LOSS_REGISTRY.get(name)


def check_loss_name(cfg: CfgNode) -> None:
    """Raises a one-line ValueError unless MODEL.LOSS_FUNC is registered."""
    names = [name for name, _ in LOSS_REGISTRY]
    check_registered("MODEL.LOSS_FUNC", cfg.MODEL.LOSS_FUNC, names)
