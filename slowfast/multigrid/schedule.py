"""The multigrid schedule: one object that answers for any epoch and iteration.

Built once from the frozen config (and the number of processes) by
``MultigridSchedule.from_cfg``. The trainer always uses it, multigrid on or
off: with neither cycle it is a trivial schedule at the config's shape with
the config's LR policy.

* Long cycle (MULTIGRID.LONG_CYCLE): every LR stage but the last cycles over
  the base shapes of MULTIGRID.LONG_CYCLE_FACTORS; the last stage fine-tunes at
  the base shape, first half at the previous stage's LR. Epochs are
  rescaled to ``MAX_EPOCH * EPOCH_FACTOR``; the LR is scaled by the long-cycle
  batch factor only (see ``long_cycle.py`` for the derivation).
* Short cycle (MULTIGRID.SHORT_CYCLE): iteration ``i`` of an epoch uses the
  crop of SHORT_CYCLE_FACTORS[0] when ``i % 3 == 0``, of [1] when
  ``i % 3 == 1`` and the base crop of the entry when ``i % 3 == 2``. Epochs are
  not rescaled when only the short cycle is on.
* Batch size of a shape ``t x s`` = B * round(T*S^2/(t*s^2)), B the global
  batch (TRAIN.BATCH_SIZE per machine x NUM_SHARDS).
* BN: MULTIGRID.BN_BASE_SIZE clips per BN group at the long-cycle shape; the
  short cycle keeps the entry's split count (see ``shapes.bn_splits_and_sync``).
"""

from __future__ import annotations

import bisect
import logging
import math
from dataclasses import dataclass

from fvcore.common.config import CfgNode

from slowfast.config.derived import per_process_batch
from slowfast.datasets.grid import SamplingGrid, jitter_scales, sampling_rate_range
from slowfast.models.describe import ModelInfo, describe_model
from slowfast.multigrid.epoch_batches import cycle_counts, epoch_batches
from slowfast.multigrid.from_config import schedule_fields
from slowfast.multigrid.long_cycle import ScheduleEntry
from slowfast.multigrid.shapes import (
    IterShape,
    batch_factor,
    bn_splits_and_sync,
    exact_batch_factor,
    short_cycle_crops,
)
from slowfast.solver.lr_policy import LrPolicy, linear_warmup

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MultigridSchedule:
    """The resolved training schedule (see the module docstring).

    Build it with ``from_cfg``; it never reads the config afterwards.

    Attributes:
        entries: ``ScheduleEntry`` tuple in order, fine-tuning last; a single
            base entry (stage 0, factor 1) when the long cycle is off.
        max_epoch: resolved number of epochs (358 for the reference's
            Kinetics SlowFast 8x8 stepwise multigrid config).
        policy: resolved LR policy (long cycle with a step policy:
            ``steps_with_relative_lrs`` with the resolved steps and LRs).
        scale_lr_by_factor: multiply ``policy`` by the entry's batch factor
            (long cycle with cosine or constant).
        base_batch, num_frames, crop_size: the global batch B (TRAIN.BATCH_SIZE x
            NUM_SHARDS),
            DATA.NUM_FRAMES, DATA.TRAIN_CROP_SIZE: the base shape ``B x T x S``.
        num_procs: number of training processes.
        long_cycle, short_cycle, short_factors, short_mode: MULTIGRID keys.
        sampling_rate, long_cycle_sampling_rate: DATA.SAMPLING_RATE and
            MULTIGRID.LONG_CYCLE_SAMPLING_RATE.
        train_jitter: DATA.TRAIN_JITTER_SCALES.
        jitter_mode: MULTIGRID.JITTER_SCALE_MODE.
        bn_base_size: MULTIGRID.BN_BASE_SIZE.
        bn_default: ``(splits, sync_size)`` of BN when neither cycle is on.
        baseline_max_epoch: SOLVER.MAX_EPOCH of the configured baseline.
    """

    entries: tuple
    max_epoch: int
    policy: LrPolicy
    scale_lr_by_factor: bool
    base_batch: int
    num_frames: int
    crop_size: int
    num_procs: int
    long_cycle: bool
    short_cycle: bool
    short_factors: tuple
    short_mode: str
    sampling_rate: int
    long_cycle_sampling_rate: int
    train_jitter: tuple
    jitter_mode: str
    bn_base_size: int
    bn_default: tuple
    baseline_max_epoch: int

    @classmethod
    def from_cfg(
        cls, cfg: CfgNode, num_procs: int = 1, model: ModelInfo | None = None
    ) -> MultigridSchedule:
        """Builds the schedule of a run and checks it against the model.

        Args:
            cfg: the frozen config.
            num_procs: number of training processes (world size).
            model: the configured model's description (``describe_model``),
                as the run resolved it; None: described here.

        Returns:
            MultigridSchedule: the schedule.

        Raises:
            ValueError: one line naming the config key or value at fault
                (multigrid with a model that takes clips of one shape only,
                or a shape the model cannot take).
        """
        model = describe_model(cfg) if model is None else model
        schedule = cls(**schedule_fields(cfg, num_procs, model.spatial_stride))
        if (schedule.long_cycle or schedule.short_cycle) and not model.varying_shapes:
            raise ValueError(
                f"MODEL.MODEL_NAME = {cfg.MODEL.MODEL_NAME!r} takes clips of one "
                "shape only; multigrid (MULTIGRID.LONG_CYCLE / SHORT_CYCLE) needs "
                "a model that takes varying shapes"
            )
        schedule.validate(model.spatial_stride, model.min_frames, model.alpha)
        logger.info(
            "schedule: long cycle %s, short cycle %s, %d entries, %d epochs, "
            "%.2fx fewer iterations than the %d-epoch baseline (the paper's "
            "measure: unrounded batch factors, whole epochs)",
            "on" if schedule.long_cycle else "off",
            "on" if schedule.short_cycle else "off",
            len(schedule.entries),
            schedule.max_epoch,
            schedule.iteration_ratio(),
            schedule.baseline_max_epoch,
        )
        return schedule

    def __post_init__(self) -> None:
        check_structure(self)

    @property
    def steps(self) -> tuple:
        """Resolved SOLVER.STEPS of the LR policy (for logging and plots)."""
        return self.policy.steps

    @property
    def lrs(self) -> tuple:
        """Resolved SOLVER.LRS (relative to BASE_LR) of the LR policy."""
        return self.policy.lrs

    def validate(
        self, min_crop: int, min_frames: int = 1, frame_multiple: int = 1
    ) -> None:
        """Checks every crop and clip length of the schedule against the network.

        Args:
            min_crop: the network's total spatial stride (e.g. 32).
            min_frames: the fewest frames a clip may have (``ModelInfo``'s:
                SLOWFAST.ALPHA for SlowFast, 2 for C2D and I3D).
            frame_multiple: clip lengths must be multiples of it (SlowFast's
                ALPHA: the fast pathway is fused into the slow one).

        Raises:
            ValueError: a crop or clip length the model cannot take, naming
                the config key.
        """
        check_crops(self, min_crop)
        key = "MULTIGRID.LONG_CYCLE_FACTORS" if self.long_cycle else "DATA.NUM_FRAMES"
        for index, entry in enumerate(self.entries):
            where = f"{key}: schedule entry {index} has {entry.num_frames} frames"
            if entry.num_frames < min_frames:
                raise ValueError(
                    f"{where}, fewer than {min_frames} (SLOWFAST.ALPHA for "
                    "SlowFast's slow pathway; 2 for C2D and I3D, whose max-pool "
                    "after res2 halves the frames)"
                )
            if entry.num_frames % frame_multiple:
                raise ValueError(
                    f"{where}, not a multiple of SLOWFAST.ALPHA = {frame_multiple} "
                    "(the fast pathway is fused into the slow one at that ratio)"
                )

    def entry_index(self, epoch: int) -> int:
        """Returns the index of the entry that holds ``epoch``.

        Args:
            epoch: epoch index in ``[0, max_epoch)``.

        Returns:
            int: index into ``entries``.

        Raises:
            ValueError: ``epoch`` out of range.
        """
        if not 0 <= epoch < self.max_epoch:
            raise ValueError(
                f"epoch {epoch} outside the schedule [0, {self.max_epoch})"
            )
        ends = [e.end_epoch for e in self.entries]
        return bisect.bisect_right(ends, epoch)

    def entry_at(self, epoch: int) -> ScheduleEntry:
        """Returns the long-cycle entry of ``epoch`` (0 <= epoch < max_epoch).

        Args:
            epoch: epoch index.

        Returns:
            ScheduleEntry: the entry.
        """
        return self.entries[self.entry_index(epoch)]

    def cycle(self, entry: ScheduleEntry) -> list:
        """Returns the shapes one short cycle goes through at an entry.

        Args:
            entry: a schedule entry.

        Returns:
            list: ``(short_index, frames, crop, batch_factor)`` per iteration of
            the cycle (a single item when the short cycle is off).
        """
        frames, crop = entry.num_frames, entry.crop_size
        if not self.short_cycle:
            return [(-1, frames, crop, entry.batch_factor)]
        crops = short_cycle_crops(
            self.short_factors, self.short_mode, self.crop_size, crop
        )
        cycle = [
            (i, frames, c, batch_factor(frames, c, self.num_frames, self.crop_size))
            for i, c in enumerate(crops)
        ]
        return cycle + [(len(crops), frames, crop, entry.batch_factor)]

    def bn_groups(self, entry: ScheduleEntry) -> tuple:
        """Returns how BN statistics are grouped at an entry.

        Args:
            entry: a schedule entry.

        Returns:
            tuple: ``(bn_splits, bn_sync_size)``: BN groups per process and
            processes per synced BN group (see ``shapes.bn_splits_and_sync``).
        """
        if not (self.long_cycle or self.short_cycle):
            return self.bn_default
        per_proc = self.base_batch * entry.batch_factor // self.num_procs
        return bn_splits_and_sync(per_proc, self.num_procs, self.bn_base_size)

    def iter_shape(self, epoch: int, it: int) -> IterShape:
        """Returns the shape of iteration ``it`` of ``epoch``.

        Args:
            epoch: epoch index in ``[0, max_epoch)``.
            it: iteration index within the epoch (short cycle: ``it % 3``).

        Returns:
            IterShape: batch sizes, clip shape, sampling and BN splits.
        """
        entry = self.entry_at(epoch)
        cycle = self.cycle(entry)
        short_index, frames, crop, factor = cycle[it % len(cycle)]
        batch = self.base_batch * factor
        rates = sampling_rate_range(
            frames, self.num_frames, self.sampling_rate, self.long_cycle_sampling_rate
        )
        jitter = jitter_scales(
            self.train_jitter, crop, self.crop_size, self.jitter_mode
        )
        return IterShape(
            epoch=epoch,
            iteration=it,
            batch_size=batch,
            per_proc_batch=batch // self.num_procs,
            grid=SamplingGrid(frames, crop, *rates, *jitter),
            long_factor=entry.batch_factor,
            short_index=short_index,
            bn_splits=self.bn_groups(entry)[0],
        )

    def bn_sync_size(self, epoch: int) -> int:
        """Returns over how many processes BN statistics are synced at ``epoch``.

        Args:
            epoch: epoch index.

        Returns:
            int: 1 when each process holds at least MULTIGRID.BN_BASE_SIZE clips
            at the long-cycle shape; else the group size (the trainer builds the
            process groups). Without multigrid: BN.NUM_SYNC_DEVICES for
            ``sync_batchnorm`` (capped at the number of processes), else 1.
        """
        return self.bn_groups(self.entry_at(epoch))[1]

    def stage_lr(self, epoch: float) -> float:
        """Returns the LR at a fractional epoch without warm-up.

        Args:
            epoch: fractional epoch.

        Returns:
            float: stage LR, long-cycle factor and fine-tuning halves included.
        """
        lr = self.policy.base(epoch)
        if self.scale_lr_by_factor:
            index = min(max(int(math.floor(epoch)), 0), self.max_epoch - 1)
            lr *= self.entry_at(index).batch_factor
        return lr

    def lr_at(self, epoch: float) -> float:
        """Returns the LR to use at a fractional epoch.

        Args:
            epoch: ``epoch + iter / iters_per_epoch``.

        Returns:
            float: the full LR: linear warm-up from SOLVER.WARMUP_START_LR to the
            LR at SOLVER.WARMUP_EPOCHS, then ``stage_lr``.
        """
        return linear_warmup(
            epoch,
            self.stage_lr,
            warmup_epochs=self.policy.warmup_epochs,
            warmup_start_lr=self.policy.warmup_start_lr,
        )

    def epoch_batches(self, epoch: int, shard_size: int) -> list:
        """One process's batches of ``epoch``: see
        ``multigrid.epoch_batches.epoch_batches``."""
        return epoch_batches(self, epoch, shard_size)

    def cycle_iters(self, epoch: int, dataset_size: int) -> list:
        """Returns the iterations of an epoch at each position of its cycle.

        Each process reads ``ceil(dataset_size / num_procs)`` clips (a padded
        distributed sampler) in batches of the per-iteration sizes and drops
        its last batch: ``epoch_batches``'s shapes, counted without building it.

        Args:
            epoch: epoch index.
            dataset_size: training clips in the whole dataset.

        Returns:
            list[int]: iterations per position of ``cycle(entry_at(epoch))``.
        """
        clips = math.ceil(dataset_size / self.num_procs)
        cycle = self.cycle(self.entry_at(epoch))
        return cycle_counts(
            [self.base_batch * f // self.num_procs for *_, f in cycle], clips
        )

    def iters_in_epoch(self, epoch: int, dataset_size: int) -> int:
        """Returns the iterations of an epoch: the sum of ``cycle_iters``."""
        return sum(self.cycle_iters(epoch, dataset_size))

    def total_iters(self, dataset_size: int) -> int:
        """Returns the iterations of the whole schedule.

        Args:
            dataset_size: training clips in the whole dataset.

        Returns:
            int: the sum of ``iters_in_epoch`` over all epochs.
        """
        return sum(self.iters_in_epoch(e, dataset_size) for e in range(self.max_epoch))

    def baseline_iters(self, dataset_size: int) -> int:
        """Returns the iterations of the baseline (base shape, SOLVER.MAX_EPOCH).

        Args:
            dataset_size: training clips in the whole dataset.

        Returns:
            int: baseline iterations.
        """
        clips = math.ceil(dataset_size / self.num_procs)
        return self.baseline_max_epoch * (clips // (self.base_batch // self.num_procs))

    def iteration_ratio(self, dataset_size: int | None = None) -> float:
        """Returns how many times fewer iterations the schedule takes.

        Args:
            dataset_size: with a size, the ratio of the real (integer) counts
                ``baseline_iters / total_iters``; without, the paper's measure:
                batch sizes scaled exactly by eq. 1 (``T*S^2/(t*s^2)``, not
                rounded), over an infinitely divisible epoch.

        Returns:
            float: baseline iterations / schedule iterations.
        """
        if dataset_size is not None:
            total = self.total_iters(dataset_size)
            if total == 0:
                raise ValueError(
                    f"dataset_size = {dataset_size}: too small for one iteration"
                )
            return self.baseline_iters(dataset_size) / total
        iters, start = 0.0, 0
        for entry in self.entries:
            factors = [
                exact_batch_factor(t, s, self.num_frames, self.crop_size)
                for _, t, s, _ in self.cycle(entry)
            ]
            epochs = max(entry.end_epoch - start, 0)
            iters += epochs * len(factors) / sum(factors)
            start = max(start, entry.end_epoch)
        return self.baseline_max_epoch / iters


# ------------------------------------------------------------------- checks
# Each error is one line naming the config key and value at fault.


def check_structure(schedule: MultigridSchedule) -> None:
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


def check_crops(schedule: MultigridSchedule, min_crop: int) -> None:
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
                key, value = "MULTIGRID.SHORT_CYCLE_FACTORS", str(list(s.short_factors))
            elif s.long_cycle:
                key = "MULTIGRID.LONG_CYCLE_FACTORS"
                value = f"entry {index} at {entry.num_frames}x{entry.crop_size}"
            else:
                key, value = "DATA.TRAIN_CROP_SIZE", str(s.crop_size)
            raise ValueError(
                f"{key} = {value}: crop {crop} is below the network stride {min_crop}"
            )


def check_epochs_have_iterations(
    schedule: MultigridSchedule, dataset_size: int
) -> None:
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
