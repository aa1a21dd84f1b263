#!/usr/bin/env python3
r"""Submits a run to SLURM with submitit: one task per GPU, requeued when preempted.

Usage:
    python tools/submit.py --cfg X.yaml [--cfg Y.yaml] --nodes N \
        --gpus-per-node G [--partition P] [--time MINUTES|HH:MM:SS] \
        [--account A] [--constraint C] [--mem M] [--cpus-per-task K] \
        [--job-dir DIR] [--name NAME] [--dry-run] [--executor slurm|local] \
        [--signal-delay-s 300] [--max-requeues 100] [--no-checks] \
        [KEY VALUE ...]

See ``slowfast/launch/submit.py`` (``--help``) for what each option does.
"""

import sys

from slowfast.launch.submit import main, parse_args

__all__ = ["main", "parse_args"]  # parse_args: tools/dev/check_docs.py checks commands

if __name__ == "__main__":
    sys.exit(main())
