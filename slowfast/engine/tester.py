"""Multi-view testing of a trained model."""

import logging
import os
import re
from typing import Optional

import simplejson
import torch
from fvcore.common.config import CfgNode

from slowfast.checkpoint import io as cu
from slowfast.checkpoint.fingerprint import test_settings
from slowfast.datasets import construct_loader, shutdown_workers
from slowfast.engine import runtime
from slowfast.engine.evaluator import evaluate
from slowfast.engine.memory_format import choose_channels_last
from slowfast.engine.metrics import chance_map
from slowfast.models import build_model
from slowfast.utils.distributed import (
    RunContext,
    all_gather_objects,
    decided_on_master,
)
from slowfast.utils.logging import JSON_STATS_LOG, log_json_stats, setup_logging

logger = logging.getLogger(__name__)

# The results a rerun prints from json_stats.log.
SHOWN = ("map", "num_videos", "top1_err", "top5_err", "views_per_video")


def _checkpoint_to_test(cfg: CfgNode) -> str:
    """TEST.CHECKPOINT_FILE_PATH, else the newest good epoch checkpoint of
    OUTPUT_DIR (a mid-epoch one only when there is no other, with a warning)."""
    if cfg.TEST.CHECKPOINT_FILE_PATH:
        return cfg.TEST.CHECKPOINT_FILE_PATH
    path = cu.get_last_checkpoint(cfg.OUTPUT_DIR, epochs_only=True)
    if path is None:
        path = cu.get_last_checkpoint(cfg.OUTPUT_DIR)
        if path is not None:
            logger.warning(
                "testing %s, taken inside an epoch (no epoch checkpoint)", path
            )
    if path is None:
        raise cu.CheckpointError(
            f"TEST.CHECKPOINT_FILE_PATH is empty and OUTPUT_DIR = "
            f"{cfg.OUTPUT_DIR!r} holds no checkpoint to test"
        )
    return path


def test(cfg: CfgNode, rank: int = 0, world_size: int = 1) -> dict:
    """Tests with NUM_ENSEMBLE_VIEWS x NUM_SPATIAL_CROPS views per video.

    Per-video scores and labels are saved to OUTPUT_DIR/TEST.SAVE_RESULTS_PATH.

    Args:
        cfg: the frozen config.
        rank: global rank.
        world_size: number of processes.

    Returns:
        The metrics: top1_err/top5_err (percent) or map, and view counts.
    """
    setup_logging(cfg.OUTPUT_DIR, rank)
    runtime.check_data_dir(cfg)
    runtime.seed_everything(cfg.RNG_SEED)
    ctx = RunContext.create(cfg, rank, world_size)
    device = ctx.device
    path = decided_on_master(
        ctx.is_master, lambda: _checkpoint_to_test(cfg), (cu.CheckpointError,)
    )
    done = all_gather_objects(_logged_result(cfg, path) if ctx.is_master else None)[0]
    if done is not None:
        logger.info(
            "%s is already tested with these settings (json_stats.log): %s; set "
            "TEST.RERUN True to test it again",
            path,
            ", ".join(f"{k} {v}" for k, v in sorted(done.items()) if k in SHOWN),
        )
        return done
    model = build_model(cfg, choose_channels_last(cfg)).to(device)
    cu.load_checkpoint(
        path, model, convert_from_caffe2=cfg.TEST.CHECKPOINT_TYPE == "caffe2"
    )
    loader = construct_loader(cfg, "test", num_procs=ctx.world_size, rank=ctx.rank)
    logger.info(
        "testing %s on %d views (%d videos)",
        path,
        len(loader.dataset),
        loader.dataset.num_videos,
    )
    autocast = runtime.autocast_factory(cfg, device)
    metrics, scores, labels = evaluate(model, loader, cfg, device, autocast)
    shutdown_workers(loader)
    stats = {"_type": "test_final", "checkpoint": path}
    stats["test_settings"] = test_settings(cfg)
    stats["checkpoint_file"] = _file_identity(path)
    stats.update(metrics)
    log_json_stats(stats, cfg.OUTPUT_DIR, ctx.rank)
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
            100 / cfg.MODEL.NUM_CLASSES,
        )
    if ctx.is_master and cfg.TEST.SAVE_RESULTS_PATH:
        dataset = loader.dataset
        results = {
            "video_scores": scores,
            "video_labels": labels,
            "video_ids": [dataset.video_id(i) for i in range(dataset.num_videos)],
            "video_paths": [dataset.video_path(i) for i in range(dataset.num_videos)],
            "checkpoint": path,
        }
        out = _results_path(cfg, path)
        torch.save(results, out)
        logger.info("per-video scores, labels, ids and paths saved to %s", out)
    if ctx.is_master and cfg.TENSORBOARD.ENABLE:
        _write_test_scalars(cfg, metrics, path)
    return metrics


def _logged_result(cfg: CfgNode, path: str) -> Optional[dict]:
    """The ``test_final`` line of ``path`` tested with this config's settings,
    when it is in json_stats.log and TEST.RERUN is off; else None."""
    log = os.path.join(cfg.OUTPUT_DIR, JSON_STATS_LOG)
    if cfg.TEST.RERUN or not os.path.exists(log):
        return None
    wanted = (path, test_settings(cfg), _file_identity(path))
    found = None
    with open(log) as f:
        for line in f:
            try:
                stats = simplejson.loads(line) if line.strip() else {}
            except ValueError:  # a line cut short by a kill
                continue
            seen = (
                stats.get("checkpoint"),
                stats.get("test_settings"),
                stats.get("checkpoint_file"),
            )
            if stats.get("_type") == "test_final" and seen == wanted:
                found = stats
    return found


def _file_identity(path: str) -> str:
    """Size and modification time: a checkpoint written again is another one."""
    info = os.stat(path)
    return f"{info.st_size}-{info.st_mtime_ns}"


def _results_path(cfg: CfgNode, checkpoint: str) -> str:
    """OUTPUT_DIR/TEST.SAVE_RESULTS_PATH, unless it holds another checkpoint's
    results: then a file named after the tested checkpoint (nothing is
    overwritten that another test wrote)."""
    out = os.path.join(cfg.OUTPUT_DIR, cfg.TEST.SAVE_RESULTS_PATH)
    if os.path.exists(out):
        previous = torch.load(out, map_location="cpu", weights_only=True)
        if previous.get("checkpoint") != checkpoint:
            stem, ext = os.path.splitext(out)
            tag = os.path.splitext(os.path.basename(checkpoint))[0]
            logger.info("%s holds the results of another test; keeping it", out)
            out = f"{stem}_{tag}{ext}"
    return out


def _write_test_scalars(cfg: CfgNode, metrics: dict, checkpoint: str) -> None:
    """Test/top1_err, top5_err or map in TensorBoard, at the checkpoint's epoch."""
    from torch.utils.tensorboard import SummaryWriter

    log_dir = cfg.TENSORBOARD.LOG_DIR or os.path.join(
        cfg.OUTPUT_DIR, f"runs-{cfg.TEST.DATASET}"
    )
    match = re.search(r"(\d+)", os.path.basename(checkpoint))
    epoch = int(match.group(1)) if match else 0  # checkpoint_epoch_00040 -> 40
    with SummaryWriter(log_dir) as writer:
        for key in ("top1_err", "top5_err", "map"):
            if key in metrics:
                writer.add_scalar(f"Test/{key}", metrics[key], epoch)
