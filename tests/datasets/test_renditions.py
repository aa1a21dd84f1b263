"""Renditions (lower-resolution copies for multigrid's coarse shapes): names,
sizes and choice of scale, the manifest, and datasets that read them (the same
frames and field of view as the original; a missing one falls back to it)."""

import json
import logging
import os
import random

import numpy as np
import pytest
import torch

from slowfast.datasets import SamplingGrid, build_dataset
from slowfast.datasets.lists import DataError
from slowfast.datasets.renditions.files import (
    MANIFEST,
    Renditions,
    load_renditions,
    rendition_path,
    scaled_size,
    suffix,
    write_renditions,
)
from slowfast.datasets.transforms import spatial_transform
from tests.helpers.rendition_utils import SCALES, clip_cfg
from tests.helpers.video_utils import (
    frame_index,
    tiny_cfg,
    write_kinetics_list,
    write_video,
)
from workshop.dataprep.demo.writers import write_jpeg_frames, write_mp4
from workshop.dataprep.prepare.common import reencode


def test_rendition_names_sizes_and_choice():
    assert suffix(0.7071) == ".r71" and suffix(0.5) == ".r50"
    assert scaled_size(340, 256, 0.7071) == (242, 182)
    assert scaled_size(340, 256, 0.5) == (170, 128)
    assert scaled_size(256, 340, 0.5) == (128, 170)
    assert rendition_path("a/b/c.mp4", 0.5) == "a/b/c.r50.mp4"
    assert rendition_path("f/vid/000001.jpg", 0.7071) == "f/vid.r71/000001.jpg"
    renditions = Renditions(SCALES)
    # The multigrid crops of a 224 base: 158 (x0.705) and 112 (x0.5).
    assert renditions.pick(158 / 224) == 0.7071
    assert renditions.pick(112 / 224) == 0.5
    assert renditions.pick(0.3) == 0.5
    assert renditions.pick(0.8) is None and renditions.pick(1.0) is None


def test_manifest_round_trip_and_one_line_errors(tmp_path):
    assert load_renditions(str(tmp_path)) is None
    write_renditions(str(tmp_path), [0.5, 0.7071])
    assert json.loads((tmp_path / MANIFEST).read_text()) == {"scales": [0.7071, 0.5]}
    assert load_renditions(str(tmp_path)) == Renditions((0.7071, 0.5))
    write_renditions(str(tmp_path), [])
    assert not (tmp_path / MANIFEST).exists()
    (tmp_path / MANIFEST).write_text('{"sizes": [128]}')
    with pytest.raises(ValueError, match=MANIFEST):
        load_renditions(str(tmp_path))
    # A dataset over a folder with a bad manifest stops at construction.
    write_kinetics_list(str(tmp_path / "train.csv"), [("v.mp4", 0)])
    with pytest.raises(DataError, match="renditions.json"):
        build_dataset("kinetics", tiny_cfg(str(tmp_path)), "train")


def test_renditions_keep_the_sampled_frames(tmp_path):
    """Grey frames whose value names their index: a coarse grid reads the same
    source frames from a rendition as from the original."""
    write_video(str(tmp_path / "src.mp4"), 90, 96, 64, gop=50)
    reencode(str(tmp_path / "src.mp4"), str(tmp_path / "v.mp4"), 64, renditions=SCALES)
    write_renditions(str(tmp_path), SCALES)
    write_kinetics_list(str(tmp_path / "train.csv"), [("v.mp4", 0)])
    on = build_dataset("kinetics", clip_cfg(tmp_path), "train")
    off = build_dataset(
        "kinetics", clip_cfg(tmp_path, "DATA.USE_RENDITIONS", "False"), "train"
    )
    grid = SamplingGrid.from_shape(on.cfg, 2, 28)
    assert on.rendition(grid) == 0.5 and off.rendition(grid) is None
    for seed in range(6):
        clip_on, clip_off = on[(0, grid, seed)][0][0], off[(0, grid, seed)][0][0]
        assert clip_on.shape == clip_off.shape == (3, 2, 28, 28)
        steps_on = [frame_index(v) for v in clip_on.float().mean(dim=(0, 2, 3))]
        steps_off = [frame_index(v) for v in clip_off.float().mean(dim=(0, 2, 3))]
        assert steps_on == steps_off


def _smooth_scene(root, backend: str):
    """A dataset of one 96 x 64 video of smooth moving waves, as an mp4 with
    renditions or as a frame folder with renditions."""
    y, x = np.mgrid[0:64, 0:96].astype(np.float32)
    frames = []
    for t in range(60):
        wave = np.sin(2 * np.pi * (x + 0.7 * t) / 41) * np.cos(2 * np.pi * y / 37)
        blob = np.exp(-((x - 30 - t / 2) ** 2 + (y - 30) ** 2) / 120)
        rgb = [128 + 70 * wave, 128 + 100 * blob - 40 * wave, 100 + 50 * np.cos(x / 9)]
        frames.append(np.clip(np.stack(rgb, -1), 0, 255).astype(np.uint8))
    frames = np.stack(frames)
    if backend == "pyav":
        write_mp4(str(root / "src.mp4"), frames, 30, "libx264")
        reencode(str(root / "src.mp4"), str(root / "v.mp4"), 64, renditions=SCALES)
        entry = "v.mp4"
    else:
        write_jpeg_frames(str(root), "v", "{:06d}.jpg", frames, scales=SCALES)
        entry = "v"
    write_renditions(str(root), SCALES)
    write_kinetics_list(str(root / "train.csv"), [(entry, 0)])


@pytest.mark.parametrize("backend", ["pyav", "frames"])
def test_coarse_grids_read_renditions_with_the_same_field_of_view(tmp_path, backend):
    _smooth_scene(tmp_path, backend)
    opts = ["DATA.DECODING_BACKEND", backend]
    on = build_dataset("kinetics", clip_cfg(tmp_path, *opts), "train")
    off_cfg = clip_cfg(tmp_path, *opts, "DATA.USE_RENDITIONS", "False")
    off = build_dataset("kinetics", off_cfg, "train")
    assert on.rendition(on.base_grid) is None
    for crop, scale in ((40, 0.7071), (28, 0.5)):
        grid = SamplingGrid.from_shape(on.cfg, 4, crop)
        assert on.rendition(grid) == scale
        same, other = [], []
        for seed in range(8):
            a = on[(0, grid, seed)][0][0].float()
            b = off[(0, grid, seed)][0][0].float()
            c = off[(0, grid, seed + 100)][0][0].float()  # another view
            same.append((a - b).abs().mean().item())
            other.append((b - c).abs().mean().item())
        # The same view up to resampling (a sub-pixel shift of these waves
        # costs a few grey levels): far below another view's difference.
        assert np.mean(same) < 0.25 * np.mean(other), (crop, same, other)


def _ramps(height: int, width: int, orig_h: int, orig_w: int) -> torch.Tensor:
    """Frames whose red / green values give each pixel's centre in the
    coordinates of a ``orig_h x orig_w`` original (x 2 and x 3)."""
    x = (np.arange(width) + 0.5) * orig_w / width - 0.5
    y = (np.arange(height) + 0.5) * orig_h / height - 0.5
    frame = np.zeros((height, width, 3), np.float32)
    frame[..., 0] = 20 + 2 * x[None, :]
    frame[..., 1] = 20 + 3 * y[:, None]
    return torch.from_numpy(np.repeat(frame[None], 2, 0).round().astype(np.uint8))


@pytest.mark.parametrize("scale", [0.7071, 0.5])
def test_rendition_crops_cover_the_original_field_of_view(scale):
    """A crop of a rendition, placed with the original's geometry, sees the
    original's pixels to within one rendition pixel."""
    # 98 x 64: neither rendition keeps the aspect ratio exactly.
    original = _ramps(64, 98, 64, 98)
    small_w, small_h = scaled_size(98, 64, scale)
    assert small_w / small_h != 98 / 64
    small = _ramps(small_h, small_w, 64, 98)
    errors = []
    for seed in range(20):
        short = 64 + seed  # the jittered short side (64-83) and 40 px crops
        a = spatial_transform(original, short, 40, -1, True, random.Random(seed))
        b = spatial_transform(
            small, short, 40, -1, True, random.Random(seed), geometry=(64, 98)
        )
        dx = (a[:, 0].float() - b[:, 0].float()) / 2  # original pixels
        dy = (a[:, 1].float() - b[:, 1].float()) / 3
        errors.append(max(dx.abs().mean().item(), dy.abs().mean().item()))
    assert max(errors) < 1.0 / scale, errors


def test_missing_rendition_reads_the_original_and_warns_once(tmp_path, caplog):
    write_video(str(tmp_path / "src.mp4"), 40, 96, 64)
    reencode(str(tmp_path / "src.mp4"), str(tmp_path / "v.mp4"), 64, renditions=SCALES)
    write_renditions(str(tmp_path), SCALES)
    os.remove(rendition_path(str(tmp_path / "v.mp4"), 0.5))
    write_kinetics_list(str(tmp_path / "train.csv"), [("v.mp4", 0)])
    ds = build_dataset("kinetics", clip_cfg(tmp_path), "train")
    grid = SamplingGrid.from_shape(ds.cfg, 4, 28)
    off_cfg = clip_cfg(tmp_path, "DATA.USE_RENDITIONS", "False")
    off = build_dataset("kinetics", off_cfg, "train")
    with caplog.at_level(logging.WARNING):
        for seed in range(3):
            frames, _, index, extras = ds[(0, grid, seed)]
            assert frames[0].shape == (3, 4, 28, 28)
            assert index == 0 and extras["num_failed"] == 0
            # The original is read with the clip's own random draws.
            assert torch.equal(frames[0], off[(0, grid, seed)][0][0])
    warnings = [r for r in caplog.records if "Rendition 0.5" in r.getMessage()]
    assert len(warnings) == 1 and "prepare_dataset" in warnings[0].getMessage()
