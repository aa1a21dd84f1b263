"""projects/multigrid/study.py: overrides, result parsing, aggregation, a tiny study."""

import csv
import importlib.util
import json
import os
import sys

import pytest
from multigrid_study import results as sr
from multigrid_study import study_runs as srun

from slowfast.config import load_config
from slowfast.engine.meters import TrainMeter, data_wait_text
from tests.conftest import REPO_ROOT
from workshop.dataprep.demo import make_demo_data

DEMO_MULTIGRID = os.path.join(
    REPO_ROOT, "configs", "Demo", "Kinetics_I3D_tiny_multigrid.yaml"
)
STUDY_PATH = os.path.join(REPO_ROOT, "projects", "multigrid", "study.py")


def _study_module():
    spec = importlib.util.spec_from_file_location("multigrid_study_cli", STUDY_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _flat(node, prefix=""):
    out = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


# ----------------------------------------------------------------- pure parts
def test_meter_counts_iterations_clips_and_time_per_shape():
    meter = TrainMeter(log_period=2, iters_per_epoch=3, iters_left_after_epoch=0)
    meter.add(2.0, 16, 0.1, 0.4, shape="16x2x45")
    meter.add(2.0, 8, 0.0, 0.3, shape="8x2x64")
    meter.add(2.0, 16, 0.2, 0.3, shape="16x2x45")
    shapes = meter.epoch_stats("1/1", 0.1)["shapes"]
    assert shapes["16x2x45"] == {
        "iters": 2,
        "clips": 32,
        "time": pytest.approx(1.0),
        "data": pytest.approx(0.3),
    }
    assert shapes["8x2x64"] == {"iters": 1, "clips": 8, "time": 0.3, "data": 0.0}
    assert data_wait_text(shapes) == "16x2x45 30.0%, 8x2x64 0.0%"
    assert "shapes" not in TrainMeter(2, 1, 0).epoch_stats("1/1", 0.1)


def test_scale_steps_rounds_and_stays_increasing():
    assert srun.scale_steps([0, 24, 34], 0.5) == [0, 12, 17]
    assert srun.scale_steps([0, 24, 34], 2) == [0, 48, 68]
    assert srun.scale_steps([0, 5, 7], 0.5) == [0, 3, 4]  # 2.5 and 3.5 round up
    assert srun.scale_steps([0, 1, 2], 0.4) == [0, 1, 2]  # 0.4 -> 0 -> 1, 0.8 -> 2
    assert srun.scale_steps([0, 12.5], 1) == [0, 12.5]


def test_budget_overrides():
    forty = ["SOLVER.MAX_EPOCH", "40", "SOLVER.STEPS", "[0, 24, 34]"]
    cfg = load_config([DEMO_MULTIGRID], forty)
    assert srun.budget_overrides(cfg.SOLVER, 0.5) == [
        "SOLVER.MAX_EPOCH", "20", "SOLVER.STEPS", "[0, 12, 17]",
    ]  # fmt: skip
    assert srun.budget_overrides(cfg.SOLVER, 1.5)[:2] == ["SOLVER.MAX_EPOCH", "60"]
    with pytest.raises(ValueError, match="do not fit in 2 epochs"):
        srun.budget_overrides(cfg.SOLVER, 0.05)
    cosine = load_config([], ["SOLVER.LR_POLICY", "cosine", "SOLVER.MAX_EPOCH", "5"])
    assert srun.budget_overrides(cosine.SOLVER, 0.5) == ["SOLVER.MAX_EPOCH", "3"]
    with pytest.raises(ValueError, match="rounds to 0 epochs"):
        srun.budget_overrides(cosine.SOLVER, 0.05)


@pytest.mark.parametrize("budget", [0.5, 2.0])
def test_arms_differ_only_in_multigrid_keys(budget):
    base = load_config([DEMO_MULTIGRID])
    run_dir = "/tmp/same"  # OUTPUT_DIR differs per run by construction
    cfgs = {
        arm: _flat(
            load_config(
                [DEMO_MULTIGRID],
                srun.run_overrides(srun.Run(arm, budget, 3), base.SOLVER, run_dir),
            )
        )
        for arm in srun.ARMS
    }
    ref = cfgs["baseline"]
    assert ref["SOLVER.MAX_EPOCH"] == round(budget * base.SOLVER.MAX_EPOCH)
    assert ref["SOLVER.WARMUP_EPOCHS"] == base.SOLVER.WARMUP_EPOCHS
    assert ref["RNG_SEED"] == 3 and ref["TRAIN.EVAL_PERIOD"] == 0
    assert ref["TRAIN.CHECKPOINT_PERIOD"] == srun.LAST_EPOCH_ONLY
    assert ref["BN.NORM_TYPE"] == base.BN.NORM_TYPE
    for arm, flat in cfgs.items():
        changed = {key for key in flat if flat[key] != ref[key]}
        assert changed <= {"MULTIGRID.LONG_CYCLE", "MULTIGRID.SHORT_CYCLE"}, arm
        assert (flat["MULTIGRID.LONG_CYCLE"], flat["MULTIGRID.SHORT_CYCLE"]) == (
            srun.ARMS[arm]
        )
    kept = srun.run_overrides(srun.Run("long", 1.0, 0), base.SOLVER, run_dir, True)
    assert "TRAIN.EVAL_PERIOD" not in kept and "TRAIN.CHECKPOINT_PERIOD" not in kept


def test_parse_lists_and_run_order():
    assert srun.parse_arms("long_short, baseline,long_short") == [
        "long_short",
        "baseline",
    ]
    assert srun.parse_budgets("0.5,1,2,1.0") == [0.5, 1.0, 2.0]
    assert srun.parse_seeds("0,1") == [0, 1]
    for parse, text, match in [
        (srun.parse_arms, "baseline,fast", "unknown arm 'fast'"),
        (srun.parse_budgets, "1,x", "'x' is not a number"),
        (srun.parse_budgets, "0", "must be a number > 0"),
        (srun.parse_seeds, "0,a", "--seeds"),
        (srun.parse_arms, ",", "empty"),
    ]:
        with pytest.raises(ValueError, match=match):
            parse(text)
    runs = srun.list_runs(["baseline", "long"], [1.0, 2.0], [0, 1])
    assert [r.name for r in runs[:3]] == [
        "baseline_b1_s0",
        "long_b1_s0",
        "baseline_b2_s0",
    ]
    assert len(runs) == 8 and runs[-1].name == "long_b2_s1"


def _line(**stats):
    return json.dumps(stats) + "\n"


def test_parse_stats_from_a_synthetic_log():
    lines = [
        _line(_type="train_iter", epoch="1/2", shape="16x2x45", time_data=9.0),
        _line(_type="train_epoch", epoch="1/2", time_epoch=4.0, time_data=1.0,
              shapes={"16x2x45": {"iters": 2, "clips": 32, "time": 2.0},
                      "4x8x64": {"iters": 1, "clips": 4, "time": 1.0}}),
        _line(_type="val_epoch", epoch="1/2", top1_err=50.0, top5_err=10.0),
        "\n",
        _line(_type="train_epoch", epoch="2/2", time_epoch=6.0, time_data=0.0,
              shapes={"16x2x45": {"iters": 3, "clips": 48, "time": 2.0,
                                  "data": 1.0}}),
        _line(_type="val_epoch", epoch="2/2", top1_err=20.0, top5_err=5.0),
        _line(_type="test_final", top1_err=25.0, top5_err=2.5, num_videos=5),
    ]  # fmt: skip
    result = sr.parse_stats(lines)
    assert result["epochs"] == 2 and result["iterations"] == 6
    assert result["epoch_time_s"] == 10.0 and result["data_wait_share"] == 0.1
    assert result["clips_per_s"] == {"16x2x45": 20.0, "4x8x64": 4.0}
    assert result["clips_per_shape"] == {"16x2x45": 80, "4x8x64": 4}
    # Per shape: data wait / time (logs before per-shape data wait count 0).
    assert result["data_wait_share_per_shape"] == {"16x2x45": 0.25, "4x8x64": 0.0}
    assert (result["val_top1"], result["val_top5"]) == (80.0, 95.0)
    assert (result["test_top1"], result["test_top5"]) == (75.0, 97.5)
    assert [(p["epoch"], p["time_s"]) for p in result["curve"]] == [(1, 4.0), (2, 10.0)]
    assert result["test_map"] is None and result["val_map"] is None
    # A resume from epoch 1's checkpoint replays epoch 2: counted once.
    resume = _line(_type="resume", epoch=1, checkpoint="c1")
    replayed = lines[:5] + [resume] + lines[4:]  # epoch 2's line twice
    assert sr.parse_stats(replayed) == result
    charades = sr.parse_stats([_line(_type="test_final", map=0.25)])
    assert charades["test_map"] == 25.0 and charades["test_top1"] is None
    assert charades["epochs"] == 0 and charades["iterations"] is None


def test_shape_rows_compare_each_shape_with_its_flop_ideal():
    from multigrid_study.shapes import format_shapes, shape_rows

    def run(arm, seed, rates, waits):
        gflop = {"4x8x32": 4.0, "16x2x32": 1.0, "8x8x16": 1.0}
        return {
            "arm": arm, "budget": 1, "seed": seed, "clips_per_s": rates,
            "data_wait_share_per_shape": waits, "gflop_per_clip": gflop,
        }  # fmt: skip

    results = [
        run("baseline", 0, {"4x8x32": 90.0}, {"4x8x32": 0.02}),
        run("baseline", 1, {"4x8x32": 110.0}, {"4x8x32": 0.04}),
        run("long_short", 0, {"16x2x32": 200.0, "8x8x16": 500.0}, {}),
    ]
    rows = shape_rows(results)
    assert [(r["arm"], r["shape"]) for r in rows] == [
        ("baseline", "4x8x32"), ("long_short", "16x2x32"), ("long_short", "8x8x16"),
    ]  # fmt: skip
    assert rows[0]["clips_per_s"] == (100.0, 90.0, 110.0)
    assert rows[0]["efficiency"] == pytest.approx(1.0)
    # Ideal at 1 GFLOP/clip: 100 clips/s x 4 = 400 clips/s.
    assert rows[1]["efficiency"] == pytest.approx(0.5)
    assert rows[2]["efficiency"] == pytest.approx(1.25)
    assert rows[0]["data_wait"] == pytest.approx((0.03, 0.02, 0.04))
    assert rows[1]["data_wait"] is None
    table = format_shapes(rows).splitlines()
    assert (
        table[2] == "| baseline | 1x | 4x8x32 | 2 | 100 (90-110) | 4.00 | 100 | 3.0 |"
    )
    assert table[3].endswith("| 200 (200-200) | 1.00 | 50 | - |")


def test_config_differences_cover_the_run_and_its_test_only():
    expected = load_config([DEMO_MULTIGRID])
    stored = json.loads(json.dumps(expected))  # as config.yaml loads: plain dicts
    assert srun.config_differences(expected, stored) == []
    stored["TEST"]["BATCH_SIZE"] = 3  # the test's own
    stored["TEST"]["ENABLE"] = not expected.TEST.ENABLE
    stored["OUTPUT_DIR"] = "another/folder"
    stored["TRAIN"]["EVAL_PERIOD"] = 3
    assert srun.config_differences(expected, stored) == []
    stored["RESNET"]["SPATIAL_STRIDES"] = [[1], [2], [2], [2]]
    stored["TEST"]["NUM_SPATIAL_CROPS"] = 1
    stored["DATA"]["PATH_TO_DATA_DIR"] = "other/data"
    keys = [key for key, _, _ in srun.config_differences(expected, stored)]
    assert sorted(keys) == [
        "DATA.PATH_TO_DATA_DIR", "RESNET.SPATIAL_STRIDES", "TEST.NUM_SPATIAL_CROPS"
    ]  # fmt: skip


# ----------------------------------------------------------------------- CLI
def test_command_line_errors_exit_2_with_one_line(tmp_path, capsys):
    study = _study_module()
    cases = [
        (["--cfg", str(tmp_path / "missing.yaml")], "config file not found"),
        (["--cfg", DEMO_MULTIGRID, "--arms", "baseline,fast"], "unknown arm"),
        (["--cfg", DEMO_MULTIGRID, "--budgets", "-1"], "must be a number > 0"),
        (["--cfg", DEMO_MULTIGRID, "SOLVER.MAX_EPOCHS", "4"], "unknown config key"),
    ]
    for argv, match in cases:
        assert study.main(argv + ["--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and match in err[0]
    assert not (tmp_path / "out").exists()


def test_dry_run_prints_commands_and_runs_nothing(tmp_path, capsys):
    study = _study_module()
    argv = ["--cfg", DEMO_MULTIGRID, "--arms", "baseline,long_short"]
    argv += ["--budgets", "0.5", "--out", str(tmp_path), "--dry-run", "RNG_SEED", "5"]
    argv += ["SOLVER.MAX_EPOCH", "40", "SOLVER.STEPS", "[0, 24, 34]"]
    assert study.main(argv) == 0
    out = capsys.readouterr().out
    assert "[1/2] baseline_b0.5_s0: 20 epochs" in out
    assert "[2/2] long_short_b0.5_s0: 30 epochs" in out
    assert "TEST.CHECKPOINT_FILE_PATH" in out and "checkpoint_epoch_00030.pyth" in out
    assert "RNG_SEED 5" in out and "RNG_SEED 0" in out  # the study's seed wins
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- tiny study
@pytest.fixture(scope="module")
def tiny_kinetics(tmp_path_factory):
    """Tiny Kinetics demo data with a 32-clip train list (fits multigrid's
    largest batch, 32 clips at TRAIN.BATCH_SIZE 2, in one epoch)."""
    root = tmp_path_factory.mktemp("study_data")
    make_demo_data(str(root), "tiny", ["kinetics"])
    lists = root / "lists"
    lists.mkdir()
    for split in ("train", "val", "test"):
        lines = (root / "kinetics" / f"{split}.csv").read_text().splitlines()
        (lists / f"{split}.csv").write_text(
            "\n".join((lines * 4)[:32] if split == "train" else lines) + "\n"
        )
    return root


@pytest.mark.slow
def test_tiny_study_end_to_end_and_rerun_skips(
    tiny_kinetics, tmp_path, capsys, monkeypatch
):
    study = _study_module()
    out = tmp_path / "study"
    argv = [
        "--cfg", DEMO_MULTIGRID, "--arms", "baseline,long_short",
        "--budgets", "1,1.5", "--out", str(out), "--results", str(tmp_path / "kept"),
        "DATA.PATH_TO_DATA_DIR", str(tiny_kinetics / "lists"),
        "DATA.PATH_PREFIX", str(tiny_kinetics / "kinetics"),
        "DATA_LOADER.NUM_WORKERS", "0", "LOG_MODEL_INFO", "False",
        "TRAIN.BATCH_SIZE", "2", "SOLVER.MAX_EPOCH", "2", "SOLVER.STEPS", "[0, 1]",
        "SOLVER.LRS", "[1, 0.1]", "SOLVER.WARMUP_EPOCHS", "0.5",
        "BN.USE_PRECISE_STATS", "False", "TEST.BATCH_SIZE", "5",
        "TEST.NUM_ENSEMBLE_VIEWS", "1", "TEST.NUM_SPATIAL_CROPS", "1",
    ]  # fmt: skip
    stale = out / "runs" / "long_short_b1_s0"
    stale.mkdir(parents=True)
    (stale / "note.txt").write_text("an interrupted run")

    assert study.main(argv) == 0
    text = capsys.readouterr().out
    assert "[1/4] baseline budget 1.0 seed 0 ... (study ETA unknown)" in text
    assert "[4/4] long_short budget 1.5 seed 0 ... (study ETA " in text
    moved = [p for p in (out / "runs").iterdir() if ".stale-" in p.name]
    assert len(moved) == 1 and (moved[0] / "note.txt").exists()

    with open(out / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["arm"], float(r["budget"])) for r in rows] == [
        ("baseline", 1.0), ("long_short", 1.0), ("baseline", 1.5), ("long_short", 1.5),
    ]  # fmt: skip
    for row in rows:
        assert row["epochs"] == row["epochs_planned"]
        assert row["iterations"] == row["iterations_planned"]
        assert float(row["train_s"]) > 0 and float(row["test_s"]) > 0
        assert 0 <= float(row["test_top1"]) <= 100
        assert row["val_top1"] == ""  # EVAL_PERIOD 0: training does not validate
        assert json.loads(row["clips_per_s"])
        assert float(row["train_gflop"]) > 0
    epochs = {(r["arm"], float(r["budget"])): int(r["epochs"]) for r in rows}
    assert epochs == {
        ("baseline", 1.0): 2, ("long_short", 1.0): 3,
        ("baseline", 1.5): 3, ("long_short", 1.5): 5,
    }  # fmt: skip
    assert len(json.loads((out / "runs.json").read_text())) == 4
    table = (out / "table.md").read_text().splitlines()
    assert [line.split(" | ")[0:2] for line in table[2:6]] == [
        ["| baseline", "1x"], ["| baseline", "1.5x"],
        ["| long_short", "1x"], ["| long_short", "1.5x"],
    ]  # fmt: skip
    assert (out / "plot.png").read_bytes()[:4] == b"\x89PNG"
    shapes = (out / "shapes.md").read_text().splitlines()
    base = [line for line in shapes if line.startswith("| baseline | 1x |")]
    assert len(base) == 1 and base[0].split(" | ")[6] == "100"  # its own ideal
    assert any(line.startswith("| long_short | 1x | ") for line in shapes)
    ckpts = sorted((out / "runs").glob("*_s0/checkpoints/*.pyth"))
    assert len(ckpts) == 4  # the last epoch only
    kept = sorted(p.name for p in (tmp_path / "kept").iterdir())
    names = [p.name for p in (out / "runs").iterdir() if ".stale-" not in p.name]
    assert kept == sorted(f"{name}.json" for name in names)  # each run's result
    for path in (tmp_path / "kept").iterdir():
        result = json.loads(path.read_text())
        right = result["test_top1"] * result["test_videos"] / 100
        assert result["correct"].count("1") == pytest.approx(right)
        assert set(result["correct"]) <= {"0", "1"} and result["args"][0] == "--cfg"
        assert result["machine"]["cpu"] and result["date"]
    mtimes = [p.stat().st_mtime_ns for p in ckpts]

    assert study.main(argv) == 0
    text = capsys.readouterr().out
    assert text.count("finished before, skipped") == 4 and "ETA" not in text
    assert [p.stat().st_mtime_ns for p in ckpts] == mtimes
    assert (out / "table.md").read_text().splitlines() == table

    # Another recipe in the same folder: refused before any run, nothing mixed.
    assert study.main(argv + ["SOLVER.BASE_LR", "0.02"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out / 'runs'}")
    assert "was made with another config (SOLVER.BASE_LR 0.02 here" in err[0]
    assert "ETA" not in captured.out
    assert [p.stat().st_mtime_ns for p in ckpts] == mtimes
