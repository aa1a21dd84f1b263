"""Launchers: plain spawn, torchrun, srun and submitit run the same job."""

import glob
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from slowfast.checkpoint.files import is_mid_epoch_checkpoint, list_checkpoints
from slowfast.checkpoint.load import get_last_checkpoint
from slowfast.config import load_config
from slowfast.launch.launcher import (
    LaunchError,
    apply_layout,
    describe_layout,
    detect_launcher,
    detect_layout,
    first_host,
    job_port,
    tasks_per_node,
)
from slowfast.launch.spawn import available_cores
from tests.conftest import REPO_ROOT

CFG = os.path.join(REPO_ROOT, "configs", "Demo", "Kinetics_I3D_tiny_multigrid.yaml")
RUN_NET = os.path.join(REPO_ROOT, "tools", "run_net.py")
SUBMIT = os.path.join(REPO_ROOT, "tools", "submit.py")
# No thread variable: every CPU process takes cores // processes threads itself
# (launch/spawn.py), so the launchers' runs agree without OMP_NUM_THREADS.
ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
}
THREADS = f"CPU threads: {max(1, available_cores() // 2)} per process"
TIMEOUT = 300


def _opts(demo_data, out_dir):
    """A 2-epoch short-cycle run of 2 CPU processes on the tiny data."""
    return [
        "DATA.PATH_TO_DATA_DIR", str(demo_data / "kinetics_x6"),
        "DATA.PATH_PREFIX", str(demo_data / "kinetics"),
        "OUTPUT_DIR", str(out_dir),
        "DATA_LOADER.NUM_WORKERS", "0",
        "LOG_MODEL_INFO", "False",
        "LOG_PERIOD", "1",
        "TRAIN.BATCH_SIZE", "4",
        "MULTIGRID.LONG_CYCLE", "False",
        "SOLVER.STEPS", "[0]",
        "SOLVER.LRS", "[1]",
        "SOLVER.MAX_EPOCH", "2",
        "SOLVER.WARMUP_EPOCHS", "0.5",
        "TRAIN.CHECKPOINT_PERIOD", "1",
        "TRAIN.EVAL_PERIOD", "100",
        "TEST.ENABLE", "False",
        "NUM_GPUS", "0",
    ]  # fmt: skip


def _weights(out_dir):
    path = get_last_checkpoint(str(out_dir))
    assert path and path.endswith("checkpoint_epoch_00002.pyth"), path
    return torch.load(path, weights_only=True)["model_state"]


def _assert_same(state_a, state_b):
    assert state_a.keys() == state_b.keys()
    for key, value in state_a.items():
        assert torch.equal(value, state_b[key]), key


def _wait_for_training(out_dir, procs, timeout=TIMEOUT):
    """Waits until the run has logged its first training iteration."""
    stats = out_dir / "json_stats.log"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if stats.exists() and "train_iter" in stats.read_text():
            return
        if any(p.poll() is not None for p in procs):
            raise AssertionError("the run ended before training")
        time.sleep(0.02)
    raise AssertionError("no training iteration logged")


def _srun_env(rank, job_id=4242):
    return dict(
        ENV,
        SLURM_JOB_ID=str(job_id),
        SLURM_STEP_ID="0",
        SLURM_PROCID=str(rank),
        SLURM_LOCALID=str(rank),
        SLURM_NODEID="0",
        SLURM_NTASKS="2",
        SLURM_JOB_NUM_NODES="1",
        SLURM_TASKS_PER_NODE="2",
        SLURM_JOB_NODELIST="localhost",
    )


def test_layouts_from_the_environment():
    cfg = load_config([CFG], ["NUM_GPUS", "0", "NUM_CPU_PROCS", "1"])
    torchrun = dict(
        RANK="5", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4",
        MASTER_ADDR="node0", MASTER_PORT="29500", TORCHELASTIC_RUN_ID="x",
    )  # fmt: skip
    layout = detect_layout(cfg, "tcp://localhost:9999", torchrun)
    assert (layout.launcher, layout.num_nodes, layout.procs_per_node) == (
        "torchrun",
        2,
        4,
    )
    assert (layout.node_rank, layout.rank, layout.init_method) == (1, 5, "env://")
    run_cfg, notes = apply_layout(cfg, layout)
    assert (run_cfg.NUM_CPU_PROCS, run_cfg.NUM_SHARDS, run_cfg.SHARD_ID) == (4, 2, 1)
    assert notes[0] == "NUM_CPU_PROCS 1 -> 4 (from torchrun)"
    lines = describe_layout(run_cfg, layout)
    assert "2 node(s) x 4 CPU process(es) = 8" in lines[0]
    # The reference's meaning: TRAIN.BATCH_SIZE per machine.
    assert lines[1].startswith("global batch 32 (TRAIN.BATCH_SIZE 16 per node x 2")

    srun = dict(
        SLURM_JOB_ID="123456", SLURM_STEP_ID="0", SLURM_PROCID="9",
        SLURM_LOCALID="1", SLURM_NODEID="1", SLURM_NTASKS="16",
        SLURM_JOB_NUM_NODES="2", SLURM_TASKS_PER_NODE="8(x2)",
        SLURM_JOB_NODELIST="gpu[017-018]",
    )  # fmt: skip
    layout = detect_layout(cfg, "", srun)
    assert layout.launcher == "srun" and layout.world_size == 16
    assert layout.init_method == "tcp://gpu017:" + str(15000 + 123456 % 20000)
    assert job_port("123456") == 15000 + 123456 % 20000  # submitit's jobs too
    assert job_port("123_4") == 15000 + 1234 % 20000  # an array task's id
    # The batch script's own shell is not an srun task.
    batch_shell = dict(srun, SLURM_STEP_ID="batch")
    assert detect_launcher(batch_shell) == "plain"
    assert detect_launcher({k: v for k, v in srun.items() if k != "SLURM_STEP_ID"}) == (
        "plain"
    )
    # One task per node with NUM_CPU_PROCS 4: that task spawns its processes.
    interactive = dict(srun, SLURM_NTASKS="1", SLURM_TASKS_PER_NODE="1")
    interactive.update(SLURM_JOB_NUM_NODES="1", SLURM_PROCID="0", SLURM_LOCALID="0")
    four = load_config([CFG], ["NUM_GPUS", "0", "NUM_CPU_PROCS", "4"])
    assert detect_layout(four, "tcp://h:1", interactive).launcher == "plain"
    assert detect_layout(cfg, "tcp://h:1", interactive).launcher == "srun"
    with pytest.raises(LaunchError, match="tasks per node"):
        detect_layout(cfg, "", dict(srun, SLURM_TASKS_PER_NODE="9,7"))
    with pytest.raises(LaunchError, match="distribution=block"):
        detect_layout(cfg, "", dict(srun, SLURM_LOCALID="2"))
    assert first_host("a01,b02") == "a01" and first_host("gpu[07-09,12]") == "gpu07"
    assert tasks_per_node("4(x2),3") == [4, 4, 3]


def test_base_lr_scale_num_shards_and_the_global_batch():
    from slowfast.multigrid import MultigridSchedule

    cfg = load_config(
        [CFG],
        ["NUM_SHARDS", "2", "SOLVER.BASE_LR_SCALE_NUM_SHARDS", "True", "NUM_GPUS", "0"],
    )
    one = load_config([CFG], ["NUM_GPUS", "0"])
    sched = MultigridSchedule.from_cfg(cfg, 2)
    sched_one = MultigridSchedule.from_cfg(one, 1)
    assert sched.policy.base_lr == pytest.approx(2 * sched_one.policy.base_lr)
    assert sched.base_batch == 2 * cfg.TRAIN.BATCH_SIZE


@pytest.mark.slow
def test_torchrun_and_srun_run_the_spawned_job_and_resume_a_preemption(
    demo_data, tmp_path
):
    spawn = tmp_path / "spawn"
    cmd = [sys.executable, RUN_NET, "--cfg", CFG, "--init_method"]
    cmd += ["tcp://127.0.0.1:29641", *_opts(demo_data, spawn), "NUM_CPU_PROCS", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert THREADS in (spawn / "stdout.log").read_text()
    expected = _weights(spawn)

    torchrun = tmp_path / "torchrun"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--master-port", "29642", RUN_NET, "--cfg", CFG]
    cmd += _opts(demo_data, torchrun)  # NUM_CPU_PROCS 1: torchrun's layout wins
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    log = (torchrun / "stdout.log").read_text()
    assert "launcher torchrun: 1 node(s) x 2 CPU process(es) = 2" in log
    assert "NUM_CPU_PROCS 1 -> 2 (from torchrun)" in log
    # torchrun sets OMP_NUM_THREADS=1 in its workers; the rule replaces it.
    assert THREADS in log and "OMP_NUM_THREADS=1 in the environment not used" in log
    _assert_same(expected, _weights(torchrun))

    # Two processes started as srun starts them: one job. Rank 1 alone gets
    # the scheduler's warning; both stop after the same iteration.
    srun = tmp_path / "srun"
    cmd = [sys.executable, RUN_NET, "--cfg", CFG, *_opts(demo_data, srun)]

    def start():
        return [
            subprocess.Popen(
                cmd,
                env=_srun_env(rank),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for rank in (0, 1)
        ]

    procs = start()
    _wait_for_training(srun, procs)
    procs[1].send_signal(signal.SIGUSR1)
    errors = [p.communicate(timeout=TIMEOUT)[1] for p in procs]
    assert [p.returncode for p in procs] == [75, 75], errors
    assert "stopped by SIGUSR1 after a mid-epoch checkpoint" in errors[0]
    mid = [p for p in list_checkpoints(str(srun)) if is_mid_epoch_checkpoint(p)]
    assert len(mid) == 1
    procs = start()  # the requeued job: the same command
    assert [p.wait(timeout=TIMEOUT) for p in procs] == [0, 0]
    log = (srun / "stdout.log").read_text()
    assert "launcher srun: 1 node(s) x 2 CPU process(es)" in log and THREADS in log
    _assert_same(expected, _weights(srun))


def test_submit_dry_run_prints_the_sbatch_script(demo_data, tmp_path):
    cmd = [sys.executable, SUBMIT, "--cfg", CFG, "--nodes", "2", "--gpus-per-node"]
    cmd += ["8", "--partition", "p1", "--time", "1-00:00:00", "--dry-run"]
    cmd += ["OUTPUT_DIR", str(tmp_path / "run")]
    cmd += ["DATA.PATH_TO_DATA_DIR", str(demo_data / "kinetics")]
    cmd += ["DATA.PATH_PREFIX", str(demo_data / "kinetics")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "2 node(s) x 8 task(s) = 16 (GPU each), time limit 1440 min" in text
    assert "global batch 32 (2 per task)" in text  # TRAIN.BATCH_SIZE 16 per node x 2
    for line in ("--nodes=2", "--ntasks-per-node=8", "--gpus-per-node=8"):
        assert f"#SBATCH {line}" in text
    assert "#SBATCH --partition=p1" in text and "#SBATCH --signal=USR2@300" in text
    assert str(tmp_path / "run" / "slurm") in text
    assert not (tmp_path / "run").exists()  # nothing submitted, nothing written


def test_submit_checks_the_data_before_submitting(tmp_path):
    cmd = [sys.executable, SUBMIT, "--cfg", CFG, "--gpus-per-node", "8"]
    cmd += ["OUTPUT_DIR", str(tmp_path / "run")]
    cmd += ["DATA.PATH_TO_DATA_DIR", str(tmp_path / "nowhere")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    assert out.returncode == 1, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(tmp_path / "nowhere") in errors[0], out.stderr
    assert "submitted" not in out.stdout and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_submit_local_job_is_requeued_after_a_signal(demo_data, tmp_path):
    pytest.importorskip("submitit", reason="submitit not installed (pip: [slurm])")
    reference = tmp_path / "reference"
    cmd = [sys.executable, RUN_NET, "--cfg", CFG, "--init_method"]
    cmd += ["tcp://127.0.0.1:29643", *_opts(demo_data, reference), "NUM_CPU_PROCS", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]

    run = tmp_path / "submitted"
    cmd = [sys.executable, SUBMIT, "--cfg", CFG, "--executor", "local"]
    cmd += ["--time", "10", *_opts(demo_data, run), "NUM_CPU_PROCS", "2"]
    proc = subprocess.Popen(
        cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    _wait_for_training(run, [proc])
    tasks = subprocess.run(
        ["pgrep", "-f", f"submitit.core._submit {run}"], capture_output=True, text=True
    ).stdout.split()
    assert len(tasks) == 2
    os.kill(int(tasks[0]), signal.SIGUSR2)  # as SLURM warns before the limit
    output = proc.communicate(timeout=TIMEOUT)[0]
    assert proc.returncode == 0, output[-3000:]
    task0 = "".join(
        open(p).read() for p in glob.glob(str(run / "slurm" / "*" / "*_0_log.*"))
    )
    assert "asks submitit to requeue the job" in task0
    assert "Requeued job" in task0 and "resumed from" in task0
    _assert_same(_weights(reference), _weights(run))


@pytest.mark.slow
def test_a_killed_process_stops_the_other_and_is_named(demo_data, tmp_path):
    out_dir = tmp_path / "run"
    cmd = [sys.executable, RUN_NET, "--cfg", CFG, "--init_method"]
    cmd += ["tcp://127.0.0.1:29644", *_opts(demo_data, out_dir), "NUM_CPU_PROCS", "2"]
    cmd += ["SOLVER.MAX_EPOCH", "20", "DIST_TIMEOUT_MINUTES", "1"]
    proc = subprocess.Popen(
        cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    # The first checkpoint (its epoch: a baseline epoch's iterations are done).
    folder = out_dir / "checkpoints"
    deadline = time.time() + TIMEOUT
    while proc.poll() is None and time.time() < deadline:
        if folder.is_dir() and any(folder.glob("checkpoint_epoch_*.pyth")):
            break
        time.sleep(0.02)
    children = subprocess.run(
        ["pgrep", "-P", str(proc.pid), "-f", "spawn_main"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert len(children) == 2
    killed = time.time()
    os.kill(max(map(int, children)), signal.SIGKILL)  # the second spawned: rank 1
    stderr = proc.communicate(timeout=120)[1]
    assert time.time() - killed < 60, "the other process must end within the bound"
    assert proc.returncode == 1
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-2000:]
    assert errors[0].startswith("error: process rank 1 was killed by SIGKILL")
    assert get_last_checkpoint(str(out_dir)) is not None  # the last good one
    assert "Traceback" not in stderr
