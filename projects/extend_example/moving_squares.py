"""A dataset registered from outside the package: generated moving squares.

Imported by name (IMPORTS in the config, or ``--import``), it registers
``MovingSquares`` for TRAIN.DATASET / TEST.DATASET (any case). Nothing is
read from disk: video ``i`` of a split is a white square on black, moving
one way (its class: ``i`` mod MODEL.NUM_CLASSES, at most 4) from a start
drawn from the clip's seed (training) or from ``i`` (val, test).
"""

import random

import torch

from slowfast.datasets.base import VideoDataset
from slowfast.datasets.build import DATASET_REGISTRY

MOVES = ((0, 1), (0, -1), (1, 0), (-1, 0))  # right, left, down, up
VIDEOS = {"train": 256, "val": 64, "test": 64}


@DATASET_REGISTRY.register()
class MovingSquares(VideoDataset):
    """Frames of DATA.TRAIN_CROP_SIZE pixels; one pixel per frame at stride 1."""

    @classmethod
    def split_files(cls, cfg, split):
        return []  # no list files to check before a run

    def _load_annotations(self) -> int:
        if not 1 <= self.spec.num_classes <= len(MOVES):
            raise ValueError(
                f"MovingSquares: MODEL.NUM_CLASSES must be 1 to {len(MOVES)}"
            )
        self.size, self.source = self.cfg.DATA.TRAIN_CROP_SIZE, "generated"
        return VIDEOS[self.split]

    def video_path(self, video_idx: int) -> str:
        return f"moving_squares/{self.split}/{video_idx}"

    def video_label(self, video_idx: int) -> int:
        return video_idx % self.spec.num_classes

    def _load_clip(self, video_idx, grid, fraction, rng):
        label, side = self.video_label(video_idx), self.size // 4
        start = rng or random.Random(video_idx)
        y, x = start.randrange(self.size), start.randrange(self.size)
        step, (dy, dx) = grid.draw_rate(rng), MOVES[label]
        frames = torch.zeros(
            grid.num_frames, self.size, self.size, 3, dtype=torch.uint8
        )
        for t in range(grid.num_frames):
            top, left = (y + dy * step * t) % self.size, (x + dx * step * t) % self.size
            rows = torch.arange(top, top + side) % self.size
            cols = torch.arange(left, left + side) % self.size
            frames[t, rows[:, None], cols] = 255
        return frames, label, None
