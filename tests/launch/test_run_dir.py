"""A run directory is the user's data: one run per OUTPUT_DIR, checks before work."""

import collections
import json
import os
import socket
import subprocess
import sys

import pytest

from slowfast.config import load_config
from slowfast.launch import preflight as pf
from slowfast.launch.launcher import Layout
from slowfast.launch.run_lock import (
    LOCK_NAME,
    RunLock,
    RunLockError,
    remove_stale_temp_files,
)
from tests.conftest import REPO_ROOT
from tests.helpers.run_utils import one_epoch_cfg

RUN_NET = os.path.join(REPO_ROOT, "tools", "run_net.py")
DEMO = os.path.join(REPO_ROOT, "configs", "Demo")
TINY = os.path.join(DEMO, "Kinetics_I3D_tiny.yaml")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_lock(folder, **holder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK_NAME).write_text(json.dumps(holder))


def test_a_second_run_in_the_same_output_dir_is_refused(tmp_path):
    out = tmp_path / "run"
    with RunLock(str(out)):
        other = RunLock(str(out))
        with pytest.raises(RunLockError) as info:
            other.acquire()
        message = str(info.value)
        assert str(out) in message and f"pid {os.getpid()}" in message
        assert socket.gethostname() in message and "since" in message
    assert not (out / LOCK_NAME).exists()  # released


@pytest.mark.slow
def test_run_net_refuses_before_writing_anything(demo_data, tmp_path):
    out = tmp_path / "run"
    _write_lock(out, host=socket.gethostname(), pid=os.getpid(), since="now")
    cmd = [sys.executable, RUN_NET, "--cfg", TINY, "OUTPUT_DIR", str(out)]
    cmd += ["DATA.PATH_TO_DATA_DIR", str(demo_data / "kinetics")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: OUTPUT_DIR {out} is in use by another run")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(os.listdir(out)) == [LOCK_NAME]  # nothing written, nothing mixed


@pytest.mark.parametrize(
    "holder,reason",
    [
        ({"host": socket.gethostname(), "since": "x"}, "has ended"),
        ({"host": "elsewhere", "pid": 1, "slurm_job": "99"}, "this SLURM job"),
    ],
)
def test_a_dead_or_requeued_holder_is_taken_over(
    tmp_path, monkeypatch, holder, reason, caplog
):
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # the job was requeued
    holder = dict(holder)
    holder.setdefault("pid", _dead_pid())
    _write_lock(tmp_path, **holder)
    lock = RunLock(str(tmp_path))
    lock.acquire()
    assert reason in lock.took_over
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()


def test_a_live_holder_on_another_host_is_not_taken_over(tmp_path):
    _write_lock(tmp_path, host="elsewhere", pid=1, since="t")
    with pytest.raises(RunLockError, match="host elsewhere, pid 1"):
        RunLock(str(tmp_path)).acquire()


def test_only_our_interrupted_writes_are_removed(tmp_path):
    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    ours = ckpt / ".checkpoint_epoch_00003.pyth.4242.0badcafe.tmp"
    ours.write_bytes(b"partial")
    kept = [
        ckpt / "notes.tmp",
        tmp_path / ".my.tmp",
        ckpt / "checkpoint_epoch_00002.pyth",
    ]
    for path in kept:
        path.write_bytes(b"x")
    assert remove_stale_temp_files(str(tmp_path)) == [str(ours)]
    assert all(path.exists() for path in kept) and not ours.exists()


def test_in_use_names_a_live_holder_only(tmp_path):
    out = tmp_path / "run"
    assert RunLock(str(out)).in_use() is None  # no folder, no lock
    with RunLock(str(out)):
        busy = RunLock(str(out)).in_use()
        assert busy.startswith(f"host {socket.gethostname()}, pid {os.getpid()}, ")
    assert RunLock(str(out)).in_use() is None  # released
    _write_lock(out, host=socket.gethostname(), pid=_dead_pid(), since="then")
    assert RunLock(str(out)).in_use() is None  # its process has ended


@pytest.mark.slow
def test_a_rerun_takes_over_a_stale_lock_and_removes_temp_files(demo_data, tmp_path):
    out = tmp_path / "run"
    _write_lock(out, host=socket.gethostname(), pid=_dead_pid(), since="then")
    (out / "checkpoints").mkdir()
    temp = out / "checkpoints" / ".checkpoint_epoch_00001.pyth.77.12345678.tmp"
    temp.write_bytes(b"partial write")
    cmd = [sys.executable, RUN_NET, "--cfg", TINY]
    cmd += [
        "DATA.PATH_TO_DATA_DIR",
        str(demo_data / "kinetics"),
        "DATA.PATH_PREFIX",
        str(demo_data / "kinetics"),
        "OUTPUT_DIR",
        str(out),
    ]
    cmd += ["SOLVER.MAX_EPOCH", "1", "SOLVER.STEPS", "[0]", "SOLVER.LRS", "[1]"]
    cmd += ["TEST.ENABLE", "False", "TRAIN.BATCH_SIZE", "4", "LOG_MODEL_INFO", "False"]
    cmd += ["DATA_LOADER.NUM_WORKERS", "0", "SOLVER.WARMUP_EPOCHS", "0.0"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    log = (out / "stdout.log").read_text()
    assert "took over the lock" in log and "has ended" in log
    assert f"removed {temp}, left by an interrupted write" in log
    assert not temp.exists() and not (out / LOCK_NAME).exists()


Cfg = collections.namedtuple("Cfg", "cfg layout")


def _setup(tmp_path, demo_data, *opts, procs=1):
    opts = ["NUM_GPUS", "0", "DATA.PATH_TO_DATA_DIR", str(demo_data / "kinetics"),
            "OUTPUT_DIR", str(tmp_path / "out"), *opts]  # fmt: skip
    layout = Layout("plain", 1, procs, 0, "tcp://localhost:1")
    return Cfg(load_config([TINY], opts), layout)


def test_preflight_names_each_problem_in_one_line(tmp_path, demo_data, monkeypatch):
    run = _setup(tmp_path, demo_data)
    pf.preflight(run.cfg, run.layout)  # all good

    gpus = _setup(tmp_path, demo_data, "NUM_GPUS", "8")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(pf.PreflightError, match="set NUM_GPUS 0") as info:
        pf.preflight(gpus.cfg, gpus.layout)
    assert info.value.exit_status == 2

    odd = _setup(tmp_path, demo_data, procs=3)
    with pytest.raises(pf.PreflightError, match="not divisible by the 3 processes"):
        pf.preflight(odd.cfg, odd.layout)

    no_test = tmp_path / "no_test"
    no_test.mkdir()
    for split in ("train", "val"):
        (no_test / f"{split}.csv").write_text("a.mp4 0\n")
    missing = _setup(tmp_path, demo_data, "DATA.PATH_TO_DATA_DIR", str(no_test))
    with pytest.raises(pf.PreflightError, match="test.csv not found") as info:
        pf.preflight(missing.cfg, missing.layout)
    assert info.value.exit_status == 1 and "TEST.ENABLE" in str(info.value)
    train_only = _setup(
        tmp_path,
        demo_data,
        "DATA.PATH_TO_DATA_DIR",
        str(no_test),
        "TEST.ENABLE",
        "False",
    )
    pf.preflight(train_only.cfg, train_only.layout)  # no test split read

    nowhere = _setup(tmp_path, demo_data, "DATA.PATH_TO_DATA_DIR", str(tmp_path / "x"))
    with pytest.raises(pf.PreflightError, match="folder not found") as info:
        pf.preflight(nowhere.cfg, nowhere.layout)
    assert info.value.exit_status == 1

    blocked = tmp_path / "file"
    blocked.write_text("")
    unwritable = _setup(tmp_path, demo_data, "OUTPUT_DIR", str(blocked / "sub"))
    with pytest.raises(pf.PreflightError, match="cannot be written"):
        pf.preflight(unwritable.cfg, unwritable.layout)

    gone = str(tmp_path / "gone.pyth")
    for node, enable in (("TEST", "TRAIN.ENABLE"), ("TRAIN", "TEST.ENABLE")):
        absent = _setup(
            tmp_path, demo_data, f"{node}.CHECKPOINT_FILE_PATH", gone, enable, "False"
        )
        with pytest.raises(pf.PreflightError, match="no such file") as info:
            pf.preflight(absent.cfg, absent.layout)
        assert str(info.value).startswith(f"{node}.CHECKPOINT_FILE_PATH = ")
        assert info.value.exit_status == 1

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(pf.shutil, "disk_usage", lambda path: usage(1, 1, 1000))
    with pytest.raises(pf.PreflightError, match="MiB free on its disk"):
        pf.preflight(run.cfg, run.layout)


@pytest.mark.parametrize(
    "opts, message",
    [
        (["MULTIGRID.SHORT_CYCLE", "True", "MULTIGRID.BN_BASE_SIZE", "3"],
         "MULTIGRID.BN_BASE_SIZE"),
        (["MULTIGRID.LONG_CYCLE", "True", "SOLVER.MAX_EPOCH", "2",
          "SOLVER.STEPS", "[0, 1]", "SOLVER.LRS", "[1, 0.1]",
          "MULTIGRID.EPOCH_FACTOR", "0.2"],
         "SOLVER.MAX_EPOCH = 2: times MULTIGRID.EPOCH_FACTOR it rounds to 0"),
    ],
)  # fmt: skip
def test_preflight_refuses_a_schedule_the_trainer_cannot_build(
    tmp_path, demo_data, opts, message
):
    run = _setup(tmp_path, demo_data, *opts)
    with pytest.raises(pf.PreflightError, match=message) as info:
        pf.preflight(run.cfg, run.layout)
    assert info.value.exit_status == 2 and "\n" not in str(info.value)


def test_a_published_gpu_config_on_a_cpu_machine_is_one_line(tmp_path):
    cfg = os.path.join(REPO_ROOT, "configs", "Kinetics", "SLOWFAST_8x8_R50.yaml")
    cmd = [sys.executable, RUN_NET, "--cfg", cfg, "OUTPUT_DIR", str(tmp_path / "o")]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: NUM_GPUS = 8 but this machine")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_a_finished_run_rerun_prints_its_results_and_tests_again_only_if_asked(
    demo_data, tmp_path, caplog
):
    from slowfast.engine.tester import test as run_test
    from slowfast.engine.trainer import train

    opts = ["TRAIN.BATCH_SIZE", "4"]
    cfg = one_epoch_cfg(demo_data, tmp_path, *opts)
    train(cfg)
    first = run_test(cfg)

    def tests_logged():
        lines = (tmp_path / "json_stats.log").read_text().splitlines()
        return [json.loads(line) for line in lines if '"test_final"' in line]

    with caplog.at_level("INFO"):
        train(cfg)  # the rerun of the finished command
        again = run_test(cfg)
    assert "all 1 epochs are trained and validated" in caplog.text
    assert "is already tested with these settings" in caplog.text
    assert "TEST.RERUN True" in caplog.text
    assert again["top1_err"] == first["top1_err"] and len(tests_logged()) == 1
    more_views = one_epoch_cfg(demo_data, tmp_path, *opts, "TEST.NUM_ENSEMBLE_VIEWS", 2)
    run_test(more_views)  # other settings: a new test
    run_test(one_epoch_cfg(demo_data, tmp_path, *opts, "TEST.RERUN", "True"))
    assert len(tests_logged()) == 3


@pytest.mark.slow
def test_a_bad_list_line_is_one_line_without_a_traceback(demo_data, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "val", "test"):
        lines = (demo_data / "kinetics" / f"{split}.csv").read_text().splitlines()
        if split == "train":
            lines[1] = lines[1].rsplit(" ", 1)[0] + " cat"  # not a class id
        (data / f"{split}.csv").write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, RUN_NET, "--cfg", TINY, "DATA.PATH_TO_DATA_DIR", str(data)]
    cmd += ["DATA.PATH_PREFIX", str(demo_data / "kinetics"), "OUTPUT_DIR"]
    cmd += [str(tmp_path / "out"), "LOG_MODEL_INFO", "False"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"error: {data / 'train.csv'}:2: label")
    assert "traceback in" in lines[0]
    assert "Traceback" in (tmp_path / "out" / "stdout.log").read_text()


@pytest.mark.slow
def test_testing_without_a_checkpoint_is_one_line(demo_data, tmp_path):
    cmd = [sys.executable, RUN_NET, "--cfg", TINY, "TRAIN.ENABLE", "False"]
    cmd += ["DATA.PATH_TO_DATA_DIR", str(demo_data / "kinetics")]
    cmd += ["DATA.PATH_PREFIX", str(demo_data / "kinetics"), "LOG_MODEL_INFO", "False"]
    cmd += ["OUTPUT_DIR", str(tmp_path / "out")]
    for extra in (["TEST.CHECKPOINT_FILE_PATH", str(tmp_path / "gone.pyth")], []):
        result = subprocess.run(
            cmd + extra, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 1, result.stderr[-2000:]
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "no checkpoint to test" in lines[0]
