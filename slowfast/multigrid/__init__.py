"""Multigrid training (Wu et al., CVPR 2020): the schedule of mini-batch shapes.

``MultigridSchedule.from_cfg(cfg, num_procs)`` resolves the whole schedule once
(long cycle, short cycle, LR, BN grouping); the trainer asks it what each
epoch and iteration uses. See projects/multigrid/README.md.
"""

from slowfast.multigrid.long_cycle import ScheduleEntry
from slowfast.multigrid.schedule import MultigridSchedule
from slowfast.multigrid.shapes import IterShape

__all__ = ["IterShape", "MultigridSchedule", "ScheduleEntry"]
