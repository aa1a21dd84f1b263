"""Starting a run: the command line (``parser``), the config with the
registries' name checks (``config``), how the job was started and its process
layout (``launcher``), checks before any work (``preflight``), one run per
output folder (``run_lock``), the one start sequence of every launcher
(``job``, with ``start``'s logging set-up), spawning processes and their CPU
threads (``spawn``), submitting to SLURM (``submit``) and the submitit job
(``submitit_job``).
"""
