"""Kinetics: video files listed with their class in train/val/test.csv."""

import os
from typing import Optional

from fvcore.common.config import CfgNode

from slowfast.datasets.base import Rng, VideoDataset
from slowfast.datasets.build import DATASET_REGISTRY
from slowfast.datasets.decoding.decoder import decode_clip
from slowfast.datasets.decoding.frames import frame_names
from slowfast.datasets.grid import SamplingGrid
from slowfast.datasets.lists import (
    SplitLists,
    VideoToCheck,
    label_problem,
    read_kinetics_list,
)
from slowfast.datasets.renditions.files import rendition_path
from slowfast.datasets.sampling import kinetics_positions, positions_to_indices


@DATASET_REGISTRY.register()
class Kinetics(VideoDataset):
    """Kinetics-style dataset of video files.

    ``DATA.PATH_TO_DATA_DIR/{split}.csv`` holds one ``path label`` per line
    (separator DATA.PATH_LABEL_SEPARATOR; relative paths are joined to
    DATA.PATH_PREFIX). With DATA.DECODING_BACKEND "frames" each path is a
    folder of JPEG frames (sorted by name, taken to be at DATA.TARGET_FPS).

    Clips: NUM_FRAMES frames over ``NUM_FRAMES * rate * fps / TARGET_FPS``
    source frames, at a random position (train), the centre (val) or the
    ``i``-th of NUM_ENSEMBLE_VIEWS positions (test).

    Args:
        cfg: the run's config.
        split: "train", "val" or "test".
    """

    @staticmethod
    def list_file(cfg: CfgNode, split: str) -> str:
        """The list file a split reads: ``PATH_TO_DATA_DIR/{split}.csv``."""
        return os.path.join(cfg.DATA.PATH_TO_DATA_DIR, f"{split}.csv")

    @classmethod
    def read_list(cls, cfg: CfgNode, split: str, strict: bool = True):
        """Reads ``{split}.csv`` (the verifier reads it through here too).

        Args:
            cfg: the run's config.
            split: "train", "val" or "test".
            strict: raise at the first bad line (else collect the problems).

        Returns:
            tuple: (list file, [(path, label, line)], [ListProblem]).
        """
        data = cfg.DATA
        source = cls.list_file(cfg, split)
        entries, problems = read_kinetics_list(
            source, data.PATH_PREFIX, data.PATH_LABEL_SEPARATOR, strict=strict
        )
        return source, entries, problems

    @classmethod
    def lists_to_verify(cls, cfg: CfgNode, split: str) -> SplitLists:
        """The split's entries, list problems and videos, for the verifier."""
        data = cfg.DATA
        source, entries, problems = cls.read_list(cfg, split, strict=False)
        lists = SplitLists(source, len(entries) + len(problems))
        lists.add_list_problems(problems)
        span = data.NUM_FRAMES * data.SAMPLING_RATE
        for path, label, _ in entries:
            reason = label_problem(label, cfg.MODEL.NUM_CLASSES)
            if reason:
                lists.problems.append((path, reason))
            backend, fps = data.DECODING_BACKEND, float(data.TARGET_FPS)
            video = VideoToCheck(path, span, backend=backend, target_fps=fps)
            lists.videos.append(video)
        return lists

    def _load_annotations(self) -> int:
        self.source, entries, _ = self.read_list(self.cfg, self.split)
        for path, label, line in entries:
            self._check_label(label, f"{self.source}:{line}: {path}")
        self._paths = [e[0] for e in entries]
        self._labels = [e[1] for e in entries]
        return len(entries)

    def test_short_side(self) -> int:
        """Short side before cropping at val/test, as the reference's Kinetics.

        With several spatial crops it is TEST_CROP_SIZE (the crops tile the
        long side); with one centre crop it is TRAIN_JITTER_SCALES[0], so the
        crop sees the training field of view.

        Returns:
            int: the short side in pixels.
        """
        spec = self.spec
        if self.split == "test" and spec.spatial_crops > 1:
            return spec.test_crop_size
        return max(spec.train_short_side, spec.test_crop_size)

    def _load_clip(
        self, video_idx: int, grid: SamplingGrid, fraction: Optional[float], rng: Rng
    ):
        rate = grid.draw_rate(rng)
        target_fps = self.spec.target_fps

        def sample_fn(video_frames: int, fps: float):
            return kinetics_positions(
                video_frames, fps, grid.num_frames, rate, target_fps, fraction, rng
            )

        path = self._paths[video_idx]
        if self.spec.frame_folders:
            names = frame_names(path)
            idx = positions_to_indices(
                sample_fn(len(names), float(target_fps)), len(names)
            )
            folder = path.rstrip("/") + "/"
            chosen = [folder + names[i] for i in idx]

            def load(scale):
                return self.read_frame_files(chosen, scale)

        else:

            def load(scale):
                where = path if scale is None else rendition_path(path, scale)
                clip, info = decode_clip(
                    where,
                    sample_fn,
                    self._threads,
                    self.frame_cache(),
                    self.reformatter(),
                )
                return clip, info.original_size

        frames, geometry = self.reader.read(grid, path, load, rng)
        return frames, self._labels[video_idx], geometry
