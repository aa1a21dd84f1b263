"""Exit statuses and the base class of errors a user can fix.

Every launcher (``tools/run_net.py``, ``tools/submit.py``'s job, the sbatch
script's tasks) ends with one of these statuses, and every error a user can
fix derives from ``UserError``: the launchers print its message as one line
(the traceback goes to the process's log) and exit with its ``exit_status``.
"""

# The run finished.
EXIT_OK = 0
# A process failed; the data, a checkpoint or OUTPUT_DIR is unusable or in use.
EXIT_FAILED = 1
# A bad config, launch environment or device request.
EXIT_CONFIG = 2
# Stopped by a stop signal after a mid-epoch checkpoint: run the same command
# (or requeue the job) to resume. BSD's EX_TEMPFAIL, "try again later".
EXIT_PREEMPTED = 75


class UserError(Exception):
    """An error the user can fix; its message is one line naming what to change.

    Attributes:
        exit_status: the status a launcher exits with (``EXIT_FAILED`` unless a
            subclass or the instance says otherwise).
    """

    exit_status = EXIT_FAILED
