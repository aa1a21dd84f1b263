"""Multi-view testing of a trained model."""

import logging
import os
import pickle
import zipfile
from typing import Optional, cast

import simplejson
import torch
from fvcore.common.config import CfgNode
from torch.utils.data import DataLoader

from slowfast.checkpoint.files import CheckpointError, epochs_done
from slowfast.checkpoint.fingerprint import test_settings
from slowfast.checkpoint.load import get_last_checkpoint, load_checkpoint
from slowfast.checkpoint.save import atomic_save
from slowfast.datasets import construct_loader, shutdown_workers
from slowfast.engine import precision
from slowfast.engine.builders import RunSetup
from slowfast.engine.evaluator import Evaluator, ViewDataset
from slowfast.engine.metrics import chance_map
from slowfast.engine.run_state import (
    RUN_STATE_FILE,
    RunStateError,
    RunStateRecorder,
    file_identity,
    read_run_state,
)
from slowfast.models import build_model
from slowfast.models.describe import ModelInfo, describe_model
from slowfast.models.memory_format import choose_channels_last
from slowfast.utils import rng
from slowfast.utils.distributed import RunContext, decided_on_master
from slowfast.utils.logging import format_json_stats, log_json_stats, setup_logging

logger = logging.getLogger(__name__)

# The results a rerun prints from run_state.json.
SHOWN = ("map", "num_videos", "top1_err", "top5_err", "views_per_video")


def _checkpoint_to_test(cfg: CfgNode) -> str:
    """TEST.CHECKPOINT_FILE_PATH, else the newest good epoch checkpoint of
    OUTPUT_DIR (a mid-epoch one only when there is no other, with a warning)."""
    if cfg.TEST.CHECKPOINT_FILE_PATH:
        return cfg.TEST.CHECKPOINT_FILE_PATH
    path = get_last_checkpoint(cfg.OUTPUT_DIR, epochs_only=True)
    if path is None:
        path = get_last_checkpoint(cfg.OUTPUT_DIR)
        if path is not None:
            logger.warning(
                "testing %s, taken inside an epoch (no epoch checkpoint)", path
            )
    if path is None:
        raise CheckpointError(
            f"TEST.CHECKPOINT_FILE_PATH is empty and OUTPUT_DIR = "
            f"{cfg.OUTPUT_DIR!r} holds no checkpoint to test"
        )
    return path


def test(
    cfg: CfgNode,
    rank: int = 0,
    world_size: int = 1,
    setup: Optional[RunSetup] = None,
) -> dict:
    """Tests with NUM_ENSEMBLE_VIEWS x NUM_SPATIAL_CROPS views per video.

    Per-video scores and labels are saved to OUTPUT_DIR/TEST.SAVE_RESULTS_PATH.
    A checkpoint already tested with these settings (run_state.json) is not
    tested again unless TEST.RERUN: its results are returned.

    Args:
        cfg: the frozen config.
        rank: global rank.
        world_size: number of processes.
        setup: what the launcher's checks resolved (the model's
            description); None: resolved here.

    Returns:
        The metrics: top1_err/top5_err (percent) or map, and view counts.
    """
    setup_logging(cfg.OUTPUT_DIR, rank)
    info = setup.model if setup is not None else describe_model(cfg)
    rng.seed_everything(cfg.RNG_SEED)
    ctx = RunContext.create(cfg, rank, world_size)
    path = decided_on_master(
        ctx.is_master, lambda: _checkpoint_to_test(cfg), (CheckpointError,)
    )
    done = _earlier_result(cfg, ctx, path)
    if done is not None:
        return done
    model = _load_model(cfg, info, path, ctx.device)
    loader = _build_test_loader(cfg, ctx, info, path)
    autocast = precision.autocast_factory(cfg, ctx.device)
    evaluator = Evaluator.from_cfg(cfg, model, loader, ctx.device, autocast)
    metrics, scores, labels = evaluator.run()
    shutdown_workers(loader)
    _log_result(metrics, labels, cfg.MODEL.NUM_CLASSES)
    if ctx.is_master and cfg.TEST.SAVE_RESULTS_PATH:
        _save_results(cfg, path, loader.dataset, scores, labels)
    # Recorded last: a test recorded as done has its scores on disk.
    _record_result(cfg, ctx, path, metrics)
    if ctx.is_master and cfg.TENSORBOARD.ENABLE:
        _write_test_scalars(cfg, metrics, path)
    return metrics


def _earlier_result(cfg: CfgNode, ctx: RunContext, path: str) -> Optional[dict]:
    """The recorded test of ``path`` with this config's settings, logged as
    such (every process gets rank 0's answer); None: test it (or TEST.RERUN)."""

    def find() -> Optional[dict]:
        if cfg.TEST.RERUN:
            return None
        state = read_run_state(cfg.OUTPUT_DIR)
        return state.find_test(path, test_settings(cfg))

    done = decided_on_master(ctx.is_master, find, (RunStateError,))
    if done is not None:
        logger.info(
            "%s is already tested with these settings (%s): %s; set "
            "TEST.RERUN True to test it again",
            path,
            RUN_STATE_FILE,
            ", ".join(f"{k} {v}" for k, v in sorted(done.items()) if k in SHOWN),
        )
    return done


def _load_model(
    cfg: CfgNode, info: ModelInfo, path: str, device: torch.device
) -> torch.nn.Module:
    """The model on ``device`` with the weights of checkpoint ``path``."""
    model = build_model(cfg, choose_channels_last(cfg, info)).to(device)
    # TEST.CHECKPOINT_TYPE is the type of TEST.CHECKPOINT_FILE_PATH; the run's
    # own checkpoints are .pyth files whatever it says, as in the reference.
    caffe2 = cfg.TEST.CHECKPOINT_TYPE == "caffe2"
    load_checkpoint(
        path,
        model,
        convert_from_caffe2=caffe2 and path == cfg.TEST.CHECKPOINT_FILE_PATH,
    )
    return model


def _build_test_loader(
    cfg: CfgNode, ctx: RunContext, info: ModelInfo, path: str
) -> DataLoader:
    """This process's shard of the test views (logged with the checkpoint)."""
    loader = construct_loader(
        cfg, "test", num_procs=ctx.world_size, rank=ctx.rank, model=info
    )
    dataset = cast(ViewDataset, loader.dataset)
    logger.info(
        "testing %s on %d views (%d videos)",
        path,
        len(dataset),
        dataset.num_videos,
    )
    return loader


def _record_result(cfg: CfgNode, ctx: RunContext, path: str, metrics: dict) -> None:
    """The ``test_final`` line in json_stats.log and the test in run_state.json,
    with the checkpoint's identity and the test settings (rank 0 writes)."""
    stats = {"_type": "test_final", "checkpoint": path}
    stats["test_settings"] = test_settings(cfg)
    stats["checkpoint_file"] = file_identity(path)
    stats.update(metrics)
    log_json_stats(stats, cfg.OUTPUT_DIR, ctx.rank)
    # The record as the log holds it (floats rounded): a rerun returns it.
    record = simplejson.loads(format_json_stats(stats))
    RunStateRecorder(cfg.OUTPUT_DIR, ctx.is_master).tested(record)


def _log_result(metrics: dict, labels: torch.Tensor, num_classes: int) -> None:
    """One line: mAP against random scores, or top-1/top-5 accuracy."""
    views = metrics["views_per_video"]
    if "map" in metrics:
        logger.info(
            "test mAP: %.2f%% over %d videos (random scores: about %.2f%%, the "
            "mean share of positives)",
            100 * metrics["map"],
            metrics["num_videos"],
            100 * chance_map(labels),
        )
    else:
        logger.info(
            "test accuracy: top-1 %.2f%%, top-5 %.2f%% over %d videos x %d %s "
            "(chance %.2f%%)",
            100 - metrics["top1_err"],
            100 - metrics["top5_err"],
            metrics["num_videos"],
            views,
            "view" if views == 1 else "views",
            100 / num_classes,
        )


def _save_results(
    cfg: CfgNode, path: str, dataset, scores: torch.Tensor, labels: torch.Tensor
) -> None:
    """Per-video scores, labels, ids and paths to TEST.SAVE_RESULTS_PATH."""
    results = {
        "video_scores": scores,
        "video_labels": labels,
        "video_ids": [dataset.video_id(i) for i in range(dataset.num_videos)],
        "video_paths": [dataset.video_path(i) for i in range(dataset.num_videos)],
        "checkpoint": path,
    }
    out = _results_path(cfg, path)
    atomic_save(results, out)
    logger.info("per-video scores, labels, ids and paths saved to %s", out)


def _results_path(cfg: CfgNode, checkpoint: str) -> str:
    """OUTPUT_DIR/TEST.SAVE_RESULTS_PATH, unless it holds another checkpoint's
    results: then a file named after the tested checkpoint (nothing is
    overwritten that another test wrote)."""
    out = os.path.join(cfg.OUTPUT_DIR, cfg.TEST.SAVE_RESULTS_PATH)
    if os.path.exists(out):
        if _results_checkpoint(out) != checkpoint:
            stem, ext = os.path.splitext(out)
            tag = os.path.splitext(os.path.basename(checkpoint))[0]
            logger.info(
                "%s holds other results (another test's, or not ours); keeping it",
                out,
            )
            out = f"{stem}_{tag}{ext}"
    return out


def _results_checkpoint(path: str) -> Optional[str]:
    """The checkpoint whose results the file ``path`` holds; None for a file
    of another kind (a PySlowFast results pickle, a damaged file)."""
    if not zipfile.is_zipfile(path):  # torch.save writes zip archives
        return None
    try:
        previous = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError):
        return None  # a zip archive, not a torch.save file of plain types
    return previous.get("checkpoint") if isinstance(previous, dict) else None


def _write_test_scalars(cfg: CfgNode, metrics: dict, checkpoint: str) -> None:
    """Test/top1_err, top5_err or map in TensorBoard, at the checkpoint's epoch."""
    from torch.utils.tensorboard import SummaryWriter

    log_dir = cfg.TENSORBOARD.LOG_DIR or os.path.join(
        cfg.OUTPUT_DIR, f"runs-{cfg.TEST.DATASET}"
    )
    epoch = epochs_done(checkpoint) or 0  # a published model's name: 0
    with SummaryWriter(log_dir) as writer:
        for key in ("top1_err", "top5_err", "map"):
            if key in metrics:
                writer.add_scalar(f"Test/{key}", metrics[key], epoch)
