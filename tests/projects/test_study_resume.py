"""The study stopped by a signal and resumed (projects/multigrid/multigrid_study/
progress.py): the records, the signal passed on, a real run resumed."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from multigrid_study import machine as sm
from multigrid_study import progress as sp

from slowfast.checkpoint.files import is_mid_epoch_checkpoint, list_checkpoints
from slowfast.utils.errors import EXIT_PREEMPTED
from tests.conftest import REPO_ROOT

from .test_study import DEMO_MULTIGRID, STUDY_PATH, _study_module

HERE = {"cpu": "a CPU", "cpus": 2, "gpu": None, "gpus": None, "torch": "2.13.0"}
THERE = dict(HERE, cpus=16)


def _proc(phase, status, seconds=1.0, machine=HERE, stopped_by=None):
    proc = {"phase": phase, "seconds": seconds, "status": status, "machine": machine}
    return dict(proc, stopped_by=stopped_by) if stopped_by else proc


TERM = {"stopped_by": "SIGTERM"}  # the study got a stop signal while it ran


@pytest.mark.parametrize(
    "processes, checkpointed, trained, phase",
    [
        ([], False, False, sp.START),  # a folder without records (an older study)
        ([_proc("train", EXIT_PREEMPTED)], True, False, sp.RESUME),
        ([_proc("train", 75), _proc("train", 75)], True, False, sp.RESUME),
        ([_proc("train", 75), _proc("train", 0)], True, True, sp.TEST),
        ([_proc("train", 0), _proc("test", -15, **TERM)], True, True, sp.TEST),
        ([_proc("train", 0), _proc("test", None, None)], True, True, sp.TEST),
        ([_proc("train", 0)], False, False, sp.START),  # no final checkpoint
        ([_proc("train", 1)], True, False, sp.START),  # it failed
        # Killed by the signal while starting, after an earlier checkpoint:
        ([_proc("train", 75), _proc("train", -15, **TERM)], True, False, sp.RESUME),
        ([_proc("train", -15, **TERM)], False, False, sp.START),  # nothing saved
        ([_proc("train", -15, **TERM)], True, True, sp.TEST),  # killed while ending
        ([_proc("train", 75), _proc("train", -15)], True, False, sp.START),  # not us
        ([_proc("train", 75), _proc("train", None, None)], True, False, sp.START),
        ([_proc("train", 75, machine=THERE)], True, False, sp.START),
        ([_proc("train", 75, machine=None)], True, False, sp.RESUME),  # older study
    ],
)
def test_next_phase(processes, checkpointed, trained, phase):
    assert sp.next_phase(processes, checkpointed, trained, HERE)[0] == phase


def test_machines_compare_by_kind_not_by_host():
    assert sm.same_machine(HERE, dict(HERE)) and sm.same_machine(HERE, None)
    assert not sm.same_machine(HERE, THERE)
    assert not sm.same_machine(HERE, dict(HERE, torch="2.12.0"))
    gpu = dict(HERE, gpu="NVIDIA H100 80GB HBM3", gpus=1, cpus=16)
    assert not sm.same_machine(gpu, dict(gpu, gpu="NVIDIA H200"))
    assert sm.machine_text(HERE) == "2 cores (a CPU), torch 2.13.0"
    assert sm.machine_text(gpu) == (
        "NVIDIA H100 80GB HBM3 x1, 16 cores (a CPU), torch 2.13.0"
    )
    this = sm.describe_machine(0)
    assert this["cpus"] >= 1 and this["gpu"] is None and this["torch"]
    assert this["cpu_isa"] == torch.backends.cpu.get_cpu_capability()
    # Two VMs of one model name: family, model number and ISA tell them apart;
    # a record without them (an older run) still matches.
    zen4 = dict(HERE, cpu_id="family 25 model 17", cpu_isa="AVX512")
    assert not sm.same_machine(zen4, dict(zen4, cpu_isa="AVX2"))
    assert not sm.same_machine(zen4, dict(zen4, cpu_id="family 23 model 49"))
    assert sm.same_machine(zen4, HERE)
    assert sm.machine_text(zen4) == (
        "2 cores (a CPU, family 25 model 17, AVX512), torch 2.13.0"
    )


def test_training_wall_clock_sums_the_training_processes():
    processes = [_proc("train", 75, 10.0), _proc("train", 0, 2.5), _proc("test", 0)]
    assert sp.train_seconds(processes) == 12.5


# A child that stops its parent (the study) with SIGTERM and exits 75 once the
# parent passes the signal on to it; 3 if it never comes.
CHILD = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(75))
print("child up", flush=True)
os.kill(os.getppid(), signal.SIGTERM)
time.sleep(60)
sys.exit(3)
"""


def _run(tmp_path, code, stopper, phase="train"):
    cmd = [sys.executable, "-c", code]
    return sp.run_process(cmd, str(tmp_path), phase, f"{phase}.out", stopper, HERE)


def test_a_stop_signal_is_passed_on_and_recorded(tmp_path):
    stopper = sp.Stopper([signal.SIGTERM])
    stopper.install()
    try:
        with pytest.raises(sp.StudyStopped, match="stopped by SIGTERM in "):
            _run(tmp_path, CHILD, stopper)
        records = sp.read_progress(str(tmp_path))
        assert [(p["phase"], p["status"]) for p in records] == [("train", 75)]
        assert 0 < records[0]["seconds"] < 60
        # Stopped: the next process does not start.
        with pytest.raises(sp.StudyStopped, match="SIGTERM before .*'s test$"):
            _run(tmp_path, "print('never')", stopper, "test")
    finally:
        stopper.restore()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert len(sp.read_progress(str(tmp_path))) == 1
    assert (tmp_path / "train.out").read_text() == "child up\n"


def test_a_failed_process_is_recorded_and_its_log_appended(tmp_path):
    stopper = sp.Stopper([signal.SIGTERM])
    assert _run(tmp_path, "print('first')", stopper) > 0
    with pytest.raises(sp.RunFailed, match=r"exit status 4 \(.*train.out\): boom"):
        _run(tmp_path, "import sys; print('boom'); sys.exit(4)", stopper)
    records = sp.read_progress(str(tmp_path))
    assert [p["status"] for p in records] == [0, 4]
    log = (tmp_path / "train.out").read_text().splitlines()
    assert log == ["first", "--- study: train process 2 ---", "boom"]


def _tiny_study_argv(demo_data, out, arm):
    """A one-run study of the tiny demo config, a few seconds per epoch."""
    return [
        "--cfg", DEMO_MULTIGRID, "--arms", arm, "--budgets", "1", "--out", str(out),
        "--results", f"{out}_kept",
        "DATA.PATH_TO_DATA_DIR", str(demo_data / "kinetics_x6"),
        "DATA.PATH_PREFIX", str(demo_data / "kinetics"),
        "DATA_LOADER.NUM_WORKERS", "0", "LOG_MODEL_INFO", "False", "LOG_PERIOD", "1",
        "TRAIN.BATCH_SIZE", "2", "SOLVER.MAX_EPOCH", "4", "SOLVER.STEPS", "[0, 2]",
        "SOLVER.LRS", "[1, 0.1]", "SOLVER.WARMUP_EPOCHS", "0.5",
        "BN.USE_PRECISE_STATS", "False", "TEST.BATCH_SIZE", "5",
        "TEST.NUM_ENSEMBLE_VIEWS", "1", "TEST.NUM_SPATIAL_CROPS", "1",
    ]  # fmt: skip


def _as_from_a_terminal():
    """The study's signals as a shell starts it: whatever this test process
    inherited (an ignored SIGINT under a background job, signals a loader left
    blocked), SIGINT is default and nothing is blocked."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _start_training(argv, run_dir, new_session=False):
    """The study in a process, once its training has logged an iteration."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    proc = subprocess.Popen(
        [sys.executable, STUDY_PATH, *argv], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=new_session, preexec_fn=_as_from_a_terminal,
    )  # fmt: skip
    stats = run_dir / "json_stats.log"
    deadline = time.time() + 300
    while not (stats.exists() and "train_iter" in stats.read_text()):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


@pytest.mark.slow
def test_a_study_stopped_mid_run_resumes_from_its_checkpoint(
    demo_data, tmp_path, capsys
):
    """SIGTERM to the study process only: it passes it on, the training saves a
    mid-epoch checkpoint, the study exits 75; the same command finishes the run
    from there with the planned iterations and both processes' wall-clock."""
    out = tmp_path / "study"
    argv = _tiny_study_argv(demo_data, out, "long_short")
    run_dir = out / "runs" / "long_short_b1_s0"
    proc = _start_training(argv, run_dir)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_PREEMPTED, stdout + stderr
    assert stderr.strip().endswith(
        "stopped by SIGTERM in long_short_b1_s0's train; run the same command to go on"
    )
    assert [(p["phase"], p["status"]) for p in sp.read_progress(str(run_dir))] == [
        ("train", EXIT_PREEMPTED)
    ]
    assert any(is_mid_epoch_checkpoint(p) for p in list_checkpoints(str(run_dir)))
    assert not (out / "runs.csv").exists()

    study = _study_module()
    assert study.main(argv) == 0
    result = json.loads((run_dir / "study_result.json").read_text())
    records = sp.read_progress(str(run_dir))
    assert [(p["phase"], p["status"]) for p in records] == [
        ("train", EXIT_PREEMPTED), ("train", 0), ("test", 0)
    ]  # fmt: skip
    resumed = [
        json.loads(line)
        for line in (run_dir / "json_stats.log").read_text().splitlines()
        if '"_type": "resume"' in line
    ]
    assert len(resumed) == 1 and resumed[0]["checkpoint"].endswith(".pyth")
    assert result["train_processes"] == 2
    assert result["train_s"] == pytest.approx(
        records[0]["seconds"] + records[1]["seconds"]
    )
    assert result["iterations"] == result["iterations_planned"]
    assert result["epochs"] == result["epochs_planned"]
    assert result["test_top1"] is not None
    assert "--- study: train process 2 ---" in (run_dir / "study_train.out").read_text()
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    curve = result["curve"]  # every epoch once, resumed or not
    assert [p["epoch"] for p in curve] == list(range(1, result["epochs"] + 1))
    assert all(p["loss"] > 0 and p["lr"] > 0 for p in curve)
    assert "1 run(s) trained in more than one process" in (out / "table.md").read_text()
    assert not [p for p in (out / "runs").iterdir() if ".stale-" in p.name]
    assert result["machine"] == records[0]["machine"] == sm.describe_machine(0)
    timed = f"Timed on {sm.machine_text(result['machine'])}; code "
    assert timed in (out / "table.md").read_text()

    # Timed on another kind of machine: no new run joins it; the table is
    # still written when nothing is left to run.
    result["machine"] = dict(result["machine"], cpu="another CPU")
    (run_dir / "study_result.json").write_text(json.dumps(result))
    more = list(argv)
    more[more.index("--budgets") + 1] = "1,2"
    assert study.main(more) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{run_dir} was timed on " in err[0]
    assert "(another CPU" in err[0] and "do not compare" in err[0]
    assert study.main(argv) == 0
    assert "(another CPU" in (out / "table.md").read_text()


@pytest.mark.slow
def test_ctrl_c_ends_the_study_in_one_line(demo_data, tmp_path):
    """Ctrl-C (SIGINT to the foreground process group) is no stop signal: the
    study ends with status 130 and one line, no traceback, and the run it
    interrupted starts over next time."""
    out = tmp_path / "study"
    run_dir = out / "runs" / "baseline_b1_s0"
    proc = _start_training(_tiny_study_argv(demo_data, out, "baseline"), run_dir, True)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stdout + stderr
    assert stderr.strip().splitlines() == [
        "stopped by Ctrl-C in baseline_b1_s0, which starts over next time (to stop "
        "resumably, send SIGTERM); run the same command to go on"
    ]
    (record,) = sp.read_progress(str(run_dir))
    assert record["status"] not in (None, 0, EXIT_PREEMPTED)
    assert "stopped_by" not in record
    assert sp.next_phase([record], True, False, record["machine"])[0] == sp.START
