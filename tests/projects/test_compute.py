"""Training compute of a run (projects/multigrid/multigrid_study/compute.py) and
the per-shape GFLOPs it sums (slowfast/models/model_stats.py)."""

import pytest
from multigrid_study.compute import parse_shape, training_gflops

from slowfast.config import load_config
from slowfast.models.model_stats import clip_gflops_fn

DEMO = "configs/Demo/Kinetics_I3D_tiny.yaml"


def test_parse_shape():
    assert parse_shape("32x4x68") == (32, 4, 68)
    for bad in ("32x4", "ax4x68", "0x4x68", ""):
        with pytest.raises(ValueError, match="CLIPSxFRAMESxCROP"):
            parse_shape(bad)


def test_training_gflops_sums_clips_times_per_clip_cost():
    calls = []

    def fn(frames, crop):
        calls.append((frames, crop))
        return frames * crop / 100.0

    clips = {"32x4x50": 64, "64x4x50": 32, "4x8x100": 8}
    assert training_gflops(clips, fn) == pytest.approx(96 * 2.0 + 8 * 8.0)
    assert calls == [(4, 50), (8, 100)]  # once per (frames, crop)
    assert training_gflops({}, fn) == 0.0


def test_clip_gflops_rounding_at_strides():
    fn = clip_gflops_fn(load_config([DEMO], ["MODEL.NUM_CLASSES", "10"]))
    base = fn(8, 64)
    assert fn(4, 64) == pytest.approx(base / 2, rel=0.05)  # linear in frames
    # A crop whose maps round up at the strides costs more than its area says.
    assert fn(8, 45) > base * (45 / 64) ** 2
    assert fn(8, 64) == base  # deterministic
