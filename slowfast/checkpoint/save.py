"""Writing checkpoints: atomically, with the run's fingerprint and a checksum."""

import errno
import logging
import os
import shutil
import uuid
from typing import Any, Dict, Optional

import torch
from fvcore.common.config import CfgNode
from iopath.common.file_io import g_pathmgr
from torch import nn

from slowfast.checkpoint.files import (
    RESERVED_KEYS,
    STATE_KEYS,
    CheckpointError,
    get_path_to_checkpoint,
    get_path_to_mid_epoch_checkpoint,
    unwrap_model,
)
from slowfast.checkpoint.fingerprint import fingerprint, state_checksum

logger = logging.getLogger(__name__)


def atomic_save(obj: Any, path: str) -> None:
    """Saves ``obj`` to ``path`` so that ``path`` is either complete or absent."""
    folder, name = os.path.split(path)
    g_pathmgr.mkdirs(folder)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    local = "://" not in path
    try:
        with g_pathmgr.open(tmp, "wb") as f:
            torch.save(obj, f)
            if local:
                f.flush()
                os.fsync(f.fileno())
        if local:
            os.replace(tmp, path)
            _fsync_dir(folder)
        else:
            g_pathmgr.mv(tmp, path)
    except BaseException as err:
        if g_pathmgr.exists(tmp):
            g_pathmgr.rm(tmp)
        if local and isinstance(err, (OSError, RuntimeError)):
            free = shutil.disk_usage(folder).free
            if free < 64 * 2**20 or getattr(err, "errno", None) == errno.ENOSPC:
                mib = free / 2**20
                raise CheckpointError(
                    f"{path}: could not be written, the disk is full ({mib:.0f} MiB "
                    "free); free some space and run the same command (a run "
                    "resumes from its previous checkpoint)"
                ) from err
        raise


def _fsync_dir(folder: str) -> None:
    """Makes a rename in ``folder`` durable (POSIX; a no-op elsewhere)."""
    if hasattr(os, "O_DIRECTORY"):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_PLAIN_TYPES = (int, float, bool, str, type(None))


def _check_loadable(value: Any, key: str) -> None:
    """Raises ValueError unless ``value`` survives ``torch.load(weights_only=True)``."""
    if isinstance(value, torch.Tensor) or type(value) in _PLAIN_TYPES:
        return
    if type(value) in (list, tuple, dict):
        items = [*value.keys(), *value.values()] if type(value) is dict else value
        for item in items:
            _check_loadable(item, key)
        return
    raise ValueError(
        f"extra checkpoint entry {key!r} holds a {type(value).__name__}; use "
        "tensors, Python numbers, strings, and lists, tuples or dicts of those "
        "(e.g. numpy_state.tolist())"
    )


def save_checkpoint(
    output_dir: str,
    model: nn.Module,
    optimizer: Optional[torch.optim.Optimizer],
    epoch: int,
    cfg: CfgNode,
    scaler: Optional[Any] = None,
    extra: Optional[Dict[str, Any]] = None,
    iteration: Optional[int] = None,
) -> str:
    """Atomically saves a checkpoint after the 0-based epoch ``epoch``.

    Call it on one process only (rank 0). A (Distributed)DataParallel model is
    unwrapped, so keys never carry a ``module.`` prefix.

    Args:
        output_dir: the run's OUTPUT_DIR.
        model: the model (wrapped or not).
        optimizer: its optimizer (None: no optimizer state is stored).
        epoch: 0-based index of the epoch just finished; the file is named
            ``epoch + 1``.
        cfg: the run's config, stored as its YAML dump.
        scaler: a ``torch.amp.GradScaler`` whose state is stored, or None.
        extra: more entries (e.g. ``rng_state``, ``schedule_state``) made of
            tensors, Python numbers, strings and lists, tuples or dicts of
            those; they may not reuse reserved keys.
        iteration: save a mid-epoch checkpoint: ``iteration`` iterations of
            epoch ``epoch + 1`` are done (stored as ``iteration_in_epoch``).

    Returns:
        str: the path written.

    Raises:
        ValueError: an extra entry reuses a reserved key or holds another type
            (it would not load back with ``weights_only=True``).
    """
    extra = dict(extra or {})
    clash = sorted(set(extra) & set(RESERVED_KEYS))
    if clash:
        raise ValueError(f"extra checkpoint entries {clash} reuse reserved keys")
    for key, value in extra.items():
        _check_loadable(value, key)
    checkpoint: Dict[str, Any] = {
        "epoch": epoch,
        "model_state": unwrap_model(model).state_dict(),
        "cfg": cfg.dump(),
    }
    if optimizer is not None:
        checkpoint["optimizer_state"] = optimizer.state_dict()
    if scaler is not None:
        checkpoint["scaler_state"] = scaler.state_dict()
    checkpoint.update(extra)
    checkpoint["fingerprint"] = fingerprint(cfg)
    checkpoint["checksum"] = state_checksum(
        *(checkpoint.get(key) for key in STATE_KEYS)
    )
    if iteration is None:
        path = get_path_to_checkpoint(output_dir, epoch + 1)
    else:
        checkpoint["iteration_in_epoch"] = int(iteration)
        path = get_path_to_mid_epoch_checkpoint(output_dir, epoch + 2, iteration)
    atomic_save(checkpoint, path)
    logger.info("Saved checkpoint %s", path)
    return path


def save_weights(path: str, model: nn.Module, cfg: CfgNode) -> str:
    """Atomically saves a model's weights as a checkpoint to initialise from.

    The file is a checkpoint of epoch -1 (a run initialised from it starts at
    epoch 0) with the config, run fingerprint and checksum; no optimizer.

    Returns:
        str: ``path``.
    """
    state = unwrap_model(model).state_dict()
    atomic_save(
        {
            "epoch": -1,
            "model_state": state,
            "cfg": cfg.dump(),
            "fingerprint": fingerprint(cfg),
            "checksum": state_checksum(state, None, None),
        },
        path,
    )
    return path
