"""The run's checkpoints, one owner: where a run starts and what it saves.

``Checkpointer`` resumes a run from the newest checkpoint of OUTPUT_DIR (or
initialises it from TRAIN.CHECKPOINT_FILE_PATH) and saves its checkpoints:
model, optimizer, scaler, every process's RNG states (captured here) and the
hooks' states the loop hands it. ``find_resume_checkpoint`` is also the
preflight check of a resume.
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import torch
from fvcore.common.config import CfgNode
from torch import nn

from slowfast.checkpoint import fingerprint as fp
from slowfast.checkpoint.files import (
    CheckpointError,
    get_checkpoint_dir,
    list_checkpoints,
    move_aside,
    prune_mid_epoch_checkpoints,
)
from slowfast.checkpoint.load import (
    checkpoint_problem,
    load_checkpoint,
    read_checkpoint,
)
from slowfast.checkpoint.save import save_checkpoint
from slowfast.utils import distributed as du
from slowfast.utils import rng
from slowfast.utils.logging import log_json_stats

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResumePoint:
    """Where a run continues.

    Attributes:
        epoch: index of the first epoch to train.
        iteration: iterations of that epoch already done (a mid-epoch
            checkpoint), else 0.
        hook_states: the hooks' states saved with the checkpoint (class name
            -> state; empty when starting afresh or initialising from another run).
    """

    epoch: int = 0
    iteration: int = 0
    hook_states: dict = field(default_factory=dict)


def find_resume_checkpoint(cfg: CfgNode) -> Optional[str]:
    """The checkpoint of OUTPUT_DIR a run resumes from, checked; None: none yet.

    From the newest: a checkpoint that cannot be read, fails its checksum or
    holds another epoch than its name says is skipped with a warning naming
    it and why. The first good one must belong to this run: its stored
    config must define the same run as ``cfg`` (``checkpoint/fingerprint.py``).

    Raises:
        CheckpointError: one line: the checkpoint is another run's (naming
            the keys that differ), or checkpoints exist and none is usable.
    """
    paths = list_checkpoints(cfg.OUTPUT_DIR)
    skipped = []
    for path in reversed(paths):
        try:
            checkpoint = read_checkpoint(path)
            problem = checkpoint_problem(path, checkpoint)
        except CheckpointError as err:
            problem = str(err).split(": cannot be read: ", 1)[-1]
        if problem:
            logger.warning("skipping checkpoint %s: %s", path, problem)
            skipped.append(f"{os.path.basename(path)}: {problem}")
            continue
        if "fingerprint" not in checkpoint:
            logger.warning(
                "%s has no run fingerprint (an older version wrote it); resuming "
                "without checking that it belongs to this run",
                path,
            )
            return path
        stored = fp.cfg_from_dump(checkpoint.get("cfg", ""))
        diffs = fp.differences(cfg, stored)
        # The stored config decides; without one, the hash does.
        if diffs or (not stored and checkpoint["fingerprint"] != fp.fingerprint(cfg)):
            raise CheckpointError(
                f"{path} belongs to another run (fingerprint "
                f"{checkpoint['fingerprint']}, this run's {fp.fingerprint(cfg)}: "
                f"{fp.describe_differences(diffs) or 'its config differs'}); "
                "choose another OUTPUT_DIR, or set TRAIN.CHECKPOINT_FILE_PATH "
                "to start from its weights in a new OUTPUT_DIR"
            )
        return path
    if skipped:
        raise CheckpointError(
            f"{cfg.OUTPUT_DIR}/checkpoints holds {len(paths)} checkpoint(s) and "
            f"none is usable ({'; '.join(skipped[:2])}); move them away to start "
            "over, or set TRAIN.AUTO_RESUME False to start over (they are moved "
            "aside)"
        )
    return None


def set_aside_checkpoints(output_dir: str) -> Optional[str]:
    """Moves the checkpoints of an earlier attempt out of a run that starts over.

    With TRAIN.AUTO_RESUME False a run trains from its start; checkpoints left
    in OUTPUT_DIR would otherwise stay beside its own (the tester and a later
    resume take the newest epoch, which may be the earlier attempt's).

    Args:
        output_dir: the run's OUTPUT_DIR.

    Returns:
        str | None: the folder they are in now
        (``checkpoints.before-<time>``); None when there were none.

    Raises:
        CheckpointError: the folder cannot be moved (one line).
    """
    paths = list_checkpoints(output_dir)
    if not paths:
        return None
    folder = get_checkpoint_dir(output_dir)
    try:
        aside = move_aside(folder, "before")
    except OSError as err:
        raise CheckpointError(
            f"TRAIN.AUTO_RESUME False: cannot move {folder} aside to start over "
            f"({err.strerror}); move it away yourself"
        ) from err
    logger.warning(
        "TRAIN.AUTO_RESUME False: this run starts over; the %d checkpoint(s) "
        "already in %s are moved to %s",
        len(paths),
        folder,
        aside,
    )
    return aside


class Checkpointer:
    """Resumes a run and saves its checkpoints (the reference's format).

    Args:
        cfg: the run's frozen config (stored in each checkpoint, with its
            fingerprint; OUTPUT_DIR is where checkpoints go; TRAIN.AUTO_RESUME
            and TRAIN.CHECKPOINT_* say where a run starts).
        ctx: this process's run context.
        model: the model (DDP-wrapped with several processes).
        optimizer: the optimizer.
        scaler: the GradScaler, or None.
    """

    def __init__(
        self,
        cfg: CfgNode,
        ctx: du.RunContext,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler: Optional[object],
    ):
        self.cfg, self.ctx, self.model = cfg, ctx, model
        self.optimizer, self.scaler = optimizer, scaler

    def resume_or_init(self) -> ResumePoint:
        """Loads the state the run continues from; returns where it continues.

        With TRAIN.AUTO_RESUME the newest valid checkpoint of OUTPUT_DIR
        restores model, optimizer, scaler and this process's RNG states;
        without it, OUTPUT_DIR's checkpoints are moved aside
        (``set_aside_checkpoints``). With no checkpoint to resume from,
        TRAIN.CHECKPOINT_FILE_PATH, when set, initialises the model (and,
        unless TRAIN.CHECKPOINT_EPOCH_RESET, a Caffe2 checkpoint, which holds
        weights only, or TRAIN.CHECKPOINT_INFLATE, the optimizer and the
        epoch, and the iteration of a mid-epoch checkpoint), as the reference
        does.

        Returns:
            ResumePoint: the first epoch (and iteration inside it) to train.
        """
        cfg, ctx = self.cfg, self.ctx
        init = cfg.TRAIN.CHECKPOINT_FILE_PATH
        if cfg.TRAIN.AUTO_RESUME:  # rank 0 chooses: a read error on one process
            # must not make it resume from another point than the others
            path = du.decided_on_master(
                ctx.is_master,
                lambda: find_resume_checkpoint(cfg),
                (CheckpointError,),
            )
            if path is not None:
                return self._resume(path)
        else:
            aside = du.decided_on_master(
                ctx.is_master,
                lambda: set_aside_checkpoints(cfg.OUTPUT_DIR),
                (CheckpointError,),
            )
            init = _moved(init, get_checkpoint_dir(cfg.OUTPUT_DIR), aside)
        return self._init_from(init) if init else ResumePoint()

    def _resume(self, path: str) -> ResumePoint:
        """Continues the run from its own checkpoint ``path``."""
        info = load_checkpoint(
            path,
            self.model,
            data_parallel=self.ctx.distributed,
            optimizer=self.optimizer,
            scaler=self.scaler,
        )
        states = info.get("rng_state")
        if states:
            rng.set_rng_state(states[self.ctx.rank % len(states)])
        iteration = int(info.get("iteration_in_epoch", 0))
        logger.info("resumed from %s (%s)", path, _done(info["epoch"], iteration))
        # Marks where the replayed epochs' lines start in json_stats.log.
        line = {"_type": "resume", "checkpoint": path, "epoch": info["epoch"] + 1}
        if iteration:
            line["iteration_in_epoch"] = iteration
        log_json_stats(line, self.cfg.OUTPUT_DIR, self.ctx.rank)
        return ResumePoint(info["epoch"] + 1, iteration, info.get("hook_states") or {})

    def _init_from(self, path: str) -> ResumePoint:
        """Starts from TRAIN.CHECKPOINT_FILE_PATH (``path``, where it is now)."""
        train = self.cfg.TRAIN
        # A Caffe2 checkpoint holds weights only, and 2D weights inflated into
        # 3D kernels start another model (their optimizer state cannot fit it):
        # both always start a fine-tuning.
        caffe2 = train.CHECKPOINT_TYPE == "caffe2"
        reset = train.CHECKPOINT_EPOCH_RESET or caffe2 or train.CHECKPOINT_INFLATE
        info = load_checkpoint(
            path,
            self.model,
            data_parallel=self.ctx.distributed,
            optimizer=None if reset else self.optimizer,
            scaler=None if reset else self.scaler,
            inflation=train.CHECKPOINT_INFLATE,
            convert_from_caffe2=caffe2,
            epoch_reset=reset,
            clear_name_pattern=train.CHECKPOINT_CLEAR_NAME_PATTERN,
        )
        if reset:
            logger.info("initialised from %s (weights only)", path)
            return ResumePoint()
        # A mid-epoch checkpoint continues inside its epoch, as a resume does.
        iteration = int(info.get("iteration_in_epoch", 0))
        logger.info("initialised from %s (%s)", path, _done(info["epoch"], iteration))
        return ResumePoint(info["epoch"] + 1, iteration)

    def save(
        self,
        epoch: int,
        hook_states: Optional[dict] = None,
        iteration: Optional[int] = None,
    ) -> Optional[str]:
        """Saves a checkpoint (collective; rank 0 writes, all wait for it).

        Every process's RNG states are captured now and gathered, so that
        each resumes its own. After the save, mid-epoch checkpoints older
        than the newest checkpoint are removed.

        Args:
            epoch: index of the finished epoch.
            hook_states: the hooks' states (rank 0's), by hook class name.
            iteration: a mid-epoch checkpoint: iterations of epoch ``epoch + 1``
                done (``epoch`` is then the last finished epoch).

        Returns:
            str | None: the path written (None on the other processes).
        """
        extra: Dict[str, Any] = {
            "rng_state": du.all_gather_objects(rng.get_rng_state())
        }
        if hook_states:
            extra["hook_states"] = hook_states
        path = None
        if self.ctx.is_master:
            output_dir = self.cfg.OUTPUT_DIR
            path = save_checkpoint(
                output_dir,
                self.model,
                self.optimizer,
                epoch,
                self.cfg,
                scaler=self.scaler,
                extra=extra,
                iteration=iteration,
            )
            for old in prune_mid_epoch_checkpoints(output_dir, keep=path):
                logger.info("removed the older mid-epoch checkpoint %s", old)
        du.barrier()
        return path


def _moved(path: str, folder: str, aside: Optional[str]) -> str:
    """``path`` where ``set_aside_checkpoints`` moved it (when ``folder`` held it)."""
    if not (path and aside):
        return path
    inside = os.path.relpath(os.path.realpath(path), os.path.realpath(folder))
    if inside.startswith(os.pardir):
        return path
    return os.path.join(aside, inside)


def _done(epoch: int, iteration: int) -> str:
    """``epoch 3 done`` or ``epoch 4, iteration 120 done`` (1-based epochs);
    ``weights only`` for a checkpoint without an epoch (-1: converted weights)."""
    if epoch < 0:
        return "weights only"
    if iteration:
        return f"epoch {epoch + 2}, iteration {iteration} done"
    return f"epoch {epoch + 1} done"
