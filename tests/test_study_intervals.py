"""The study's intervals: t over seeds, paired differences, test sampling."""

import json

import pytest
import torch
from multigrid_study import intervals as si


def test_t_interval_of_three_seeds():
    mean, low, high = si.t_interval([1.0, 2.0, 3.0])
    # sd 1, t(0.975, 2 dof) = 4.3027: half-width 4.3027 / sqrt(3)
    assert mean == 2.0
    assert low == pytest.approx(2.0 - 2.48414, abs=1e-4)
    assert high == pytest.approx(2.0 + 2.48414, abs=1e-4)
    assert si.t_interval([5.0]) is None  # one seed: no interval


def test_correctness_string_in_video_order():
    scores = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    assert si.correctness(scores, torch.tensor([0, 0, 0])) == "101"


def test_test_sampling_halfwidth_of_paired_videos():
    # differences 0, 1, -1, 0: variance 2/3, se sqrt(2/3 / 4); z = 1.95996
    width = si.test_sampling_halfwidth("1100", "1010")
    assert width == pytest.approx(100 * 1.959964 * (2 / 3 / 4) ** 0.5, rel=1e-5)
    assert si.test_sampling_halfwidth("1010", "1010") == 0.0  # same answers
    assert si.test_sampling_halfwidth("10", "101") is None  # other videos


def _run(arm, budget, seed, top1, correct=None):
    return {"arm": arm, "budget": budget, "seed": seed, "test_top1": top1,
            "correct": correct}  # fmt: skip


def test_paired_difference_pairs_by_seed():
    results = [
        _run("baseline", 1, 0, 90.0, "1100"),
        _run("baseline", 1, 1, 94.0, "1110"),
        _run("baseline", 1, 2, 80.0),  # no multigrid run of seed 2
        _run("long_short", 1, 0, 89.0, "1010"),
        _run("long_short", 1, 1, 92.0, "1110"),
        _run("long_short", 0.5, 0, 70.0),
    ]
    diff = si.paired_difference(results, "test_top1", "long_short", 1)
    assert diff["seeds"] == [0, 1]
    assert diff["mean"] == -1.5  # (-1 + -2) / 2, seed 2 left out
    mean, low, high = diff["interval"]
    # differences -1, -2: sd 0.7071, t(0.975, 1 dof) = 12.706
    assert (mean, high - mean) == pytest.approx((-1.5, 12.7062 * 0.5), rel=1e-4)
    seed0 = si.test_sampling_halfwidth("1010", "1100")
    assert diff["test_halfwidth"] == pytest.approx((seed0 + 0.0) / 2)
    one = si.paired_difference(results, "test_top1", "long_short", 0.5)
    assert one["seeds"] == [0] and one["interval"] is None
    assert one["test_halfwidth"] is None  # no per-video correctness
    assert si.paired_difference(results, "test_top1", "short", 1) is None


def test_kept_results_are_portable_and_never_mixed(tmp_path):
    from types import SimpleNamespace

    from multigrid_study import archive
    from multigrid_study.plan import Run

    repo = str(tmp_path / "checkout")
    run = Run("long_short", 1.0, 0)
    args = ["--cfg", f"{repo}/configs/x.yaml", "OUTPUT_DIR", f"{repo}/out/r"]
    folder = archive.results_folder(repo, "", f"{repo}/output/demo_study/")
    assert folder == f"{repo}/results/multigrid_study/demo_study"
    path = archive.keep(folder, run, {"args": args, "test_top1": 91.0}, repo)
    assert path.endswith("long_short_b1_s0.json")
    kept = json.loads(open(path).read())
    assert kept["args"] == ["--cfg", "./configs/x.yaml", "OUTPUT_DIR", "./out/r"]
    same = SimpleNamespace(run=run, args=args)
    archive.check_folder(folder, [same], repo)  # the same study: fine
    other = SimpleNamespace(run=run, args=args + ["SOLVER.BASE_LR", "0.2"])
    with pytest.raises(ValueError, match="long_short_b1_s0 of another study"):
        archive.check_folder(folder, [other], repo)
