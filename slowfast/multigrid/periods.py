"""When a run saves checkpoints, validates and recomputes BN statistics.

TRAIN.CHECKPOINT_PERIOD and TRAIN.EVAL_PERIOD count epochs of the baseline's
training: an action is due after each epoch whose end completes another
``period`` baseline epochs' worth of iterations (one baseline epoch: the
dataset in whole batches of the base shape), and after the last epoch.

* Without multigrid every epoch is one baseline epoch: "every ``period``
  epochs and the last", as the keys read.
* Under multigrid an epoch at 8x the batch is an eighth of a baseline epoch
  and a short-cycle epoch about three sevenths. Multigrid keeps the FLOPs of
  an iteration constant, so the actions come at the baseline's spacing in
  compute, and a run does at most as many of each as its baseline, which has
  more iterations. Counted per epoch instead, the 358 epochs of the Kinetics
  SlowFast multigrid config would checkpoint (and recompute BN statistics)
  1.5x as often as its 239-epoch baseline, for 3.4x fewer iterations.

The reference instead overrides the periods under multigrid with
MULTIGRID.EVAL_FREQ actions per schedule entry; that key is not read here.
Precise BN (BN.USE_PRECISE_STATS) runs before every checkpoint and validation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Sequence

from slowfast.multigrid.schedule import MultigridSchedule


def baseline_epoch_iters(schedule: MultigridSchedule, dataset_size: int) -> int:
    """Iterations of one baseline epoch on each process (the dataset in whole
    base-shape batches): the unit the periods count in."""
    return schedule.baseline_iters(dataset_size) // schedule.baseline_max_epoch


def due_epochs(epoch_iters: Sequence[int], unit_iters: int, period: int) -> FrozenSet:
    """Epochs after which an every-``period``-baseline-epochs action runs.

    Args:
        epoch_iters: iterations of each epoch of the run, in order.
        unit_iters: iterations of one baseline epoch.
        period: baseline epochs between actions; 0: never.

    Returns:
        frozenset[int]: epoch indices (the last always, unless ``period`` is 0).
    """
    if period == 0 or not epoch_iters:
        return frozenset()
    step = period * max(unit_iters, 1)
    due, done = {len(epoch_iters) - 1}, 0
    for epoch, iters in enumerate(epoch_iters):
        if (done + iters) // step > done // step:
            due.add(epoch)
        done += iters
    return frozenset(due)


@dataclass(frozen=True)
class PeriodicWork:
    """The epochs after which a run saves, validates and recomputes BN stats.

    Attributes:
        checkpoint: epochs ending with a checkpoint (TRAIN.CHECKPOINT_PERIOD).
        validation: epochs ending with a validation (TRAIN.EVAL_PERIOD).
        precise_bn: epochs ending with precise BN (before a checkpoint or a
            validation; empty without BN.USE_PRECISE_STATS).
        max_epoch: epochs of the run.
        unit_iters: iterations of one baseline epoch on each process.
    """

    checkpoint: FrozenSet
    validation: FrozenSet
    precise_bn: FrozenSet
    max_epoch: int
    unit_iters: int

    @classmethod
    def build(
        cls,
        epoch_iters: Sequence[int],
        unit_iters: int,
        checkpoint_period: int,
        eval_period: int,
        precise_bn: bool,
    ) -> PeriodicWork:
        """The work of a run whose epochs have ``epoch_iters`` iterations."""
        ckpt = due_epochs(epoch_iters, unit_iters, checkpoint_period)
        val = due_epochs(epoch_iters, unit_iters, eval_period)
        bn = ckpt | val if precise_bn else frozenset()
        return cls(ckpt, val, bn, len(epoch_iters), unit_iters)

    @classmethod
    def for_schedule(
        cls,
        schedule: MultigridSchedule,
        dataset_size: int,
        checkpoint_period: int,
        eval_period: int,
        precise_bn: bool,
        baseline: bool = False,
    ) -> PeriodicWork:
        """The work of the run ``schedule`` trains on ``dataset_size`` clips,
        or with ``baseline`` of its baseline (SOLVER.MAX_EPOCH base epochs)."""
        unit = baseline_epoch_iters(schedule, dataset_size)
        if baseline:
            iters = [unit] * schedule.baseline_max_epoch
        else:
            epochs = range(schedule.max_epoch)
            iters = [schedule.iters_in_epoch(e, dataset_size) for e in epochs]
        return cls.build(iters, unit, checkpoint_period, eval_period, precise_bn)

    def end_of_epoch(self, epoch: int) -> bool:
        """Whether anything is due after ``epoch`` (BN statistics are then
        averaged over processes before it)."""
        return epoch in self.checkpoint or epoch in self.validation

    def checkpoint_due(self, epoch: int) -> bool:
        """Whether a checkpoint is saved after ``epoch``."""
        return epoch in self.checkpoint

    def validation_due(self, epoch: int) -> bool:
        """Whether the model is validated after ``epoch``."""
        return epoch in self.validation

    def precise_bn_due(self, epoch: int) -> bool:
        """Whether BN statistics are recomputed after ``epoch``."""
        return epoch in self.precise_bn

    def counts(self) -> dict:
        """``{"epochs", "checkpoints", "validations", "precise_bn"}``: how many."""
        return {
            "epochs": self.max_epoch,
            "checkpoints": len(self.checkpoint),
            "validations": len(self.validation),
            "precise_bn": len(self.precise_bn),
        }

    def summary(self) -> str:
        """``"358 epochs: 70 checkpoints, 8 validations, 70 precise-BN passes"``."""
        c = self.counts()
        return (
            f"{c['epochs']} epochs: {c['checkpoints']} checkpoints, "
            f"{c['validations']} validations, {c['precise_bn']} precise-BN passes"
        )


# A forward pass (precise BN, validation) against a training iteration
# (forward and backward, the backward about twice the forward).
FORWARD_COST = 1 / 3


def estimated_share(
    work: PeriodicWork,
    train_iters: int,
    precise_batches: int,
    val_iters: float,
) -> dict:
    """The estimated share of a run's compute spent on precise BN and
    validation, by counting forward passes (checkpoint writing is not
    estimated: it depends on the file system).

    Args:
        work: the run's periodic work.
        train_iters: the run's training iterations on one process.
        precise_batches: batches of one precise-BN pass on one process
            (BN.NUM_BATCHES_PRECISE, at the base shape).
        val_iters: one validation's cost on one process, in base-shape
            batches (its clips' cost over a base batch's).

    Returns:
        dict: ``precise_bn`` and ``validation`` (fractions of the whole).
    """
    bn = len(work.precise_bn) * precise_batches * FORWARD_COST
    val = len(work.validation) * val_iters * FORWARD_COST
    total = train_iters + bn + val
    return {
        "precise_bn": bn / total if total else 0.0,
        "validation": val / total if total else 0.0,
    }
