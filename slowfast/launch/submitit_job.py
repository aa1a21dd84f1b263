"""The job that ``tools/submit.py`` hands to submitit: one task per GPU.

Every task is one rank: it reads its place from ``submitit.JobEnvironment``,
joins the process group (the first host of the job, a port derived from the
job id) and runs the enabled stages as ``tools/run_net.py`` would. On a stop
signal the run saves a mid-epoch checkpoint (``engine/preemption.py``) and the
job passes the signal on to submitit's own handler, which requeues it through
its checkpoint mechanism (``checkpoint`` below: the same job again, which
resumes from OUTPUT_DIR).
"""

import logging
import os
import signal
import sys

from fvcore.common.config import CfgNode

from slowfast.launch.launcher import Layout, apply_layout, job_port
from slowfast.launch.preflight import PreflightError, preflight
from slowfast.launch.run_lock import RunLock
from slowfast.launch.start import begin_run, stages

logger = logging.getLogger(__name__)


class SubmititJob:
    """A picklable training (and testing) job for submitit.

    Args:
        cfg: the frozen config of the run.
    """

    def __init__(self, cfg: CfgNode) -> None:
        self.cfg = cfg

    def layout(self) -> Layout:
        """This task's place in the job, from submitit's environment."""
        import submitit

        env = submitit.JobEnvironment()
        per_node = env.num_tasks // env.num_nodes
        host = os.environ.get("MASTER_ADDR") or env.hostnames[0]
        port = os.environ.get("MASTER_PORT") or job_port(env.job_id)
        return Layout(
            "submitit",
            env.num_nodes,
            per_node,
            env.node,
            f"tcp://{host}:{port}",
            env.global_rank,
            env.local_rank,
        )

    def __call__(self) -> int:
        """Runs the job's stages in this task; returns 0 when done."""
        from slowfast.engine.preemption import Preempted
        from slowfast.launch.spawn import run_in_group

        layout = self.layout()
        cfg, notes = apply_layout(self.cfg, layout)
        try:
            preflight(cfg, layout)  # as run_net.py does, on this task's node
        except PreflightError as err:
            logger.error("error: %s", err)
            sys.exit(err.exit_status)
        lock = RunLock(cfg.OUTPUT_DIR)
        try:
            # The first task holds the lock; a requeued job takes its own over.
            begin_run(cfg, layout, lock, layout.rank == 0, notes)
            run_in_group(
                stages(cfg),
                cfg,
                layout.init_method,
                layout.rank,
                layout.world_size,
                layout.local_rank,
                group=True,  # as under torchrun and srun: DDP with one task too
            )
        except Preempted as err:
            logger.warning("%s; asking submitit to requeue the job", err)
            self._requeue()
            # Tasks other than the first: submitit's handler leaves the
            # requeue to task 0 and returns.
            sys.exit(err.exit_status)
        finally:
            lock.release()
        return 0

    @staticmethod
    def _requeue() -> None:
        """Hands the stop over to submitit's handler of its preemption signal."""
        from submitit import JobEnvironment

        signal.raise_signal(JobEnvironment._usr_sig())

    def checkpoint(self):
        """submitit's requeue hook: the same job again (it resumes from OUTPUT_DIR)."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(SubmititJob(self.cfg))
