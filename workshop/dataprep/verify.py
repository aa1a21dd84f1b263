"""Dataset verification: list and label files, files on disk, decodability,
frame counts against the clip span, label ranges, and (training split) the
renditions ``renditions.json`` lists.

Used by ``tools/verify_dataset.py``; every problem is collected (nothing stops
at the first one) as a ``Problem`` naming the path and the reason. Each
registered dataset reads its own lists (``VideoDataset.lists_to_verify``); this
module decodes the videos they name.
"""

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple, Type

from fvcore.common.config import CfgNode

from slowfast.datasets.base import VideoDataset
from slowfast.datasets.build import dataset_class, dataset_name
from slowfast.datasets.decoding.decoder import DecodeError, check_complete, scan_video
from slowfast.datasets.decoding.frames import list_frame_dir, load_image
from slowfast.datasets.lists import VideoToCheck
from slowfast.datasets.renditions.files import load_renditions, rendition_path


@dataclass(frozen=True)
class Problem:
    """One bad entry: where and why."""

    path: str
    reason: str


@dataclass
class SplitReport:
    """Result of verifying one split."""

    split: str
    dataset: str
    source: str
    entries: int = 0
    problems: List[Problem] = field(default_factory=list)
    warnings: List[Problem] = field(default_factory=list)


@dataclass(frozen=True)
class _Job:
    """Check of one video (a ``VideoToCheck`` and how to check it)."""

    video: VideoToCheck
    full: bool = False
    scales: Tuple[float, ...] = ()  # renditions the dataset folder lists


def _missing_renditions(job: _Job, files: Sequence[str]) -> List[str]:
    """Problems for renditions listed in renditions.json but not on disk."""
    found = []
    for scale in job.scales:
        paths = [rendition_path(p, scale) for p in files]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            found.append(
                f"rendition {scale:g} missing ({missing[0]}; renditions.json lists "
                "it): write it with tools/prepare_dataset.py or tools/add_renditions.py"
            )
    return found


def _check_job(job: _Job) -> Tuple[List[str], List[str]]:
    """Returns (problems, short-video notes) of one video."""
    video = job.video
    try:
        if video.frames or video.backend == "frames":
            files = list(video.frames) or list_frame_dir(video.path)
            missing = [p for p in files if not os.path.isfile(p)]
            if missing:
                return [
                    f"{len(missing)} of {len(files)} frames missing, e.g. {missing[0]}"
                ], []
            picks = (
                files
                if job.full
                else sorted({files[0], files[len(files) // 2], files[-1]})
            )
            for p in picks:
                load_image(p)
            count, need = len(files), video.min_frames
            renditions = _missing_renditions(job, picks)
        else:
            times, info = scan_video(video.path)
            check_complete(video.path, times, info)
            count, need = len(times), video.min_frames * info.fps / video.target_fps
            renditions = _missing_renditions(job, [video.path])
    except DecodeError as err:
        return [err.reason if err.path == video.path else str(err)], []
    if renditions:
        return renditions, []
    if count < need:
        return [], [f"too short: {count} frames < clip span {need:.0f}"]
    return [], []


def verify_split(
    cfg: CfgNode,
    split: str,
    workers: int = 0,
    allow_short: bool = False,
    full: bool = False,
    progress: Optional[Callable[[int, int], None]] = None,
) -> SplitReport:
    """Checks one split of the configured dataset.

    Args:
        cfg: the run's config.
        split: "train", "val" or "test".
        workers: processes for decoding (0: in this process).
        allow_short: report videos shorter than the clip span as warnings
            instead of problems.
        full: decode every frame of frame lists (default: first, middle, last).
        progress: called as ``progress(done, total)`` while videos are checked.

    Returns:
        SplitReport: the entries and every problem found.
    """
    name = dataset_name(cfg, split)
    report = SplitReport(split=split, dataset=name.lower(), source="")
    try:
        dataset = dataset_class(name)
        lists = dataset.lists_to_verify(cfg, split)
    except (KeyError, NotImplementedError) as err:
        report.problems.append(Problem(name, str(err).strip("'\"")))
        return report
    except (FileNotFoundError, ValueError) as err:
        report.source = _split_files(dataset, cfg, split)[0] or name
        report.problems.append(Problem(report.source, str(err)))
        return report
    report.source, report.entries = lists.source, lists.entries
    report.problems += [Problem(where, why) for where, why in lists.problems]
    manifest = None
    if split == "train" and cfg.DATA.USE_RENDITIONS:
        try:
            manifest = load_renditions(cfg.DATA.PATH_TO_DATA_DIR)
        except ValueError as err:
            report.problems.append(Problem(cfg.DATA.PATH_TO_DATA_DIR, str(err)))
    scales = manifest.scales if manifest else ()
    jobs = [_Job(video, full, scales) for video in lists.videos]
    if workers > 0:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_check_job, jobs, chunksize=8))
    else:
        results = []
        for done, job in enumerate(jobs, start=1):
            results.append(_check_job(job))
            if progress is not None:
                progress(done, len(jobs))
    for job, (problems, short) in zip(jobs, results):
        report.problems += [Problem(job.video.path, r) for r in problems]
        target = report.warnings if allow_short else report.problems
        target += [Problem(job.video.path, r) for r in short]
    return report


def _split_files(dataset: Type[VideoDataset], cfg: CfgNode, split: str) -> List[str]:
    """The dataset's annotation files of a split ([""] when it names none)."""
    try:
        return list(dataset.split_files(cfg, split)) or [""]
    except AttributeError:  # a dataset without list_file / split_files
        return [""]


def default_splits(cfg: CfgNode) -> List[str]:
    """Splits with their own files: train, val, and test where it reads other
    files than val (Kinetics; SSv2 and Charades test on the val files)."""
    splits = ["train", "val"]
    test, val = dataset_name(cfg, "test"), dataset_name(cfg, "val")
    test_files = _split_files(dataset_class(test), cfg, "test")
    if test.lower() != val.lower() or test_files != _split_files(
        dataset_class(val), cfg, "val"
    ):
        splits.append("test")
    return splits


def print_reports(reports: List[SplitReport], out=None) -> None:
    """Prints the summary table and every bad entry (to ``out``, default stdout)."""
    out = sys.stdout if out is None else out
    print(
        f"{'split':<6} {'dataset':<9} {'entries':>8} {'bad':>6} {'warn':>5}  source",
        file=out,
    )
    for r in reports:
        print(
            f"{r.split:<6} {r.dataset:<9} {r.entries:>8} {len(r.problems):>6} "
            f"{len(r.warnings):>5}  {r.source}",
            file=out,
        )
    for kind, attr in (("BAD", "problems"), ("WARNING", "warnings")):
        for r in reports:
            for p in getattr(r, attr):
                print(f"{kind} [{r.split}] {p.path}: {p.reason}", file=out)
