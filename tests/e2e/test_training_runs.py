"""Short training and test runs on generated Moving Digits data."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from slowfast.checkpoint.load import get_last_checkpoint
from slowfast.config import load_config
from slowfast.engine import trainer as trainer_module
from slowfast.engine.tester import test as run_test
from slowfast.engine.trainer import train
from slowfast.launch.launcher import Layout
from slowfast.launch.preflight import PreflightError, preflight
from tests.conftest import REPO_ROOT
from tests.helpers.run_utils import ONE_EPOCH

DEMO = os.path.join(REPO_ROOT, "configs", "Demo")
RUN_NET = os.path.join(REPO_ROOT, "tools", "run_net.py")


def _opts(data_dir, out_dir, extra=()):
    return [
        "DATA.PATH_TO_DATA_DIR",
        str(data_dir),
        "DATA.PATH_PREFIX",
        str(data_dir).replace("kinetics_x6", "kinetics"),
        "OUTPUT_DIR",
        str(out_dir),
        "DATA_LOADER.NUM_WORKERS",
        "0",
        "LOG_MODEL_INFO",
        "False",
        "LOG_PERIOD",
        "2",
        *extra,
    ]


def _cfg(name, data_dir, out_dir, extra=()):
    return load_config([os.path.join(DEMO, name)], _opts(data_dir, out_dir, extra))


ARCH_CASES = [
    ("Kinetics_C2D_tiny.yaml", "kinetics"),
    ("Kinetics_I3D_tiny.yaml", "kinetics"),
    ("Kinetics_I3D_NLN_tiny.yaml", "kinetics"),
    ("Kinetics_SLOWFAST_tiny.yaml", "kinetics"),
    ("SSv2_SLOWFAST_tiny.yaml", "ssv2"),
    ("Charades_I3D_tiny.yaml", "charades"),
]


@pytest.mark.parametrize("name,data", ARCH_CASES)
@pytest.mark.slow
def test_train_then_test_each_arch_and_dataset(demo_data, tmp_path, name, data):
    cfg = _cfg(
        name,
        demo_data / data,
        tmp_path,
        [
            *ONE_EPOCH,
            "TRAIN.BATCH_SIZE",
            "2",
            "TEST.BATCH_SIZE",
            "4",
            "TEST.NUM_ENSEMBLE_VIEWS",
            "2",
            "TEST.NUM_SPATIAL_CROPS",
            "1",
            "SOLVER.WARMUP_EPOCHS",
            "0.0",
            "BN.USE_PRECISE_STATS",
            "True",
            "BN.NUM_BATCHES_PRECISE",
            "2",
        ],
    )
    train(cfg)
    assert get_last_checkpoint(str(tmp_path)).endswith("checkpoint_epoch_00001.pyth")
    metrics = run_test(cfg)
    assert metrics["num_videos"] > 0
    if cfg.DATA.MULTI_LABEL:
        assert 0.0 <= metrics["map"] <= 1.0
    else:
        assert 0.0 <= metrics["top1_err"] <= 100.0
        assert metrics["views_per_video"] == (1 if data == "ssv2" else 2)
    saved = torch.load(tmp_path / "test_results.pyth")
    assert saved["video_scores"].shape == (metrics["num_videos"], cfg.MODEL.NUM_CLASSES)
    assert len(saved["video_paths"]) == metrics["num_videos"]
    assert len(saved["video_ids"]) == metrics["num_videos"]
    for video_id, path in zip(saved["video_ids"], saved["video_paths"]):
        assert video_id and video_id in path  # the file or frame folder's name
    assert saved["checkpoint"].endswith("checkpoint_epoch_00001.pyth")
    stats = (tmp_path / "json_stats.log").read_text()
    assert '"train_epoch"' in stats and '"val_epoch"' in stats
    assert (tmp_path / "config.yaml").exists() and (tmp_path / "schedule.json").exists()


def _multigrid_opts(extra=()):
    # The paper's short-cycle factors (SHORT_CYCLE_MIN_MAP 0): 32 and 45 px
    # views of the demo's 64 px, the shapes these tests count.
    return [
        "MULTIGRID.SHORT_CYCLE_MIN_MAP",
        "0",
        "TRAIN.BATCH_SIZE",
        "2",
        "SOLVER.STEPS",
        "[0, 2]",
        "SOLVER.LRS",
        "[1, 0.1]",
        "SOLVER.MAX_EPOCH",
        "3",
        "SOLVER.WARMUP_EPOCHS",
        "0.5",
        "TRAIN.CHECKPOINT_PERIOD",
        "1",
        "TRAIN.EVAL_PERIOD",
        "100",
        "TEST.ENABLE",
        "False",
        *extra,
    ]


def _final_state(out_dir):
    path = get_last_checkpoint(str(out_dir))
    return path, torch.load(path, weights_only=True)["model_state"]


@pytest.mark.slow
def test_kill_and_resume_gives_the_same_weights(demo_data, tmp_path):
    """A run killed mid-way and restarted ends with the uninterrupted weights."""
    data = demo_data / "kinetics_x6"
    args = ["--cfg", os.path.join(DEMO, "Kinetics_I3D_tiny_multigrid.yaml")]
    env = dict(os.environ)

    # 9 baseline epochs: multigrid's 13 epochs hold 2.4 baseline epochs of
    # iterations, so TRAIN.CHECKPOINT_PERIOD 1 saves after epochs 9, 12 and 13.
    longer = _multigrid_opts(["SOLVER.MAX_EPOCH", "9", "SOLVER.STEPS", "[0, 6]"])
    full_dir = tmp_path / "full"
    cmd = [sys.executable, RUN_NET, *args, *_opts(data, full_dir, longer)]
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    saved = sorted(p.name for p in (full_dir / "checkpoints").glob("*.pyth"))
    assert saved == [f"checkpoint_epoch_{e:05d}.pyth" for e in (9, 12, 13)]

    killed_dir = tmp_path / "killed"
    cmd = [sys.executable, RUN_NET, *args, *_opts(data, killed_dir, longer)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    target = killed_dir / "checkpoints" / "checkpoint_epoch_00012.pyth"
    deadline = time.time() + 120
    while not target.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = sorted(glob.glob(str(killed_dir / "checkpoints" / "*.pyth")))
    full_count = len(glob.glob(str(full_dir / "checkpoints" / "*.pyth")))
    assert 2 <= len(done) < full_count, "the kill must interrupt the run"
    subprocess.run(cmd, check=True, capture_output=True, env=env)

    path_a, state_a = _final_state(full_dir)
    path_b, state_b = _final_state(killed_dir)
    assert os.path.basename(path_a) == os.path.basename(path_b)
    for key, value in state_a.items():
        assert torch.equal(value, state_b[key]), key
    log = (killed_dir / "stdout.log").read_text()
    assert "resumed from" in log


@pytest.mark.slow
def test_two_cpu_processes_with_short_cycle(demo_data, tmp_path):
    data = demo_data / "kinetics_x6"
    extra = _multigrid_opts(
        [
            "MULTIGRID.LONG_CYCLE",
            "False",
            "TRAIN.BATCH_SIZE",
            "4",
            "NUM_CPU_PROCS",
            "2",
            *ONE_EPOCH,
            "TEST.ENABLE",
            "True",
            "TEST.NUM_ENSEMBLE_VIEWS",
            "1",
            "TEST.NUM_SPATIAL_CROPS",
            "1",
            "TEST.BATCH_SIZE",
            "2",
        ]
    )
    cmd = [
        sys.executable,
        RUN_NET,
        "--cfg",
        os.path.join(DEMO, "Kinetics_I3D_tiny_multigrid.yaml"),
        "--init_method",
        "tcp://127.0.0.1:29533",
        *_opts(data, tmp_path, extra),
    ]
    env = dict(os.environ)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    log = (tmp_path / "stdout.log").read_text()
    assert "Spawning 2 CPU processes" in log
    # Short cycle: iterations 0, 1, 2 use 16, 8 and 4 clips (global).
    stats = (tmp_path / "json_stats.log").read_text()
    for shape in ("16x8x32", "8x8x45", "4x8x64"):  # logged at iterations 3, 1, 5
        assert f'"shape": "{shape}"' in stats, shape
    assert "test_final" in stats


def test_missing_data_folder_fails_early(tmp_path):
    cfg = _cfg("Kinetics_I3D_tiny.yaml", tmp_path / "nowhere", tmp_path)
    layout = Layout("plain", 1, 1, 0, "tcp://localhost:9999")
    with pytest.raises(PreflightError, match="DATA.PATH_TO_DATA_DIR") as info:
        preflight(cfg, layout)  # the launcher's checks, before any model
    assert info.value.exit_status == 1


def test_nan_loss_stops_with_iteration_and_keeps_last_checkpoint(
    demo_data, tmp_path, monkeypatch
):
    cfg = _cfg(
        "Kinetics_I3D_tiny.yaml",
        demo_data / "kinetics",
        tmp_path,
        [
            "SOLVER.MAX_EPOCH",
            "3",
            "SOLVER.STEPS",
            "[0, 2]",
            "SOLVER.LRS",
            "[1, 0.1]",
            "TRAIN.BATCH_SIZE",
            "2",
            "TRAIN.CHECKPOINT_PERIOD",
            "1",
            "TRAIN.EVAL_PERIOD",
            "100",
        ],
    )
    calls = {"n": 0}
    real = trainer_module.get_loss_func(cfg.MODEL.LOSS_FUNC)

    def nan_after_epoch_one(preds, labels):
        calls["n"] += 1
        loss = real(preds, labels)
        return loss * float("nan") if calls["n"] == 8 else loss

    monkeypatch.setattr(
        trainer_module, "get_loss_func", lambda name: nan_after_epoch_one
    )
    with pytest.raises(FloatingPointError, match="iteration 3/") as info:
        train(cfg)
    assert "checkpoint_epoch_00001.pyth" in str(info.value)
    assert get_last_checkpoint(str(tmp_path)).endswith("checkpoint_epoch_00001.pyth")


def test_test_only_run_keeps_earlier_results_and_writes_tensorboard(
    demo_data, tmp_path
):
    import shutil

    extra = [*ONE_EPOCH, "TRAIN.BATCH_SIZE", "2", "TEST.BATCH_SIZE", "4",
             "TEST.NUM_ENSEMBLE_VIEWS", "1", "TEST.NUM_SPATIAL_CROPS", "1",
             "BN.USE_PRECISE_STATS", "False"]  # fmt: skip
    cfg = _cfg("Kinetics_I3D_tiny.yaml", demo_data / "kinetics", tmp_path, extra)
    train(cfg)
    run_test(cfg)
    first = torch.load(tmp_path / "test_results.pyth")
    other = tmp_path / "elsewhere" / "checkpoint_epoch_00007.pyth"
    other.parent.mkdir()
    shutil.copy(get_last_checkpoint(str(tmp_path)), other)
    again = _cfg(
        "Kinetics_I3D_tiny.yaml",
        demo_data / "kinetics",
        tmp_path,
        extra
        + [
            "TRAIN.ENABLE",
            "False",
            "TEST.CHECKPOINT_FILE_PATH",
            str(other),
            "TENSORBOARD.ENABLE",
            "True",
        ],  # fmt: skip
    )
    run_test(again)
    kept = torch.load(tmp_path / "test_results.pyth")
    assert kept["checkpoint"] == first["checkpoint"] != str(other)
    assert torch.equal(kept["video_scores"], first["video_scores"])
    new = torch.load(tmp_path / "test_results_checkpoint_epoch_00007.pyth")
    assert new["checkpoint"] == str(other)
    assert glob.glob(str(tmp_path / "runs-kinetics" / "events.out.tfevents.*"))


def test_rerun_after_a_kill_before_the_final_validation_runs_it(demo_data, tmp_path):
    extra = [*ONE_EPOCH, "TRAIN.BATCH_SIZE", "2", "BN.USE_PRECISE_STATS", "False"]
    cfg = _cfg("Kinetics_I3D_tiny.yaml", demo_data / "kinetics", tmp_path, extra)
    stats = tmp_path / "json_stats.log"
    run_state = tmp_path / "run_state.json"

    def val_lines():
        lines = [json.loads(s) for s in stats.read_text().splitlines() if s.strip()]
        return [s for s in lines if s["_type"] == "val_epoch"]

    train(cfg)
    assert len(val_lines()) == 1
    state = json.loads(run_state.read_text())
    assert state["trained_epochs"] == [1] and state["validated_epochs"] == [1]
    # Killed after the checkpoint, before the validation: neither records it.
    kept = [s for s in stats.read_text().splitlines() if '"val_epoch"' not in s]
    stats.write_text("\n".join(kept) + "\n")
    run_state.write_text(json.dumps({**state, "validated_epochs": []}))
    train(cfg)
    assert [s["epoch"] for s in val_lines()] == ["1/1"]
    assert json.loads(run_state.read_text())["validated_epochs"] == [1]
    train(cfg)  # nothing left to do: no second validation
    assert len(val_lines()) == 1


def test_the_run_state_decides_not_the_log(demo_data, tmp_path):
    extra = [*ONE_EPOCH, "TRAIN.BATCH_SIZE", "2", "BN.USE_PRECISE_STATS", "False",
             "TEST.BATCH_SIZE", "4", "TEST.NUM_ENSEMBLE_VIEWS", "1",
             "TEST.NUM_SPATIAL_CROPS", "1"]  # fmt: skip
    cfg = _cfg("Kinetics_I3D_tiny.yaml", demo_data / "kinetics", tmp_path, extra)
    stats = tmp_path / "json_stats.log"

    def count(kind):
        lines = stats.read_text().splitlines()
        return sum(json.loads(s)["_type"] == kind for s in lines if s.strip())

    train(cfg)
    first = run_test(cfg)
    state = json.loads((tmp_path / "run_state.json").read_text())
    (tested,) = state["tests"]
    path = get_last_checkpoint(str(tmp_path), epochs_only=True)
    assert tested["checkpoint"] == path and tested["top1_err"] == first["top1_err"]
    info = os.stat(path)
    assert tested["checkpoint_file"] == f"{info.st_size}-{info.st_mtime_ns}"
    # A log without its val_epoch and test_final lines does not matter any more.
    lines = stats.read_text().splitlines()
    kept = [s for s in lines if '"val_epoch"' not in s and '"test_final"' not in s]
    stats.write_text("\n".join(kept) + "\n")
    train(cfg)
    assert run_test(cfg)["top1_err"] == first["top1_err"]
    assert count("val_epoch") == 0 and count("test_final") == 0
