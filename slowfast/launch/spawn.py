"""Spawning a job's processes on this machine and running its stages in each.

``launch_job`` spawns one process per GPU (or NUM_CPU_PROCS on CPU), or runs
in this process when the job has one; ``run_in_group`` is what each process
runs (also under torchrun, srun and submitit): join the process group, run
the stages, leave the group.
"""

import gc
import logging
import os
import signal
from typing import Callable, Optional, Sequence, Union

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from fvcore.common.config import CfgNode

from slowfast.utils.distributed import init_process_group, procs_per_machine

logger = logging.getLogger(__name__)

JobFunc = Callable[[CfgNode, int, int], None]


def global_rank(shard_id: int, num_procs: int, local_rank: int) -> int:
    """Returns the global rank of process ``local_rank`` on machine ``shard_id``."""
    return shard_id * num_procs + local_rank


def run_in_group(
    funcs: Sequence[JobFunc],
    cfg: CfgNode,
    init_method: str,
    rank: int,
    world_size: int,
    local_rank: int,
) -> None:
    """Runs ``func(cfg, rank, world_size)`` for each of ``funcs`` in this process.

    Joins the process group first (none with one process) and leaves it at
    the end. An exception is logged (rank > 0: to its own log, see
    ``utils.logging``) and re-raised.

    Args:
        funcs: the job's stages (training, testing), in order.
        cfg: the frozen config.
        init_method: rendezvous URL.
        rank: global rank.
        world_size: number of processes.
        local_rank: index of this process on its machine (its GPU).
    """
    use_cuda = cfg.NUM_GPUS > 0
    if use_cuda:  # modulo: a task may see only its own GPU
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    if world_size > 1:
        backend = cfg.DIST_BACKEND if use_cuda else "gloo"
        init_process_group(
            backend, init_method, world_size, rank, cfg.DIST_TIMEOUT_MINUTES
        )
    try:
        for func in funcs:
            func(cfg, rank, world_size)
        if world_size > 1:
            # Free what still holds the process group (a DDP model in a
            # reference cycle) and let every process get here before the
            # group goes: a process leaving while its peer's group is alive
            # was a suspect of a rare abort ("terminate called without an
            # active exception") at the end of 2-process CPU runs.
            gc.collect()
            dist.barrier()
    except Exception as err:
        if not getattr(err, "expected_stop", False):
            logger.exception("process rank %d failed", rank)
        raise
    finally:
        if world_size > 1:
            dist.destroy_process_group()


def _worker(
    local_rank: int,
    funcs: Sequence[JobFunc],
    cfg: CfgNode,
    init_method: str,
    shard_id: int,
    num_procs: int,
    num_shards: int,
) -> None:
    """Entry point of one spawned process; exits with the job's status."""
    world_size = num_procs * num_shards
    rank = global_rank(shard_id, num_procs, local_rank)
    try:
        run_in_group(funcs, cfg, init_method, rank, world_size, local_rank)
    except Exception as err:
        status = getattr(err, "exit_status", None)
        if status is None:
            raise
        raise SystemExit(status) from err


def _forward_signals(context, signums: Sequence[int]) -> dict:
    """Passes the stop signals this process gets on to its spawned processes."""

    def forward(signum, frame):
        for process in context.processes:
            if process.is_alive():
                os.kill(process.pid, signum)

    return {s: signal.signal(s, forward) for s in signums}


def launch_job(
    cfg: CfgNode,
    init_method: str,
    func: Union[JobFunc, Sequence[JobFunc]],
    num_procs: Optional[int] = None,
    shard_id: Optional[int] = None,
    num_shards: Optional[int] = None,
    daemon: bool = False,
    forward_signals: Sequence[int] = (),
) -> None:
    """Runs ``func(cfg, rank, world_size)`` on every process of this machine.

    With one process in total, ``func`` runs here without a process group.
    Otherwise ``num_procs`` processes are spawned; each joins the group (gloo
    on CPU, ``cfg.DIST_BACKEND`` on GPU after selecting GPU ``local_rank``),
    runs ``func`` and leaves the group. An exception in a child is re-raised
    here (``torch.multiprocessing.ProcessRaisedException``) with its traceback;
    a child that exits with a status (e.g. a preempted run) raises
    ``ProcessExitedException``. When one child fails, the others are stopped
    (SIGTERM, then SIGKILL after 30 s).

    Args:
        cfg: the frozen config (picklable); passed unchanged to ``func``.
        init_method: rendezvous URL shared by all machines.
        func: a module-level (picklable) function ``func(cfg, rank, world)``.
        num_procs: processes on this machine (default: NUM_GPUS, or
            NUM_CPU_PROCS when NUM_GPUS is 0).
        shard_id: index of this machine (default: cfg.SHARD_ID).
        num_shards: number of machines (default: cfg.NUM_SHARDS).
        daemon: spawn the processes as daemons.
        forward_signals: signals this process passes on to the children.
    """
    funcs = [func] if callable(func) else list(func)
    num_procs = procs_per_machine(cfg) if num_procs is None else num_procs
    shard_id = cfg.SHARD_ID if shard_id is None else shard_id
    num_shards = cfg.NUM_SHARDS if num_shards is None else num_shards
    if num_procs * num_shards == 1:
        run_in_group(funcs, cfg, init_method, 0, 1, 0)
        return
    use_cuda = cfg.NUM_GPUS > 0
    logger.info(
        "Spawning %d %s processes (machine %d of %d, backend %s)",
        num_procs,
        "GPU" if use_cuda else "CPU",
        shard_id,
        num_shards,
        cfg.DIST_BACKEND if use_cuda else "gloo",
    )
    context = mp.start_processes(
        _worker,
        args=(funcs, cfg, init_method, shard_id, num_procs, num_shards),
        nprocs=num_procs,
        daemon=daemon,
        join=False,
        start_method="spawn",
    )
    previous = _forward_signals(context, forward_signals)
    try:
        while not context.join():
            pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
