"""Checkpoint files in OUTPUT_DIR/checkpoints: naming, listing, pruning, moving aside.

``checkpoint_epoch_{e:05d}.pyth`` holds the run after epoch ``e`` (1-based, as
the reference names them); ``checkpoint_epoch_{e:05d}_iter_{i:06d}.pyth`` one
taken inside epoch ``e`` after ``i`` of its iterations (preemption, timed
checkpoints). Lists sort mid-epoch checkpoints inside their epoch.
"""

import os
import re
import time
from typing import List, Optional, Tuple

from iopath.common.file_io import g_pathmgr
from torch import nn

from slowfast.utils.errors import UserError

CHECKPOINT_SUBDIR = "checkpoints"
_NAME_FORMAT = "checkpoint_epoch_{:05d}.pyth"
_MID_EPOCH_FORMAT = "checkpoint_epoch_{:05d}_iter_{:06d}.pyth"
_NAME_RE = re.compile(r"^checkpoint_epoch_(\d+)(?:_iter_(\d+))?\.pyth$")


STATE_KEYS = ("model_state", "optimizer_state", "scaler_state")
RESERVED_KEYS: Tuple[str, ...] = (
    "epoch",
    "cfg",
    "iteration_in_epoch",
    "fingerprint",
    "checksum",
)
RESERVED_KEYS += STATE_KEYS


class CheckpointError(UserError, RuntimeError):
    """A checkpoint is missing, unreadable or does not fit; the message is one line."""


def unwrap_model(model: nn.Module) -> nn.Module:
    """Returns the module inside a (Distributed)DataParallel wrapper, else ``model``."""
    wrappers = (nn.parallel.DistributedDataParallel, nn.DataParallel)
    return model.module if isinstance(model, wrappers) else model


def get_checkpoint_dir(output_dir: str) -> str:
    """Returns the folder holding a run's checkpoints.

    Args:
        output_dir: the run's OUTPUT_DIR.

    Returns:
        str: ``output_dir/checkpoints``.
    """
    return os.path.join(output_dir, CHECKPOINT_SUBDIR)


def get_path_to_checkpoint(output_dir: str, epoch: int) -> str:
    """Returns the path of the checkpoint with 1-based number ``epoch``.

    Args:
        output_dir: the run's OUTPUT_DIR.
        epoch: 1-based epoch number in the file name (finished epochs).

    Returns:
        str: ``output_dir/checkpoints/checkpoint_epoch_{epoch:05d}.pyth``.
    """
    return os.path.join(get_checkpoint_dir(output_dir), _NAME_FORMAT.format(epoch))


def get_path_to_mid_epoch_checkpoint(output_dir: str, epoch: int, it: int) -> str:
    """Returns the path of a checkpoint taken inside an epoch.

    Args:
        output_dir: the run's OUTPUT_DIR.
        epoch: 1-based number of the epoch in progress.
        it: iterations of that epoch done.

    Returns:
        str: ``output_dir/checkpoints/checkpoint_epoch_{epoch:05d}_iter_{it:06d}.pyth``.
    """
    name = _MID_EPOCH_FORMAT.format(epoch, it)
    return os.path.join(get_checkpoint_dir(output_dir), name)


def checkpoint_position(path: str) -> Optional[tuple]:
    """Where a checkpoint file's name puts it: ``(epoch, iteration)``.

    An epoch checkpoint ``checkpoint_epoch_00003.pyth`` is ``(3, inf)`` (epoch
    3 finished); a mid-epoch one ``..._00004_iter_000120.pyth`` is
    ``(4, 120)``. Other names give None.
    """
    match = _NAME_RE.match(os.path.basename(path))
    if not match:
        return None
    it = match.group(2)
    return int(match.group(1)), float("inf") if it is None else int(it)


def epochs_done(path: str) -> Optional[int]:
    """Epochs a checkpoint file's name says are finished: 3 for
    ``checkpoint_epoch_00003.pyth`` and ``..._00004_iter_000120.pyth``; None
    for other names."""
    position = checkpoint_position(path)
    if position is None:
        return None
    epoch, iteration = position
    return epoch if iteration == float("inf") else epoch - 1


def is_mid_epoch_checkpoint(path: str) -> bool:
    """Whether ``path`` is named as a checkpoint taken inside an epoch."""
    position = checkpoint_position(path)
    return position is not None and position[1] != float("inf")


def list_checkpoints(output_dir: str) -> List[str]:
    """Lists a run's checkpoint files, oldest first (temporary files excluded).

    Mid-epoch checkpoints sort inside their epoch: ``..._00004_iter_000120``
    comes after ``checkpoint_epoch_00003`` and before ``checkpoint_epoch_00004``.

    Args:
        output_dir: the run's OUTPUT_DIR.

    Returns:
        list[str]: paths sorted by position; empty when there are none.
    """
    folder = get_checkpoint_dir(output_dir)
    if not g_pathmgr.isdir(folder):
        return []
    numbered = []
    for name in g_pathmgr.ls(folder):
        position = checkpoint_position(name)
        if position is not None:
            numbered.append((position, name))
    return [os.path.join(folder, name) for _, name in sorted(numbered)]


def prune_mid_epoch_checkpoints(
    output_dir: str, keep: Optional[str] = None
) -> List[str]:
    """Removes the mid-epoch checkpoints older than ``keep`` (rank 0, after a save).

    Epoch checkpoints are never removed, nor is ``keep`` (the checkpoint just
    written); mid-epoch checkpoints positioned after it (left by an earlier
    attempt that got further) are kept too. Without ``keep``, every mid-epoch
    checkpoint but the newest one of the run is removed.

    Returns:
        list[str]: the removed paths.
    """
    paths = list_checkpoints(output_dir)
    if keep is None:
        keep = paths[-1] if paths else None
    limit = checkpoint_position(keep) if keep else None

    def older(path: str) -> bool:
        position = checkpoint_position(path)
        assert position is not None  # a mid-epoch checkpoint's name
        return limit is None or position < limit

    removed = [
        p
        for p in paths
        if is_mid_epoch_checkpoint(p)
        and os.path.basename(p) != os.path.basename(keep or "")
        and older(p)
    ]
    for path in removed:
        g_pathmgr.rm(path)
    return removed


def has_checkpoint(output_dir: str) -> bool:
    """Returns True when the run's checkpoint folder holds a checkpoint file.

    Only file names are checked; ``get_last_checkpoint`` may still find none
    valid.

    Args:
        output_dir: the run's OUTPUT_DIR.
    """
    return len(list_checkpoints(output_dir)) > 0


def move_aside(path: str, tag: str) -> str:
    """Renames ``path`` to ``<path>.<tag>-<time>`` (``-1``, ``-2``, ... when
    that name is taken), keeping what it holds out of a run that starts over.

    Args:
        path: a file or folder.
        tag: what the new name says of it (``before``, ``stale``).

    Returns:
        str: the new path.

    Raises:
        OSError: the rename failed (iopath's ``mv`` would only log it).
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside, n = f"{path}.{tag}-{stamp}", 1
    while os.path.exists(aside):
        aside, n = f"{path}.{tag}-{stamp}-{n}", n + 1
    os.rename(path, aside)
    return aside
