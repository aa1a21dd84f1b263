"""Tests of spatial transforms, pathway packing, temporal sampling and grids."""

import dataclasses
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from slowfast.config import load_config
from slowfast.datasets.grid import SamplingGrid
from slowfast.datasets.sampling import (
    charades_fraction,
    charades_indices,
    kinetics_fraction,
    kinetics_positions,
    positions_to_indices,
    ssv2_indices,
)
from slowfast.datasets.transforms import (
    crop_resize,
    jitter_size,
    pack_pathways,
    short_side_size,
    spatial_transform,
    to_clip_format,
    uniform_crop_offset,
)
from slowfast.models import describe_model
from slowfast.models.input_norm import InputNormalizer
from tests.helpers.video_utils import tiny_cfg


def _ramp(t=3, h=30, w=40):
    """uint8 [T, H, W, 3] whose pixel (y, x) encodes y in R and x in G."""
    ys = torch.arange(h).view(1, h, 1).expand(t, h, w)
    xs = torch.arange(w).view(1, 1, w).expand(t, h, w)
    frames = torch.stack([ys * 4, xs * 4, torch.full_like(ys, 9)], dim=-1)
    return frames.to(torch.uint8)


def test_short_side_size_matches_reference_rounding():
    assert short_side_size(30, 40, 24) == (24, 32)
    assert short_side_size(45, 67, 20) == (20, 29)  # floor(67 / 45 * 20) = 29
    assert short_side_size(67, 45, 20) == (29, 20)
    assert short_side_size(10, 10, 7) == (7, 7)


def test_jitter_size_ranges():
    rng = random.Random(0)
    sizes = [jitter_size(24, 40, rng) for _ in range(300)]
    assert min(sizes) >= 24 and max(sizes) <= 40 and len(set(sizes)) > 10
    inv = [jitter_size(24, 40, rng, inverse_uniform=True) for _ in range(300)]
    assert min(inv) >= 24 and max(inv) <= 40
    # Inverse-uniform favours small sizes.
    assert np.mean(inv) < np.mean(sizes)


def test_uniform_crop_positions():
    # Wide frame: crops move along x.
    assert uniform_crop_offset(20, 29, 20, 0) == (0, 0)
    assert uniform_crop_offset(20, 29, 20, 1) == (0, 5)
    assert uniform_crop_offset(20, 29, 20, 2) == (0, 9)
    # Tall frame: crops move along y.
    assert uniform_crop_offset(29, 20, 20, 0) == (0, 0)
    assert uniform_crop_offset(29, 20, 20, 2) == (9, 0)
    with pytest.raises(ValueError):
        uniform_crop_offset(20, 20, 10, 3)


def test_crop_without_resize_is_exact_slice():
    frames = _ramp()
    out = crop_resize(frames, 30, 20, lambda h, w: (3, 7))
    assert out.shape == (3, 3, 20, 20)
    assert torch.equal(out, frames[:, 3:23, 7:27].permute(0, 3, 1, 2))


def test_crop_before_resize_matches_resize_then_crop():
    frames = _ramp(2, 30, 40)
    for short, crop, offset in ((45, 30, (5, 12)), (24, 16, (4, 9)), (20, 20, (0, 3))):
        out = crop_resize(frames, short, crop, lambda h, w, o=offset: o)
        h, w = short_side_size(30, 40, short)
        full = F.interpolate(
            frames.permute(0, 3, 1, 2).float(), size=(h, w), mode="bilinear"
        )
        ref = full[:, :, offset[0] : offset[0] + crop, offset[1] : offset[1] + crop]
        assert out.shape == ref.shape
        # Same window of the scene, up to under a pixel of resampling offset
        # (the ramps step by 4 grey levels per source pixel).
        assert (out.float() - ref).abs().mean() < 3.0


def test_flip_and_random_crop_are_seeded():
    frames = _ramp()
    a = spatial_transform(frames, 36, 20, -1, True, random.Random(3))
    b = spatial_transform(frames, 36, 20, -1, True, random.Random(3))
    assert torch.equal(a, b)
    flips = set()
    for seed in range(20):
        out = spatial_transform(frames, 30, 30, -1, True, random.Random(seed))
        green = out[0, 1, 0].float()
        flips.add(bool(green[0] > green[-1]))  # x decreasing: flipped
    assert flips == {True, False}
    no_flip = spatial_transform(frames, 30, 30, -1, False, random.Random(0))
    assert no_flip[0, 1, 0, 0] < no_flip[0, 1, 0, -1]


def test_clip_format_and_model_normalisation_with_reversed_channels():
    frames = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 3, 1, 1)
    mean, std = [0.1, 0.2, 0.3], [0.5, 0.25, 0.1]
    clip = to_clip_format(frames)
    assert clip.shape == (3, 1, 1, 1) and clip.dtype == torch.uint8
    assert clip.is_contiguous()
    out = InputNormalizer(mean, std)(clip[None])
    assert out.shape == (1, 3, 1, 1, 1) and out.dtype == torch.float32
    expect = [(0 - 0.1) / 0.5, (0.2 - 0.2) / 0.25, (1 - 0.3) / 0.1]
    assert torch.allclose(out.flatten(), torch.tensor(expect), atol=1e-5)
    # DATA.REVERSE_INPUT_CHANNEL: BGR clips, normalised with RGB statistics.
    rev = to_clip_format(frames, reverse_channels=True)
    assert rev.flatten().tolist() == [255, 51, 0]
    rev_out = InputNormalizer(mean[::-1], std[::-1])(rev[None])
    assert torch.allclose(rev_out.flatten(), torch.tensor(expect[::-1]), atol=1e-5)
    last = InputNormalizer(mean, std, channels_last=True)(clip[None])
    assert last.is_contiguous(memory_format=torch.channels_last_3d)
    assert torch.equal(last, out)
    normalised = torch.randn(1, 3, 1, 1, 1)
    assert InputNormalizer(mean, std)(normalised) is normalised  # float: as is
    with pytest.raises(ValueError, match="DATA.MEAN and DATA.STD have 3"):
        InputNormalizer(mean, std)(torch.zeros(1, 2, 1, 1, 1, dtype=torch.uint8))


def test_pack_pathways():
    frames = torch.arange(16.0).view(1, 16, 1, 1).expand(3, 16, 2, 2)
    single = pack_pathways(frames, False, 4)
    assert len(single) == 1 and single[0] is frames
    slow, fast = pack_pathways(frames, True, 4)
    assert fast is frames
    assert slow[0, :, 0, 0].tolist() == torch.linspace(0, 15, 4).long().float().tolist()
    assert slow[0, :, 0, 0].tolist() == [0.0, 5.0, 10.0, 15.0]
    with pytest.raises(ValueError, match="ALPHA"):
        pack_pathways(frames[:, :3], True, 4)


@pytest.mark.parametrize(
    "num, sampling, want",
    [
        (16, "linspace", [0, 5, 10, 15]),
        (8, "linspace", [0, 7]),
        (4, "linspace", [0]),
        (16, "stride", [0, 4, 8, 12]),
        (8, "stride", [0, 4]),
        (4, "stride", [0]),
        (10, "stride", [0, 4]),
    ],
)
def test_slow_pathway_frames_per_sampling(num, sampling, want):
    # "stride" takes the frames where the fusion conv (temporal stride ALPHA,
    # padding FUSION_KERNEL_SZ // 2) centres its outputs: 0, ALPHA, 2 ALPHA..
    frames = torch.arange(float(num)).view(1, num, 1, 1)
    slow, fast = pack_pathways(frames, True, 4, sampling)
    assert slow[0, :, 0, 0].tolist() == [float(i) for i in want]
    assert fast is frames


def test_slowfast_tells_the_datasets_its_slow_sampling():
    opts = ["MODEL.ARCH", "slowfast", "MODEL.MODEL_NAME", "SlowFast"]
    assert describe_model(load_config(opts=opts)).slow_sampling == "linspace"
    opts += ["SLOWFAST.SLOW_SAMPLING", "stride"]
    assert describe_model(load_config(opts=opts)).slow_sampling == "stride"


def test_kinetics_positions():
    # Test clips: start = (video - span) * i / n; span = 4 * 2 * 60 / 30 = 16.
    pos = kinetics_positions(100, 60.0, 4, 2, 30, kinetics_fraction(1, 2), None)
    assert np.allclose(pos, np.linspace(42, 57, 4))
    first = kinetics_positions(100, 30.0, 4, 2, 30, kinetics_fraction(0, 3), None)
    assert first[0] == 0 and np.isclose(first[-1], 7)
    rng = random.Random(0)
    starts = [kinetics_positions(20, 30.0, 4, 2, 30, None, rng)[0] for _ in range(200)]
    assert min(starts) >= 0 and max(starts) <= 12 and max(starts) > 10
    # Shorter than the span: starts at 0, runs past the end (repeats last).
    short = kinetics_positions(5, 30.0, 4, 2, 30, None, rng)
    assert short[0] == 0 and positions_to_indices(short, 5) == [0, 2, 4, 4]


def test_ssv2_indices():
    assert ssv2_indices(9, 4, None) == [1, 3, 5, 7]
    rng = random.Random(0)
    for _ in range(50):
        seq = ssv2_indices(9, 4, rng)
        assert all(lo <= s <= hi for s, lo, hi in zip(seq, [0, 2, 4, 6], [2, 4, 6, 8]))
    assert ssv2_indices(2, 4, None) == [0, 0, 0, 1]


def test_charades_indices():
    # Test clip i of n: start = round((L - clip) * i / (n - 1)).
    assert charades_indices(20, 4, 2, charades_fraction(0, 3), None) == [0, 2, 4, 6]
    assert charades_indices(20, 4, 2, charades_fraction(2, 3), None) == [13, 15, 17, 19]
    assert charades_indices(20, 4, 2, charades_fraction(0, 1), None)[0] == 6  # centre
    rng = random.Random(1)
    for _ in range(50):
        seq = charades_indices(5, 4, 2, None, rng)  # clip 7 > 5 frames: clamped
        assert min(seq) >= 0 and max(seq) <= 4


def test_sampling_grid_from_shape(tmp_path):
    opts = ["DATA.NUM_FRAMES", 8, "DATA.SAMPLING_RATE", 4, "DATA.TRAIN_CROP_SIZE", 32]
    opts += ["DATA.TRAIN_JITTER_SCALES", "[40, 48]"]
    cfg = tiny_cfg(str(tmp_path), "kinetics", *opts)
    base = SamplingGrid.from_shape(cfg, 8, 32)
    assert base == SamplingGrid(8, 32, 4, 4, 40, 48)
    small = SamplingGrid.from_shape(cfg, 2, 16)
    assert (small.min_rate, small.max_rate) == (4, 16)
    # The same fields of view at half the resolution: [40, 48] * 16 / 32.
    assert (small.jitter_min, small.jitter_max) == (20, 24)
    assert SamplingGrid.from_shape(cfg, 4, 23).jitter_min == 29  # round(40 * 23 / 32)
    cfg = tiny_cfg(str(tmp_path), "kinetics", *opts, "MULTIGRID.JITTER_SCALE_MODE",
                   "lower_bound")  # fmt: skip
    small = SamplingGrid.from_shape(cfg, 2, 16)
    assert (small.jitter_min, small.jitter_max) == (20, 48)
    with pytest.raises(ValueError):
        SamplingGrid(4, 16, 3, 2, 20, 30)
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.num_frames = 3
