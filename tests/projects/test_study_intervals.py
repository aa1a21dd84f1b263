"""The study's intervals (t over seeds, paired differences, test sampling),
its table and its kept results."""

import csv
import json

import pytest
import torch
from multigrid_study import intervals as si
from multigrid_study import results as sr


def test_t_interval_of_three_seeds():
    mean, low, high = si.t_interval([1.0, 2.0, 3.0])
    # sd 1, t(0.975, 2 dof) = 4.3027: half-width 4.3027 / sqrt(3)
    assert mean == 2.0
    assert low == pytest.approx(2.0 - 2.48414, abs=1e-4)
    assert high == pytest.approx(2.0 + 2.48414, abs=1e-4)
    assert si.t_interval([5.0]) is None  # one seed: no interval


def test_accuracy_interval_stays_within_0_and_100():
    # two seeds: t(0.975, 1 dof) = 12.706 x the standard error 0.48 runs past 100
    mean, low, high = si.accuracy_interval([95.67, 96.63])
    assert mean == pytest.approx(96.15)
    assert low == pytest.approx(96.15 - 12.7062 * 0.48, abs=1e-3)
    assert high == 100.0
    assert si.t_interval([95.67, 96.63])[2] > 100.0  # the raw t interval does
    assert si.accuracy_interval([1.0, 3.0])[1] == 0.0
    assert si.accuracy_interval([50.0]) is None


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
    from multigrid_study.study_runs import Run

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


def _result(arm, budget, seed, train_s, top1, iterations=100, gflop=None):
    return {
        "arm": arm, "budget": budget, "seed": seed, "epochs": 4,
        "iterations": iterations, "train_s": train_s, "test_s": 1.0,
        "epoch_time_s": train_s - 10.0, "train_gflop": gflop,
        "data_wait_share": 0.1, "test_top1": top1, "test_top5": 99.0,
        "test_map": None, "clips_per_s": {"2x8x64": 10.0}, "run_dir": "x",
    }  # fmt: skip


def test_aggregate_table_csv_and_eta():
    results = [
        _result("baseline", 1.0, 0, 100.0, 80.0, gflop=300.0),
        _result("baseline", 1.0, 1, 120.0, 90.0, gflop=300.0),
        _result("long_short", 1.0, 0, 50.0, 70.0, iterations=25, gflop=100.0),
        _result("long_short", 2.0, 0, 100.0, 85.0, iterations=50),
    ]
    rows = sr.aggregate(results, sr.metric_key(False))
    assert [(r["arm"], r["budget"], r["n"]) for r in rows] == [
        ("baseline", 1.0, 2), ("long_short", 1.0, 1), ("long_short", 2.0, 1),
    ]  # fmt: skip
    assert rows[0]["train_s"] == (110.0, 100.0, 120.0)
    assert rows[0]["metric"] == (85.0, 80.0, 90.0)
    assert rows[0]["speedup_time"] == 1.0
    assert rows[1]["speedup_time"] == 2.2 and rows[1]["speedup_iters"] == 4.0
    assert rows[1]["speedup_compute"] == 3.0 and rows[2]["speedup_compute"] is None
    table = sr.markdown_table(rows).splitlines()
    assert table[0].startswith("| arm | budget | n | epochs | iterations |")
    assert table[2] == (
        "| baseline | 1x | 2 | 4 | 100 | 110.0 (100.0-120.0) | 100.0 (90.0-110.0) "
        "| 1.00x | 1.00x | 1.00x | 10.0 | 85.0 [21.5, 100.0] | 99.0 | - | - |"
    )  # t(0.975, 1 dof) = 12.706 x sd 7.07 / sqrt(2): 85 +- 63.5, cut at 100
    assert table[3].startswith(
        "| long_short | 1x | 1 | 4 | 25 | 50.0 | 40.0 | 2.20x | 4.00x | 3.00x |"
    )
    assert table[3].endswith("| 70.0 | 99.0 | -10.0 | - |")  # seed 0 paired, alone
    assert table[4].startswith(
        "| long_short | 2x | 1 | 4 | 50 | 100.0 | 90.0 | 1.10x | 2.00x | - |"
    )
    no_ref = sr.aggregate(results[2:], "test_top1")
    assert no_ref[0]["speedup_time"] is None
    assert "| - | - | - |" in sr.markdown_table(no_ref)
    rows_csv = list(csv.DictReader(sr.format_csv(results).splitlines()))
    assert len(rows_csv) == 4 and rows_csv[2]["arm"] == "long_short"
    assert json.loads(rows_csv[0]["clips_per_s"]) == {"2x8x64": 10.0}

    assert sr.estimate_eta([], [("baseline", 1.0)]) is None
    done = [("baseline", 1.0, 100.0), ("long_short", 2.0, 100.0)]
    # baseline: 100 s per budget unit; long_short 50; unseen arms: 200/3.
    eta = sr.estimate_eta(done, [("baseline", 0.5), ("long_short", 1.0), ("long", 3.0)])
    assert eta == pytest.approx(50 + 50 + 200)
