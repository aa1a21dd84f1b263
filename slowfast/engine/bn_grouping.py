"""BN statistics grouping driven by the multigrid schedule.

Multigrid computes BN statistics over groups of about BN_BASE_SIZE clips: the
local batch is split (sub-batch BN) or, when a process holds fewer clips,
statistics are shared across processes (sync BN). Both are attributes of the
norm layers, so changing them swaps no parameter and rebuilds nothing.
"""

import logging
from typing import Optional

from torch import nn

from slowfast.models.norm import SubBatchNorm3d, set_bn_process_group, set_bn_splits
from slowfast.utils import distributed as du

logger = logging.getLogger(__name__)


def convert_to_sub_bn(model: nn.Module) -> nn.Module:
    """Replaces every plain ``nn.BatchNorm3d`` by a ``SubBatchNorm3d`` in place.

    Parameters and buffers are carried over and state-dict keys do not change.

    Args:
        model: the model, before the optimizer is built.

    Returns:
        The same model object.
    """
    for name, child in list(model.named_children()):
        if type(child) is nn.BatchNorm3d:
            new = SubBatchNorm3d(
                child.num_features,
                eps=child.eps,
                momentum=child.momentum,
                affine=child.affine,
            )
            new.load_state_dict(child.state_dict())
            new.train(child.training)
            setattr(model, name, new)
        else:
            convert_to_sub_bn(child)
    return model


def _make_groups(size: int, world_size: int) -> list:
    """Creates consecutive process groups of ``size`` ranks (collective call)."""
    if world_size % size:
        raise ValueError(
            f"BN sync over {size} processes does not divide the {world_size} "
            "processes; change TRAIN.BATCH_SIZE or MULTIGRID.BN_BASE_SIZE"
        )
    return du.new_groups([list(range(s, s + size)) for s in range(0, world_size, size)])


class BNGrouping:
    """Sets the BN split count and sync group of every iteration.

    Args:
        model: the (unwrapped) model with ``SubBatchNorm3d`` layers.
        sync_sizes: every sync size (processes per BN group) the run uses.
        world_size: number of processes.
        rank: this process's rank.
    """

    def __init__(
        self, model: nn.Module, sync_sizes: set, world_size: int, rank: int
    ) -> None:
        self.model = model
        self.rank = rank
        self.groups = {}
        for size in sorted(s for s in sync_sizes if s > 1):
            groups = _make_groups(size, world_size)
            self.groups[size] = groups[rank // size]
        self._state: Optional[tuple] = None

    def apply(self, num_splits: int, sync_size: int) -> None:
        """Sets the grouping for the next forward pass (no-op when unchanged).

        Args:
            num_splits: splits of the local batch.
            sync_size: processes sharing statistics (1: none).
        """
        state = (num_splits, sync_size)
        if state == self._state:
            return
        if sync_size > 1 and sync_size not in self.groups:
            raise ValueError(f"no BN process group of {sync_size} processes was made")
        set_bn_splits(self.model, num_splits)
        set_bn_process_group(self.model, self.groups.get(sync_size))
        if self._state is not None:
            logger.info("BN groups: %d splits, sync over %d process(es)", *state)
        self._state = state
