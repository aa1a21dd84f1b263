"""Reading a training clip from the rendition its sampling grid calls for.

``renditions.py`` says what a dataset folder holds; a ``RenditionReader``
decides, per clip, whether to read a rendition and which, falls back to the
original when a rendition cannot be read, and reads frame files (the video
decoder reads a rendition's original size from the file itself).
"""

import logging
from typing import List, Optional, Tuple

import torch
from fvcore.common.config import CfgNode

from slowfast.datasets.decoding.av_utils import DecodeError
from slowfast.datasets.decoding.frame_cache import FrameCache
from slowfast.datasets.decoding.frames import image_size, load_frames
from slowfast.datasets.grid import SamplingGrid
from slowfast.datasets.lists import DataError
from slowfast.datasets.renditions.files import (
    Renditions,
    load_renditions,
    rendition_path,
)

logger = logging.getLogger(__name__)

# (frames uint8 [T, H, W, C], the original's (height, width) or None)
Clip = Tuple[torch.Tensor, Optional[Tuple[int, int]]]


class RenditionReader:
    """Picks and reads renditions for training clips.

    Args:
        renditions: what the dataset folder holds (None: originals only).
        base_grid: the config's base sampling grid.
    """

    def __init__(self, renditions: Optional[Renditions], base_grid: SamplingGrid):
        self.renditions = renditions
        self.base_jitter = base_grid.jitter_max
        self._reported: set = set()

    @classmethod
    def from_config(
        cls, cfg: CfgNode, split: str, base_grid: SamplingGrid
    ) -> "RenditionReader":
        """The reader of a dataset split: the renditions of
        DATA.PATH_TO_DATA_DIR/renditions.json for training with
        DATA.USE_RENDITIONS, none otherwise.

        Raises:
            DataError: the manifest is malformed (one line naming it).
        """
        renditions = None
        if cfg.DATA.USE_RENDITIONS and split == "train":
            try:
                renditions = load_renditions(cfg.DATA.PATH_TO_DATA_DIR)
            except ValueError as err:
                raise DataError(str(err)) from err
        return cls(renditions, base_grid)

    def describe(self) -> str:
        """What the dataset's start-up log line says about renditions."""
        if self.renditions is None:
            return ""
        return f"; renditions at scales {list(self.renditions.scales)} for coarse grids"

    def scale(self, grid: SamplingGrid) -> Optional[float]:
        """The rendition (scale) a training grid reads (None: the original):
        the smallest stored scale at least ``grid.jitter_max /
        base_grid.jitter_max`` (``Renditions.pick``)."""
        if self.renditions is None or grid.jitter_max >= self.base_jitter:
            return None
        return self.renditions.pick(grid.jitter_max / self.base_jitter)

    def read(self, grid: SamplingGrid, path: str, load, rng=None) -> Clip:
        """``load(scale)`` for the grid's rendition, else ``load(None)``.

        A rendition that cannot be read is reported once and the original
        read instead (the clip is the same, only slower); a failing original
        raises as usual.

        Args:
            grid: the clip's sampling grid.
            path: the original video file or frame (for the message).
            load: ``load(scale) -> (frames, geometry)``, reading the rendition
                at ``scale`` (None: the original); ``geometry`` is the
                original's (height, width) when it read a rendition.
            rng: the clip's random source, if ``load`` draws from it: the
                original is then read with the same draws.

        Returns:
            tuple: what ``load`` returned.
        """
        scale = self.scale(grid)
        if scale is not None:
            state = rng.getstate() if rng is not None else None
            try:
                return load(scale)
            except DecodeError as err:
                if state is not None:
                    rng.setstate(state)
                if path not in self._reported:
                    self._reported.add(path)
                    logger.warning(
                        "Rendition %g of %s unreadable, reading the original "
                        "instead (write it with tools/prepare_dataset.py or "
                        "tools/add_renditions.py): %s",
                        scale,
                        path,
                        err,
                    )
        return load(None)


def read_frame_files(
    paths: List[str], scale: Optional[float], cache: Optional[FrameCache]
) -> Clip:
    """Reads a clip's frame files, or their rendition at ``scale``.

    Returns:
        tuple: uint8 ``[T, H, W, C]`` frames, and for a rendition the
        original's (height, width) (from the first frame's header).
    """
    if scale is None:
        return load_frames(paths, cache), None
    chosen = [rendition_path(p, scale) for p in paths]
    return load_frames(chosen, cache), image_size(paths[0])
