"""The start of a run, for ``launch/job.py``'s ``run_job`` (every launcher).

``begin_run`` does what every start does once the layout is known: log set-up,
the layout's description, warnings for reference keys nothing reads, the lock
on OUTPUT_DIR (held by the job's first process) and the clean-up of temporary
files an interrupted write left;
``stages`` lists the enabled stages (training, then testing).
"""

import logging
from functools import partial
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence

from fvcore.common.config import CfgNode

from slowfast.config.defaults import get_cfg
from slowfast.config.validate import unread_keys_set
from slowfast.launch.launcher import Layout, describe_layout
from slowfast.launch.run_lock import RunLock, remove_stale_temp_files
from slowfast.utils.logging import setup_logging

if TYPE_CHECKING:  # the engine (and torch) load only when a run starts
    from slowfast.engine.builders import RunSetup

logger = logging.getLogger(__name__)


def stages(cfg: CfgNode, setup: Optional["RunSetup"] = None) -> List[Callable]:
    """The enabled stages, ``stage(cfg, rank, world_size)``, in order.

    Args:
        cfg: the run's config.
        setup: what the launcher's checks resolved, handed to each stage (it
            travels to spawned processes with the stage); None: each stage
            resolves its own.
    """
    from slowfast.engine.tester import test
    from slowfast.engine.trainer import train

    enabled = ((train, cfg.TRAIN.ENABLE), (test, cfg.TEST.ENABLE))
    return [partial(stage, setup=setup) for stage, on in enabled if on]


def begin_run(
    cfg: CfgNode,
    layout: Layout,
    lock: RunLock,
    first: bool,
    notes: Sequence[str] = (),
) -> None:
    """Sets up this process's logging and takes (or has taken) OUTPUT_DIR.

    Args:
        cfg: the run's config, after the layout was applied.
        layout: this process's place in the job.
        lock: the run's lock on OUTPUT_DIR.
        first: this is the job's first process: it holds the lock (acquired
            here unless already held) and removes stale temporary files.
        notes: the launcher's notes on the config (logged).

    Raises:
        slowfast.launch.run_lock.RunLockError: another run holds OUTPUT_DIR.
    """
    if first and not lock.held:
        lock.acquire()
    setup_logging(cfg.OUTPUT_DIR, rank=layout.rank or 0)
    for line in describe_layout(cfg, layout):
        logger.info(line)
    for note in notes:
        logger.info("the launcher's layout wins: %s", note)
    for line in unread_keys_set(cfg, get_cfg()):
        logger.warning(line)
    if lock.took_over:
        logger.warning(lock.took_over)
    if first:
        for path in remove_stale_temp_files(cfg.OUTPUT_DIR):
            logger.warning("removed %s, left by an interrupted write", path)
