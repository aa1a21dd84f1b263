"""torch.distributed helpers for CPU (gloo) and GPU (nccl) runs, the run context.

Every helper works without an initialised process group (a single process):
the world size is then 1, the rank 0, and collectives return their input.
With nccl, tensors passed to the collectives must be on the current GPU.
"""

import datetime
import logging
import os
import sys
from dataclasses import dataclass
from typing import Callable, List, Sequence

import torch
import torch.distributed as dist
from fvcore.common.config import CfgNode

logger = logging.getLogger(__name__)


def exit_without_teardown(status: int = 0) -> None:
    """Ends a spawned process at once, after flushing its logs and output.

    Call it only when the work is done and saved, the process group destroyed.
    Python's and the C++ runtime's teardown is skipped: a process that leaves
    through it after gloo collectives is, rarely, aborted ("terminate called
    without an active exception", SIGABRT), which turns a finished job into a
    failed one. The runtime starts no threads of its own that could still be
    writing (checkpoints are saved in the main thread).

    Args:
        status: the exit status.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


def is_initialized() -> bool:
    """Returns True when a torch.distributed process group is up."""
    return dist.is_available() and dist.is_initialized()


def get_world_size() -> int:
    """Returns the number of processes of the job (1 without a process group)."""
    return dist.get_world_size() if is_initialized() else 1


def get_rank() -> int:
    """Returns this process's global rank (0 without a process group)."""
    return dist.get_rank() if is_initialized() else 0


def is_master_proc() -> bool:
    """Returns True on the process that logs, saves and writes results (rank 0)."""
    return get_rank() == 0


def init_process_group(
    backend: str,
    init_method: str,
    world_size: int,
    rank: int,
    timeout_minutes: float = 30.0,
) -> None:
    """Joins the job's process group.

    A collective that waits longer than ``timeout_minutes`` (a peer died or
    hangs) raises instead of hanging; with NCCL, asynchronous error handling
    is switched on (unless the environment says otherwise), so that a failed
    collective ends the process.

    Args:
        backend: "gloo" (CPU) or "nccl" (GPU).
        init_method: rendezvous URL, e.g. "tcp://localhost:9999",
            "env://" or "file:///path/to/shared_file".
        world_size: total number of processes.
        rank: global rank of this process.
        timeout_minutes: DIST_TIMEOUT_MINUTES.
    """
    if backend == "nccl":
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    dist.init_process_group(
        backend=backend,
        init_method=init_method,
        world_size=world_size,
        rank=rank,
        timeout=datetime.timedelta(minutes=timeout_minutes),
    )


@dataclass(frozen=True)
class RunContext:
    """Who this process is in the run, built once and passed to whoever needs it.

    Attributes:
        rank: global rank.
        world_size: number of processes of the run.
        local_rank: index of this process on its machine.
        device: this process's device (its GPU, or the CPU).
        grouped: whether the processes have a process group, which several
            always have and one has under torchrun, srun and submitit.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    grouped: bool = False

    @property
    def is_master(self) -> bool:
        """Whether this process logs and writes files (rank 0)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether the run is data-parallel (DDP and collectives): several
        processes, or one in a process group."""
        return self.world_size > 1 or self.grouped

    @classmethod
    def create(cls, cfg: CfgNode, rank: int = 0, world_size: int = 1) -> "RunContext":
        """The context of process ``rank`` of ``world_size`` for a config.

        The local rank is the rank modulo the processes per machine
        (NUM_GPUS, or NUM_CPU_PROCS on CPU); the device is that GPU or the
        CPU (see ``get_device``); ``grouped`` is whether this process has
        joined a process group.
        """
        local_rank = rank % procs_per_machine(cfg)
        device = get_device(cfg, local_rank)
        return cls(rank, world_size, local_rank, device, is_initialized())


def all_reduce(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Reduces a tensor over all processes ("sum" or "max"); returns the result.

    A CPU tensor goes through the GPU when the backend is NCCL. With one
    process the tensor is returned as it is.
    """
    if get_world_size() == 1:
        return tensor
    reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op]
    if dist.get_backend() == "nccl" and tensor.device.type == "cpu":
        moved = tensor.cuda()
        dist.all_reduce(moved, op=reduce_op)
        return moved.cpu()
    dist.all_reduce(tensor, op=reduce_op)
    return tensor


def barrier() -> None:
    """Waits for every process (a no-op with one process)."""
    if get_world_size() > 1:
        dist.barrier()


def new_groups(ranks: Sequence[Sequence[int]]) -> list:
    """Creates one process group per list of ranks (every process must call it)."""
    return [dist.new_group(list(group)) for group in ranks]


def all_gather_objects(obj) -> list:
    """Every process's ``obj`` (picklable), in rank order."""
    if get_world_size() == 1:
        return [obj]
    objects = [None] * get_world_size()
    dist.all_gather_object(objects, obj)
    return objects


def decided_on_master(is_master: bool, decide: Callable, errors: tuple):
    """Runs ``decide()`` on rank 0 only and returns its result on every process.

    An error of one of the ``errors`` types raised there is raised on every
    process, so that none waits for the others in vain and none acts on a
    decision of its own (such as which checkpoint to load).

    Args:
        is_master: whether this process is rank 0.
        decide: the decision, run on rank 0.
        errors: the exception types handed to every process.
    """
    outcome = None
    if is_master:
        try:
            outcome = (decide(), None)
        except errors as err:
            outcome = (None, err)
    value, error = all_gather_objects(outcome)[0]
    if error is not None:
        raise error
    return value


def all_reduce_mean(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Averages each tensor over all processes, in place.

    Args:
        tensors: tensors of the same shape on every process.

    Returns:
        list[Tensor]: the same tensors, now holding the mean over processes.
    """
    world_size = get_world_size()
    if world_size == 1:
        return list(tensors)
    for tensor in tensors:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        tensor.div_(world_size)
    return list(tensors)


def all_gather_tensors(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Gathers each tensor from all processes and concatenates along dim 0.

    Args:
        tensors: tensors of the same shape on every process.

    Returns:
        list[Tensor]: for each input, the rank-ordered concatenation of every
        process's copy (the input itself in a single process).
    """
    world_size = get_world_size()
    if world_size == 1:
        return list(tensors)
    gathered = []
    for tensor in tensors:
        parts = [torch.empty_like(tensor) for _ in range(world_size)]
        dist.all_gather(parts, tensor.contiguous())
        gathered.append(torch.cat(parts, dim=0))
    return gathered


def gather_varlen(tensor: torch.Tensor) -> torch.Tensor:
    """Gathers tensors whose first dimension differs across processes.

    Every process gets the rank-ordered concatenation along dim 0; the other
    dimensions and the dtype must agree. Use it to collect per-video results
    when processes hold different numbers of videos.

    Args:
        tensor: this process's part, shape (n_rank, ...); n_rank may be 0.

    Returns:
        Tensor: shape (sum of n_rank, ...), on every process.
    """
    world_size = get_world_size()
    if world_size == 1:
        return tensor
    length = torch.tensor([tensor.shape[0]], dtype=torch.long, device=tensor.device)
    lengths = [torch.empty_like(length) for _ in range(world_size)]
    dist.all_gather(lengths, length)
    sizes = [int(n.item()) for n in lengths]
    max_len = max(sizes)
    if max_len == 0:
        return tensor
    padded = tensor.new_zeros((max_len,) + tuple(tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    parts = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(parts, padded)
    return torch.cat([part[:n] for part, n in zip(parts, sizes)], dim=0)


def procs_per_machine(cfg: CfgNode) -> int:
    """Returns the processes per machine: NUM_GPUS, or NUM_CPU_PROCS on CPU."""
    return cfg.NUM_GPUS if cfg.NUM_GPUS > 0 else cfg.NUM_CPU_PROCS


def num_processes(cfg: CfgNode) -> int:
    """Returns the processes a run of ``cfg`` has in all (its world size):
    :func:`procs_per_machine` x NUM_SHARDS machines."""
    return procs_per_machine(cfg) * cfg.NUM_SHARDS


def get_device(cfg: CfgNode, local_rank: int = 0) -> torch.device:
    """The device of this process: a GPU per process when NUM_GPUS > 0, else CPU.

    Args:
        cfg: the config (NUM_GPUS).
        local_rank: index of this process on its machine.

    Returns:
        The torch device.
    """
    if cfg.NUM_GPUS > 0:
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"NUM_GPUS = {cfg.NUM_GPUS} but CUDA is not available; "
                "set NUM_GPUS 0 to run on CPU"
            )
        # local_rank modulo the visible GPUs: a launcher may show each task
        # only its own GPU (srun --gpus-per-task, --gpu-bind).
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")
