"""The short cycle's views: never larger than the long-cycle shape they shrink."""

from slowfast.config import load_config
from slowfast.multigrid import MultigridSchedule


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
    return MultigridSchedule.from_cfg(cfg, 1)


def _crops(schedule: MultigridSchedule, entry) -> list:
    return [crop for _, _, crop, _ in schedule.cycle(entry)]


def test_views_never_exceed_the_long_cycle_crop():
    # Absolute factors of a 64 px base give 56 / 60 px views; at a 45 px
    # long-cycle shape they are that shape's crop, not larger.
    sched = _schedule("MULTIGRID.SHORT_CYCLE_FACTORS", "[0.875, 0.935414]")
    first, last = sched.entries[0], sched.entries[-1]
    assert first.crop_size == 45
    assert _crops(sched, first) == [45, 45, 45]
    assert [f for *_, f in sched.cycle(first)] == [8, 8, 8]
    assert _crops(sched, last) == [56, 60, 64]


def test_paper_factors_are_unchanged_by_the_cap():
    sched = _schedule()
    assert _crops(sched, sched.entries[0]) == [32, 45, 45]
    assert _crops(sched, sched.entries[-1]) == [32, 45, 64]
