"""Two-node jobs on a real SLURM (``conftest.py``): submitit and sbatch.

Every job trains the tiny I3D twin in DDP over 2 processes (2 nodes x 1 CPU
task), then tests it; its per-video test scores must equal, bit for bit,
those of the same config trained by torchrun as 2 nodes x 1 process, with
and without a preemption, a time limit or a killed task on the way.
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.launch.test_launch import _opts as launch_opts

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

CFG = os.path.join(REPO_ROOT, "configs", "Demo", "Kinetics_I3D_tiny_multigrid.yaml")
RUN_NET = os.path.join(REPO_ROOT, "tools", "run_net.py")
SUBMIT = os.path.join(REPO_ROOT, "tools", "submit.py")
SBATCH = os.path.join(REPO_ROOT, "tools", "slurm", "train.sbatch")
JOB_TIMEOUT = 240
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def _opts(demo_data, out_dir, epochs=3):
    """The launch tests' short-cycle run, 3 epochs and tested (later values win)."""
    return [
        *launch_opts(demo_data, out_dir),
        "SOLVER.MAX_EPOCH", str(epochs),
        "BN.USE_PRECISE_STATS", "False",
        "TEST.ENABLE", "True",
        "TEST.BATCH_SIZE", "4",
        "TEST.NUM_ENSEMBLE_VIEWS", "1",
        "TEST.NUM_SPATIAL_CROPS", "1",
    ]  # fmt: skip


def _env(slurm_env):
    # Every CPU process takes cores // processes threads itself.
    return {
        k: v
        for k, v in slurm_env.items()
        if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }


def _scores(out_dir):
    saved = torch.load(out_dir / "test_results.pyth", weights_only=False)
    return saved["video_scores"]


def _run(cmd, env, timeout=JOB_TIMEOUT):
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO_ROOT
    )


def _torchrun(demo_data, out, env, extra=()):
    """Trains and tests the run with torchrun as 2 nodes x 1 process."""
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
        cmd += ["--node-rank", str(node), "--nproc-per-node", "1"]
        cmd += ["--master-addr", "127.0.0.1", "--master-port", "29671"]
        cmd += [RUN_NET, "--cfg", CFG, *_opts(demo_data, out), *extra]
        procs.append(
            subprocess.Popen(
                cmd,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    errors = [p.communicate(timeout=JOB_TIMEOUT)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors[0][-3000:]
    log = (out / "stdout.log").read_text()
    assert "launcher torchrun: 2 node(s) x 1 CPU process(es) = 2" in log
    return _scores(out)


@pytest.fixture(scope="module")
def reference(demo_data, tmp_path_factory, slurm_env):
    """Test scores of the run trained by torchrun as 2 nodes x 1 process."""
    return _torchrun(demo_data, tmp_path_factory.mktemp("torchrun"), _env(slurm_env))


def _submit(demo_data, out_dir, env, *options, extra=()):
    cmd = [sys.executable, SUBMIT, "--cfg", CFG, "--nodes", "2"]
    cmd += ["--gpus-per-node", "0", "--cpus-per-task", "1", *options]
    cmd += [*_opts(demo_data, out_dir), *extra]
    out = _run(cmd, env)
    assert out.returncode == 0, out.stdout + out.stderr
    return re.search(r"submitted job (\d+)", out.stdout).group(1)


def _sbatch(demo_data, out_dir, env, *options, extra=()):
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = ["sbatch", "--parsable", "--nodes", "2", "--ntasks-per-node", "1"]
    cmd += ["--cpus-per-task", "1", "--gpus-per-node", "0", "--time", "10"]
    cmd += ["--output", str(out_dir / "slurm-%j.out"), *options, SBATCH]
    cmd += ["--cfg", CFG, *_opts(demo_data, out_dir), *extra]
    out = _run(cmd, env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def _job(job_id, env) -> dict:
    """``scontrol show job``'s fields of one job."""
    out = _run(["scontrol", "show", "job", "-o", job_id], env, timeout=30)
    assert out.returncode == 0, out.stderr
    return dict(re.findall(r"(\w+)=(\S*)", out.stdout))


def _wait_ended(job_id, env, timeout=JOB_TIMEOUT) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = _job(job_id, env)
        if job["JobState"] in ENDED:
            return job
        time.sleep(1)
    raise AssertionError(f"job {job_id} still {job['JobState']} after {timeout} s")


def _wait_for_checkpoint(out_dir, job_id, env, timeout=JOB_TIMEOUT):
    """Waits for the run's first end-of-epoch checkpoint."""
    folder = out_dir / "checkpoints"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if folder.is_dir() and any(folder.glob("checkpoint_epoch_*.pyth")):
            return
        assert _job(job_id, env)["JobState"] not in ENDED, "the job ended early"
        time.sleep(0.1)
    raise AssertionError("no checkpoint written")


def _logs(folder) -> str:
    paths = glob.glob(str(folder / "**" / "*.out"), recursive=True)
    paths += glob.glob(str(folder / "**" / "*.err"), recursive=True)
    return "".join(open(p, errors="replace").read() for p in sorted(paths))


def _rank_pid(out_dir, rank) -> int:
    """The pid of the job's Python process of ``rank`` (its SLURM_PROCID)."""
    found = subprocess.run(
        ["pgrep", "-f", str(out_dir)], capture_output=True, text=True
    ).stdout.split()
    for pid in found:
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:  # ended meanwhile
            continue
        if b"python" in os.path.basename(cmdline[0]) and (
            f"SLURM_PROCID={rank}".encode() in environ
        ):
            return int(pid)
    raise AssertionError(f"no process of rank {rank} among {found}")


def test_submit_trains_on_two_nodes_and_resumes_after_preemption(
    demo_data, tmp_path, slurm_env, reference
):
    env = _env(slurm_env)
    plain = tmp_path / "plain"
    job = _submit(demo_data, plain, env, "--time", "10")
    assert _wait_ended(job, env)["JobState"] == "COMPLETED", _logs(plain)
    log = (plain / "stdout.log").read_text()
    assert "launcher submitit: 2 node(s) x 1 CPU process(es) = 2" in log
    assert torch.equal(_scores(plain), reference)

    # Preempted after its first checkpoint: SLURM signals every task.
    run = tmp_path / "preempted"
    job = _submit(demo_data, run, env, "--time", "20")
    _wait_for_checkpoint(run, job, env)
    _run(["scancel", "--signal=USR2", job], env, timeout=30)
    ended = _wait_ended(job, env)
    text = _logs(run / "slurm")
    assert ended["JobState"] == "COMPLETED" and ended["Restarts"] == "1", text
    assert "this job is preempted" in text and "Requeued job" in text
    assert "stopped by SIGUSR2 after a mid-epoch checkpoint" in text
    assert "resumed from" in (run / "stdout.log").read_text()
    assert torch.equal(_scores(run), reference)


# About 70 s of training: longer than SLURM takes to warn a job of its
# 2-minute limit with a 70 s delay (20-50 s after its start: slurmctld checks
# the limits every 30 s and warns up to that much early).
LONG = ["SOLVER.MAX_EPOCH", "14"]


def test_submit_requeues_at_the_time_limit(demo_data, tmp_path, slurm_env):
    env = _env(slurm_env)
    run = tmp_path / "run"
    limit = ["--time", "2", "--signal-delay-s", "70", "--max-requeues", "3"]
    job = _submit(demo_data, run, env, *limit, extra=LONG)
    ended = _wait_ended(job, env, timeout=2 * JOB_TIMEOUT)
    text = _logs(run / "slurm")
    assert ended["JobState"] == "COMPLETED" and int(ended["Restarts"]) >= 1, text
    assert "this job is timed-out" in text and "Requeued job" in text
    assert "resumed from" in (run / "stdout.log").read_text()
    assert torch.equal(_scores(run), _torchrun(demo_data, tmp_path / "ref", env, LONG))


def test_submit_past_max_requeues_ends_with_one_line(
    demo_data, tmp_path, slurm_env, reference
):
    """submitit counts a signal as the time limit's when the job has run past
    min(80%, limit - 10 min) of its limit: any signal, under a 5-minute
    limit. Past --max-requeues 0 the job ends with one line; the next
    submission resumes the run and ends it."""
    env = _env(slurm_env)
    run = tmp_path / "run"
    # SLURM's own warning comes 4-4.5 minutes in, after the job's end.
    options = ["--time", "5", "--signal-delay-s", "30", "--max-requeues", "0"]
    job = _submit(demo_data, run, env, *options)
    _wait_for_checkpoint(run, job, env)
    _run(["scancel", "--signal=USR2", job], env, timeout=30)
    ended = _wait_ended(job, env)
    text = _logs(run / "slurm")
    assert ended["JobState"] != "COMPLETED" and ended["Restarts"] == "0", text
    assert "this job is timed-out" in text, text
    lines = [x for x in text.splitlines() if x.startswith("error: not requeued")]
    assert len(lines) == 1 and "--max-requeues" in lines[0], text
    assert "Traceback" not in text
    assert not (run / "test_results.pyth").exists()

    job = _submit(demo_data, run, env, *options)
    assert _wait_ended(job, env)["JobState"] == "COMPLETED", _logs(run / "slurm")
    assert "resumed from" in (run / "stdout.log").read_text()
    assert torch.equal(_scores(run), reference)


def test_sbatch_script_requeues_itself_after_usr1(
    demo_data, tmp_path, slurm_env, reference
):
    env = _env(slurm_env)
    run = tmp_path / "run"
    job = _sbatch(demo_data, run, env)
    _wait_for_checkpoint(run, job, env)
    _run(["scancel", "--signal=USR1", job], env, timeout=30)
    ended = _wait_ended(job, env)
    text = _logs(run)
    assert ended["JobState"] == "COMPLETED" and ended["Restarts"] == "1", text
    assert f"requeueing job {job}" in text
    log = (run / "stdout.log").read_text()
    assert "launcher srun: 2 node(s) x 1 CPU process(es) = 2" in log
    assert "stopped by SIGUSR1" in text and "resumed from" in log
    assert torch.equal(_scores(run), reference)


@pytest.mark.parametrize("launcher", ["submitit", "sbatch"])
def test_a_killed_task_ends_the_job_and_the_next_submission_resumes(
    demo_data, tmp_path, slurm_env, reference, launcher
):
    env = _env(slurm_env)
    run = tmp_path / "run"
    start = _submit if launcher == "submitit" else _sbatch
    options = ("--time", "10") if launcher == "submitit" else ()
    job = start(demo_data, run, env, *options)
    _wait_for_checkpoint(run, job, env)
    os.kill(_rank_pid(run, 1), signal.SIGKILL)
    killed = time.time()
    ended = _wait_ended(job, env, timeout=120)
    took = time.time() - killed
    print(f"{launcher}: the job ended {took:.1f} s after rank 1 was killed")
    text = _logs(run)
    assert ended["JobState"] == "FAILED" and took < 60, (took, text)
    assert re.search(r"srun: error: sfnode\d: task 1: Killed", text), text
    folder = run / "checkpoints"
    assert not list(folder.glob(".*.tmp")), "a partial checkpoint was left"
    for path in folder.glob("*.pyth"):
        torch.load(path, weights_only=False)  # every checkpoint reads whole

    job = start(demo_data, run, env, *options)
    assert _wait_ended(job, env)["JobState"] == "COMPLETED", _logs(run)
    assert "resumed from" in (run / "stdout.log").read_text()
    assert torch.equal(_scores(run), reference)


def test_submit_dry_run_and_absent_data(demo_data, tmp_path, slurm_env):
    env = _env(slurm_env)
    cmd = [sys.executable, SUBMIT, "--cfg", CFG, "--nodes", "2"]
    cmd += ["--gpus-per-node", "0", "--cpus-per-task", "1", "--dry-run"]
    out = _run(cmd + _opts(demo_data, tmp_path / "run"), env)
    assert out.returncode == 0, out.stderr
    assert (
        "#SBATCH --nodes=2" in out.stdout and "#SBATCH --signal=USR2@300" in out.stdout
    )
    assert "--kill-on-bad-exit=1" in out.stdout
    assert not (tmp_path / "run").exists()
    # The data checks run before anything is submitted, dry run or not.
    short = _run(cmd + ["--time", "5"] + _opts(demo_data, tmp_path / "run"), env)
    assert short.returncode == 2 and "--signal-delay-s 300 is not below" in short.stderr
    for dry in (["--dry-run"], []):
        absent = ["DATA.PATH_TO_DATA_DIR", str(tmp_path / "nowhere")]
        out = _run(cmd[:-1] + dry + _opts(demo_data, tmp_path / "run") + absent, env)
        errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
        assert out.returncode == 1 and len(errors) == 1, out.stderr
        assert str(tmp_path / "nowhere") in errors[0] and "submitted" not in out.stdout
    queue = _run(["squeue", "-h"], env, timeout=30)
    assert queue.returncode == 0 and queue.stdout.strip() == ""


def test_run_lock_of_an_ended_job_on_another_node_is_taken_over(
    tmp_path, slurm_env, monkeypatch
):
    """A failed job's lock, written on another node, is stale once squeue says
    its job has ended; while the job lives, the folder stays refused."""
    from slowfast.launch.run_lock import LOCK_NAME, RunLock, RunLockError

    env = _env(slurm_env)
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    sbatch = ["sbatch", "--parsable", "--output", str(tmp_path / "slurm-%j.out")]
    sleeper = _run(sbatch + ["--wrap", "sleep 60"], env).stdout.strip()
    done = _run(sbatch + ["--wrap", "true"], env).stdout.strip()
    try:
        assert _wait_ended(done, env, timeout=60)["JobState"] == "COMPLETED"
        for job, alive in ((sleeper, True), (done, False)):
            folder = tmp_path / job
            folder.mkdir()
            holder = dict(host="another-node", pid=1, since="-", slurm_job=job)
            (folder / LOCK_NAME).write_text(json.dumps(holder))
            lock = RunLock(str(folder))
            if alive:
                with pytest.raises(RunLockError, match=f"SLURM job {job}"):
                    lock.acquire()
            else:
                lock.acquire()
                assert lock.took_over.endswith(f"its SLURM job {job} has ended")
                lock.release()
    finally:
        _run(["scancel", sleeper], env, timeout=30)
