"""Data loaders: per-batch sampling grids, sharding and deterministic seeding.

Training batches come from ``GridBatchSampler``: each epoch it takes this
process's shard of a seeded shuffle (``DistributedSampler``, seed RNG_SEED +
epoch) and cuts it into the epoch's batches, ``batches_fn(epoch, shard_size)``:
the epoch's ``BatchSpec`` (size and ``SamplingGrid`` of each batch) in order
(the multigrid schedule's ``epoch_batches`` in training). Each item is
requested as
``(index, grid, seed)`` with ``seed`` derived from (RNG_SEED, epoch, index), so
an epoch's samples depend on (RNG_SEED, epoch, rank) only, not on the number
of workers. All processes see the same number of batches (shards are padded
to equal length and cut into the same batches).

Evaluation loaders ("val", "test") are sequential; with several processes
each gets a contiguous ``EvalShardSampler`` block, padded to equal length by
repeating items (``EvalShardSampler.padded`` tells which to drop).
"""

import logging
import os
import random
import signal
from typing import (
    Callable,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Sized,
    Tuple,
    cast,
)

import numpy as np
import torch
from fvcore.common.config import CfgNode
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler

from slowfast.config.derived import (
    global_batch_size,
    per_process_batch,
    stop_signals,
    worker_niceness,
)
from slowfast.datasets.build import build_dataset, dataset_name
from slowfast.datasets.grid import SamplingGrid
from slowfast.datasets.lists import DataError
from slowfast.datasets.request import mix_seed
from slowfast.models.describe import ModelInfo

logger = logging.getLogger(__name__)


class BatchSpec(NamedTuple):
    """The size and sampling grid of one of the epoch's batches.

    Attributes:
        size: clips of this process in the batch.
        grid: their sampling grid (None: the dataset's, from the config).
    """

    size: int
    grid: Optional[SamplingGrid]


# batches_fn(epoch, shard_size) -> the epoch's batches in order, whose sizes sum
# to at most shard_size.
BatchesFn = Callable[[int, int], Sequence[BatchSpec]]


def clips_in_batch(batch: Sequence) -> int:
    """Clips in a batch of this module's loaders: ``(inputs, labels, index,
    extras)``, ``inputs`` one ``[N, C, T, H, W]`` tensor per pathway."""
    return int(batch[0][0].shape[0])


def fixed_batches(batch_size: int) -> BatchesFn:
    """The batches of a fixed shape: whole batches of ``batch_size``, the rest
    dropped."""

    def batches(epoch: int, shard_size: int):
        return [BatchSpec(batch_size, None)] * (shard_size // batch_size)

    return batches


class GridBatchSampler(Sampler):
    """The epoch's batches of ``(index, grid, seed)`` requests, one list each.

    It yields the batches of one epoch, or of a span of consecutive epochs as
    one stream (``set_epoch(epoch, end_epoch=...)``): the training loop takes
    each epoch's count from a single loader iterator, so the loader's workers
    prepare the next epoch's first batches while the current epoch ends,
    instead of idling until a new iterator starts. Multigrid's coarse shapes
    make epochs of few, large batches, so an idle start at every epoch
    boundary would be a large share of the loop's time (docs/benchmarks/design-notes.md,
    "One loader iterator across epochs").

    Args:
        sampler: yields this process's indices for the epoch (has
            ``set_epoch``, e.g. a ``DistributedSampler``).
        batches_fn: ``(epoch, shard_size) -> [BatchSpec]``, the epoch's
            batches in order; in training the schedule's (whose shapes the
            schedule hook reads for the same iterations).
        seed: RNG_SEED, mixed with the epoch and index into each item's seed.
    """

    def __init__(self, sampler, batches_fn: BatchesFn, seed: int):
        self.sampler = sampler
        self.batches_fn = batches_fn
        self.seed = int(seed)
        self.epoch = 0
        self.start_iter = 0
        self.end_epoch = 1

    def set_epoch(
        self, epoch: int, start_iter: int = 0, end_epoch: Optional[int] = None
    ) -> None:
        """Selects the epoch(s) to yield (each reshuffled deterministically).

        Args:
            epoch: the (first) epoch index.
            start_iter: batches of ``epoch`` to skip (a run resumed inside the
                epoch); the others are those an uninterrupted epoch yields.
            end_epoch: yield epochs ``epoch .. end_epoch - 1`` in one stream;
                None: ``epoch`` alone.
        """
        end_epoch = int(epoch) + 1 if end_epoch is None else int(end_epoch)
        if end_epoch <= epoch:
            raise ValueError(f"end_epoch {end_epoch} must be > epoch {epoch}")
        self.epoch = int(epoch)
        self.start_iter = int(start_iter)
        self.end_epoch = end_epoch
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.epoch)

    def batches(self, epoch: Optional[int] = None) -> List[BatchSpec]:
        """An epoch's batches (default: the first selected), in order."""
        epoch = self.epoch if epoch is None else int(epoch)
        shard = len(self.sampler)
        batches = [BatchSpec(*item) for item in self.batches_fn(epoch, shard)]
        if any(batch.size <= 0 for batch in batches):
            raise ValueError(f"batches of epoch {epoch}: sizes must be > 0")
        if sum(batch.size for batch in batches) > shard:
            raise ValueError(
                f"epoch {epoch} needs "
                f"{sum(batch.size for batch in batches)} clips; the shard has {shard}"
            )
        return batches

    def __iter__(self) -> Iterator[List[Tuple[int, Optional[SamplingGrid], int]]]:
        for epoch in range(self.epoch, self.end_epoch):
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
            indices = list(self.sampler)
            skip = self.start_iter if epoch == self.epoch else 0
            start = 0
            for k, batch in enumerate(self.batches(epoch)):
                chunk = indices[start : start + batch.size]
                start += batch.size
                if k >= skip:
                    yield [
                        (i, batch.grid, mix_seed(self.seed, epoch, i)) for i in chunk
                    ]

    def __len__(self) -> int:
        """Batches of the selected epochs (skipped ones included)."""
        return sum(len(self.batches(e)) for e in range(self.epoch, self.end_epoch))


class EvalShardSampler(Sampler):
    """One process's contiguous block of an evaluation split, padded.

    Process ``r`` of ``W`` takes positions ``[r * n, (r + 1) * n)`` of the
    split (``n = ceil(N / W)``); positions past its end repeat its first
    items, so that every process runs as many batches. A block keeps a
    video's spatial crops of one temporal view together, which the dataset
    decodes once; a strided shard (every W-th item) loses that from 3
    processes on.

    Args:
        size: items in the split.
        num_replicas: processes.
        rank: this process's rank.
    """

    def __init__(self, size: int, num_replicas: int, rank: int):
        self.size, self.num_replicas, self.rank = size, num_replicas, rank
        self.per_rank = -(-size // num_replicas)

    def __len__(self) -> int:
        return self.per_rank

    def __iter__(self) -> Iterator[int]:
        start = self.rank * self.per_rank
        return iter([p % self.size for p in range(start, start + self.per_rank)])

    def padded(self, count: int) -> torch.Tensor:
        """Which of this process's first ``count`` items are padding.

        Args:
            count: items this process loaded (at most ``len(self)``).

        Returns:
            torch.Tensor: ``[count]`` bools, True for a repeated item.
        """
        return self.rank * self.per_rank + torch.arange(count) >= self.size


class _WorkerInit:
    """Seeds a loader worker's RNGs from (seed, rank, worker id); one thread;
    its CPU priority lowered by ``nice`` (``config.derived.worker_niceness``).

    The worker ignores the run's stop signals (TRAIN.STOP_SIGNALS): a
    scheduler signals every process of a job, and the main process, not its
    loader workers, decides when to stop (``engine/preemption.py``).
    """

    def __init__(
        self,
        seed: int,
        rank: int,
        ignored_signals: Sequence[int] = (),
        nice: int = 0,
    ):
        self.seed, self.rank, self.nice = seed, rank, nice
        self.ignored_signals = tuple(int(s) for s in ignored_signals)

    def __call__(self, worker_id: int) -> None:
        for signum in self.ignored_signals:
            signal.signal(signum, signal.SIG_IGN)
        # Started with them blocked (``_StopSafeLoader``): now they are ignored.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self.ignored_signals)
        value = mix_seed(self.seed, self.rank, worker_id) & 0xFFFFFFFF
        random.seed(value)
        np.random.seed(value)
        torch.manual_seed(value)
        torch.set_num_threads(1)
        if self.nice:
            os.nice(self.nice)


class _StopSafeLoader(DataLoader):
    """A DataLoader whose workers start with the stop signals blocked, so that
    a signal arriving while they start cannot end one before it ignores them."""

    def __init__(self, *args, stop_signals: Sequence[int] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.stop_signals = tuple(stop_signals)

    def __iter__(self):
        if not self.stop_signals or self.num_workers == 0:
            return super().__iter__()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, self.stop_signals)
        try:
            return super().__iter__()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _per_process(batch: int, num_procs: int, key: str, strict: bool) -> int:
    if strict or batch % num_procs == 0:
        return per_process_batch(batch, num_procs, key)
    return max(1, -(-batch // num_procs))


def construct_loader(
    cfg: CfgNode,
    split: str,
    batches_fn: Optional[BatchesFn] = None,
    num_procs: int = 1,
    rank: int = 0,
    dataset: Optional[Dataset] = None,
    model: Optional[ModelInfo] = None,
) -> DataLoader:
    """Builds the data loader of a split for one process.

    Args:
        cfg: the run's config (TRAIN.DATASET for train/val, TEST.DATASET for test).
        split: "train", "val" or "test".
        batches_fn: training only: ``(epoch, shard_size) -> [BatchSpec]``;
            None: whole batches of TRAIN.BATCH_SIZE /
            num_procs at the config's shape.
        num_procs: number of training processes (shards).
        rank: this process's rank.
        dataset: the split's dataset, already built (e.g. another loader's
            ``dataset``: the precise-BN loader shares the training loader's,
            so the split's annotations are read once); None builds it.
        model: the run's model description, for the dataset built here
            (``build_dataset``).

    Returns:
        DataLoader: yields ``(inputs, labels, indices, extras)`` with inputs a
        list of ``[N, C, T, H, W]`` tensors. For "train" its batch sampler is
        a ``GridBatchSampler``: call ``loader.batch_sampler.set_epoch(epoch)``
        (or ``loader_set_epoch``) before each epoch, or ``set_epoch(first,
        end_epoch=last + 1)`` once to iterate epochs ``first .. last`` as one
        stream.
    """
    if not 0 <= rank < num_procs:
        raise ValueError(f"rank {rank} out of range for {num_procs} processes")
    if dataset is None:
        dataset = build_dataset(dataset_name(cfg, split), cfg, split, model)
    workers = cfg.DATA_LOADER.NUM_WORKERS
    stops = stop_signals(cfg)
    common = dict(
        num_workers=workers,
        pin_memory=bool(cfg.DATA_LOADER.PIN_MEMORY and torch.cuda.is_available()),
        worker_init_fn=_WorkerInit(cfg.RNG_SEED, rank, stops, worker_niceness(cfg)),
        persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(mix_seed(cfg.RNG_SEED, rank) >> 1),
    )
    if split == "train":
        batch = _per_process(
            global_batch_size(cfg), num_procs, "TRAIN.BATCH_SIZE", True
        )
        fixed = batches_fn is None
        if batches_fn is None:
            batches_fn = fixed_batches(batch)
        sampler: DistributedSampler = DistributedSampler(
            dataset, num_replicas=num_procs, rank=rank, shuffle=True, seed=cfg.RNG_SEED
        )
        batch_sampler = GridBatchSampler(sampler, batches_fn, cfg.RNG_SEED)
        if len(batch_sampler) == 0:
            raise DataError(
                f"train split of {dataset_name(cfg, split)} has {len(sampler)} "
                f"items per process, fewer than one batch"
                + (f" ({batch})" if fixed else "")
            )
        return _StopSafeLoader(
            dataset, batch_sampler=batch_sampler, stop_signals=stops, **common
        )
    batch = _per_process(
        global_batch_size(cfg, split), num_procs, "TEST.BATCH_SIZE", False
    )
    shard_sampler: Optional[EvalShardSampler] = None
    if num_procs > 1:
        shard_sampler = EvalShardSampler(len(cast(Sized, dataset)), num_procs, rank)
    return _StopSafeLoader(
        dataset,
        batch_size=batch,
        sampler=shard_sampler,
        shuffle=False,
        stop_signals=stops,
        **common,
    )


def shutdown_workers(loader: DataLoader) -> None:
    """Stops a loader's persistent worker processes now.

    Otherwise they are stopped at interpreter exit, where PyTorch waits 5 s
    per worker when memory pinning is on (pytorch/pytorch#81794), which adds
    minutes to the end of a GPU run with many workers and several loaders.
    The loader starts new workers if it is iterated again.

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
        set_epoch = getattr(obj, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(epoch)
            return
