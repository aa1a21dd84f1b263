"""Preemption: a stop signal mid-epoch saves, stops, and the rerun resumes exactly."""

import json
import os
import random
import signal

import pytest
import torch

from slowfast.checkpoint.files import (
    CheckpointError,
    epochs_done,
    is_mid_epoch_checkpoint,
    list_checkpoints,
    prune_mid_epoch_checkpoints,
)
from slowfast.checkpoint.load import get_last_checkpoint
from slowfast.checkpoint.save import save_checkpoint
from slowfast.config import load_config
from slowfast.config.derived import parse_signals
from slowfast.engine import trainer as trainer_module
from slowfast.engine.loop import HookBase, LoopState
from slowfast.engine.preemption import (
    EXIT_PREEMPTED,
    Preempted,
    PreemptionHook,
    StopSignals,
)
from slowfast.utils.distributed import RunContext
from tests.conftest import REPO_ROOT

CFG = os.path.join(REPO_ROOT, "configs", "Demo", "Kinetics_I3D_tiny_multigrid.yaml")


def _cfg(demo_data, out_dir, extra=()):
    return load_config([CFG], _cfg_opts(demo_data, out_dir, extra))


def _cfg_opts(demo_data, out_dir, extra=()):
    data = demo_data / "kinetics_x6"
    return [
        "DATA.PATH_TO_DATA_DIR", str(data),
        "DATA.PATH_PREFIX", str(demo_data / "kinetics"),
        "OUTPUT_DIR", str(out_dir),
        "DATA_LOADER.NUM_WORKERS", "0",
        "LOG_MODEL_INFO", "False",
        "LOG_PERIOD", "2",
        "TRAIN.BATCH_SIZE", "2",
        "SOLVER.STEPS", "[0, 2]",
        "SOLVER.LRS", "[1, 0.1]",
        "SOLVER.MAX_EPOCH", "3",
        "SOLVER.WARMUP_EPOCHS", "0.5",
        "TRAIN.CHECKPOINT_PERIOD", "1",
        "TRAIN.EVAL_PERIOD", "100",
        "TEST.ENABLE", "False",
        *extra,
    ]  # fmt: skip


class _SignalAt(HookBase):
    """Sends this process ``signum`` during global iteration ``at``."""

    def __init__(self, at: int, signum: int):
        self.at, self.signum = at, signum

    def after_step(self, state: LoopState) -> None:
        if state.global_iter == self.at:
            os.kill(os.getpid(), self.signum)


class _SignalledTrainer(trainer_module.Trainer):
    at = -1
    signum = signal.SIGUSR1

    def build_hooks(self):
        hooks = super().build_hooks()
        # Before the preemption hook (last), as a signal arriving mid-step.
        return hooks[:-1] + [_SignalAt(self.at, self.signum)] + hooks[-1:]


def _run(cfg, trainer_cls=trainer_module.Trainer):
    stop = StopSignals(parse_signals(cfg.TRAIN.STOP_SIGNALS))
    stop.install()
    try:
        trainer_cls(cfg, RunContext(), stop).train()
    finally:
        stop.restore()


def _epoch_lines(out_dir):
    lines = (out_dir / "json_stats.log").read_text().splitlines()
    epochs = {}
    for line in map(json.loads, lines):
        if line["_type"] == "train_epoch":  # a replayed epoch's line replaces it
            shapes = {k: (v["iters"], v["clips"]) for k, v in line["shapes"].items()}
            epochs[line["epoch"]] = (line["loss"], line["top1_err"], shapes)
    return epochs


@pytest.mark.slow
def test_preempted_at_random_iterations_ends_bit_identical(demo_data, tmp_path):
    full = tmp_path / "full"
    _run(_cfg(demo_data, full))
    final = get_last_checkpoint(str(full))
    per_epoch = [sum(s[0] for s in e[2].values()) for e in _epoch_lines(full).values()]
    assert sum(per_epoch) > 20  # enough iterations to stop at random ones

    out = tmp_path / "preempted"
    stops = sorted(random.Random(0).sample(range(sum(per_epoch) - 1), 3))
    signums = [signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM]
    positions = []
    for at, signum in zip(stops, signums):
        trainer = type("T", (_SignalledTrainer,), {"at": at, "signum": signum})
        with pytest.raises(Preempted) as info:
            _run(_cfg(demo_data, out), trainer)
        assert info.value.signum == signum and info.value.exit_status == EXIT_PREEMPTED
        mid = [p for p in list_checkpoints(str(out)) if is_mid_epoch_checkpoint(p)]
        assert mid == [info.value.path], "older mid-epoch checkpoints are pruned"
        # Saved at the first statistics read-back after the signal (LOG_PERIOD
        # 2: the signalled iteration or the next), no work lost.
        saved = torch.load(info.value.path, weights_only=True)
        epoch, it = saved["epoch"] + 1, saved["iteration_in_epoch"]
        assert at + 1 <= sum(per_epoch[:epoch]) + it <= at + 2
        assert it % 2 == 0 or it == per_epoch[epoch]
        positions.append(it)
    _run(_cfg(demo_data, out))

    state_a = torch.load(final, weights_only=True)
    path_b = get_last_checkpoint(str(out))
    state_b = torch.load(path_b, weights_only=True)
    assert os.path.basename(path_b) == os.path.basename(final)
    for key, value in state_a["model_state"].items():
        assert torch.equal(value, state_b["model_state"][key]), key
    assert not any(is_mid_epoch_checkpoint(p) for p in list_checkpoints(str(out)))
    # The epochs' statistics, meters restored mid-epoch, equal the uninterrupted run's.
    assert _epoch_lines(out) == _epoch_lines(full)
    lines = map(json.loads, open(out / "json_stats.log"))
    resumes = [line for line in lines if line["_type"] == "resume"]
    assert [r["iteration_in_epoch"] for r in resumes] == positions


def test_timed_checkpoints_and_the_all_process_flag():
    clock = [0.0]
    saved = []
    stop = StopSignals([])

    def save(state):
        saved.append(state.iter)
        return "path"

    hook = PreemptionHook(stop, save, RunContext(), 1.0, lambda: clock[0])
    state = LoopState(readback_due=True)
    hook.before_train(state)
    for it in range(6):
        state.iter = it
        clock[0] += 25.0  # seconds per iteration: due every 60 s
        hook.after_step(state)
    assert saved == [2, 5]  # at 75 s and 150 s
    stop.received = signal.SIGTERM
    state.iter, state.readback_due = 6, False
    hook.after_step(state)  # only where the statistics are read back
    state.iter, state.readback_due = 7, True
    with pytest.raises(Preempted):
        hook.after_step(state)
    assert saved == [2, 5, 7]


def test_unknown_stop_signal_is_one_line():
    with pytest.raises(ValueError, match="TRAIN.STOP_SIGNALS: unknown signal 'SIGFOO'"):
        parse_signals(["SIGFOO"])
    assert parse_signals(["usr1", "SIGTERM"]) == [signal.SIGUSR1, signal.SIGTERM]


def test_checkpoint_names_sort_mid_epoch_checkpoints_inside_their_epoch(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    names = [
        "checkpoint_epoch_00004.pyth",
        "checkpoint_epoch_00004_iter_000120.pyth",
        "checkpoint_epoch_00003.pyth",
        "checkpoint_epoch_00003_iter_000007.pyth",
        "checkpoint_epoch_00004_iter_000009.pyth",
    ]
    for name in names:
        (folder / name).write_bytes(b"x")
    order = [os.path.basename(p) for p in list_checkpoints(str(tmp_path))]
    assert order == [
        "checkpoint_epoch_00003_iter_000007.pyth",
        "checkpoint_epoch_00003.pyth",
        "checkpoint_epoch_00004_iter_000009.pyth",
        "checkpoint_epoch_00004_iter_000120.pyth",
        "checkpoint_epoch_00004.pyth",
    ]
    # What the tester's TensorBoard scalars use as the epoch.
    assert [epochs_done(name) for name in order] == [2, 3, 3, 3, 4]
    assert epochs_done("SLOWFAST_8x8_R50.pyth") is None
    # A save at an earlier position (a resume from an older checkpoint) keeps
    # itself and what lies after it; it removes only what lies before.
    keep = str(folder / "checkpoint_epoch_00004_iter_000009.pyth")
    removed = prune_mid_epoch_checkpoints(str(tmp_path), keep=keep)
    assert [os.path.basename(p) for p in removed] == [
        "checkpoint_epoch_00003_iter_000007.pyth"
    ]
    removed = prune_mid_epoch_checkpoints(str(tmp_path))
    assert len(removed) == 2
    left = [os.path.basename(p) for p in list_checkpoints(str(tmp_path))]
    assert left == ["checkpoint_epoch_00003.pyth", "checkpoint_epoch_00004.pyth"]


@pytest.mark.slow
def test_sigterm_to_the_whole_process_group_stops_cleanly(demo_data, tmp_path):
    """A scheduler signals every process of the job, loader workers included:
    the workers ignore it, the run saves and exits 75."""
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    cmd = [sys.executable, os.path.join(REPO_ROOT, "tools", "run_net.py"), "--cfg", CFG]
    cmd += [str(v) for v in _cfg_opts(demo_data, out)]
    cmd[cmd.index("DATA_LOADER.NUM_WORKERS") + 1] = "2"
    cmd += ["SOLVER.MAX_EPOCH", "20"]
    env = dict(os.environ)
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own process group, as a job step
    )  # fmt: skip
    stats = out / "json_stats.log"
    deadline = time.time() + 300
    while not (stats.exists() and "train_iter" in stats.read_text()):
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    stderr = proc.communicate(timeout=300)[1]
    assert proc.returncode == EXIT_PREEMPTED, stderr[-3000:]
    assert "stopped by SIGTERM after a mid-epoch checkpoint" in stderr
    assert "Traceback" not in stderr
    assert [p for p in list_checkpoints(str(out)) if is_mid_epoch_checkpoint(p)]


def test_a_checkpoint_past_the_end_of_this_runs_epoch_is_refused(demo_data, tmp_path):
    """A mid-epoch checkpoint from a run with longer epochs (another batch size
    or dataset) would start an epoch past its end: one line, before training."""
    cfg = _cfg(demo_data, tmp_path / "first")
    trainer = trainer_module.Trainer(cfg, RunContext())
    iters = trainer._iters(0)
    path = save_checkpoint(
        str(tmp_path / "first"),
        trainer.model,
        trainer.optimizer,
        -1,
        cfg,
        iteration=iters + 1,
    )
    trainer._shutdown_loaders()
    again = _cfg(demo_data, tmp_path / "second", ["TRAIN.CHECKPOINT_FILE_PATH", path])
    with pytest.raises(CheckpointError) as info:
        trainer_module.Trainer(again, RunContext())
    assert str(info.value).startswith(
        f"the checkpoint was saved after iteration {iters + 1} of epoch 1, which "
        f"has {iters} in this run"
    )
