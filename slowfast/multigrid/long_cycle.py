"""Derivation of the long-cycle schedule and of its step LR solver.

Follows the reference implementation (PySlowFast) so that its published
configs give the same entries, epochs, steps and LRs:

1. Each long-cycle base shape ``(t, s)`` comes with its short-cycle shapes (when
   the short cycle is on); its *average batch factor* is the mean of their
   batch factors (eq. 1, rounded).
2. Every LR stage but the last is one long cycle: its epochs are split over the
   base shapes in proportion to their average batch factors, so each shape
   gets the same number of iterations.
3. The last stage (fine-tuning at the base shape) gets as many epochs as keep
   its iteration saving equal to that of the rest of the schedule.
4. All entries are scaled so that they sum to ``MAX_EPOCH * EPOCH_FACTOR``,
   and cumulative end epochs are rounded (Python ``round``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, Sequence

from slowfast.multigrid.shapes import batch_factor, long_cycle_shapes, short_cycle_crops
from slowfast.solver.lr_policy import LrPolicy


@dataclass(frozen=True)
class ScheduleEntry:
    """One entry of the schedule: a base shape held until ``end_epoch``.

    Attributes:
        lr_stage: index of the LR stage (SOLVER.STEPS) the entry belongs to;
            the last stage is the fine-tuning phase.
        batch_factor: long-cycle batch factor (1 at the base shape); the LR is
            scaled by it.
        num_frames: frames per clip.
        crop_size: spatial crop.
        end_epoch: first epoch after the entry (exclusive).
    """

    lr_stage: int
    batch_factor: int
    num_frames: int
    crop_size: int
    end_epoch: int

    def as_tuple(self) -> tuple:
        """Returns ``(lr_stage, [batch_factor, num_frames, crop_size], end_epoch)``.

        Returns:
            tuple: the entry in the reference's notation.
        """
        return (
            self.lr_stage,
            [self.batch_factor, self.num_frames, self.crop_size],
            self.end_epoch,
        )


def average_batch_factor(
    frames: int,
    crop: int,
    *,
    base_frames: int,
    base_crop: int,
    short_cycle: bool,
    short_factors: Sequence[float],
    short_mode: str,
) -> float:
    """Returns the mean batch factor over one short cycle at a base shape.

    Args:
        frames: frames of the long-cycle shape.
        crop: crop of the long-cycle shape.
        base_frames: DATA.NUM_FRAMES.
        base_crop: DATA.TRAIN_CROP_SIZE.
        short_cycle: MULTIGRID.SHORT_CYCLE.
        short_factors: MULTIGRID.SHORT_CYCLE_FACTORS.
        short_mode: MULTIGRID.SHORT_CYCLE_CROP_MODE.

    Returns:
        float: the mean batch factor of the iterations at that base shape.
    """
    crops = [crop]
    if short_cycle:
        crops = list(short_cycle_crops(short_factors, short_mode, base_crop, crop))
        crops.append(crop)
    factors = [batch_factor(frames, c, base_frames, base_crop) for c in crops]
    return sum(factors) / len(factors)


def derive_long_cycle(
    *,
    base_frames: int,
    base_crop: int,
    stage_starts: Sequence[int],
    max_epoch: int,
    epoch_factor: float,
    long_factors: Sequence[Sequence[float]],
    short_cycle: bool,
    short_factors: Sequence[float],
    short_mode: str,
) -> tuple[ScheduleEntry, ...]:
    """Derives the long-cycle entries (see the module docstring).

    Args:
        base_frames: DATA.NUM_FRAMES.
        base_crop: DATA.TRAIN_CROP_SIZE.
        stage_starts: start epochs of the LR stages (at least 2, first 0).
        max_epoch: SOLVER.MAX_EPOCH of the baseline.
        epoch_factor: MULTIGRID.EPOCH_FACTOR.
        long_factors: MULTIGRID.LONG_CYCLE_FACTORS.
        short_cycle: MULTIGRID.SHORT_CYCLE.
        short_factors: MULTIGRID.SHORT_CYCLE_FACTORS.
        short_mode: MULTIGRID.SHORT_CYCLE_CROP_MODE.

    Returns:
        tuple: the entries in order; the last one is the fine-tuning phase.
    """
    avg_kwargs: Dict[str, Any] = dict(
        base_frames=base_frames,
        base_crop=base_crop,
        short_cycle=short_cycle,
        short_factors=short_factors,
        short_mode=short_mode,
    )
    shapes = long_cycle_shapes(base_frames, base_crop, long_factors)
    avgs = [average_batch_factor(t, s, **avg_kwargs) for t, s in shapes]
    raw = []  # (stage, factor, frames, crop, epochs)
    cycle_iters = 0.0
    for stage in range(len(stage_starts) - 1):
        span = stage_starts[stage + 1] - stage_starts[stage]
        for (frames, crop), avg in zip(shapes, avgs):
            epochs = span * avg / sum(avgs)
            cycle_iters += epochs / avg
            factor = batch_factor(frames, crop, base_frames, base_crop)
            raw.append((stage, factor, frames, crop, epochs))
    saving = (stage_starts[-1] - stage_starts[0]) / cycle_iters
    ft_avg = average_batch_factor(base_frames, base_crop, **avg_kwargs)
    ft_epochs = (max_epoch - stage_starts[-1]) / saving * ft_avg
    raw.append((len(stage_starts) - 1, 1, base_frames, base_crop, ft_epochs))

    scale = max_epoch * epoch_factor / sum(r[-1] for r in raw)
    entries = []
    total = 0.0
    for stage, factor, frames, crop, epochs in raw:
        total += epochs * scale
        entries.append(ScheduleEntry(stage, factor, frames, crop, int(round(total))))
    return tuple(entries)


def resolve_step_solver(
    entries: Sequence[ScheduleEntry], stage_lrs: Sequence[float]
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Returns SOLVER.STEPS and SOLVER.LRS (relative) of a long-cycle schedule.

    Each entry starts a step at ``stage_lrs[stage] * batch_factor``; the
    fine-tuning entry is split at its midpoint: first half at the previous
    stage's LR, second half at the last stage's LR.

    Args:
        entries: the long-cycle entries, fine-tuning last.
        stage_lrs: relative LR of each LR stage (SOLVER.LRS, or GAMMA powers).

    Returns:
        tuple: ``(steps, lrs)``, both one longer than ``entries``.
    """
    ft = entries[-1]
    steps = [0] + [e.end_epoch for e in entries[:-1]]
    steps.append((steps[-1] + ft.end_epoch) // 2)
    lrs = [stage_lrs[e.lr_stage] * e.batch_factor for e in entries[:-1]]
    lrs.append(stage_lrs[ft.lr_stage - 1] * ft.batch_factor)
    lrs.append(stage_lrs[ft.lr_stage] * ft.batch_factor)
    return tuple(steps), tuple(_clean(x) for x in lrs)


def _clean(value: float) -> float:
    """Rounds away float noise (``0.1**3 * 1`` -> ``0.001``)."""
    return float(f"{value:.12g}")


def build_long_cycle(
    policy: LrPolicy,
    *,
    base_frames: int,
    base_crop: int,
    epoch_factor: float,
    long_factors: Sequence[Sequence[float]],
    short_cycle: bool,
    short_factors: Sequence[float],
    short_mode: str,
) -> tuple[tuple[ScheduleEntry, ...], LrPolicy, bool]:
    """Resolves the entries and the LR policy of a long-cycle run.

    Step policies become ``steps_with_relative_lrs`` with the resolved steps
    and LRs (stage LR = SOLVER.LRS[stage], or GAMMA**stage for ``steps``, times
    the batch factor). Cosine and constant keep their shape over the new
    length, and the caller scales them by the entry's batch factor.

    Args:
        policy: the configured LR policy (baseline epochs and steps).
        base_frames: DATA.NUM_FRAMES.
        base_crop: DATA.TRAIN_CROP_SIZE.
        epoch_factor: MULTIGRID.EPOCH_FACTOR.
        long_factors: MULTIGRID.LONG_CYCLE_FACTORS.
        short_cycle: MULTIGRID.SHORT_CYCLE.
        short_factors: MULTIGRID.SHORT_CYCLE_FACTORS.
        short_mode: MULTIGRID.SHORT_CYCLE_CROP_MODE.

    Returns:
        tuple: ``(entries, policy, scale_lr_by_factor)``.

    Raises:
        ValueError: SOLVER.STEPS defines fewer than two LR stages.
    """
    steps = list(policy.steps)
    starts = steps if steps and steps[0] == 0 else [0] + steps
    if len(starts) < 2:
        raise ValueError(
            f"SOLVER.STEPS = {steps}: MULTIGRID.LONG_CYCLE needs at least two LR "
            "stages (one long cycle each, the last one fine-tunes)"
        )
    entries = derive_long_cycle(
        base_frames=base_frames,
        base_crop=base_crop,
        stage_starts=starts,
        max_epoch=int(policy.max_epoch),
        epoch_factor=epoch_factor,
        long_factors=long_factors,
        short_cycle=short_cycle,
        short_factors=short_factors,
        short_mode=short_mode,
    )
    max_epoch = entries[-1].end_epoch
    if policy.name not in ("steps_with_relative_lrs", "steps"):
        return entries, replace(policy, max_epoch=max_epoch), True
    if policy.name == "steps":
        stage_lrs = [policy.gamma**i for i in range(len(starts))]
    else:
        stage_lrs = list(policy.lrs)
    new_steps, new_lrs = resolve_step_solver(entries, stage_lrs)
    policy = replace(
        policy,
        name="steps_with_relative_lrs",
        steps=new_steps,
        lrs=new_lrs,
        max_epoch=max_epoch,
    )
    return entries, policy, False
