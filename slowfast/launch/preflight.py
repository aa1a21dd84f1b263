"""Checks a run's set-up before any model is built or any process spawned.

Each problem a user can fix is one line, with the exit status the launcher
should use: 2 for the config or the machine (devices, batch divisibility), 1
for the data and the output folder (missing list files, an OUTPUT_DIR that
cannot be written, too little disk for a checkpoint).
"""

import os
import shutil
import uuid
from typing import TYPE_CHECKING, List, Optional

from fvcore.common.config import CfgNode

from slowfast.config.derived import per_process_batch
from slowfast.launch.launcher import Layout
from slowfast.multigrid import MultigridSchedule
from slowfast.utils.errors import EXIT_CONFIG, EXIT_FAILED, UserError

if TYPE_CHECKING:  # the engine (and torch) load only when a run resolves
    from slowfast.engine.builders import RunSetup

EXIT_DATA = EXIT_FAILED


class PreflightError(UserError):
    """A problem found before the run starts.

    Attributes:
        exit_status: ``EXIT_CONFIG`` (config, devices) or ``EXIT_DATA`` (data,
            output folder).
    """

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def splits_read(cfg: CfgNode) -> List[str]:
    """The splits a run reads: train and val when training, test when testing."""
    splits = ["train", "val"] if cfg.TRAIN.ENABLE else []
    return splits + (["test"] if cfg.TEST.ENABLE else [])


def check_devices(cfg: CfgNode, layout: Layout) -> None:
    """GPUs asked for must exist."""
    if cfg.NUM_GPUS <= 0:
        return
    import torch

    if not torch.cuda.is_available():
        raise PreflightError(
            f"NUM_GPUS = {cfg.NUM_GPUS} but this machine has no usable CUDA GPU "
            f"(torch {torch.__version__}); set NUM_GPUS 0 to run on CPU "
            "(NUM_CPU_PROCS processes)",
            EXIT_CONFIG,
        )
    count = torch.cuda.device_count()
    # Spawned processes share this process's GPUs; a launcher's tasks may
    # each see only their own.
    if layout.spawns and layout.procs_per_node > count:
        raise PreflightError(
            f"{layout.procs_per_node} GPU processes per machine (NUM_GPUS or the "
            f"launcher) but this machine has {count} GPU(s); set NUM_GPUS {count}",
            EXIT_CONFIG,
        )


def check_cuda_graphs(
    cfg: CfgNode, layout: Layout, schedule: Optional[MultigridSchedule]
) -> None:
    """CUDA graphs of the training step with several processes: BN statistics
    per process (the graphs hold no collective; the gradients are averaged
    after them, ``engine/flat_grads.py``)."""
    procs = layout.world_size
    if schedule is None or not (cfg.TRAIN.CUDA_GRAPHS and procs > 1):
        return
    where = f"TRAIN.CUDA_GRAPHS = True with {procs} processes needs BN statistics "
    where += "per process"
    if cfg.BN.NORM_TYPE == "sync_batchnorm":
        raise PreflightError(
            f"{where}, BN.NORM_TYPE sync_batchnorm syncs them; set BN.NORM_TYPE "
            "sub_batchnorm or TRAIN.CUDA_GRAPHS False",
            EXIT_CONFIG,
        )
    sync = max(schedule.bn_sync_size(e) for e in range(schedule.max_epoch))
    if sync > 1:
        raise PreflightError(
            f"{where}, this schedule syncs them over {sync} processes (fewer "
            f"than MULTIGRID.BN_BASE_SIZE = {cfg.MULTIGRID.BN_BASE_SIZE} clips per "
            "process at a shape); raise TRAIN.BATCH_SIZE, lower "
            "MULTIGRID.BN_BASE_SIZE or set TRAIN.CUDA_GRAPHS False",
            EXIT_CONFIG,
        )


def check_batch(cfg: CfgNode, layout: Layout) -> None:
    """The training batch divides among the processes of a machine."""
    if cfg.TRAIN.ENABLE:
        try:
            per_process_batch(
                cfg.TRAIN.BATCH_SIZE, layout.procs_per_node, where=" per machine"
            )
        except ValueError as err:
            raise PreflightError(str(err), EXIT_CONFIG) from err


def resolve_setup(cfg: CfgNode, layout: Layout) -> "RunSetup":
    """The model's description and, when training, the schedule, which must
    build and fit the model: LR stages, multigrid epochs, batch factors and
    BN splits. The job's stages get this one resolution (``RunSetup``)."""
    from slowfast.engine.builders import RunSetup

    try:
        return RunSetup.from_cfg(cfg, layout.world_size)
    except ValueError as err:
        raise PreflightError(str(err), EXIT_CONFIG) from err


def check_data(cfg: CfgNode) -> None:
    """The data folder and the annotation files of every split read exist."""
    from slowfast.datasets.build import check_data_dir, dataset_class, dataset_name

    try:
        check_data_dir(cfg)
    except FileNotFoundError as err:
        raise PreflightError(str(err), EXIT_DATA) from err
    for split in splits_read(cfg):
        name = dataset_name(cfg, split)
        for path in dataset_class(name).split_files(cfg, split):
            if not os.path.isfile(path):
                why = "testing (TEST.ENABLE)" if split == "test" else "training"
                raise PreflightError(
                    f"{path} not found: the {split} split of {name} reads it, "
                    f"needed for {why}; see DATASET.md for the files and folders",
                    EXIT_DATA,
                )


def check_checkpoint_files(cfg: CfgNode) -> None:
    """The checkpoint files a run is told to load exist.

    TEST.CHECKPOINT_FILE_PATH when testing; TRAIN.CHECKPOINT_FILE_PATH when
    training starts afresh (a run that resumes from OUTPUT_DIR does not read it).
    """
    from iopath.common.file_io import g_pathmgr

    from slowfast.checkpoint.files import list_checkpoints

    wanted = []
    if cfg.TEST.ENABLE and cfg.TEST.CHECKPOINT_FILE_PATH:
        wanted.append("TEST")
    resumes = cfg.TRAIN.AUTO_RESUME and list_checkpoints(cfg.OUTPUT_DIR)
    if cfg.TRAIN.ENABLE and cfg.TRAIN.CHECKPOINT_FILE_PATH and not resumes:
        wanted.append("TRAIN")
    for node in wanted:
        path = cfg[node].CHECKPOINT_FILE_PATH
        if not g_pathmgr.isfile(path):
            raise PreflightError(
                f"{node}.CHECKPOINT_FILE_PATH = {path!r}: no such file; give the "
                f"path of a checkpoint (.pyth, or .pkl with {node}.CHECKPOINT_TYPE "
                "caffe2)",
                EXIT_DATA,
            )


def checkpoint_bytes(cfg: CfgNode) -> int:
    """About the size of one training checkpoint: weights, buffers and SGD
    momentum in float32 (the model is built on the meta device: no memory)."""
    import torch

    from slowfast.models import build_model

    with torch.device("meta"):
        model = build_model(cfg)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for b in model.buffers())
    return 4 * (2 * params + buffers)


def check_output_dir(cfg: CfgNode) -> None:
    """OUTPUT_DIR can be written and holds room for a checkpoint being saved."""
    folder = cfg.OUTPUT_DIR
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".write_test.{uuid.uuid4().hex[:8]}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as err:
        raise PreflightError(
            f"OUTPUT_DIR = {folder!r} cannot be written ({err.strerror}); choose "
            "another OUTPUT_DIR",
            EXIT_DATA,
        ) from err
    if not cfg.TRAIN.ENABLE:
        return
    need = 2 * checkpoint_bytes(cfg)  # a temporary file, then the checkpoint
    free = shutil.disk_usage(folder).free
    if free < need:
        raise PreflightError(
            f"OUTPUT_DIR = {folder!r}: {free / 2**20:.0f} MiB free on its disk, a "
            f"checkpoint needs about {need / 2**21:.0f} MiB (twice that while it is "
            "written); free some space or choose another OUTPUT_DIR",
            EXIT_DATA,
        )


def preflight(cfg: CfgNode, layout: Layout) -> "RunSetup":
    """Runs every check; raises ``PreflightError`` at the first problem.

    Args:
        cfg: the run's config (with the launcher's layout applied).
        layout: the job's process layout.

    Returns:
        RunSetup: the model's description and the schedule, for the stages.
    """
    check_devices(cfg, layout)
    check_batch(cfg, layout)
    setup = resolve_setup(cfg, layout)
    check_cuda_graphs(cfg, layout, setup.schedule)
    check_checkpoint_files(cfg)
    check_data(cfg)
    if layout.spawns and layout.node_rank == 0 or layout.rank == 0:
        check_output_dir(cfg)
        check_resume(cfg)
    return setup


def preflight_submit(cfg: CfgNode, layout: Layout, write: bool = True) -> None:
    """The checks that hold on the machine that submits a cluster job.

    All of :func:`preflight`'s but the devices, which are the job's nodes'.
    Raises ``PreflightError`` at the first problem.

    Args:
        cfg: the job's config (with its layout applied).
        layout: the job's process layout.
        write: probe OUTPUT_DIR by writing to it (False for a dry run, which
            writes nothing).
    """
    check_batch(cfg, layout)
    setup = resolve_setup(cfg, layout)
    check_cuda_graphs(cfg, layout, setup.schedule)
    check_checkpoint_files(cfg)
    check_data(cfg)
    if write:
        check_output_dir(cfg)
    check_resume(cfg)


def check_resume(cfg: CfgNode) -> None:
    """The checkpoint a training run resumes from belongs to it and is whole."""
    if not (cfg.TRAIN.ENABLE and cfg.TRAIN.AUTO_RESUME):
        return
    from slowfast.checkpoint.files import CheckpointError
    from slowfast.engine.checkpointer import find_resume_checkpoint

    try:
        find_resume_checkpoint(cfg)
    except CheckpointError as err:
        raise PreflightError(str(err), EXIT_DATA) from err
