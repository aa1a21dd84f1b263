"""Counting the videos that fail to load during a training epoch."""

import logging
from typing import Iterable, Union

import torch

from slowfast.datasets.lists import DataError

logger = logging.getLogger(__name__)


class BadDataMonitor:
    """Counts failed videos per epoch and stops a run drowning in bad data.

    The training datasets replace a video that fails to load by another one
    and report how many failed before each item in ``extras["num_failed"]``;
    feed those to ``update`` after every batch.

    Args:
        dataset_size: videos seen per epoch by this process (the bound is a
            fraction of it).
        max_fraction: DATA.MAX_BAD_FRACTION; more failures than
            ``max_fraction * dataset_size`` in one epoch is an error.
    """

    def __init__(self, dataset_size: int, max_fraction: float = 0.05):
        if dataset_size <= 0:
            raise ValueError(
                f"BadDataMonitor: dataset_size must be positive, got {dataset_size}"
            )
        if not 0 <= max_fraction <= 1:
            raise ValueError(
                f"BadDataMonitor: max_fraction must be in [0, 1], got {max_fraction}"
            )
        self.dataset_size = int(dataset_size)
        self.max_fraction = float(max_fraction)
        self.count = 0
        self.total = 0

    @property
    def bound(self) -> float:
        """Largest number of failures tolerated in one epoch."""
        return self.max_fraction * self.dataset_size

    def update(self, num_failed: Union[int, torch.Tensor, Iterable[int]]) -> None:
        """Adds a batch's failures.

        Args:
            num_failed: ``extras["num_failed"]`` of a batch (tensor, ints or int).

        Raises:
            DataError: the epoch's failures exceed the bound.
        """
        if isinstance(num_failed, torch.Tensor):
            added = int(num_failed.sum().item())
        elif isinstance(num_failed, int):
            added = num_failed
        else:
            added = int(sum(int(n) for n in num_failed))
        self.count += added
        self.total += added
        if self.count > self.bound:
            raise DataError(
                f"{self.count} videos failed to load this epoch, more than "
                f"DATA.MAX_BAD_FRACTION={self.max_fraction} of {self.dataset_size} "
                f"videos ({self.bound:g}); check the data with tools/verify_dataset.py"
            )

    def end_epoch(self, epoch: int) -> int:
        """Logs the epoch's failure count and resets it.

        Args:
            epoch: index of the epoch that ended (logged 1-based).

        Returns:
            int: the number of failures in that epoch.
        """
        count = self.count
        if count:
            logger.warning(
                "Epoch %d: %d of %d videos failed to load and were replaced (bound %g)",
                epoch + 1,
                count,
                self.dataset_size,
                self.bound,
            )
        else:
            logger.debug("Epoch %d: no video failed to load", epoch + 1)
        self.count = 0
        return count
