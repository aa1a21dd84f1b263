"""The short cycle's views: never larger than the long-cycle shape they shrink,
and raised where a small crop or stride would leave a smaller last feature map
than the paper's 112 px view at stride 32 (MULTIGRID.SHORT_CYCLE_MIN_MAP)."""

import logging
import math
import os
from dataclasses import replace

import pytest

from slowfast.config import ConfigError, load_config
from slowfast.models.describe import describe_model
from slowfast.multigrid import MultigridSchedule
from slowfast.multigrid.shapes import resolve_short_factors
from tests.conftest import REPO_ROOT

PAPER = (0.5, 0.5**0.5)


def _schedule(*opts: str) -> MultigridSchedule:
    cfg = load_config(
        [],
        [
            "TRAIN.BATCH_SIZE", "8",
            "DATA.NUM_FRAMES", "8",
            "DATA.TRAIN_CROP_SIZE", "64",
            "SOLVER.LR_POLICY", "steps_with_relative_lrs",
            "SOLVER.STEPS", "[0, 48, 68]",
            "SOLVER.LRS", "[1, 0.1, 0.01]",
            "SOLVER.MAX_EPOCH", "80",
            "MULTIGRID.LONG_CYCLE", "True",
            "MULTIGRID.SHORT_CYCLE", "True",
            *opts,
        ],
    )  # fmt: skip
    # The default model's stride (the short cycle's rule) with any clip
    # length: these tests are about crops.
    model = replace(describe_model(cfg), min_frames=1, alpha=1)
    return MultigridSchedule.from_cfg(cfg, 1, model)


def _crops(schedule: MultigridSchedule, entry) -> list:
    return [crop for _, _, crop, _ in schedule.cycle(entry)]


def test_views_never_exceed_the_long_cycle_crop():
    # Absolute factors of a 64 px base give 56 / 60 px views; at a 45 px
    # long-cycle shape they are that shape's crop, not larger.
    sched = _schedule(
        "MULTIGRID.SHORT_CYCLE_FACTORS", "[0.875, 0.935414]",
        "MULTIGRID.SHORT_CYCLE_MIN_MAP", "0",
    )  # fmt: skip
    first, last = sched.entries[0], sched.entries[-1]
    assert first.crop_size == 45
    assert _crops(sched, first) == [45, 45, 45]
    assert [f for *_, f in sched.cycle(first)] == [8, 8, 8]
    assert _crops(sched, last) == [56, 60, 64]


def test_paper_factors_are_unchanged_by_the_cap():
    sched = _schedule("MULTIGRID.SHORT_CYCLE_MIN_MAP", "0")
    assert _crops(sched, sched.entries[0]) == [32, 45, 45]
    assert _crops(sched, sched.entries[-1]) == [32, 45, 64]


@pytest.mark.parametrize(
    "crop, stride, expected",
    [
        (224, 32, PAPER),  # the paper: 112 px / 32 = 3.5, unchanged
        (256, 32, PAPER),  # wider maps than the paper's, unchanged
        (64, 16, (0.875, 0.935414)),  # the demos: 56 px / 16 = 3.5
        (80, 16, (0.7, 0.83666)),
        (64, 32, (1.0, 1.0)),  # 3.5 x 32 px is more than the crop
    ],
)
def test_rule_raises_factors_to_the_papers_map(crop, stride, expected):
    factors = resolve_short_factors(PAPER, 3.5, stride, crop)
    assert factors == pytest.approx(expected, abs=1e-6)
    smallest = min(factors)
    assert smallest * crop / stride >= 3.5 - 1e-6 or smallest == 1.0
    # The other factor stays the square root of the smallest, as 0.7071 is.
    assert max(factors) == pytest.approx(math.sqrt(smallest), abs=1e-6)


def test_rule_off_keeps_the_factors():
    assert resolve_short_factors(PAPER, 0, 16, 64) == PAPER
    assert resolve_short_factors((0.6, 0.8), 0, 16, 64) == (0.6, 0.8)


def _demo(name: str, *opts: str):
    path = os.path.join(REPO_ROOT, "configs", "Demo", name)
    return MultigridSchedule.from_cfg(load_config([path], list(opts)), 1)


@pytest.mark.parametrize(
    "name",
    ["Kinetics_I3D_tiny_multigrid.yaml", "Kinetics_SLOWFAST_tiny_multigrid.yaml"],
)
def test_demo_views_leave_the_papers_last_map(name, caplog):
    with caplog.at_level(logging.INFO, logger="slowfast.multigrid.from_config"):
        sched = _demo(name)
    assert sched.short_factors == pytest.approx((0.875, 0.935414))
    # Total stride 16: 56 px views leave 4 x 4 maps (3.5 rounded up), as
    # 112 px views do at stride 32; 32 px views left 2 x 2.
    assert _crops(sched, sched.entries[-1]) == [56, 60, 64]
    assert "SHORT_CYCLE_FACTORS [0.5, 0.7071] raised to [0.875, 0.9354]" in caplog.text
    off = _demo(name, "MULTIGRID.SHORT_CYCLE_MIN_MAP", "0")
    assert _crops(off, off.entries[-1]) == [32, 45, 64]


def test_negative_min_map_is_rejected():
    with pytest.raises(ConfigError, match="MULTIGRID.SHORT_CYCLE_MIN_MAP"):
        load_config([], ["MULTIGRID.SHORT_CYCLE_MIN_MAP", "-1"])
