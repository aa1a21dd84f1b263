"""Starting a run: the command line (``parser``), the config with the
registries' name checks (``config``), how the job was started and its process
layout (``launcher``), checks before any work (``preflight``), one run per
output folder (``run_lock``), the start every launch shares (``start``),
spawning processes and their CPU threads (``spawn``) and the submitit job
(``submitit_job``).
"""
