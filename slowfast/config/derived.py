"""Values derived from the config that several parts of a run must agree on."""

import signal
from typing import List, Sequence

from fvcore.common.config import CfgNode


def global_batch_size(cfg: CfgNode, split: str = "train") -> int:
    """The batch of all processes together, at the base shape.

    As in the reference, TRAIN.BATCH_SIZE and TEST.BATCH_SIZE are divided
    among the processes of one machine: a config run on NUM_SHARDS machines
    trains with NUM_SHARDS times that batch.

    Args:
        cfg: the run's config.
        split: "train" (TRAIN.BATCH_SIZE) or "val" / "test" (TEST.BATCH_SIZE).
    """
    batch = cfg.TRAIN.BATCH_SIZE if split == "train" else cfg.TEST.BATCH_SIZE
    return batch * cfg.NUM_SHARDS


def lr_scale(cfg: CfgNode) -> int:
    """The factor of every SOLVER learning rate: NUM_SHARDS when
    SOLVER.BASE_LR_SCALE_NUM_SHARDS (as the reference), else 1."""
    return cfg.NUM_SHARDS if cfg.SOLVER.BASE_LR_SCALE_NUM_SHARDS else 1


def parse_signals(names: Sequence[str]) -> List[int]:
    """Signal numbers of names such as ``"SIGUSR1"`` or ``"USR1"``.

    Raises:
        ValueError: an unknown name (the message names TRAIN.STOP_SIGNALS).
    """
    numbers = []
    for name in names:
        key = "SIG" + str(name).upper().removeprefix("SIG")
        if not hasattr(signal, key):
            raise ValueError(
                f"TRAIN.STOP_SIGNALS: unknown signal {name!r}; use names such as "
                "SIGUSR1, SIGUSR2, SIGTERM"
            )
        numbers.append(int(getattr(signal, key)))
    return numbers


def stop_signals(cfg: CfgNode) -> List[int]:
    """The signals that stop a run at a checkpoint (TRAIN.STOP_SIGNALS); the
    trainer catches them, the launcher forwards them, loader workers ignore them."""
    return parse_signals(cfg.TRAIN.STOP_SIGNALS)


def worker_niceness(cfg: CfgNode) -> int:
    """How much lower the CPU priority of a loader worker is than its trainer's.

    DATA_LOADER.WORKER_NICE when set; else 19 in CPU runs (NUM_GPUS 0), where
    the workers run on the cores the model's threads compute on, and 0 in GPU
    runs, where the workers must keep the GPU fed.

    On a 2-core CPU a worker that takes a core mid-step stalls both of the
    model's threads (one is preempted, the other waits for it), most at the
    coarse multigrid shapes, whose large batches the workers fill fastest.
    At 19 the model's threads get the cores first (docs/benchmarks/loader.md,
    "Worker priority").

    Args:
        cfg: the run's config.

    Returns:
        int: the increment for ``os.nice`` in each worker (0-19).
    """
    nice = cfg.DATA_LOADER.WORKER_NICE
    if nice is not None:
        return int(nice)
    return 19 if cfg.NUM_GPUS == 0 else 0


def per_process_batch(
    batch: int, num_procs: int, key: str = "TRAIN.BATCH_SIZE", where: str = ""
) -> int:
    """The clips each process takes of a global batch (the one home of the
    "divides among the processes" check: the preflight, the loaders and the
    multigrid schedule call it).

    Args:
        batch: the global batch.
        num_procs: the processes it is split among.
        key: the config key named in the error.
        where: said after "processes" in the error (e.g. " per machine").

    Returns:
        int: ``batch // num_procs``.

    Raises:
        ValueError: ``batch`` is not divisible by ``num_procs`` (one line).
    """
    if num_procs < 1:
        raise ValueError(f"num_procs = {num_procs}: must be >= 1")
    if batch % num_procs:
        raise ValueError(
            f"{key} = {batch} is not divisible by the {num_procs} processes{where}; "
            f"use a multiple of {num_procs}"
        )
    return batch // num_procs
