"""The batch plan: one process's batches of an epoch, from the schedule.

The loader's batch sampler, the trainer and the schedule's iteration counts
all follow this one list: iteration ``i`` of an epoch has the schedule's shape
``iter_shape(epoch, i)``, and an epoch holds as many whole batches as fit in
the process's shard of the dataset (the last incomplete batch is dropped).
"""

from typing import List

from slowfast.multigrid.shapes import IterShape


def epoch_plan(schedule, epoch: int, shard_size: int) -> List[IterShape]:
    """The shapes of one process's batches in ``epoch``, in order.

    Args:
        schedule: the run's ``MultigridSchedule``.
        epoch: epoch index.
        shard_size: clips this process reads in the epoch
            (``ceil(dataset_size / num_procs)`` with a padded distributed
            sampler).

    Returns:
        list[IterShape]: one per iteration; their ``per_proc_batch`` sum to at
        most ``shard_size``. Iterations with the same position in the short
        cycle share one object.
    """
    period = len(schedule.cycle(schedule.entry_at(epoch)))
    shapes = [schedule.iter_shape(epoch, i) for i in range(period)]
    plan: List[IterShape] = []
    used = 0
    while True:
        shape = shapes[len(plan) % period]
        if used + shape.per_proc_batch > shard_size:
            return plan
        plan.append(shape)
        used += shape.per_proc_batch
