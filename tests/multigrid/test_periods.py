"""End-of-epoch work (checkpoints, validations, precise BN) counted in baseline
epochs of training (``slowfast/multigrid/periods.py``)."""

import json
import os

import pytest

from slowfast.launch.config import load_run_config
from slowfast.multigrid import MultigridSchedule
from slowfast.multigrid.periods import PeriodicWork, due_epochs, estimated_share
from tests.conftest import REPO_ROOT
from tests.helpers.tool_utils import load_tool

KINETICS = os.path.join(REPO_ROOT, "configs", "Kinetics")


def test_baseline_epochs_follow_the_period_and_the_last():
    due = due_epochs([10] * 7, 10, 3)
    assert due == {2, 5, 6}
    assert due_epochs([10] * 7, 10, 1) == set(range(7))
    assert due_epochs([10] * 7, 10, 0) == set()
    assert due_epochs([10] * 7, 10, 100) == {6}


def test_short_epochs_share_a_period_of_iterations():
    # Epochs of 4, 4, 4, 2, 2, 10 iterations against a 10-iteration baseline
    # epoch: the action comes when 10 more iterations are done, and at the end.
    assert due_epochs([4, 4, 4, 2, 2, 10], 10, 1) == {2, 5}
    assert due_epochs([4, 4, 4, 2, 2, 10], 10, 2) == {5}
    # An epoch longer than the period still runs it once.
    assert due_epochs([25, 5], 10, 1) == {0, 1}


def test_precise_bn_runs_before_each_checkpoint_and_validation():
    work = PeriodicWork.build([5] * 6, 10, 2, 3, precise_bn=True)
    assert work.checkpoint == {3, 5}
    assert work.validation == {5}
    assert work.precise_bn == {3, 5}
    assert work.end_of_epoch(3) and not work.end_of_epoch(4)
    off = PeriodicWork.build([5] * 6, 10, 2, 3, precise_bn=False)
    assert off.precise_bn == set() and not off.precise_bn_due(3)
    assert work.counts() == {
        "epochs": 6,
        "checkpoints": 2,
        "validations": 1,
        "precise_bn": 2,
    }


@pytest.mark.parametrize(
    "name", ["SLOWFAST_8x8_R50_multigrid.yaml", "I3D_8x8_R50_multigrid.yaml"]
)
def test_kinetics_multigrid_does_at_most_its_baselines_work(name):
    path = os.path.join(KINETICS, name)
    cfg = load_run_config([path], ["NUM_GPUS", "8"])
    schedule = MultigridSchedule.from_cfg(cfg, 8)
    args = (240000, 1, 10, True)
    run = PeriodicWork.for_schedule(schedule, *args)
    base = PeriodicWork.for_schedule(schedule, *args, baseline=True)
    assert base.counts()["epochs"] == schedule.baseline_max_epoch
    assert base.checkpoint == set(range(schedule.baseline_max_epoch))
    for key in ("checkpoints", "validations", "precise_bn"):
        assert 0 < run.counts()[key] <= base.counts()[key], key
    # Spaced by training iterations: one baseline epoch's iterations apart
    # (about the same compute: FLOPs per iteration are constant under
    # multigrid), give or take the epoch in which the period ends.
    iters = [schedule.iters_in_epoch(e, 240000) for e in range(schedule.max_epoch)]
    ends = [sum(iters[: e + 1]) for e in sorted(run.checkpoint)]
    gaps = [b - a for a, b in zip(ends, ends[1:-1])]
    assert all(abs(gap - run.unit_iters) < max(iters) for gap in gaps)
    assert len(run.checkpoint) == sum(iters) // run.unit_iters + 1
    share = estimated_share(run, sum(iters), 200, 20000 / 64)
    base_share = estimated_share(base, schedule.baseline_iters(240000), 200, 20000 / 64)
    assert share["precise_bn"] <= 1.1 * base_share["precise_bn"]


def test_trivial_schedule_keeps_every_period_epochs():
    cfg = load_run_config(
        [os.path.join(KINETICS, "SLOWFAST_8x8_R50.yaml")], ["NUM_GPUS", "8"]
    )
    schedule = MultigridSchedule.from_cfg(cfg, 8)
    work = PeriodicWork.for_schedule(schedule, 240000, 5, 10, False)
    last = schedule.max_epoch - 1
    assert work.checkpoint == {e for e in range(last) if (e + 1) % 5 == 0} | {last}
    assert work == PeriodicWork.for_schedule(
        schedule, 240000, 5, 10, False, baseline=True
    )


def test_plan_tool_prints_both_arms_work(capsys):
    tool = load_tool("plan_multigrid.py")
    cfg = os.path.join(KINETICS, "SLOWFAST_8x8_R50_multigrid.yaml")
    assert tool.main(["--cfg", cfg, "--no-flops", "NUM_GPUS", "8"]) == 0
    text = capsys.readouterr().out
    assert "end-of-epoch work: TRAIN.CHECKPOINT_PERIOD 1" in text
    assert "training time: not estimated; give --step-times" in text
    work = text[text.index("end-of-epoch work") :].splitlines()[3:5]
    rows = {line.split()[0]: line.split() for line in work}
    assert rows["this"][2:7] == ["358", "261582", "70", "7", "70"]
    assert rows["baseline"][1:6] == ["239", "896250", "239", "24", "239"]
    assert tool.main(["--cfg", cfg, "--json", "NUM_GPUS", "8"]) == 0
    work = json.loads(capsys.readouterr().out)["periodic_work"]
    assert work["run"]["checkpoints"] == 70 and work["unit_iters"] == 3750
    assert 0 < work["run"]["share"]["precise_bn"] < 0.05


def _check_json(path, cells):
    data = {"stages": {"model_step": {"configs": {"SLOWFAST_8x8_R50_multigrid": {}}}}}
    data["stages"]["model_step"]["configs"]["SLOWFAST_8x8_R50_multigrid"]["cells"] = [
        dict(bn=bn, mode=mode, clips=c, frames=t, crop=s, status=status, ms=ms)
        for bn, mode, (c, t, s), status, ms in cells
    ]
    path.write_text(json.dumps(data))
    return str(path)


def test_plan_tool_times_each_arm_from_the_checks_step_times(tmp_path, capsys):
    tool = load_tool("plan_multigrid.py")
    cfg = os.path.join(KINETICS, "SLOWFAST_8x8_R50_multigrid.yaml")
    check = _check_json(
        tmp_path / "gpu_check.json",
        [
            ("plain", "eager", (8, 32, 224), "ok", 400.0),
            ("sub", "eager", (8, 32, 224), "ok", 410.0),
            ("sub", "eager", (128, 8, 112), "ok", 500.0),
            ("sub", "eager", (64, 8, 158), "oom", None),
            ("sub", "graphs", (64, 16, 112), "ok", 1.0),  # another step mode
        ],
    )
    args = ["--cfg", cfg, "--no-flops", "--step-times", check, "NUM_GPUS", "8"]
    assert tool.main(args) == 0
    text = capsys.readouterr().out
    assert "training time: not estimated" not in text
    assert "(2 of 10 shapes measured)" in text and "(1 of 1 shapes measured)" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("run ")]
    by_shape = {(r[1], r[2]): r[4:] for r in rows}
    assert by_shape[("128x8x112", "8")] == ["500.0"]
    assert by_shape[("8x32x224", "1")] == ["400.0"]  # one BN group: plain BN
    assert by_shape[("64x8x158", "8")] == ["408.0", "est."]  # 410 x its compute
    assert by_shape[("64x16x112", "4")] == ["410.0", "est."]
    baseline = [line.split() for line in text.splitlines() if line.startswith("base")]
    assert baseline[-1][1:] == ["8x32x224", "1", "896250", "400.0"]
    assert tool.main(args + ["--json"]) == 0
    timing = json.loads(capsys.readouterr().out)["training_time"]
    assert timing["baseline"]["seconds"] == 896250 * 0.4
    assert sum(s["iterations"] for s in timing["run"]["shapes"]) == 261582


def test_plan_tool_names_a_missing_config(tmp_path, capsys):
    tool = load_tool("plan_multigrid.py")
    check = _check_json(tmp_path / "c.json", [])
    cfg = os.path.join(KINETICS, "I3D_8x8_R50_multigrid.yaml")
    assert tool.main(["--cfg", cfg, "--no-flops", "--step-times", check]) == 2
    err = capsys.readouterr().err
    assert "no model_step results for 'I3D_8x8_R50_multigrid'" in err
    assert "--step-config" in err and "\n" not in err.strip()
