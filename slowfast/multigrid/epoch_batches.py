"""The epoch's batches: one process's batches of an epoch, in order, from the schedule.

The loader's batch sampler, the trainer and the schedule's iteration counts
all follow this one list: iteration ``i`` of an epoch has the schedule's shape
``iter_shape(epoch, i)``, and an epoch holds as many whole batches as fit in
the process's shard of the dataset (the last incomplete batch is dropped).
"""

from dataclasses import replace
from typing import List, Sequence

from slowfast.multigrid.shapes import IterShape


def cycle_counts(sizes: Sequence[int], shard_size: int) -> List[int]:
    """How many batches of each of ``sizes``, taken in turn, fit in
    ``shard_size`` clips.

    The one rule of an epoch's length: whole batches only (the last
    incomplete one is dropped), so the positions of the short cycle that
    come first get one more batch where the cycles do not fit evenly.
    ``epoch_batches``, the schedule's iteration counts and ``plan_multigrid.py``'s
    compute all follow it.

    Args:
        sizes: per-process batch sizes of one short cycle, in order.
        shard_size: clips this process reads in the epoch.

    Returns:
        list[int]: the number of batches at each position of the cycle.
    """
    full, rest = divmod(shard_size, sum(sizes))
    counts = [full] * len(sizes)
    for position, size in enumerate(sizes):
        if rest < size:
            break
        rest -= size
        counts[position] += 1
    return counts


def batch_count(sizes: Sequence[int], shard_size: int) -> int:
    """How many batches of ``sizes``, taken in turn, fit in ``shard_size``
    clips: the sum of ``cycle_counts``."""
    return sum(cycle_counts(sizes, shard_size))


def epoch_batches(schedule, epoch: int, shard_size: int) -> List[IterShape]:
    """One process's batches in ``epoch``, in order.

    Args:
        schedule: the run's ``MultigridSchedule``.
        epoch: epoch index.
        shard_size: clips this process reads in the epoch
            (``ceil(dataset_size / num_procs)`` with a padded distributed
            sampler).

    Returns:
        list[IterShape]: one shape per iteration (its ``iteration`` is its
        index); their ``per_proc_batch`` sum to at most ``shard_size``.
    """
    period = len(schedule.cycle(schedule.entry_at(epoch)))
    shapes = [schedule.iter_shape(epoch, i) for i in range(period)]
    count = batch_count([s.per_proc_batch for s in shapes], shard_size)
    return [replace(shapes[i % period], iteration=i) for i in range(count)]
