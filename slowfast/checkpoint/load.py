"""Reading and loading checkpoints in the reference (PySlowFast) format.

This module reads and loads them; names and listing live in ``files.py``,
writing in ``save.py``, Caffe2 ``.pkl`` reading in ``caffe2.py``: each is
imported by name from its own module.

A checkpoint is a dict saved with ``torch.save``::

    {"epoch": e, "model_state": ..., "optimizer_state": ..., "cfg": cfg.dump(),
     "scaler_state": ... (optional), **extras (optional, e.g. "rng_state")}

where ``e`` is the 0-based index of the epoch just finished; the file is
``OUTPUT_DIR/checkpoints/checkpoint_epoch_{e + 1:05d}.pyth`` (1-based names as
the reference). A mid-epoch checkpoint (written when a run is preempted, or
every TRAIN.CHECKPOINT_MINUTES) is ``checkpoint_epoch_{e + 2:05d}_iter_{i:06d}.pyth``
with an ``iteration_in_epoch`` entry ``i``: epoch ``e + 1`` had done ``i`` iterations
(its ``epoch`` entry is still the last finished epoch ``e``, so the reference
would redo that epoch). Saves are atomic (temporary file, fsync, rename), so an
interrupted save never leaves a truncated checkpoint behind. Loading is
strict: any missing key, unexpected key or shape mismatch fails with one
``CheckpointError`` line naming the file and the first offending keys; only
fine-tuning (``epoch_reset``) skips a classifier made for other classes.

Files are read with ``torch.load(weights_only=True)``: extras must be made of
tensors, numbers, strings, and lists, tuples or dicts of those.
"""

import logging
import pickle
import zipfile
from typing import Any, Dict, Iterable, Mapping, Optional

import torch
from iopath.common.file_io import g_pathmgr
from torch import nn

from slowfast.checkpoint.caffe2 import load_caffe2_checkpoint
from slowfast.checkpoint.files import (
    STATE_KEYS,
    CheckpointError,
    checkpoint_position,
    is_mid_epoch_checkpoint,
    list_checkpoints,
    unwrap_model,
)
from slowfast.checkpoint.fingerprint import state_checksum
from slowfast.checkpoint.inflate import (
    MAX_LISTED,
    describe_mismatch,
    inflate_state_dict,
    keep_model_classifier,
    normalize_keys,
)

logger = logging.getLogger(__name__)


def get_last_checkpoint(output_dir: str, epochs_only: bool = False) -> Optional[str]:
    """Returns the newest checkpoint that loads and passes its checks.

    Newer files that fail to load (truncated, corrupt) or their checks are
    skipped with a warning naming each of them. (Auto-resume also checks that
    the checkpoint is the run's own: ``engine/checkpointer.find_resume_checkpoint``.)

    Args:
        output_dir: the run's OUTPUT_DIR.
        epochs_only: skip checkpoints taken inside an epoch.

    Returns:
        str | None: the path, or None when no valid checkpoint exists.
    """
    for path in reversed(list_checkpoints(output_dir)):
        if epochs_only and is_mid_epoch_checkpoint(path):
            continue
        try:
            problem = checkpoint_problem(path, read_checkpoint(path))
        except CheckpointError as err:
            problem = str(err).split(": ", 1)[-1]
        if problem:
            logger.warning("Skipping unusable checkpoint %s: %s", path, problem)
            continue
        return path
    return None


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _why_unreadable(path: str, err: Exception) -> str:
    """What a ``torch.load`` failure means, in plain words."""
    try:
        with g_pathmgr.open(path, "rb") as f:
            whole = zipfile.is_zipfile(f)
    except OSError as read_err:
        return f"a read error ({read_err.strerror or read_err})"
    if not whole:
        return "truncated or damaged, or not a torch.save file"
    if "Weights only load failed" in str(err):
        return "it holds objects other than tensors and plain values"
    return f"damaged ({type(err).__name__})"


def read_checkpoint(path: str) -> Dict[str, Any]:
    """Reads a checkpoint file and checks that it is one.

    Args:
        path: the checkpoint file.

    Returns:
        dict: the checkpoint, tensors on the CPU.

    Raises:
        CheckpointError: the file is missing, unreadable (e.g. truncated) or
            not a checkpoint dict with a ``model_state``.
    """
    if not g_pathmgr.isfile(path):
        raise CheckpointError(f"{path}: checkpoint file not found")
    try:
        with g_pathmgr.open(path, "rb") as f:
            checkpoint = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointError(
            f"{path}: cannot be read: {_why_unreadable(path, err)}"
        ) from err
    if not isinstance(checkpoint, dict):
        raise CheckpointError(
            f"{path}: not a checkpoint (expected a dict, got "
            f"{type(checkpoint).__name__})"
        )
    if not isinstance(checkpoint.get("model_state"), Mapping):
        raise CheckpointError(
            f"{path}: not a checkpoint (no 'model_state' dict; entries: "
            f"{sorted(map(str, checkpoint))[:MAX_LISTED]})"
        )
    return checkpoint


def checkpoint_problem(path: str, checkpoint: Mapping[str, Any]) -> Optional[str]:
    """Why a read checkpoint cannot be trusted, in plain words, or None.

    Checks its states against its checksum (when it has one) and the epoch
    (and iteration) in its file name against those inside.
    """
    stored = checkpoint.get("checksum")
    if stored is not None:
        actual = state_checksum(*(checkpoint.get(key) for key in STATE_KEYS))
        if actual != stored:
            return (
                "its content does not match its checksum (damaged on disk or in a copy)"
            )
    position = checkpoint_position(path)
    if position is not None:
        epoch, it = position
        if it == float("inf"):
            inside = (int(checkpoint.get("epoch", -2)) + 1, float("inf"))
        else:
            inside = (
                int(checkpoint.get("epoch", -2)) + 2,
                int(checkpoint.get("iteration_in_epoch", -1)),
            )
        if inside != (epoch, it):
            return (
                f"its name says epoch {epoch}"
                + ("" if it == float("inf") else f" iteration {it}")
                + f" but it holds epoch {inside[0]}"
                + ("" if inside[1] == float("inf") else f" iteration {inside[1]}")
                + " (renamed or copied from elsewhere?)"
            )
    return None


def _target_module(model: nn.Module, data_parallel: bool) -> nn.Module:
    inner = unwrap_model(model)
    if data_parallel and inner is model:
        raise ValueError(
            f"data_parallel=True but the model is a {type(model).__name__}, "
            "not a DistributedDataParallel wrapper"
        )
    return inner


_KERNEL_FLAGS = ("foreach", "fused")  # optimizer implementation, per machine


def _load_aux_states(
    path: str,
    checkpoint: Mapping[str, Any],
    optimizer: Optional[torch.optim.Optimizer],
    scaler: Optional[Any],
) -> None:
    """Restores the optimizer and grad-scaler states when both sides have them."""
    if optimizer is not None:
        state = checkpoint.get("optimizer_state")
        if state is None:
            logger.warning(
                "%s has no optimizer state; the optimizer starts fresh", path
            )
        else:
            # Which kernel runs the update is this machine's choice, not the
            # checkpoint's (the saved groups carry the saving run's flags).
            kernels = [
                {k: g[k] for k in _KERNEL_FLAGS if k in g}
                for g in optimizer.param_groups
            ]
            try:
                optimizer.load_state_dict(state)
            except (ValueError, KeyError, RuntimeError) as err:
                raise CheckpointError(
                    f"{path}: optimizer state does not fit the optimizer: "
                    f"{_first_line(err)}"
                ) from err
            for group, flags in zip(optimizer.param_groups, kernels):
                group.update(flags)
    if scaler is not None and scaler.is_enabled():
        state = checkpoint.get("scaler_state")
        if not state:
            logger.warning("%s has no grad-scaler state; the scaler starts fresh", path)
        else:
            scaler.load_state_dict(state)


def load_checkpoint(
    path: str,
    model: nn.Module,
    data_parallel: bool = False,
    optimizer: Optional[torch.optim.Optimizer] = None,
    scaler: Optional[Any] = None,
    inflation: bool = False,
    convert_from_caffe2: bool = False,
    epoch_reset: bool = False,
    clear_name_pattern: Iterable[str] = (),
) -> Dict[str, Any]:
    """Loads a checkpoint into a model (and optimizer and scaler), strictly.

    Args:
        path: the checkpoint file.
        model: the model to fill (bare or DDP-wrapped).
        data_parallel: the model is DDP-wrapped; the state goes into
            ``model.module`` (wrappers are also unwrapped when False).
        optimizer: restored from ``optimizer_state`` unless ``epoch_reset``.
        scaler: a ``torch.amp.GradScaler`` restored from ``scaler_state``
            unless ``epoch_reset``.
        inflation: inflate 2D kernels of the checkpoint into the model's 3D
            kernels (TRAIN.CHECKPOINT_INFLATE).
        convert_from_caffe2: ``path`` is a Caffe2 ``.pkl`` of the reference's
            model zoo (``checkpoint/caffe2.py``): its weights are loaded, as
            strictly as a ``.pyth``'s (with ``epoch_reset``, another dataset's
            classifier is left out), and training starts at epoch 0.
        epoch_reset: load the weights only and report epoch -1, so training
            starts at epoch 0 (TRAIN.CHECKPOINT_EPOCH_RESET); a classifier of
            another shape (another dataset's classes) keeps the model's
            initialisation, with a warning. Everything else loads strictly.
        clear_name_pattern: substrings removed from checkpoint keys
            (TRAIN.CHECKPOINT_CLEAR_NAME_PATTERN); leading ``module.`` prefixes
            are always removed.

    Returns:
        dict: the checkpoint without its states: ``epoch`` (0-based epoch
        finished, -1 with ``epoch_reset``), ``cfg`` and any extras (extras
        are dropped with ``epoch_reset``). Training resumes at ``epoch + 1``.

    Raises:
        CheckpointError: missing, unreadable or non-checkpoint file, or a
            checkpoint that does not match the model or optimizer.
    """
    target = _target_module(model, data_parallel)
    if convert_from_caffe2:
        if not g_pathmgr.isfile(path):
            raise CheckpointError(f"{path}: checkpoint file not found")
        try:
            mismatch = load_caffe2_checkpoint(path, target, new_classifier=epoch_reset)
        except (pickle.UnpicklingError, ValueError, EOFError) as err:
            raise CheckpointError(
                f"{path}: not a Caffe2 checkpoint: {_first_line(err)}"
            ) from err
        if mismatch:
            raise CheckpointError(
                f"{path}: Caffe2 checkpoint does not match the model; {mismatch}"
            )
        return {"epoch": -1, "cfg": None}  # weights only: training starts at 0
    checkpoint = read_checkpoint(path)
    try:
        state = normalize_keys(checkpoint["model_state"], clear_name_pattern)
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from err
    model_state = target.state_dict()
    if inflation:
        state, _ = inflate_state_dict(state, model_state)
    # Fine-tuning: another dataset's classifier starts afresh.
    kept = keep_model_classifier(state, model_state) if epoch_reset else []
    mismatch = describe_mismatch(state, model_state, inflation)
    if mismatch:
        raise CheckpointError(
            f"{path}: checkpoint does not match the model; {mismatch}"
        )
    for key in kept:
        logger.warning("%s: classifier left as initialised (%s)", path, key)
    try:
        target.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{path}: {_first_line(err)}") from err

    if epoch_reset:
        logger.info("Loaded weights from %s (epoch reset)", path)
        return {"epoch": -1, "cfg": checkpoint.get("cfg")}
    _load_aux_states(path, checkpoint, optimizer, scaler)
    info = {k: v for k, v in checkpoint.items() if k not in STATE_KEYS}
    if "epoch" not in info:
        logger.warning("%s has no epoch entry; treating it as before epoch 1", path)
        info["epoch"] = -1
    done = f"after epoch {info['epoch'] + 1}"
    if info.get("iteration_in_epoch"):
        done += f" and {int(info['iteration_in_epoch'])} iterations of the next"
    logger.info("Loaded checkpoint %s (%s)", path, done)
    return info


def checkpoint_epoch(info: Mapping[str, Any]) -> int:
    """Returns the 0-based epoch finished, from ``load_checkpoint``'s result.

    Args:
        info: the dict returned by ``load_checkpoint``.

    Returns:
        int: the epoch index (-1: start from epoch 0).
    """
    return int(info["epoch"])
