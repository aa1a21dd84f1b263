"""Charades: multi-label JPEG frame lists with per-frame class ids."""

import os
import random
from typing import List, Optional

from fvcore.common.config import CfgNode

from slowfast.datasets.base import VideoDataset
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
class Charades(VideoDataset):
    """Charades from frame lists (the reference's layout).

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
        self._names, self._paths, self._frame_labels, self._video_labels = (
            [],
            [],
            [],
            [],
        )
        for video in videos.values():
            for row, labels in enumerate(video.labels):
                for label in labels:
                    where = f"{self.source}: video {video.name} frame {row}"
                    self._check_label(label, where)
            self._names.append(video.name)
            self._paths.append(video.paths)
            self._frame_labels.append(video.labels)
            self._video_labels.append(union(video.labels))
        return len(self._paths)

    def video_path(self, video_idx: int) -> str:
        return os.path.dirname(self._paths[video_idx][0]) or self._names[video_idx]

    def video_id(self, video_idx: int) -> str:
        return self._names[video_idx]

    def video_label(self, video_idx: int):
        return self._label(self._video_labels[video_idx])

    def _test_fraction(self, temporal_idx: int, num_temporal: int) -> float:
        return charades_fraction(temporal_idx, num_temporal)

    def _load_clip(
        self,
        video_idx: int,
        grid: SamplingGrid,
        fraction: Optional[float],
        rng: Optional[random.Random],
    ):
        paths = self._paths[video_idx]
        rate = grid.draw_rate(rng)
        seq = charades_indices(len(paths), grid.num_frames, rate, fraction, rng)
        chosen = [paths[i] for i in seq]
        frames, geometry = self.reader.read(
            grid,
            self.video_path(video_idx),
            lambda scale: self.read_frame_files(chosen, scale),
        )
        if self.split == "train":
            labels = union(self._frame_labels[video_idx][seq[0] : seq[-1] + 1])
        else:
            labels = self._video_labels[video_idx]
        return frames, labels, geometry
