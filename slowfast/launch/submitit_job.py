"""The job that ``tools/submit.py`` hands to submitit: one task per GPU.

Every task is one rank: it reads its place from ``submitit.JobEnvironment``
(the first host of the job, a port derived from the job id) and runs the
start sequence every launcher shares (``launch/job.py: run_job``). On a stop
signal the run saves a mid-epoch checkpoint (``engine/preemption.py``); then
task 0 hands the signal to submitit's own handler, which requeues the job
through its checkpoint mechanism (``checkpoint`` below: the same job again,
which resumes from OUTPUT_DIR). A job stopped by its time limit more often
than ``--max-requeues`` is not requeued: task 0 says so in one line.
"""

import os
import signal
import sys
from typing import TYPE_CHECKING

from fvcore.common.config import CfgNode

from slowfast.launch.job import report, run_job
from slowfast.launch.launcher import Layout, job_port
from slowfast.utils.errors import EXIT_OK, EXIT_PREEMPTED

if TYPE_CHECKING:
    from submitit.helpers import DelayedSubmission

REQUEUE_HINT = "task 0 asks submitit to requeue the job, which resumes there"


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
        layout = self.layout()
        status = run_job(self.cfg, layout, resume_hint=REQUEUE_HINT)
        if status == EXIT_PREEMPTED:
            if layout.rank != 0:
                # Task 0 alone requeues (as submitit's handler does). Ending
                # with 0 here keeps srun's --kill-on-bad-exit from killing
                # task 0 before it has.
                sys.exit(EXIT_OK)
            self._requeue()
        if status != EXIT_OK:
            sys.exit(status)
        return EXIT_OK

    @staticmethod
    def _requeue() -> None:
        """Hands the stop over to submitit's handler of its preemption signal.

        The handler requeues the job and exits, or raises
        ``UncompletedJobError`` when the job reached its time limit more often
        than ``--max-requeues`` allows: then one line says so.
        """
        from submitit import JobEnvironment
        from submitit.core.utils import UncompletedJobError

        try:
            signal.raise_signal(JobEnvironment._usr_sig())
        except UncompletedJobError as err:
            # submitit's reason: "Job not requeued because: <why>."
            why = str(err).split("because:", 1)[-1].strip().rstrip(".")
            if "too many times" in why:
                why += " (more often than --max-requeues allows)"
            report(
                f"error: not requeued: {why}; submit the same command again to "
                "resume from the last checkpoint"
            )
            sys.exit(EXIT_PREEMPTED)

    def checkpoint(self) -> "DelayedSubmission":
        """submitit's requeue hook: the same job again (it resumes from OUTPUT_DIR)."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(SubmititJob(self.cfg))
