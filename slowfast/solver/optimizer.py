"""Optimizers by registry (SOLVER.OPTIMIZING_METHOD), with BN parameters in
their own group, and per-iteration LR setting.

A new optimizer is one function ``f(param_groups, cfg) -> Optimizer``
decorated with ``@OPTIMIZER_REGISTRY.register()``; its name is the
SOLVER.OPTIMIZING_METHOD value.
"""

import torch
from fvcore.common.config import CfgNode
from fvcore.common.registry import Registry
from torch import nn

from slowfast.models.describe import param_groups
from slowfast.utils.registry import check_registered

OPTIMIZER_REGISTRY = Registry("OPTIMIZER")
OPTIMIZER_REGISTRY.__doc__ = "Optimizers ``f(param_groups, cfg)`` by name."


def construct_optimizer(model: nn.Module, cfg: CfgNode) -> torch.optim.Optimizer:
    """Builds the optimizer over the model's parameter groups.

    The groups come from ``models.describe.param_groups`` (by default norm
    layers and the rest).

    The groups are fixed at construction: changing the BN split count or the
    sync group later swaps no parameter, so the optimizer stays valid.

    Args:
        model: the model (possibly DDP-wrapped).
        cfg: the config (SOLVER.*, BN.WEIGHT_DECAY).

    Returns:
        The optimizer; its LR is set every iteration by ``set_lr``.
    """
    groups = param_groups(model, cfg)
    name = cfg.SOLVER.OPTIMIZING_METHOD
    check_optimizer_name(cfg)
    return OPTIMIZER_REGISTRY.get(name)(groups, cfg)


@OPTIMIZER_REGISTRY.register()
def sgd(groups: list, cfg: CfgNode) -> torch.optim.Optimizer:
    """SGD with SOLVER.MOMENTUM, DAMPENING and NESTEROV (the reference's).

    On GPUs the update is the fused kernel: one launch for all parameters,
    and it skips a non-finite step on the device (``found_inf``,
    ``engine/nonfinite.py``), so the host never waits for the verdict. On
    CPUs PyTorch's per-tensor loop: ``foreach`` does not pay off there
    (docs/benchmarks/design-notes.md, "SGD implementation on CPU"), and the
    fused kernel rounds differently in the last bit, which would change every
    trained number of the CPU demos.
    """
    on_gpu = all(p.is_cuda for group in groups for p in group["params"])
    return torch.optim.SGD(
        groups,
        lr=cfg.SOLVER.BASE_LR,
        momentum=cfg.SOLVER.MOMENTUM,
        dampening=cfg.SOLVER.DAMPENING,
        nesterov=cfg.SOLVER.NESTEROV,
        fused=True if on_gpu else None,
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Sets the learning rate of every parameter group.

    Args:
        optimizer: the optimizer.
        lr: the new learning rate.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr


def check_optimizer_name(cfg: CfgNode) -> None:
    """Raises a one-line ValueError unless SOLVER.OPTIMIZING_METHOD is registered."""
    names = [name for name, _ in OPTIMIZER_REGISTRY]
    check_registered("SOLVER.OPTIMIZING_METHOD", cfg.SOLVER.OPTIMIZING_METHOD, names)
