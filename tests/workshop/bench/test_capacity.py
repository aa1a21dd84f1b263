"""Tests of the loader capacity arithmetic (workshop/bench/capacity.py)."""

import pytest

from workshop.bench.capacity import ShapeLoad, capacity_rows, workers_needed


def _shapes(model=None):
    return [
        ShapeLoad("long 1/4", 2, 158, 16, 4.0, model),
        ShapeLoad("long 4/4", 8, 224, 2, 20.0, model),
        ShapeLoad("short 1", 8, 112, 8, 5.0, model),
    ]


def test_model_speed_follows_compute_and_wait_follows_the_shortfall():
    rows = capacity_rows(_shapes(), base_index=1, workers=2, base_clips_per_s=100)
    long14, base, short1 = rows
    # 2 x 224^2 x 8 / (2 x 158^2) = 8.04x the base's clips per second.
    assert long14[4] == pytest.approx(100 * 8 * 224**2 / (2 * 158**2))
    assert short1[4] == pytest.approx(400.0)
    assert base[4:7] == [100.0, 50.0, 2.0]  # needs 100, 50 per core: 2 cores
    assert base[7:] == [2, 100.0, 0.0]  # 2 workers give 100: no wait
    assert short1[5:9] == [200.0, 2.0, 2, 400.0] and short1[9] == 0.0
    assert long14[5] == 250.0 and long14[8] == 500.0
    assert long14[9] == pytest.approx(100 * (1 - 500 / long14[4]))
    assert workers_needed(rows) == 4  # long 1/4 needs 3.2 cores


def test_measured_model_speeds_win_and_a_missing_one_is_an_error():
    rows = capacity_rows(_shapes(model=50.0), base_index=1, workers=1)
    assert [row[4] for row in rows] == [50.0, 50.0, 50.0]
    assert workers_needed(rows) == 1
    with pytest.raises(ValueError, match="long 1/4"):
        capacity_rows(_shapes(), base_index=1, workers=1)
