"""``projects/multigrid/compare.py``: kept results of several studies in one
table, each arm paired by seed with the baseline's runs."""

import json
import os

import compare  # projects/multigrid, on the path from conftest
import pytest


def _result(arm, seed, top1, videos=4, correct="1111"):
    return {
        "arm": arm, "budget": 1.0, "seed": seed, "test_top1": top1,
        "test_top5": 100.0, "test_videos": videos, "correct": correct,
        "epochs": 10, "iterations": 100 if arm == "baseline" else 25,
        "train_s": 400.0 if arm == "baseline" else 100.0,
        "data_wait_share": 0.01, "epoch_time_s": None, "train_gflop": None,
    }  # fmt: skip


def _keep(folder, results):
    os.makedirs(folder, exist_ok=True)
    for r in results:
        with open(os.path.join(folder, f"{r['arm']}_s{r['seed']}.json"), "w") as f:
            json.dump(r, f)
    return str(folder)


def _study_and_arm(tmp_path, name, runs):
    """A study folder of ``runs`` (arm, seed, top-1) and a folder ``name`` of
    long_short runs at 91% and 92% (seeds 0 and 1); returns both paths."""
    arm = [_result("long_short", 0, 91.0), _result("long_short", 1, 92.0)]
    study = _keep(tmp_path / "study", [_result(*run) for run in runs])
    return study, _keep(tmp_path / name, arm)


def _table_rows(out):
    """The table's rows at budget 1."""
    return [line for line in out.splitlines() if "| 1x |" in line]


def test_arms_from_other_folders_pair_with_the_baseline(tmp_path, capsys):
    runs = [("baseline", 0, 90.0), ("baseline", 1, 92.0), ("long_short", 0, 10.0)]
    base, swept = _study_and_arm(tmp_path, "sweep", runs)
    assert compare.main([base, f"views={swept}"]) == 0
    rows = _table_rows(capsys.readouterr().out)
    assert [r.split(" | ")[0] for r in rows] == ["| baseline", "| views"]
    # Differences +1 and 0 over seeds 0 and 1; the study folder's own
    # long_short run (10%) is not part of the table.
    assert "+0.5 [-5.9, 6.9]" in rows[1]
    assert "4.00x" in rows[1]


def test_other_test_sets_and_bad_arguments_are_refused(tmp_path, capsys):
    base = _keep(tmp_path / "study", [_result("baseline", 0, 90.0)])
    other = _keep(tmp_path / "other", [_result("long_short", 0, 91.0, videos=8)])
    assert compare.main([base, f"x={other}"]) == 2
    assert "tested on 8 videos, the baseline on [4]" in capsys.readouterr().err
    assert compare.main([base, other]) == 2
    assert "give arms as NAME=DIR" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no baseline run at budget 1"):
        compare.combine(other, [])


def test_another_arm_as_the_reference(tmp_path, capsys):
    runs = [("baseline", 0, 80.0), ("long_short", 0, 90.0), ("long_short", 1, 92.0)]
    study, variant = _study_and_arm(tmp_path, "variant", runs)
    args = [study, f"renditions={variant}", "--reference", "long_short"]
    assert compare.main(args) == 0
    out = capsys.readouterr().out
    assert "test top-1 minus long_short (points) [95% CI]" in out
    rows = _table_rows(out)
    assert [r.split(" | ")[0] for r in rows] == [
        "| long_short (reference)",
        "| renditions",
    ]
    assert "+0.5 [-5.9, 6.9]" in rows[1]  # paired with long_short, not the baseline
    assert compare.main([study, f"r={variant}", "--reference", "nothing"]) == 2
    assert "holds no nothing run at budget 1" in capsys.readouterr().err
