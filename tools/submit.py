#!/usr/bin/env python3
"""Submits a run to SLURM with submitit: ``python tools/submit.py --help``.

The code and the full usage are in ``slowfast/launch/submit.py``.
"""

import sys

from slowfast.launch.submit import main, parse_args

__all__ = ["main", "parse_args"]  # parse_args: tools/dev/check_docs.py checks commands

if __name__ == "__main__":
    sys.exit(main())
