"""Logic shared by the video datasets: views, bad data, transforms.

A dataset item is requested as

* ``dataset[i]``: entry ``i`` at the config's shape;
* ``dataset[(i, grid)]``: a training clip sampled on ``grid`` (a
  ``SamplingGrid``; None means the config's shape);
* ``dataset[(i, grid, seed)]``: the same with every random choice (clip
  position, stride, scale, crop, flip, replacement of a bad video) drawn from
  ``seed``. The training batch sampler always passes a seed derived from
  (RNG_SEED, epoch, index), so an epoch's clips do not depend on the number
  of loader workers or on which worker loads which item.

(``slowfast.datasets.request`` parses requests and mixes seeds.)

Splits: "train" holds one entry per video, sampled randomly; "val" holds one
deterministic view per video (centre clip, centre crop at the test scale);
"test" holds one entry per (video, temporal view, spatial crop), ordered
video-major, then temporal view, then crop.

Each item is ``(frames, label, index, extras)``: ``frames`` is the list of
uint8 pathway tensors ``[C, T, H, W]`` (the models normalise them), ``label``
an int or a multi-hot float tensor, ``index`` the entry that was loaded (a
replacement's index when a training video failed), ``extras`` a dict with
``video_idx``, ``temporal_idx`` (-1: random), ``spatial_idx`` (-1: random; 0
left/top, 1 centre, 2 right/bottom) and ``num_failed`` (videos that failed
before this item loaded).
"""

import logging
import os
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import torch
from fvcore.common.config import CfgNode
from torch.utils.data import Dataset

from slowfast.datasets.decoding.decoder import DecodeError
from slowfast.datasets.decoding.frame_cache import FrameCache
from slowfast.datasets.grid import SamplingGrid
from slowfast.datasets.lists import DataError, SplitLists, label_problem
from slowfast.datasets.renditions.reader import RenditionReader, read_frame_files
from slowfast.datasets.request import mix_seed, parse_request
from slowfast.datasets.transforms import (
    jitter_size,
    pack_pathways,
    spatial_transform,
    to_clip_format,
)
from slowfast.models.describe import ModelInfo, describe_model

logger = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")

# A clip's random source: None outside training (evaluation views are fixed).
Rng = Optional[random.Random]


@dataclass(frozen=True)
class ClipSpec:
    """What a dataset's per-clip code needs from the config, read once.

    The datasets read the config in ``__init__`` and ``_load_annotations``
    only; ``__getitem__`` and everything it calls read this.

    Attributes:
        num_classes: MODEL.NUM_CLASSES.
        multi_label: DATA.MULTI_LABEL (labels as multi-hot tensors).
        random_flip: DATA.RANDOM_FLIP (training).
        reverse_channels: DATA.REVERSE_INPUT_CHANNEL (BGR clips).
        inv_uniform_sample: DATA.INV_UNIFORM_SAMPLE (scale jitter).
        rng_seed: RNG_SEED (replacements of bad videos, unseeded requests).
        test_crop_size: DATA.TEST_CROP_SIZE.
        train_short_side: DATA.TRAIN_JITTER_SCALES[0].
        target_fps: DATA.TARGET_FPS.
        frame_folders: DATA.DECODING_BACKEND is "frames".
        ensemble_views: TEST.NUM_ENSEMBLE_VIEWS.
        spatial_crops: TEST.NUM_SPATIAL_CROPS.
    """

    num_classes: int
    multi_label: bool
    random_flip: bool
    reverse_channels: bool
    inv_uniform_sample: bool
    rng_seed: int
    test_crop_size: int
    train_short_side: int
    target_fps: int
    frame_folders: bool
    ensemble_views: int
    spatial_crops: int

    @classmethod
    def from_cfg(cls, cfg: CfgNode) -> "ClipSpec":
        data = cfg.DATA
        return cls(
            num_classes=cfg.MODEL.NUM_CLASSES,
            multi_label=bool(data.MULTI_LABEL),
            random_flip=bool(data.RANDOM_FLIP),
            reverse_channels=bool(data.REVERSE_INPUT_CHANNEL),
            inv_uniform_sample=bool(data.INV_UNIFORM_SAMPLE),
            rng_seed=cfg.RNG_SEED,
            test_crop_size=data.TEST_CROP_SIZE,
            train_short_side=data.TRAIN_JITTER_SCALES[0],
            target_fps=data.TARGET_FPS,
            frame_folders=data.DECODING_BACKEND == "frames",
            ensemble_views=cfg.TEST.NUM_ENSEMBLE_VIEWS,
            spatial_crops=cfg.TEST.NUM_SPATIAL_CROPS,
        )


class VideoDataset(Dataset):
    """Base class of the video datasets (see the module docstring).

    Subclasses implement ``_load_annotations`` (filling ``_paths`` and
    ``_labels``, or overriding ``video_path`` and ``video_label``) and
    ``_load_clip`` (and may override ``num_temporal_views`` and
    ``_test_fraction``), and ``lists_to_verify`` for
    ``tools/verify_dataset.py``.

    Args:
        cfg: the run's (frozen) config; it is only read, in ``__init__`` and
            ``_load_annotations`` (per-clip code reads ``self.spec``).
        split: "train", "val" or "test".
    """

    # Consecutive failed videos after which a training item gives up.
    max_consecutive_failures = 10
    # Per video, filled by ``_load_annotations``: its file (or frame files)
    # and its class id(s).
    _paths: List[Any]
    _labels: List[Any]
    # The dataset's name in messages (the class name unless set).
    name: Optional[str] = None

    if TYPE_CHECKING:
        # The list file of a split, in the datasets that read one (a static
        # method of theirs; ``split_files`` uses it). Not defined here: a
        # dataset without it has no list file to check.
        @staticmethod
        def list_file(cfg: CfgNode, split: str) -> str: ...

    @property
    def display_name(self) -> str:
        """How messages name the dataset ("Kinetics", "SSv2", "Charades")."""
        return self.name or type(self).__name__

    @classmethod
    def split_files(cls, cfg: CfgNode, split: str) -> list:
        """The annotation files a split reads (checked before a run starts):
        by default the one ``list_file`` of the split."""
        return [cls.list_file(cfg, split)]

    @classmethod
    def lists_to_verify(cls, cfg: CfgNode, split: str) -> SplitLists:
        """The split's entries, list problems and videos, for
        ``tools/verify_dataset.py`` (lists read leniently: every problem
        collected). A registered dataset defines it to be verifiable.

        Args:
            cfg: the run's config.
            split: "train", "val" or "test".

        Returns:
            SplitLists: what the lists hold, bad entries included.

        Raises:
            FileNotFoundError: a list file is missing.
            ValueError: a list file cannot be read at all.
            NotImplementedError: the dataset does not define it.
        """
        raise NotImplementedError(
            f"{cls.__name__} defines no lists_to_verify(); the verifier cannot check it"
        )

    def __init__(self, cfg: CfgNode, split: str, model: Optional[ModelInfo] = None):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.cfg = cfg
        self.spec = ClipSpec.from_cfg(cfg)
        self.split = split
        self.base_grid = SamplingGrid.from_shape(
            cfg, cfg.DATA.NUM_FRAMES, cfg.DATA.TRAIN_CROP_SIZE
        )
        # How clips are packed for the model (pathways): the run's description.
        self._model = describe_model(cfg) if model is None else model
        loader = cfg.DATA_LOADER
        self._threads = (
            loader.DECODE_THREADS if loader.ENABLE_MULTI_THREAD_DECODE else None
        )
        self._cache_bytes = (
            int(loader.FRAME_CACHE_MB * 2**20) if loader.FRAME_CACHE else 0
        )
        self._cache: Optional[FrameCache] = None
        self._reformatter = None  # PyAV's VideoReformatter, made when needed
        self._reported: set = set()
        self._last_view: Optional[tuple] = None  # (key, frames, classes)
        self.reader = RenditionReader.from_config(cfg, split, self.base_grid)
        self.num_videos = self._load_annotations()
        if self.num_videos == 0:
            raise DataError(
                f"{self.display_name} {split}: no videos found ({self.source})"
            )
        logger.info(
            "%s %s: %d videos, %d entries (%s)%s",
            self.display_name,
            split,
            self.num_videos,
            len(self),
            self.source,
            self.reader.describe(),
        )

    # ----------------------------------------------------------- subclass API
    source = ""  # where the annotations came from, for messages

    def _load_annotations(self) -> int:
        """Reads the split's annotations; returns the number of videos."""
        raise NotImplementedError

    def _load_clip(
        self, video_idx: int, grid: SamplingGrid, fraction: Optional[float], rng: Rng
    ) -> Tuple[torch.Tensor, Any, Optional[Tuple[int, int]]]:
        """Decodes a clip: (uint8 ``[T, H, W, C]`` frames, label, geometry).

        Args:
            video_idx: the video.
            grid: frames and stride range (training) or the config's shape.
            fraction: temporal position in [0, 1] (None: random, training).
            rng: random source (None outside training).

        Returns:
            tuple: the frames, the label, and the (height, width) of the
            original when the frames come from a lower-resolution rendition
            (``RenditionReader.read``; None otherwise).
        """
        raise NotImplementedError

    def video_path(self, video_idx: int) -> str:
        """The video's file or frame folder (for messages): its ``_paths``."""
        return self._paths[video_idx]

    def video_id(self, video_idx: int) -> str:
        """The video's id: its file or folder name without the extension (frame
        list datasets: the list's ``original_vido_id``)."""
        name = os.path.basename(self.video_path(video_idx).rstrip("/"))
        return os.path.splitext(name)[0]

    def video_label(self, video_idx: int) -> Any:
        """The video's label: an int, or a multi-hot float tensor (of the
        class ids in ``_labels``)."""
        return self._label(self._labels[video_idx])

    @property
    def num_temporal_views(self) -> int:
        """Temporal clips per video at test."""
        return self.spec.ensemble_views

    def _test_fraction(self, temporal_idx: int, num_temporal: int) -> float:
        """Position of test clip ``temporal_idx`` (default: Kinetics rule)."""
        return temporal_idx / num_temporal

    # ------------------------------------------------------------ public API
    @property
    def num_spatial_crops(self) -> int:
        """Spatial crops per temporal view at test."""
        return self.spec.spatial_crops

    def __len__(self) -> int:
        if self.split == "test":
            return self.num_videos * self.num_temporal_views * self.num_spatial_crops
        return self.num_videos

    def video_labels(self) -> List[Any]:
        """The label of every video, in video order."""
        return [self.video_label(v) for v in range(self.num_videos)]

    def view(self, index: int) -> Tuple[int, int, int]:
        """(video_idx, temporal_idx, spatial_idx) of an entry.

        Args:
            index: entry index.

        Returns:
            tuple: video, temporal view (-1 random) and crop position
            (-1 random, 0 left/top, 1 centre, 2 right/bottom).
        """
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} entries")
        if self.split == "train":
            return index, -1, -1
        if self.split == "val":
            return index, 0, 1
        crops = self.num_spatial_crops
        video, rest = divmod(index, self.num_temporal_views * crops)
        temporal, spatial = divmod(rest, crops)
        return video, temporal, (spatial if crops > 1 else 1)

    def __getitem__(self, request: Any):
        index, grid, seed = parse_request(request)
        if self.split == "train":
            return self._get_train(
                index, self.base_grid if grid is None else grid, seed
            )
        if grid is not None:
            raise ValueError(
                f"a sampling grid is only valid for 'train', not {self.split!r}"
            )
        return self._get_eval(index)

    # -------------------------------------------------------------- internals
    def frame_cache(self) -> Optional[FrameCache]:
        """This process's decoded-frame cache (None when disabled)."""
        if self._cache is None and self._cache_bytes > 0:
            self._cache = FrameCache(self._cache_bytes)
        return self._cache

    def reformatter(self):
        """This process's RGB converter, PyAV's ``VideoReformatter`` (reused:
        creating one per clip is costly; PyAV imported here, for videos only)."""
        if self._reformatter is None:
            from av.video.reformatter import VideoReformatter

            self._reformatter = VideoReformatter()
        return self._reformatter

    def __getstate__(self):
        # Per-process state is not pickled (workers started by "spawn").
        state = self.__dict__.copy()
        state["_cache"] = state["_reformatter"] = state["_last_view"] = None
        return state

    def rendition(self, grid: SamplingGrid) -> Optional[float]:
        """The rendition (scale) a training grid reads (None: the original)."""
        return self.reader.scale(grid)

    def read_frame_files(self, paths: List[str], scale: Optional[float]):
        """A clip's frame files or their rendition (``read_frame_files``)."""
        return read_frame_files(paths, scale, self.frame_cache())

    def _check_label(self, label: int, where: str) -> None:
        """Raises one line naming ``where`` when a class id is out of range."""
        problem = label_problem(label, self.spec.num_classes)
        if problem:
            raise DataError(f"{where}: {problem}")

    def _label(self, classes) -> Any:
        """An int label, or a multi-hot float tensor for multi-label data."""
        if isinstance(classes, int) and not self.spec.multi_label:
            return classes
        target = torch.zeros(self.spec.num_classes, dtype=torch.float32)
        ids = [classes] if isinstance(classes, int) else list(classes)
        if ids:
            target[torch.tensor(ids, dtype=torch.long)] = 1.0
        return target

    def _finish(
        self, frames, short_side, crop, spatial_idx, rng, geometry=None
    ) -> List[torch.Tensor]:
        flip = spatial_idx == -1 and self.spec.random_flip
        out = spatial_transform(
            frames, short_side, crop, spatial_idx, flip, rng, geometry
        )
        out = to_clip_format(out, self.spec.reverse_channels)
        model = self._model
        return pack_pathways(
            out, model.num_pathways > 1, model.alpha, model.slow_sampling
        )

    def _report(self, index: int, err: DecodeError) -> None:
        if err.path not in self._reported:
            self._reported.add(err.path)
            logger.warning("Bad video (entry %d) skipped: %s", index, err)

    def _get_train(self, index: int, grid: SamplingGrid, seed: Optional[int]):
        if seed is None:
            # Unseeded request: random choices from the process's RNG, bad-video
            # replacements still deterministic from (RNG_SEED, index).
            clip_seed = random.getrandbits(64)
            base = mix_seed(self.spec.rng_seed, index)
        else:
            clip_seed = base = seed
        failures: List[str] = []
        current = index
        for attempt in range(self.max_consecutive_failures + 1):
            rng = random.Random(
                clip_seed if attempt == 0 else mix_seed(base, attempt, 1)
            )
            try:
                frames, classes, geometry = self._load_clip(current, grid, None, rng)
            except DecodeError as err:
                self._report(current, err)
                failures.append(str(err))
                if len(self) == 1:
                    break
                pick = random.Random(mix_seed(base, attempt, 2)).randrange(
                    len(self) - 1
                )
                current = pick + 1 if pick >= current else pick
                continue
            short = jitter_size(
                grid.jitter_min, grid.jitter_max, rng, self.spec.inv_uniform_sample
            )
            pathways = self._finish(frames, short, grid.crop_size, -1, rng, geometry)
            extras = self._extras(current, -1, -1, len(failures))
            return pathways, self._label(classes), current, extras
        raise DataError(
            f"{self.display_name} {self.split}: {len(failures)} videos in a row "
            f"failed to load (from entry {index}); check the data with "
            "tools/verify_dataset.py; last: " + " | ".join(failures[-3:])
        )

    def _get_eval(self, index: int):
        video, temporal, spatial = self.view(index)
        if self.split == "val":
            fraction = 0.5
        else:
            fraction = self._test_fraction(temporal, self.num_temporal_views)
        try:
            frames, classes = self._view_clip(video, fraction)
        except DecodeError as err:
            raise RuntimeError(
                f"{self.display_name} {self.split} entry {index} (video {video}) "
                f"failed to load: {err}"
            ) from err
        crop = self.spec.test_crop_size
        pathways = self._finish(frames, self.test_short_side(), crop, spatial, None)
        return (
            pathways,
            self._label(classes),
            index,
            self._extras(video, temporal, spatial, 0),
        )

    def _view_clip(self, video: int, fraction: float):
        """(frames, classes) of an evaluation view, decoded once for the
        consecutive entries that crop it (a test view's spatial crops)."""
        key = (video, fraction)
        if self._last_view is None or self._last_view[0] != key:
            frames, classes, _ = self._load_clip(video, self.base_grid, fraction, None)
            self._last_view = (key, frames, classes)
        return self._last_view[1:]

    def test_short_side(self) -> int:
        """Short side of val/test frames before cropping: TEST_CROP_SIZE.

        Returns:
            int: the size; datasets override it where the reference differs.
        """
        return self.spec.test_crop_size

    @staticmethod
    def _extras(video: int, temporal: int, spatial: int, failed: int) -> Dict[str, int]:
        return {
            "video_idx": video,
            "temporal_idx": temporal,
            "spatial_idx": spatial,
            "num_failed": failed,
        }


class FrameListDataset(VideoDataset):
    """A video dataset of frame lists (SSv2, Charades).

    ``_load_annotations`` fills ``_names`` (each video's id in the list,
    ``original_vido_id``), ``_paths`` (its frame files, in order) and
    ``_labels`` (its class ids). Subclasses implement ``_frame_indices`` and
    may override ``_clip_classes``.
    """

    _names: List[str]

    def video_path(self, video_idx: int) -> str:
        """The folder of the video's frames (its id when they have none)."""
        return os.path.dirname(self._paths[video_idx][0]) or self._names[video_idx]

    def video_id(self, video_idx: int) -> str:
        """The video's id in the frame list."""
        return self._names[video_idx]

    def _frame_indices(
        self, count: int, grid: SamplingGrid, fraction: Optional[float], rng: Rng
    ) -> List[int]:
        """The frames of a clip among the video's ``count`` (``_load_clip``'s
        arguments)."""
        raise NotImplementedError

    def _clip_classes(self, video_idx: int, seq: List[int]) -> Any:
        """The class ids of a clip of frames ``seq``: by default the video's."""
        return self._labels[video_idx]

    def _load_clip(
        self, video_idx: int, grid: SamplingGrid, fraction: Optional[float], rng: Rng
    ):
        paths = self._paths[video_idx]
        seq = self._frame_indices(len(paths), grid, fraction, rng)
        chosen = [paths[i] for i in seq]
        frames, geometry = self.reader.read(
            grid,
            self.video_path(video_idx),
            lambda scale: self.read_frame_files(chosen, scale),
        )
        return frames, self._clip_classes(video_idx, seq), geometry
