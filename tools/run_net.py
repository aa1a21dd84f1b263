#!/usr/bin/env python3
"""Runs a job from a config: ``python tools/run_net.py --cfg FILE [KEY VALUE ...]``.

Arguments follow the reference (see ``slowfast.launch.parser``). A bad config
is reported as one ``error: ...`` line on stderr with exit status 2.

The job trains when TRAIN.ENABLE, then tests when TEST.ENABLE. How it was
started decides who runs them (``slowfast.launch.launcher``): plain spawns
NUM_GPUS processes per machine (NUM_CPU_PROCS when NUM_GPUS is 0); under
torchrun or srun every process is one rank and runs them itself. With neither
stage enabled it logs the model's parameters and FLOPs.

Before any model is built or process spawned, ``launch/preflight.py`` checks
the devices, the batch, the training schedule, the data files and OUTPUT_DIR,
and the job's first process takes OUTPUT_DIR's lock (``launch/run_lock.py``:
one run per folder).

Exit status: 0 done, 1 a process failed (one line names it and its log), the
data or OUTPUT_DIR is unusable or in use by another run, 2 bad config, launch
environment or devices, 75 stopped by a stop signal after a mid-epoch
checkpoint (run the same command to resume). ``--debug`` shows the tracebacks
of set-up errors.
"""

import logging
import os
import sys
from typing import Optional, Sequence

from fvcore.common.config import CfgNode

from slowfast.config import ConfigError
from slowfast.launch.launcher import (
    LaunchError,
    Layout,
    apply_layout,
    detect_layout,
)
from slowfast.launch.parser import load_config_from_args, parse_args
from slowfast.launch.preflight import PreflightError, preflight
from slowfast.launch.run_lock import RunLock, RunLockError
from slowfast.launch.start import begin_run
from slowfast.utils.logging import error_line, process_log_path, setup_logging

logger = logging.getLogger("slowfast.tools.run_net")

EXIT_FAILED = 1
EXIT_CONFIG_ERROR = 2


def _one_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return "; ".join(lines) or type(err).__name__


def model_info(cfg: CfgNode) -> None:
    """Builds the model and, when LOG_MODEL_INFO, logs its params and FLOPs.

    Args:
        cfg: the run's frozen config.
    """
    # Imported here so that --help and config errors answer without the
    # model code (and torch) being loaded.
    from slowfast.models import build_model
    from slowfast.models.model_stats import log_model_info

    model = build_model(cfg)
    if cfg.LOG_MODEL_INFO:
        log_model_info(model, cfg)


def _newest_mid_epoch(output_dir: str) -> str:
    """The mid-epoch checkpoint written last (what a stopped run saved)."""
    from slowfast.checkpoint.files import is_mid_epoch_checkpoint, list_checkpoints

    mid = [p for p in list_checkpoints(output_dir) if is_mid_epoch_checkpoint(p)]
    return max(mid, key=os.path.getmtime) if mid else "none found"


def run_stages(cfg: CfgNode, layout: Layout) -> int:
    """Runs the enabled stages on this layout; returns the exit status."""
    import torch.multiprocessing as mp

    from slowfast.config.derived import stop_signals
    from slowfast.engine.preemption import EXIT_PREEMPTED, Preempted, signal_name
    from slowfast.launch.spawn import launch_job, run_in_group
    from slowfast.launch.start import stages as enabled_stages

    stages = enabled_stages(cfg)
    first_rank = layout.node_rank * layout.procs_per_node
    try:
        if layout.spawns:
            signums = stop_signals(cfg)
            for stage in stages:
                launch_job(cfg, layout.init_method, stage, forward_signals=signums)
        else:
            run_in_group(
                stages,
                cfg,
                layout.init_method,
                layout.rank,
                layout.world_size,
                layout.local_rank,
                group=True,  # torchrun's or srun's rendezvous: DDP with 1 process too
            )
        return 0
    except (Preempted, mp.ProcessExitedException) as err:
        status = getattr(err, "exit_code", None) or getattr(err, "exit_status", None)
        if status == EXIT_PREEMPTED:
            saved = getattr(err, "path", None) or _newest_mid_epoch(cfg.OUTPUT_DIR)
            how = f" by {signal_name(err.signum)}" if hasattr(err, "signum") else ""
            print(
                f"stopped{how} after a mid-epoch checkpoint ({saved}); run the same "
                "command to resume",
                file=sys.stderr,
            )
            return EXIT_PREEMPTED
        rank = first_rank + err.error_index
        signum = -err.exit_code if err.exit_code < 0 else None
        why = f"was killed by {signal_name(signum)}" if signum else "exited"
        print(
            f"error: process rank {rank} {why} (exit status {err.exit_code}); "
            f"the others were stopped; its log: "
            f"{process_log_path(cfg.OUTPUT_DIR, rank)}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except mp.ProcessRaisedException as err:
        rank = first_rank + err.error_index
        last = error_line(str(err))  # its traceback's last line, the message
        print(
            f"error: process rank {rank} failed: {last}; the others were "
            f"stopped; traceback in {process_log_path(cfg.OUTPUT_DIR, rank)}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except Exception as err:  # this process is the rank (torchrun, srun, 1 process)
        # Errors in the data, checkpoints or recipe (their classes set
        # ``user_error``): one line here, the traceback in the log.
        user_error = getattr(err, "user_error", False)
        if layout.spawns and layout.world_size == 1 and not user_error:
            raise  # a single process: the traceback is the report
        rank = layout.rank or 0
        who = "" if layout.world_size == 1 else f"process rank {rank} failed: "
        # A loader worker's error arrives with the worker's traceback in its
        # message: error_line keeps the error's own last line.
        text = error_line(str(err)) if user_error else _one_line(err)
        print(
            f"error: {who}{text}; traceback in "
            f"{process_log_path(cfg.OUTPUT_DIR, rank)}",
            file=sys.stderr,
        )
        return EXIT_FAILED


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses the command line, loads the config and runs the enabled stages.

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
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    cfg, notes = apply_layout(cfg, layout)
    if not (cfg.TRAIN.ENABLE or cfg.TEST.ENABLE):
        setup_logging(cfg.OUTPUT_DIR, rank=layout.rank or 0)
        model_info(cfg)
        return 0
    # The first process of the job holds OUTPUT_DIR for the run's life.
    first = layout.rank == 0 or (layout.spawns and layout.node_rank == 0)
    lock = RunLock(cfg.OUTPUT_DIR)
    try:
        preflight(cfg, layout)
        if first:
            lock.acquire()
    except (PreflightError, RunLockError) as err:
        if args.debug:
            raise
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return getattr(err, "exit_status", EXIT_FAILED)
    try:
        begin_run(cfg, layout, lock, first, notes)
        logger.info("Config files: %s; overrides: %s", args.cfg_files, args.opts)
        return run_stages(cfg, layout)
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
