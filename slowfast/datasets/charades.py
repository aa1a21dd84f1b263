"""Charades: multi-label JPEG frame lists with per-frame class ids."""

import os
from typing import List, Optional

from fvcore.common.config import CfgNode

from slowfast.datasets.base import FrameListDataset, Rng
from slowfast.datasets.build import DATASET_REGISTRY
from slowfast.datasets.grid import SamplingGrid
from slowfast.datasets.lists import (
    SplitLists,
    VideoToCheck,
    label_problem,
    read_frame_list,
)
from slowfast.datasets.sampling import charades_fraction, charades_indices


def union(labels: List[List[int]]) -> List[int]:
    """Sorted union of per-frame class-id lists."""
    return sorted({c for frame in labels for c in frame})


@DATASET_REGISTRY.register()
class Charades(FrameListDataset):
    """Charades from frame lists (the reference's format).

    ``train.csv`` / ``val.csv`` (test reads val.csv) list one frame per line,
    ``original_vido_id video_id frame_id path labels``, where ``labels`` holds
    the frame's class ids separated by commas (possibly empty or ``""``).
    Targets are multi-hot over MODEL.NUM_CLASSES: the union over the clip's
    span in training, the union over the whole video for val and test.

    Clips: NUM_FRAMES frames ``rate`` apart (rate drawn from the grid's range
    in training), random start (train), centre (val) or the ``i``-th of
    NUM_ENSEMBLE_VIEWS starts spread from the first to the last possible
    (test). DATA.INV_UNIFORM_SAMPLE selects the inverse-uniform short-side
    jitter, as in the reference.

    Args:
        cfg: the run's config.
        split: "train", "val" or "test".
    """

    @staticmethod
    def list_file(cfg: CfgNode, split: str) -> str:
        """The frame list a split reads ("val" and "test" read ``val.csv``)."""
        name = "train.csv" if split == "train" else "val.csv"
        return os.path.join(cfg.DATA.PATH_TO_DATA_DIR, name)

    @classmethod
    def read_list(cls, cfg: CfgNode, split: str, strict: bool = True):
        """Reads the split's frame list with per-frame labels (the verifier too).

        Args:
            cfg: the run's config.
            split: "train", "val" ("test" reads the val list).
            strict: raise at the first bad line (else collect the problems).

        Returns:
            tuple: (list file, {video id: frames and labels}, [ListProblem]).
        """
        source = cls.list_file(cfg, split)
        videos, problems = read_frame_list(source, cfg.DATA.PATH_PREFIX, strict)
        return source, videos, problems

    @classmethod
    def lists_to_verify(cls, cfg: CfgNode, split: str) -> SplitLists:
        """The split's entries, list problems and videos, for the verifier."""
        source, videos, problems = cls.read_list(cfg, split, strict=False)
        lists = SplitLists(source, len(videos) + len(problems))
        lists.add_list_problems(problems)
        need = (cfg.DATA.NUM_FRAMES - 1) * cfg.DATA.SAMPLING_RATE + 1
        for video in videos.values():
            where = f"{source} video {video.name}"
            bad = [
                reason
                for c in union(video.labels)
                if (reason := label_problem(c, cfg.MODEL.NUM_CLASSES))
            ]
            if bad:
                lists.problems.append((where, bad[0]))
            lists.videos.append(VideoToCheck(where, need, frames=tuple(video.paths)))
        return lists

    def _load_annotations(self) -> int:
        self.source, videos, _ = self.read_list(self.cfg, self.split)
        self._names, self._paths, self._frame_labels, self._labels = [], [], [], []
        for video in videos.values():
            for row, labels in enumerate(video.labels):
                for label in labels:
                    where = f"{self.source}: video {video.name} frame {row}"
                    self._check_label(label, where)
            self._names.append(video.name)
            self._paths.append(video.paths)
            self._frame_labels.append(video.labels)
            self._labels.append(union(video.labels))
        return len(self._paths)

    def _test_fraction(self, temporal_idx: int, num_temporal: int) -> float:
        return charades_fraction(temporal_idx, num_temporal)

    def _frame_indices(
        self, count: int, grid: SamplingGrid, fraction: Optional[float], rng: Rng
    ) -> List[int]:
        rate = grid.draw_rate(rng)
        return charades_indices(count, grid.num_frames, rate, fraction, rng)

    def _clip_classes(self, video_idx: int, seq: List[int]) -> List[int]:
        """Training: the union over the clip's span; else the video's."""
        if self.split == "train":
            return union(self._frame_labels[video_idx][seq[0] : seq[-1] + 1])
        return self._labels[video_idx]
