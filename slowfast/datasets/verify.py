"""Dataset verification: list and label files, files on disk, decodability,
frame counts against the clip span, label ranges, and (training split) the
renditions ``renditions.json`` lists.

Used by ``tools/verify_dataset.py``; every problem is collected (nothing stops
at the first one) as a ``Problem`` naming the path and the reason.
"""

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, List, Optional, Sequence, Tuple

from fvcore.common.config import CfgNode

from slowfast.datasets.build import dataset_name
from slowfast.datasets.charades import Charades
from slowfast.datasets.decoder import DecodeError, check_complete, scan_video
from slowfast.datasets.frames import list_frame_dir, load_image
from slowfast.datasets.kinetics import Kinetics
from slowfast.datasets.lists import ListProblem, label_problem
from slowfast.datasets.renditions import load_renditions, rendition_path
from slowfast.datasets.ssv2 import Ssv2, ssv2_files


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
    """Check of one video: a file (``frames`` empty) or a frame list."""

    path: str
    min_frames: float
    frames: Tuple[str, ...] = ()
    backend: str = "pyav"
    target_fps: float = 30.0
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
    try:
        if job.frames or job.backend == "frames":
            files = list(job.frames) or list_frame_dir(job.path)
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
            count, need = len(files), job.min_frames
            renditions = _missing_renditions(job, picks)
        else:
            times, info = scan_video(job.path)
            check_complete(job.path, times, info)
            count, need = len(times), job.min_frames * info.fps / job.target_fps
            renditions = _missing_renditions(job, [job.path])
    except DecodeError as err:
        return [err.reason if err.path == job.path else str(err)], []
    if renditions:
        return renditions, []
    if count < need:
        return [], [f"too short: {count} frames < clip span {need:.0f}"]
    return [], []


def _from_list(problems: Sequence[ListProblem]) -> List[Problem]:
    return [
        Problem(f"{p.file}:{p.line}" if p.line else p.file, f"{p.reason}: {p.text!r}")
        for p in problems
    ]


def _kinetics(cfg: CfgNode, split: str, report: SplitReport) -> List[_Job]:
    data = cfg.DATA
    report.source = Kinetics.list_file(cfg, split)  # named if reading fails
    _, entries, problems = Kinetics.read_list(cfg, split, strict=False)
    report.problems += _from_list(problems)
    report.entries = len(entries) + len(problems)
    jobs = []
    span = data.NUM_FRAMES * data.SAMPLING_RATE
    for path, label, _ in entries:
        reason = label_problem(label, cfg.MODEL.NUM_CLASSES)
        if reason:
            report.problems.append(Problem(path, reason))
        jobs.append(
            _Job(
                path,
                span,
                backend=data.DECODING_BACKEND,
                target_fps=float(data.TARGET_FPS),
            )
        )
    return jobs


def _ssv2(cfg: CfgNode, split: str, report: SplitReport) -> List[_Job]:
    report.source = ssv2_files(cfg.DATA.PATH_TO_DATA_DIR, split)[0]
    frame_list, videos_json, labelled, videos, problems = Ssv2.read_lists(
        cfg, split, strict=False
    )
    report.problems += _from_list(problems)
    report.entries = len(labelled) + len(problems)
    jobs = []
    for vid, label in labelled:
        reason = label_problem(label, cfg.MODEL.NUM_CLASSES)
        if reason:
            report.problems.append(Problem(f"{videos_json} video {vid}", reason))
        video = videos.get(vid)
        if video is None or not video.paths:
            report.problems.append(
                Problem(
                    f"{videos_json} video {vid}", f"no frames listed in {frame_list}"
                )
            )
            continue
        jobs.append(
            _Job(
                f"{frame_list} video {vid}",
                cfg.DATA.NUM_FRAMES,
                frames=tuple(video.paths),
            )
        )
    return jobs


def _charades(cfg: CfgNode, split: str, report: SplitReport) -> List[_Job]:
    report.source = Charades.list_file(cfg, split)  # named if reading fails
    _, videos, problems = Charades.read_list(cfg, split, strict=False)
    report.problems += _from_list(problems)
    report.entries = len(videos) + len(problems)
    need = (cfg.DATA.NUM_FRAMES - 1) * cfg.DATA.SAMPLING_RATE + 1
    jobs = []
    for video in videos.values():
        where = f"{report.source} video {video.name}"
        bad = sorted(
            {
                c
                for frame in video.labels
                for c in frame
                if label_problem(c, cfg.MODEL.NUM_CLASSES)
            }
        )
        if bad:
            report.problems.append(
                Problem(where, label_problem(bad[0], cfg.MODEL.NUM_CLASSES))
            )
        jobs.append(_Job(where, need, frames=tuple(video.paths)))
    return jobs


_READERS: dict = {"kinetics": _kinetics, "ssv2": _ssv2, "charades": _charades}


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
    name = dataset_name(cfg, split).lower()
    report = SplitReport(split=split, dataset=name, source="")
    reader = _READERS.get(name)
    if reader is None:
        report.problems.append(Problem(name, f"no verifier for dataset {name!r}"))
        return report
    try:
        jobs = reader(cfg, split, report)
    except (FileNotFoundError, ValueError) as err:
        report.problems.append(Problem(report.source or name, str(err)))
        return report
    manifest = None
    if split == "train" and cfg.DATA.USE_RENDITIONS:
        try:
            manifest = load_renditions(cfg.DATA.PATH_TO_DATA_DIR)
        except ValueError as err:
            report.problems.append(Problem(cfg.DATA.PATH_TO_DATA_DIR, str(err)))
    scales = manifest.scales if manifest else ()
    jobs = [replace(j, full=full, scales=scales) for j in jobs]
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
        report.problems += [Problem(job.path, r) for r in problems]
        target = report.warnings if allow_short else report.problems
        target += [Problem(job.path, r) for r in short]
    return report


def default_splits(cfg: CfgNode) -> List[str]:
    """Splits with distinct files: train, val, and test for Kinetics (SSv2 and
    Charades test on the val files)."""
    splits = ["train", "val"]
    if dataset_name(cfg, "test").lower() == "kinetics" or (
        dataset_name(cfg, "test") != dataset_name(cfg, "val")
    ):
        splits.append("test")
    return splits
