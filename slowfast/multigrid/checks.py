"""Consistency checks of a ``MultigridSchedule``; each error is one line naming
the config key and value at fault."""

from __future__ import annotations

import logging
from typing import Any, Protocol, Sequence

from slowfast.config.derived import per_process_batch

logger = logging.getLogger(__name__)


class ScheduleView(Protocol):
    """What these checks read of a ``schedule.MultigridSchedule`` (a protocol,
    so that this module, which the schedule calls, does not import it)."""

    num_procs: int
    base_batch: int
    crop_size: int
    bn_base_size: int
    long_cycle: bool
    short_cycle: bool
    short_factors: Sequence[float]
    entries: Sequence[Any]
    max_epoch: int
    baseline_max_epoch: int

    def cycle(self, *args: Any) -> Any: ...

    def bn_groups(self, *args: Any) -> Any: ...

    def iters_in_epoch(self, epoch: int, dataset_size: int) -> int: ...

    def iter_shape(self, epoch: int, iteration: int) -> Any: ...


def check_structure(schedule: ScheduleView) -> None:
    """Checks process count, batch divisibility, frames and BN splits.

    Args:
        schedule: the schedule (called from its constructor).

    Raises:
        ValueError: a global batch not divisible by the number of processes, a
            shape with no frames, or a BN split count that does not divide a
            per-process batch.
    """
    s = schedule
    per_process_batch(
        s.base_batch,
        s.num_procs,
        key="TRAIN.BATCH_SIZE x NUM_SHARDS",
    )
    multigrid = s.long_cycle or s.short_cycle
    if s.entries[-1].end_epoch < 1:
        raise ValueError(
            f"SOLVER.MAX_EPOCH = {s.baseline_max_epoch}: times "
            "MULTIGRID.EPOCH_FACTOR it rounds to 0 epochs, so the schedule has "
            "none; raise SOLVER.MAX_EPOCH or MULTIGRID.EPOCH_FACTOR"
        )
    for index, entry in enumerate(s.entries):
        if entry.num_frames < 1:
            raise ValueError(
                f"MULTIGRID.LONG_CYCLE_FACTORS: schedule entry {index} has "
                f"{entry.num_frames} frames (needs at least 1)"
            )
        if entry.end_epoch <= (s.entries[index - 1].end_epoch if index else 0):
            logger.warning(
                "multigrid schedule entry %d (LR stage %d, %d frames x %d px, "
                "batch x%d) gets no epochs: %d epochs in all are too few to "
                "hold every shape once (SOLVER.MAX_EPOCH x MULTIGRID.EPOCH_FACTOR)",
                index,
                entry.lr_stage,
                entry.num_frames,
                entry.crop_size,
                entry.batch_factor,
                s.entries[-1].end_epoch,
            )
        splits = s.bn_groups(entry)[0]
        for _, frames, crop, factor in s.cycle(entry):
            per_proc = s.base_batch * factor // s.num_procs
            if per_proc % splits:
                key = "MULTIGRID.BN_BASE_SIZE" if multigrid else "BN.NUM_SPLITS"
                value = s.bn_base_size if multigrid else splits
                raise ValueError(
                    f"{key} = {value}: {splits} BN splits do not divide the "
                    f"per-process batch of {per_proc} clips at shape "
                    f"{frames}x{crop} (entry {index})"
                )


def check_crops(schedule: ScheduleView, min_crop: int) -> None:
    """Checks that every crop of the schedule is at least ``min_crop``.

    Args:
        schedule: the schedule.
        min_crop: the network's total spatial stride (e.g. 32).

    Raises:
        ValueError: a crop below ``min_crop``, naming the config key.
    """
    s = schedule
    for index, entry in enumerate(s.entries):
        for short_index, _, crop, _ in s.cycle(entry):
            if crop >= min_crop:
                continue
            if short_index in (0, 1):
                key, value = "MULTIGRID.SHORT_CYCLE_FACTORS", list(s.short_factors)
            elif s.long_cycle:
                key = "MULTIGRID.LONG_CYCLE_FACTORS"
                value = f"entry {index} at {entry.num_frames}x{entry.crop_size}"
            else:
                key, value = "DATA.TRAIN_CROP_SIZE", s.crop_size
            raise ValueError(
                f"{key} = {value}: crop {crop} is below the network stride {min_crop}"
            )


def check_epochs_have_iterations(schedule: ScheduleView, dataset_size: int) -> None:
    """Checks that every epoch has at least one full batch of the training clips.

    Args:
        schedule: the schedule.
        dataset_size: training clips in the whole dataset.

    Raises:
        ValueError: the first epoch without an iteration, naming TRAIN.BATCH_SIZE.
    """
    for epoch in range(schedule.max_epoch):
        if schedule.iters_in_epoch(epoch, dataset_size) == 0:
            shape = schedule.iter_shape(epoch, 0)
            raise ValueError(
                f"epoch {epoch + 1}: the first batch ({shape.batch_size} clips "
                f"of {shape.num_frames}x{shape.crop_size}) is larger than the "
                f"{dataset_size} training clips; lower TRAIN.BATCH_SIZE "
                "or use more data"
            )
