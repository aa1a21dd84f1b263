"""Something-Something V2: JPEG frame lists with labels from the release's JSON."""

import logging
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
    read_ssv2_labels,
)
from slowfast.datasets.sampling import ssv2_indices

logger = logging.getLogger(__name__)


def ssv2_files(data_dir: str, split: str):
    """(frame list, labels json, videos json) read by an SSv2 split."""
    name = "train" if split == "train" else "validation"
    return (
        os.path.join(data_dir, "train.csv" if split == "train" else "val.csv"),
        os.path.join(data_dir, "something-something-v2-labels.json"),
        os.path.join(data_dir, f"something-something-v2-{name}.json"),
    )


@DATASET_REGISTRY.register()
class Ssv2(FrameListDataset):
    """Something-Something V2 from frame lists (the reference's format).

    Labels: ``something-something-v2-labels.json`` (template -> class id) and
    ``something-something-v2-{train,validation}.json`` (videos with their
    template). Frames: ``train.csv`` / ``val.csv`` frame lists (header
    ``original_vido_id video_id frame_id path labels``), frame paths relative
    to DATA.PATH_PREFIX. "val" and "test" read the validation files. Videos of
    the JSON missing from the frame list are dropped (with a warning).

    Clips: NUM_FRAMES equal segments, a random frame of each (train) or the
    middle one; SAMPLING_RATE is not used. One temporal view per video at test.

    Args:
        cfg: the run's config.
        split: "train", "val" or "test".
    """

    name = "SSv2"

    @staticmethod
    def split_files(cfg: CfgNode, split: str) -> list:
        """The annotation files a split reads (checked before a run starts)."""
        return list(ssv2_files(cfg.DATA.PATH_TO_DATA_DIR, split))

    @classmethod
    def read_lists(cls, cfg: CfgNode, split: str, strict: bool = True):
        """Reads the split's labels (JSON) and frame list (the verifier too).

        Args:
            cfg: the run's config.
            split: "train", "val" or "test".
            strict: raise at the first bad entry (else collect the problems).

        Returns:
            tuple: (frame list file, videos JSON file, [(video id, label)],
            {video id: frames}, [ListProblem]).
        """
        data = cfg.DATA
        frame_list, _, videos_json = ssv2_files(data.PATH_TO_DATA_DIR, split)
        labelled, problems = read_ssv2_labels(data.PATH_TO_DATA_DIR, split, strict)
        frames, more = read_frame_list(frame_list, data.PATH_PREFIX, strict=strict)
        return frame_list, videos_json, labelled, frames, list(problems) + list(more)

    @classmethod
    def lists_to_verify(cls, cfg: CfgNode, split: str) -> SplitLists:
        """The split's entries, list problems and videos, for the verifier."""
        frame_list, videos_json, labelled, videos, problems = cls.read_lists(
            cfg, split, strict=False
        )
        lists = SplitLists(frame_list, len(labelled) + len(problems))
        lists.add_list_problems(problems)
        for vid, label in labelled:
            where = f"{videos_json} video {vid}"
            reason = label_problem(label, cfg.MODEL.NUM_CLASSES)
            if reason:
                lists.problems.append((where, reason))
            video = videos.get(vid)
            if video is None or not video.paths:
                lists.problems.append((where, f"no frames listed in {frame_list}"))
                continue
            lists.videos.append(
                VideoToCheck(
                    f"{frame_list} video {vid}",
                    cfg.DATA.NUM_FRAMES,
                    frames=tuple(video.paths),
                )
            )
        return lists

    def _load_annotations(self) -> int:
        frame_list, videos_json, labelled, frames, _ = self.read_lists(
            self.cfg, self.split
        )
        self.source = frame_list
        self._paths, self._labels, self._names = [], [], []
        missing = 0
        for vid, label in labelled:
            self._check_label(label, f"{videos_json}: video {vid}")
            video = frames.get(vid)
            if video is None or not video.paths:
                missing += 1
                continue
            self._names.append(vid)
            self._paths.append(video.paths)
            self._labels.append(label)
        if missing:
            logger.warning(
                "SSv2 %s: %d of %d videos of %s have no frames in %s; dropped",
                self.split,
                missing,
                len(labelled),
                videos_json,
                frame_list,
            )
        return len(self._paths)

    @property
    def num_temporal_views(self) -> int:
        return 1

    def _frame_indices(
        self, count: int, grid: SamplingGrid, fraction: Optional[float], rng: Rng
    ) -> List[int]:
        return ssv2_indices(count, grid.num_frames, rng)
