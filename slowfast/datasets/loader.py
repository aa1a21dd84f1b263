"""Data loaders: per-batch sampling grids, sharding and deterministic seeding.

Training batches come from ``GridBatchSampler``: each epoch it takes this
process's shard of a seeded shuffle (``DistributedSampler``, seed RNG_SEED +
epoch) and cuts it into batches whose size and ``SamplingGrid`` come from
``shape_fn(epoch, it)``. Each item is requested as ``(index, grid, seed)``
with ``seed`` derived from (RNG_SEED, epoch, index), so an epoch's samples
depend on (RNG_SEED, epoch, rank) only, not on the number of workers. All
processes see the same number of batches (shards are padded to equal length
and cut by the same ``shape_fn``).

Evaluation loaders ("val", "test") are sequential; with several processes
each gets a ``DistributedSampler`` shard, padded to equal length by
repeating entries (deduplicate by the returned entry indices when gathering).
"""

import logging
import random
from typing import Callable, Iterator, List, Optional, Tuple

import numpy as np
import torch
from fvcore.common.config import CfgNode
from torch.utils.data import DataLoader, Sampler
from torch.utils.data.distributed import DistributedSampler

from slowfast.datasets.base import mix_seed
from slowfast.datasets.build import build_dataset, dataset_name
from slowfast.datasets.grid import SamplingGrid

logger = logging.getLogger(__name__)

# shape_fn(epoch, it) -> (per-process batch size, grid or None for the config's)
ShapeFn = Callable[[int, int], Tuple[int, Optional[SamplingGrid]]]


class GridBatchSampler(Sampler):
    """Batches of ``(index, grid, seed)`` requests with per-iteration shapes.

    Args:
        sampler: yields this process's indices for the epoch (has
            ``set_epoch``, e.g. a ``DistributedSampler``).
        shape_fn: ``(epoch, it) -> (batch size, grid)`` for iteration ``it``;
            must be a pure function (it is called again by ``len``).
        seed: RNG_SEED, mixed with the epoch and index into each item's seed.
        drop_last: drop the last incomplete batch (training).
    """

    def __init__(self, sampler, shape_fn: ShapeFn, seed: int, drop_last: bool = True):
        self.sampler = sampler
        self.shape_fn = shape_fn
        self.seed = int(seed)
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch (reshuffles deterministically and picks shapes)."""
        self.epoch = int(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.epoch)

    def _sizes(self, total: int) -> Iterator[Tuple[int, Optional[SamplingGrid]]]:
        start, it = 0, 0
        while start < total:
            size, grid = self.shape_fn(self.epoch, it)
            if int(size) <= 0:
                raise ValueError(f"shape_fn({self.epoch}, {it}) gave batch size {size}")
            if start + size > total and self.drop_last:
                return
            yield int(size), grid
            start += size
            it += 1

    def __iter__(self) -> Iterator[List[Tuple[int, Optional[SamplingGrid], int]]]:
        indices = list(self.sampler)
        start = 0
        for size, grid in self._sizes(len(indices)):
            chunk = indices[start : start + size]
            start += size
            yield [(i, grid, mix_seed(self.seed, self.epoch, i)) for i in chunk]

    def __len__(self) -> int:
        return sum(1 for _ in self._sizes(len(self.sampler)))


class _WorkerInit:
    """Seeds a loader worker's RNGs from (seed, rank, worker id); one thread."""

    def __init__(self, seed: int, rank: int):
        self.seed, self.rank = seed, rank

    def __call__(self, worker_id: int) -> None:
        value = mix_seed(self.seed, self.rank, worker_id) & 0xFFFFFFFF
        random.seed(value)
        np.random.seed(value)
        torch.manual_seed(value)
        torch.set_num_threads(1)


def _per_process(batch: int, num_procs: int, key: str, strict: bool) -> int:
    if batch % num_procs:
        if strict:
            raise ValueError(
                f"{key} = {batch} must be divisible by the number of processes "
                f"({num_procs})"
            )
        return max(1, -(-batch // num_procs))
    return batch // num_procs


def construct_loader(
    cfg: CfgNode,
    split: str,
    shape_fn: Optional[ShapeFn] = None,
    num_procs: int = 1,
    rank: int = 0,
) -> DataLoader:
    """Builds the data loader of a split for one process.

    Args:
        cfg: the run's config (TRAIN.DATASET for train/val, TEST.DATASET for test).
        split: "train", "val" or "test".
        shape_fn: training only: ``(epoch, it) -> (per-process batch, grid)``;
            None uses TRAIN.BATCH_SIZE / num_procs and the config's shape.
        num_procs: number of training processes (shards).
        rank: this process's rank.

    Returns:
        DataLoader: yields ``(inputs, labels, indices, extras)`` with inputs a
        list of ``[N, C, T, H, W]`` tensors. For "train" its batch sampler is
        a ``GridBatchSampler``: call ``loader.batch_sampler.set_epoch(epoch)``
        (or ``loader_set_epoch``) before each epoch.
    """
    if not 0 <= rank < num_procs:
        raise ValueError(f"rank {rank} out of range for {num_procs} processes")
    dataset = build_dataset(dataset_name(cfg, split), cfg, split)
    workers = cfg.DATA_LOADER.NUM_WORKERS
    common = dict(
        num_workers=workers,
        pin_memory=bool(cfg.DATA_LOADER.PIN_MEMORY and torch.cuda.is_available()),
        worker_init_fn=_WorkerInit(cfg.RNG_SEED, rank),
        persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(mix_seed(cfg.RNG_SEED, rank) >> 1),
    )
    if split == "train":
        batch = _per_process(cfg.TRAIN.BATCH_SIZE, num_procs, "TRAIN.BATCH_SIZE", True)
        if shape_fn is None:

            def shape_fn(epoch: int, it: int) -> Tuple[int, Optional[SamplingGrid]]:
                return batch, None

        sampler = DistributedSampler(
            dataset, num_replicas=num_procs, rank=rank, shuffle=True, seed=cfg.RNG_SEED
        )
        batch_sampler = GridBatchSampler(
            sampler, shape_fn, cfg.RNG_SEED, drop_last=True
        )
        if len(batch_sampler) == 0:
            raise ValueError(
                f"train split of {dataset_name(cfg, split)} has {len(sampler)} "
                f"entries per process, fewer than one batch ({shape_fn(0, 0)[0]})"
            )
        return DataLoader(dataset, batch_sampler=batch_sampler, **common)
    batch = _per_process(cfg.TEST.BATCH_SIZE, num_procs, "TEST.BATCH_SIZE", False)
    sampler = None
    if num_procs > 1:
        sampler = DistributedSampler(
            dataset, num_replicas=num_procs, rank=rank, shuffle=False
        )
    return DataLoader(
        dataset, batch_size=batch, sampler=sampler, shuffle=False, **common
    )


def shutdown_workers(loader: DataLoader) -> None:
    """Stops a loader's persistent worker processes now.

    Otherwise they are stopped at interpreter exit, where PyTorch waits 5 s
    per worker when memory pinning is on (pytorch/pytorch#81794): 210 s at the
    end of a one-GPU run with 14 workers and 3 loaders, measured on an H100
    machine. The loader starts new workers if it is iterated again.

    Args:
        loader: a loader from ``construct_loader``.
    """
    iterator = getattr(loader, "_iterator", None)
    if iterator is None:
        return
    loader._iterator = None
    stop = getattr(iterator, "_shutdown_workers", None)
    if stop is not None:
        stop()


def loader_set_epoch(loader: DataLoader, epoch: int) -> None:
    """Sets the epoch of a loader's (batch) sampler, whichever kind it has.

    Args:
        loader: a loader from ``construct_loader``.
        epoch: the epoch about to start.
    """
    for obj in (loader.batch_sampler, loader.sampler):
        if hasattr(obj, "set_epoch"):
            obj.set_epoch(epoch)
            return
