"""Tests of the multigrid schedule against the reference's golden schedules."""

import json
import math
import os
import re

import pytest

from slowfast.config import ConfigError, get_cfg, load_config
from slowfast.models.describe import ModelInfo
from slowfast.multigrid import MultigridSchedule, report
from slowfast.multigrid.schedule import check_epochs_have_iterations
from slowfast.multigrid.shapes import bn_splits_and_sync
from tests.conftest import REPO_ROOT

KINETICS = "Kinetics_SLOWFAST_8x8_R50_stepwise_multigrid.yaml"
CHARADES = "Charades_SLOWFAST_16x8_R50_multigrid.yaml"


def _long_cycles(frames, ends):
    """(LR stage, [batch factor, frames, crop], end epoch) rows: the long
    cycle's four shapes in every LR stage but the last, which trains at the
    base shape only; ``ends``: the end epochs, in order."""
    base = [1, frames, 224]
    cycle = [[8, frames // 4, 158], [4, frames // 2, 158], [2, frames // 2, 224], base]
    stages = len(ends) // 4
    shapes = [(s, shape) for s in range(stages) for shape in cycle] + [(stages, base)]
    return [(s, shape, end) for (s, shape), end in zip(shapes, ends, strict=True)]


# multigrid_golden.md: (LR stage, [batch factor, frames, crop], end epoch).
KINETICS_ENTRIES = _long_cycles(
    32, [73, 110, 142, 158, 205, 228, 248, 259, 291, 308, 322, 329, 358]
)
KINETICS_STEPS = [0, 73, 110, 142, 158, 205, 228, 248, 259, 291, 308, 322, 329, 343]
KINETICS_LRS = [8, 4, 2, 1, 0.8, 0.4, 0.2, 0.1, 0.08, 0.04, 0.02, 0.01, 0.01, 0.001]
CHARADES_ENTRIES = _long_cycles(64, [31, 47, 60, 67, 73, 76, 79, 80, 86])
CHARADES_STEPS = [0, 31, 47, 60, 67, 73, 76, 79, 80, 83]
CHARADES_LRS = [8, 4, 2, 1, 0.8, 0.4, 0.2, 0.1, 0.1, 0.01]

# A small step-policy config without reference files (Kinetics-like shape).
BASE_OPTS = [
    "TRAIN.BATCH_SIZE", "8",
    "DATA.NUM_FRAMES", "32",
    "DATA.SAMPLING_RATE", "2",
    "DATA.TRAIN_CROP_SIZE", "224",
    "SOLVER.LR_POLICY", "steps_with_relative_lrs",
    "SOLVER.STEPS", "[0, 94, 154, 196]",
    "SOLVER.LRS", "[1, 0.1, 0.01, 0.001]",
    "SOLVER.MAX_EPOCH", "239",
    "SOLVER.BASE_LR", "0.1",
    "SOLVER.WARMUP_EPOCHS", "34.0",
    "SOLVER.WARMUP_START_LR", "0.01",
]  # fmt: skip


def _cfg(long_cycle, short_cycle, *extra):
    opts = BASE_OPTS + [
        "MULTIGRID.LONG_CYCLE", str(long_cycle),
        "MULTIGRID.SHORT_CYCLE", str(short_cycle),
    ]  # fmt: skip
    return load_config([], opts + list(extra))


def _reference(reference_dir, name, *opts):
    return load_config([os.path.join(reference_dir, "configs", name)], list(opts))


def _ours_or_reference(request, name, *opts):
    """Our config for a reference config (``configs/<dataset>/<rest>``) where we
    ship one; else the reference's YAML (skips, saying so, where absent)."""
    dataset, rest = name.split("_", 1)
    ours = os.path.join(REPO_ROOT, "configs", dataset, rest)
    if os.path.isfile(ours):
        return load_config([ours], list(opts))
    return _reference(request.getfixturevalue("reference_dir"), name, *opts)


def _assert_golden(sched, entries, max_epoch, steps, lrs):
    assert [e.as_tuple() for e in sched.entries] == entries
    assert sched.max_epoch == max_epoch
    assert list(sched.steps) == steps
    assert list(sched.lrs) == pytest.approx(lrs)


def test_golden_kinetics(reference_dir):
    sched = MultigridSchedule.from_cfg(_reference(reference_dir, KINETICS), 8)
    _assert_golden(sched, KINETICS_ENTRIES, 358, KINETICS_STEPS, KINETICS_LRS)
    assert round(sched.iteration_ratio(), 2) == 3.43
    assert round(sched.iteration_ratio(240000), 2) == 3.43
    info = json.loads(json.dumps(report.to_dict(sched, 1000)))
    assert info["max_epoch"] == 358
    assert info["schedule"][-1] == dict(
        lr_stage=3, batch_factor=1, num_frames=32, crop_size=224, end_epoch=358
    )


def test_golden_charades(request):
    sched = MultigridSchedule.from_cfg(_ours_or_reference(request, CHARADES), 8)
    _assert_golden(sched, CHARADES_ENTRIES, 86, CHARADES_STEPS, CHARADES_LRS)


def test_derivation_without_reference_files():
    sched = MultigridSchedule.from_cfg(_cfg(True, True), 1)
    assert [e.as_tuple() for e in sched.entries] == KINETICS_ENTRIES
    assert round(sched.iteration_ratio(), 2) == 3.43


def test_short_cycle_shapes_per_iteration():
    sched = MultigridSchedule.from_cfg(_cfg(True, True), 2)
    base_volume = 8 * 32 * 224**2
    # Entry 0 (8 frames, crop 158, 8x) and the fine-tuning entry (base shape).
    cases = [(0, (112, 158, 158), (16, 8, 8)), (350, (112, 158, 224), (4, 2, 1))]
    for epoch, crops, factors in cases:
        for it in range(7):
            shape = sched.iter_shape(epoch, it)
            assert shape.short_index == it % 3
            assert shape.crop_size == crops[it % 3]
            assert shape.batch_size == 8 * factors[it % 3]
            assert shape.per_proc_batch == shape.batch_size // 2
            assert shape.long_factor == factors[2]
            volume = shape.batch_size * shape.num_frames * shape.crop_size**2
            assert volume == pytest.approx(base_volume, rel=0.03)
    first = sched.iter_shape(0, 0)
    assert first.num_frames == 8
    assert first.sampling_rate == (2, 8)  # stride up to 2 * 32 / 8
    assert first.jitter_scales == (128, 160)  # [256, 320] * 112 / 224
    assert sched.iter_shape(0, 1).jitter_scales == (181, 226)  # x 158 / 224
    assert sched.iter_shape(350, 2).sampling_rate == (2, 2)
    assert sched.iter_shape(350, 2).jitter_scales == (256, 320)


def test_jitter_scale_mode_lower_bound_is_the_reference_rule():
    cfg = _cfg(True, True, "MULTIGRID.JITTER_SCALE_MODE", "lower_bound")
    sched = MultigridSchedule.from_cfg(cfg, 2)
    assert sched.iter_shape(0, 0).jitter_scales == (128, 320)  # 256 * 112 / 224
    assert sched.iter_shape(0, 1).jitter_scales == (181, 320)
    assert sched.iter_shape(350, 2).jitter_scales == (256, 320)


def test_relative_short_cycle_crops():
    cfg = _cfg(True, True, "MULTIGRID.SHORT_CYCLE_CROP_MODE", "relative")
    sched = MultigridSchedule.from_cfg(cfg, 1)
    assert [sched.iter_shape(0, i).crop_size for i in range(3)] == [79, 112, 158]
    assert [sched.iter_shape(0, i).batch_size for i in range(3)] == [256, 128, 64]
    assert [sched.iter_shape(350, i).crop_size for i in range(3)] == [112, 158, 224]


def test_lr_per_iteration(reference_dir):
    sched = MultigridSchedule.from_cfg(_reference(reference_dir, KINETICS), 8)
    # Linear warm-up from 0.01 to the LR at epoch 34 (0.1 * 8), by fraction.
    iters = 100
    for epoch, it in [(0, 0), (5, 50), (17, 0), (33, 99)]:
        frac = epoch + it / iters
        assert sched.lr_at(frac) == pytest.approx(0.01 + (0.8 - 0.01) * frac / 34)
    assert sched.lr_at(34) == pytest.approx(0.8)
    # Long-cycle factor: 8, 4, 2, 1 within stage 0, then x0.1 in stage 1.
    for epoch, lr in [(72.99, 0.8), (73, 0.4), (110, 0.2), (142, 0.1), (158, 0.08)]:
        assert sched.lr_at(epoch) == pytest.approx(lr)
    # Fine-tuning halves: previous stage's LR, then 10x lower at epoch 343.
    assert sched.lr_at(329.5) == pytest.approx(0.001)
    assert sched.lr_at(342.99) == pytest.approx(0.001)
    assert sched.lr_at(343) == pytest.approx(0.0001)
    assert sched.lr_at(357.9) == pytest.approx(0.0001)


def test_cosine_long_cycle_scales_by_factor():
    cfg = _cfg(True, False, "SOLVER.LR_POLICY", "cosine", "SOLVER.WARMUP_EPOCHS", "0.0")
    sched = MultigridSchedule.from_cfg(cfg, 1)
    policy = sched.policy
    for epoch in (0.5, 80.0, 200.0):
        factor = sched.entry_at(int(epoch)).batch_factor
        assert sched.lr_at(epoch) == pytest.approx(policy.base(epoch) * factor)
    assert policy.max_epoch == sched.max_epoch


def test_bn_splits_per_entry(reference_dir):
    sched = MultigridSchedule.from_cfg(_reference(reference_dir, KINETICS), 8)
    splits = [sched.iter_shape(e.end_epoch - 1, 2).bn_splits for e in sched.entries]
    assert splits == [8, 4, 2, 1] * 3 + [1]
    # The short cycle keeps the split count: groups of 16 and 32 clips.
    for epoch in (0, 100, 357):
        shapes = [sched.iter_shape(epoch, i) for i in range(3)]
        assert len({s.bn_splits for s in shapes}) == 1
        assert shapes[2].per_proc_batch // shapes[2].bn_splits == 8
        assert sched.bn_sync_size(epoch) == 1
    assert sched.iter_shape(0, 0).per_proc_batch // 8 == 16
    assert sched.iter_shape(357, 0).per_proc_batch // 1 == 32


def test_bn_sync_when_a_process_holds_too_few_clips(request):
    # Charades: 16 clips on 8 processes, 2 per process at the base shape.
    sched = MultigridSchedule.from_cfg(_ours_or_reference(request, CHARADES), 8)
    assert [sched.bn_sync_size(e.end_epoch - 1) for e in sched.entries[:4]] == [
        1,
        1,
        2,
        4,
    ]
    assert sched.iter_shape(66, 2).bn_splits == 1


def test_bn_splits_and_sync_rule():
    assert bn_splits_and_sync(64, 8, 8) == (8, 1)
    assert bn_splits_and_sync(12, 8, 8) == (1, 1)
    assert bn_splits_and_sync(2, 8, 8) == (1, 4)
    assert bn_splits_and_sync(3, 8, 8) == (1, 4)  # needs 3, rounded up to divide 8
    assert bn_splits_and_sync(1, 6, 8) == (1, 6)  # capped at the number of processes


def test_long_cycle_only_fine_tunes_without_short_cycle():
    sched = MultigridSchedule.from_cfg(_cfg(True, False), 1)
    last = sched.entries[-1]
    assert (last.batch_factor, last.num_frames, last.crop_size) == (1, 32, 224)
    assert [e.batch_factor for e in sched.entries[:4]] == [8, 4, 2, 1]
    for epoch in (0, sched.max_epoch - 1):
        for it in range(3):
            shape = sched.iter_shape(epoch, it)
            assert shape.short_index == -1
            assert shape.batch_size == 8 * sched.entry_at(epoch).batch_factor
    assert sched.max_epoch == round(239 * 1.5)
    assert sched.lrs[-2] == pytest.approx(0.01) and sched.lrs[-1] == pytest.approx(
        0.001
    )


def test_short_cycle_only():
    sched = MultigridSchedule.from_cfg(_cfg(False, True), 1)
    assert sched.max_epoch == 239  # no epoch rescaling
    assert len(sched.entries) == 1
    assert [sched.iter_shape(100, i).crop_size for i in range(4)] == [
        112,
        158,
        224,
        112,
    ]
    assert [sched.iter_shape(100, i).batch_size for i in range(3)] == [32, 16, 8]
    assert sched.lr_at(100) == pytest.approx(0.01)  # the configured policy
    assert sched.iteration_ratio() == pytest.approx((4 + 224**2 / 158**2 + 1) / 3)


def test_neither_cycle_is_a_trivial_schedule():
    cfg = load_config(
        [], ["BN.NORM_TYPE", "sync_batchnorm", "BN.NUM_SYNC_DEVICES", "2"]
    )
    sched = MultigridSchedule.from_cfg(cfg, 4)
    assert sched.max_epoch == cfg.SOLVER.MAX_EPOCH
    shape = sched.iter_shape(3, 5)
    assert (shape.batch_size, shape.per_proc_batch) == (64, 16)
    assert (shape.num_frames, shape.crop_size, shape.short_index) == (8, 224, -1)
    assert shape.sampling_rate == (8, 8) and shape.bn_splits == 1
    assert sched.bn_sync_size(0) == 2
    assert sched.lr_at(150) == pytest.approx(0.1 * (math.cos(math.pi / 2) + 1) / 2)
    assert sched.iteration_ratio() == 1.0
    assert sched.total_iters(6400) == sched.baseline_iters(6400) == 300 * 100


def test_iters_in_epoch_drop_last_chunking():
    sched = MultigridSchedule.from_cfg(
        _cfg(False, True, "TRAIN.BATCH_SIZE", "4"), num_procs=2
    )
    # Per process: batches of 8, 4, 2 clips (4x, 2x, 1x of 2), last one dropped.
    for size in (0, 13, 40, 46, 57, 1000):
        clips, count, it = math.ceil(size / 2), 0, 0
        while clips >= sched.iter_shape(0, it).per_proc_batch:
            clips -= sched.iter_shape(0, it).per_proc_batch
            count, it = count + 1, it + 1
        assert sched.iters_in_epoch(0, size) == count
    assert sched.total_iters(46) == 239 * 4


def test_entry_at_out_of_range():
    sched = MultigridSchedule.from_cfg(_cfg(True, True), 1)
    assert sched.entry_at(357) == sched.entries[-1]
    with pytest.raises(ValueError, match="epoch 358"):
        sched.entry_at(358)


@pytest.mark.parametrize(
    "opts, num_procs, min_crop, match",
    [
        (["TRAIN.BATCH_SIZE", "12"], 8, 1, "TRAIN.BATCH_SIZE x NUM_SHARDS = 12"),
        (
            ["TRAIN.BATCH_SIZE", "9", "MULTIGRID.BN_BASE_SIZE", "2"],
            1,
            1,
            "BN_BASE_SIZE",
        ),
        (["DATA.NUM_FRAMES", "2"], 1, 1, "MULTIGRID.LONG_CYCLE_FACTORS"),
        (
            ["DATA.TRAIN_CROP_SIZE", "48", "MULTIGRID.SHORT_CYCLE_MIN_MAP", "0"],
            1,
            32,
            "MULTIGRID.SHORT_CYCLE_FACTORS",
        ),
        (["SOLVER.STEPS", "[0]", "SOLVER.LRS", "[1]"], 1, 1, "SOLVER.STEPS"),
    ],
)
def test_validation_errors(opts, num_procs, min_crop, match):
    model = ModelInfo(spatial_stride=min_crop)
    with pytest.raises(ValueError, match=match) as info:
        MultigridSchedule.from_cfg(_cfg(True, True, *opts), num_procs, model)
    assert "\n" not in str(info.value)


def test_steps_not_increasing_is_rejected():
    with pytest.raises(ConfigError, match="SOLVER.STEPS"):
        _cfg(True, True, "SOLVER.STEPS", "[0, 154, 94, 196]")
    cfg = get_cfg()  # not validated: the schedule checks again
    cfg.SOLVER.LR_POLICY = "steps_with_relative_lrs"
    cfg.SOLVER.STEPS = [0, 154, 94]
    cfg.SOLVER.LRS = [1, 0.1, 0.01]
    with pytest.raises(ValueError, match="SOLVER.STEPS"):
        MultigridSchedule.from_cfg(cfg, 1)


def test_validate_min_crop_on_base_shape():
    cfg = load_config([], ["DATA.TRAIN_CROP_SIZE", "24"])
    sched = MultigridSchedule.from_cfg(cfg, 1, ModelInfo())
    with pytest.raises(ValueError, match="DATA.TRAIN_CROP_SIZE = 24"):
        sched.validate(32)
    with pytest.raises(ValueError, match="DATA.TRAIN_CROP_SIZE = 24"):
        MultigridSchedule.from_cfg(cfg, 1)  # the configured model's stride, 32


def test_bn_num_splits_checked_without_multigrid():
    cfg = load_config([], ["BN.NORM_TYPE", "sub_batchnorm", "BN.NUM_SPLITS", "3"])
    with pytest.raises(ValueError, match="BN.NUM_SPLITS = 3"):
        MultigridSchedule.from_cfg(cfg, 1)


def test_describe_rows(reference_dir):
    sched = MultigridSchedule.from_cfg(_reference(reference_dir, KINETICS), 8)
    rows = report.describe(sched, 240000)
    assert [r["phase"] for r in rows] == ["long"] * 12 + ["fine-tune"]
    assert rows[0]["global_batch"] == 512 and rows[0]["short_crops"] == [112, 158]
    assert rows[-1]["lr"] == pytest.approx(0.001)
    assert rows[-1]["lr_end"] == pytest.approx(0.0001)
    assert sum(r["epochs"] for r in rows) == 358
    assert sum(r["iters"] for r in rows) == sched.total_iters(240000)
    assert all(r["rel_cost"] == pytest.approx(1, abs=0.01) for r in rows)


def test_table_counts_gflops_at_each_shape():
    sched = MultigridSchedule.from_cfg(_cfg(True, True), 1)

    def area(frames, crop):  # a clip that costs exactly t x s^2
        return frames * crop**2 / 1e3

    def strided(frames, crop):  # last-stage maps rounded up at stride 32
        return frames * math.ceil(crop / 32) ** 2

    def ratios(text):
        return [float(x) for x in re.findall(r"([0-9.]+)x less", text)]

    # Every iteration the trainer runs, at its shape (1000 clips: epochs that
    # end inside a short cycle give its first shapes one more iteration).
    for size in (1000, 24000):
        counted, baseline = report.compute_totals(sched, size, strided)
        batches = [
            it for e in range(sched.max_epoch) for it in sched.epoch_batches(e, size)
        ]
        exact = sum(
            it.batch_size * strided(it.num_frames, it.crop_size) for it in batches
        )
        assert counted == pytest.approx(exact)
        base_iteration = 8 * strided(32, 224)  # 8 clips of 32 x 224
        assert baseline == pytest.approx(sched.baseline_iters(size) * base_iteration)
    counted, estimated = ratios(report.schedule_table(sched, 24000, area))
    assert counted == estimated  # the counter agrees with the t x s^2 estimate
    counted, estimated = ratios(report.schedule_table(sched, 24000, strided))
    assert counted < estimated - 0.1  # coarse crops cost more than their area


def test_epoch_without_a_full_batch_is_one_line_error():
    sched = MultigridSchedule.from_cfg(_cfg(True, True), 1)
    first = sched.iter_shape(0, 0).batch_size
    check_epochs_have_iterations(sched, 10 * first)
    with pytest.raises(ValueError, match="epoch 1: the first batch") as info:
        check_epochs_have_iterations(sched, first - 1)
    assert "TRAIN.BATCH_SIZE" in str(info.value) and "\n" not in str(info.value)


def test_entry_without_epochs_is_named_in_words(caplog):
    opts = ["SOLVER.MAX_EPOCH", "6", "SOLVER.STEPS", "[0, 4, 5]"]
    with caplog.at_level("WARNING", logger="slowfast.multigrid.schedule"):
        sched = MultigridSchedule.from_cfg(_cfg(True, True, *opts), 1)
    lines = [r.getMessage() for r in caplog.records]
    assert sched.max_epoch == 9
    assert lines, "a schedule too short for its shapes must warn"
    assert all("ScheduleEntry(" not in line for line in lines)
    assert any("gets no epochs: 9 epochs in all" in line for line in lines)
