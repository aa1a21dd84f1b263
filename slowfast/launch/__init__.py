"""Starting a run: the command line (``parser``), how the job was started and
its process layout (``launcher``), checks before any work (``preflight``), one
run per output folder (``run_lock``), spawning processes (``spawn``) and the
submitit job (``submitit_job``).
"""
