#!/usr/bin/env python3
"""Runs a job from a config: ``python tools/run_net.py --cfg FILE [KEY VALUE ...]``.

Arguments follow the reference (see ``slowfast.launch.parser``). A bad config
is reported as one ``error: ...`` line on stderr with exit status 2.

The job trains when TRAIN.ENABLE, then tests when TEST.ENABLE. How it was
started decides who runs them (``slowfast.launch.launcher``): plain spawns
NUM_GPUS processes per machine (NUM_CPU_PROCS when NUM_GPUS is 0); under
torchrun or srun every process is one rank and runs them itself. With neither
stage enabled it logs the model's parameters and FLOPs.

Every launcher runs the same start sequence (``slowfast/launch/job.py``):
before any model is built or process spawned, ``launch/preflight.py`` checks
the devices, the batch, the training schedule, the data files and OUTPUT_DIR,
and the job's first process takes OUTPUT_DIR's lock (``launch/run_lock.py``:
one run per folder).

A model, dataset or other registered part of your own needs no edit of the
package: ``--import MODULE`` (repeatable) or the config's IMPORTS names its
module, which every process imports before the config's names are checked
(``slowfast/launch/user_modules.py``; docs/EXTENDING.md).

Exit status (``slowfast/utils/errors.py``): 0 done, 1 a process failed (one
line names it and its log), the data or OUTPUT_DIR is unusable or in use by
another run, 2 bad config, launch environment or devices, 75 stopped by a
stop signal after a mid-epoch checkpoint (run the same command to resume).
``--debug`` shows the tracebacks of set-up errors.
"""

import os
import sys
from typing import Optional, Sequence

from slowfast.config import ConfigError
from slowfast.launch.job import one_line, report, run_job
from slowfast.launch.launcher import LaunchError, detect_layout
from slowfast.launch.parser import load_config_from_args, parse_args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses the command line, loads the config and runs the job.

    Args:
        argv: arguments without the program name; None reads sys.argv.

    Returns:
        int: the exit status (see the module docstring).
    """
    args = parse_args(argv)
    try:
        cfg = load_config_from_args(args)
        layout = detect_layout(cfg, args.init_method, os.environ, args.launcher)
    except (ConfigError, LaunchError) as err:
        if args.debug:
            raise
        report(f"error: {one_line(err)}")
        return err.exit_status
    source = f"Config files: {args.cfg_files}; overrides: {args.opts}"
    return run_job(cfg, layout, debug=args.debug, source=source)


if __name__ == "__main__":
    sys.exit(main())
