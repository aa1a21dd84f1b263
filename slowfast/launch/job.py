"""The one start sequence of every launcher: ``run_job(cfg, layout) -> exit status``.

``tools/run_net.py`` (plain spawn, torchrun, srun: the tasks of
``tools/slurm/train.sbatch``) and the submitit job of ``tools/submit.py`` find
their layout and call ``run_job``, which:

1. applies the layout to the config (the launcher's values win, and are logged);
2. imports the user's modules of IMPORTS (``user_modules``; loading the config
   did already, but submitit's tasks are handed a loaded config);
3. checks the set-up before any work (``preflight``);
4. takes OUTPUT_DIR's lock in the job's first process (``run_lock``);
5. sets up logging and logs the layout (``start.begin_run``);
6. runs the enabled stages: spawned processes (plain, which import IMPORTS
   too) or this process as one rank (torchrun, srun, submitit);
7. turns the outcome into an exit status (``utils/errors.py``) and, unless
   the run finished, one ``error: ...`` or ``stopped ...`` line on stderr.

With neither TRAIN.ENABLE nor TEST.ENABLE it logs the model's parameters and
FLOPs instead.
"""

import logging
import os
import sys
from typing import TYPE_CHECKING, Optional

from fvcore.common.config import CfgNode

from slowfast.launch.launcher import Layout, apply_layout
from slowfast.launch.preflight import preflight
from slowfast.launch.run_lock import RunLock
from slowfast.launch.start import begin_run
from slowfast.launch.user_modules import describe_imports, import_user_modules
from slowfast.utils.errors import EXIT_FAILED, EXIT_OK, EXIT_PREEMPTED, UserError
from slowfast.utils.logging import error_line, process_log_path, setup_logging

if TYPE_CHECKING:  # the engine (and torch) load only when a run starts
    from slowfast.engine.builders import RunSetup

logger = logging.getLogger(__name__)

RESUME_HINT = "run the same command to resume"


def one_line(err: BaseException) -> str:
    """An error's message on one line (its lines joined), or its class name."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return "; ".join(lines) or type(err).__name__


def report(line: str) -> None:
    """Writes one line for the user on stderr (the job log under SLURM)."""
    print(line, file=sys.stderr, flush=True)


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


def run_job(
    cfg: CfgNode,
    layout: Layout,
    debug: bool = False,
    resume_hint: str = RESUME_HINT,
    source: str = "",
) -> int:
    """Runs a job's enabled stages in this process's place of ``layout``.

    Args:
        cfg: the loaded, frozen config.
        layout: the job's processes and this process's place among them.
        debug: re-raise set-up errors (their tracebacks) instead of one line.
        resume_hint: what the user does after a preemption (said in its line).
        source: where the config came from (files and overrides), logged.

    Returns:
        int: an exit status of ``slowfast.utils.errors``.
    """
    cfg, notes = apply_layout(cfg, layout)
    try:
        import_user_modules(cfg.IMPORTS)
    except UserError as err:
        if debug:
            raise
        report(f"error: {one_line(err)}")
        return err.exit_status
    if not (cfg.TRAIN.ENABLE or cfg.TEST.ENABLE):
        setup_logging(cfg.OUTPUT_DIR, rank=layout.rank or 0)
        model_info(cfg)
        return EXIT_OK
    # The first process of the job holds OUTPUT_DIR for the run's life.
    first = layout.rank == 0 or (layout.spawns and layout.node_rank == 0)
    lock = RunLock(cfg.OUTPUT_DIR)
    try:
        setup = preflight(cfg, layout)
        if first:
            lock.acquire()
    except UserError as err:
        if debug:
            raise
        report(f"error: {one_line(err)}")
        return err.exit_status
    try:
        begin_run(cfg, layout, lock, first, notes)
        if source:
            logger.info(source)
        if cfg.IMPORTS:
            logger.info(describe_imports(cfg.IMPORTS))
        return run_stages(cfg, layout, resume_hint, setup)
    finally:
        lock.release()


def _newest_mid_epoch(output_dir: str) -> str:
    """The mid-epoch checkpoint written last (what a stopped run saved)."""
    from slowfast.checkpoint.files import is_mid_epoch_checkpoint, list_checkpoints

    mid = [p for p in list_checkpoints(output_dir) if is_mid_epoch_checkpoint(p)]
    return max(mid, key=os.path.getmtime) if mid else "none found"


def _stopped(cfg: CfgNode, signum: int, path: Optional[str], resume_hint: str) -> int:
    from slowfast.engine.preemption import signal_name

    how = f" by {signal_name(signum)}" if signum else ""
    saved = path or _newest_mid_epoch(cfg.OUTPUT_DIR)
    report(f"stopped{how} after a mid-epoch checkpoint ({saved}); {resume_hint}")
    return EXIT_PREEMPTED


def run_stages(
    cfg: CfgNode,
    layout: Layout,
    resume_hint: str = RESUME_HINT,
    setup: Optional["RunSetup"] = None,
) -> int:
    """Runs the enabled stages on this layout, reporting how they ended.

    Args:
        cfg: the run's config, with the layout applied.
        layout: the job's processes and this process's place among them.
        resume_hint: what the user does after a preemption.
        setup: what the checks resolved (``preflight``), handed to every
            stage of every process; None: each stage resolves its own.

    Returns:
        int: the exit status (``utils/errors.py``).
    """
    import torch.multiprocessing as mp

    from slowfast.config.derived import stop_signals
    from slowfast.engine.preemption import Preempted, signal_name
    from slowfast.launch.spawn import launch_job, run_in_group
    from slowfast.launch.start import stages

    first_rank = layout.node_rank * layout.procs_per_node
    try:
        if layout.spawns:
            signums = stop_signals(cfg)
            for stage in stages(cfg, setup):
                launch_job(cfg, layout.init_method, stage, forward_signals=signums)
        else:
            rank = layout.rank or 0  # a launcher's process: its rank is set
            local = layout.local_rank
            run_in_group(
                stages(cfg, setup),
                cfg,
                layout.init_method,
                rank,
                layout.world_size,
                rank % layout.procs_per_node if local is None else local,
                group=True,  # a launcher's rendezvous: DDP with 1 process too
            )
        return EXIT_OK
    except Preempted as err:  # this process is the rank
        return _stopped(cfg, err.signum, err.path, resume_hint)
    except mp.ProcessExitedException as err:  # a spawned process exited
        if err.exit_code == EXIT_PREEMPTED:
            return _stopped(cfg, 0, "", resume_hint)
        rank = first_rank + err.error_index
        signum = -err.exit_code if err.exit_code < 0 else None
        why = f"was killed by {signal_name(signum)}" if signum else "exited"
        report(
            f"error: process rank {rank} {why} (exit status {err.exit_code}); "
            f"the others were stopped; its log: "
            f"{process_log_path(cfg.OUTPUT_DIR, rank)}"
        )
        return EXIT_FAILED
    except mp.ProcessRaisedException as err:
        rank = first_rank + err.error_index
        report(
            f"error: process rank {rank} failed: {error_line(str(err))}; the "
            f"others were stopped; traceback in "
            f"{process_log_path(cfg.OUTPUT_DIR, rank)}"
        )
        return EXIT_FAILED
    except Exception as err:  # this process is the rank (torchrun, srun, 1 process)
        if layout.spawns and layout.world_size == 1 and not isinstance(err, UserError):
            raise  # a single process: the traceback is the report
        rank = layout.rank or 0
        who = "" if layout.world_size == 1 else f"process rank {rank} failed: "
        log = process_log_path(cfg.OUTPUT_DIR, rank)
        if isinstance(err, UserError):
            # A loader worker's error arrives with the worker's traceback in
            # its message: error_line keeps the error's own last line.
            report(f"error: {who}{error_line(str(err))}; traceback in {log}")
        else:
            report(f"error: {who}{one_line(err)}; traceback in {log}")
        return EXIT_FAILED  # a process failed, whatever the launcher
