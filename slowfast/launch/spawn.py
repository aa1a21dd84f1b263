"""Spawning a job's processes on this machine and running its stages in each.

``launch_job`` spawns one process per GPU (or NUM_CPU_PROCS on CPU), or runs
in this process when the job has one; each spawned process imports the
user's modules (IMPORTS) first. ``run_in_group`` is what each process runs
(also under torchrun, srun and submitit): set its CPU threads, join the
process group, run the stages, leave the group.

A job of one process has a process group only under a launcher that gives it
a rendezvous (torchrun, srun, submitit: ``group=True``); its model is then
wrapped in DistributedDataParallel as with several processes, so one GPU
runs the several-GPU path. ``python tools/run_net.py`` with one process
starts no group.

CPU threads: on CPU (NUM_GPUS 0) every process takes ``cores // processes per
machine`` intra-op threads, at least 1, however it was started
(``cpu_threads_per_process``, ``available_cores``): the spawned, torchrun and
srun runs of one config then compute with the same threads and end with the
same weights. GPU runs keep torch's threads.
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

from slowfast.engine.preemption import Preempted
from slowfast.launch.user_modules import import_user_modules
from slowfast.utils.distributed import (
    exit_without_teardown,
    init_process_group,
    procs_per_machine,
)
from slowfast.utils.errors import UserError
from slowfast.utils.logging import FILE_ONLY, error_line, setup_logging

logger = logging.getLogger(__name__)

JobFunc = Callable[[CfgNode, int, int], None]
# Thread variables that the CPU thread rule replaces (torchrun sets the first).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def global_rank(shard_id: int, num_procs: int, local_rank: int) -> int:
    """Returns the global rank of process ``local_rank`` on machine ``shard_id``."""
    return shard_id * num_procs + local_rank


def available_cores() -> int:
    """The CPUs this process may run on: its CPU affinity, or os.cpu_count().

    The affinity (``os.sched_getaffinity``, where the platform has it) is used
    when it is narrower than ``os.cpu_count()``. This is what keeps the launch
    modes identical on one machine: a process inherits the affinity of the
    process that started it, so the processes spawned by ``launch_job``,
    torchrun's workers and srun's (or submitit's) tasks all count the cores
    of the shell or launcher they came from, and all count the same. It is
    also how to give a run fewer cores (``taskset -c 0-7 ...``, ``numactl``, a
    container's or a SLURM allocation's cpuset), in every launch mode alike;
    ``os.cpu_count()`` alone would ignore such limits and oversubscribe them.
    A CPU quota without a cpuset (``docker --cpus``) is not seen. Per-task
    binding (``srun --cpu-bind`` giving each task its own cores) makes the
    affinity a task's share, which ``cpu_threads_per_process`` divides again:
    bind CPU jobs per job (``--cpu-bind=none``) rather than per task.

    Hyper-threads of one core count once (Linux: the CPUs' thread siblings
    in ``/sys``), as torch's own default thread count does.

    Returns:
        int: at least 1.
    """
    cpus = list(range(os.cpu_count() or 1))
    if hasattr(os, "sched_getaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
    return max(1, _physical_cores(cpus))


def _physical_cores(cpus: Sequence[int], root: str = "/sys/devices/system/cpu") -> int:
    """Distinct cores among logical ``cpus`` (their number where unknown)."""
    cores = set()
    for cpu in cpus:
        path = f"{root}/cpu{cpu}/topology/thread_siblings_list"
        try:
            with open(path) as handle:
                cores.add(handle.read().strip())
        except OSError:
            return len(cpus)
    return len(cores)


def cpu_threads_per_process(
    cfg: CfgNode, num_procs: Optional[int] = None, cores: Optional[int] = None
) -> Optional[int]:
    """The intra-op threads of each CPU process: ``cores // num_procs``, >= 1.

    Applies to CPU runs only; GPU runs (NUM_GPUS > 0) keep torch's threads
    (None), as their processes compute on the GPU.

    An OMP_NUM_THREADS (or MKL_NUM_THREADS) in the environment is not used:
    torchrun sets OMP_NUM_THREADS=1 in its workers when it is unset, which
    cannot be told apart from a value set by hand, and honouring it would
    give a torchrun run other threads (and other weights) than the spawned
    run of the same config. To use fewer cores, narrow the CPU affinity
    (``available_cores``).

    Args:
        cfg: the run's config (NUM_GPUS, NUM_CPU_PROCS).
        num_procs: processes on this machine (default:
            ``procs_per_machine(cfg)``, which the launchers' layout sets).
        cores: cores of this machine (default: ``available_cores()``).

    Returns:
        The thread count, or None for a GPU run.
    """
    if cfg.NUM_GPUS > 0:
        return None
    num_procs = procs_per_machine(cfg) if num_procs is None else num_procs
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, num_procs))


def _set_cpu_threads(cfg: CfgNode, rank: int, num_procs: Optional[int]) -> int:
    """Applies ``cpu_threads_per_process`` here; returns the previous count.

    Rank 0 logs the choice, and the thread variables it leaves unused.
    """
    previous = torch.get_num_threads()
    cores = available_cores()
    num_procs = procs_per_machine(cfg) if num_procs is None else num_procs
    threads = cpu_threads_per_process(cfg, num_procs, cores)
    if threads is None:
        return previous
    torch.set_num_threads(threads)
    if rank == 0:
        unused = [f"{k}={os.environ[k]}" for k in THREAD_VARIABLES if k in os.environ]
        logger.info(
            "CPU threads: %d per process (%d cores // %d processes per machine)%s",
            threads,
            cores,
            num_procs,
            f"; {', '.join(unused)} in the environment not used (narrow the "
            "CPU affinity to use fewer cores)"
            if unused
            else "",
        )
    return previous


def run_in_group(
    funcs: Sequence[JobFunc],
    cfg: CfgNode,
    init_method: str,
    rank: int,
    world_size: int,
    local_rank: int,
    num_procs: Optional[int] = None,
    group: bool = False,
) -> None:
    """Runs ``func(cfg, rank, world_size)`` for each of ``funcs`` in this process.

    On CPU, sets this process's threads first (``cpu_threads_per_process``,
    logged by rank 0) and restores the previous count at the end. Joins the
    process group (none with one process) and leaves it at the end. An
    exception is logged (rank > 0: to its own log, see ``utils.logging``)
    and re-raised.

    Args:
        funcs: the job's stages (training, testing), in order.
        cfg: the frozen config.
        init_method: rendezvous URL.
        rank: global rank.
        world_size: number of processes.
        local_rank: index of this process on its machine (its GPU).
        num_procs: processes on this machine (default:
            ``procs_per_machine(cfg)``).
        group: start a process group with one process too (a launcher's
            rendezvous); several processes always have one.
    """
    if cfg.NUM_GPUS > 0:  # modulo: a task may see only its own GPU
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    previous_threads = _set_cpu_threads(cfg, rank, num_procs)
    try:
        grouped = group or world_size > 1
        _run_in_group(funcs, cfg, init_method, rank, world_size, grouped)
    finally:
        torch.set_num_threads(previous_threads)


def _run_in_group(
    funcs: Sequence[JobFunc],
    cfg: CfgNode,
    init_method: str,
    rank: int,
    world_size: int,
    grouped: bool,
) -> None:
    """``run_in_group`` once the device and threads are set."""
    if grouped:
        backend = cfg.DIST_BACKEND if cfg.NUM_GPUS > 0 else "gloo"
        init_process_group(
            backend, init_method, world_size, rank, cfg.DIST_TIMEOUT_MINUTES
        )
    try:
        for func in funcs:
            func(cfg, rank, world_size)
        if grouped:
            # Free what still holds the process group (a DDP model in a
            # reference cycle) and let every process get here before the
            # group goes (the spawned processes then leave without Python's
            # teardown: utils/distributed.exit_without_teardown).
            gc.collect()
            dist.barrier()
    except Exception as err:
        if isinstance(err, UserError):  # bad data, checkpoint, recipe
            logger.error("process rank %d failed: %s", rank, error_line(str(err)))
            logger.error("traceback of rank %d", rank, exc_info=True, extra=FILE_ONLY)
        elif not isinstance(err, Preempted):  # a stop is no failure
            logger.exception("process rank %d failed", rank)
        raise
    finally:
        if grouped:
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
    """Entry point of one spawned process; exits with the job's status.

    Sets up this process's logging first, as the entry points of torchrun's
    and srun's processes do (``tools/run_net.py``), then imports the user's
    modules of IMPORTS (a spawned process starts afresh: it has imported
    none of them), before its stages build any model or dataset.
    """
    world_size = num_procs * num_shards
    rank = global_rank(shard_id, num_procs, local_rank)
    setup_logging(cfg.OUTPUT_DIR, rank)
    import_user_modules(cfg.IMPORTS)
    try:
        run_in_group(funcs, cfg, init_method, rank, world_size, local_rank, num_procs)
    except Preempted as err:  # a stop, not a failure: no traceback to pass on
        status = err.exit_status
    else:
        status = 0
    if world_size > 1:  # done, its group destroyed: leave before gloo's teardown
        exit_without_teardown(status)
    if status:
        raise SystemExit(status)


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
        run_in_group(funcs, cfg, init_method, 0, 1, 0, num_procs)
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
