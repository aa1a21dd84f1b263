"""Checkpoint format and saving: reference names, round trips (model, optimizer,
scaler, extras), reference-format files, epoch reset, atomic saves, auto-resume's
choice of the last readable checkpoint, and DDP save/load."""

import logging
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn

from slowfast.checkpoint.files import (
    get_checkpoint_dir,
    get_path_to_checkpoint,
    has_checkpoint,
    list_checkpoints,
)
from slowfast.checkpoint.load import (
    checkpoint_epoch,
    get_last_checkpoint,
    load_checkpoint,
)
from slowfast.checkpoint.save import save_checkpoint
from slowfast.config import get_cfg, load_config
from slowfast.engine.checkpointer import Checkpointer, ResumePoint
from slowfast.utils.distributed import RunContext
from tests.helpers.checkpoint_utils import (
    TinyNet,
    assert_same_state,
    make_optimizer,
    train_step,
)


def test_paths_are_reference_names(tmp_path, cfg):
    out = str(tmp_path)
    assert get_checkpoint_dir(out) == os.path.join(out, "checkpoints")
    assert get_path_to_checkpoint(out, 3).endswith(
        os.path.join("checkpoints", "checkpoint_epoch_00003.pyth")
    )
    model = TinyNet()
    path = save_checkpoint(out, model, make_optimizer(model), 2, cfg)
    assert path == get_path_to_checkpoint(out, 3)
    assert list_checkpoints(out) == [path]
    assert has_checkpoint(out)


def test_round_trip_model_optimizer_scaler_extras(tmp_path, cfg):
    model = TinyNet(temporal=3)
    optimizer = make_optimizer(model)
    for seed in range(2):
        train_step(model, optimizer, seed)
    scaler = torch.amp.GradScaler("cpu", init_scale=512.0)
    extras = {
        "rng_state": torch.get_rng_state(),
        "iteration": 17,
        "schedule_state": {"shape_index": 2, "crop": [4, 112]},
    }
    path = save_checkpoint(str(tmp_path), model, optimizer, 4, cfg, scaler, extras)

    fresh = TinyNet(temporal=3)
    fresh_opt = make_optimizer(fresh)
    fresh_scaler = torch.amp.GradScaler("cpu", init_scale=2.0)
    info = load_checkpoint(path, fresh, optimizer=fresh_opt, scaler=fresh_scaler)

    assert checkpoint_epoch(info) == 4
    assert info["iteration"] == 17
    assert info["schedule_state"] == extras["schedule_state"]
    assert torch.equal(info["rng_state"], extras["rng_state"])
    assert info["cfg"] == cfg.dump()
    assert not set(info) & {"model_state", "optimizer_state", "scaler_state"}
    assert_same_state(model.state_dict(), fresh.state_dict())
    assert_same_state(optimizer.state_dict(), fresh_opt.state_dict())
    assert fresh_scaler.state_dict() == scaler.state_dict()

    train_step(model, optimizer, seed=7)
    train_step(fresh, fresh_opt, seed=7)
    assert_same_state(model.state_dict(), fresh.state_dict())


def test_load_logs_the_epochs_and_iterations_done(tmp_path, cfg, caplog):
    model = TinyNet()
    out = str(tmp_path)
    whole = save_checkpoint(out, model, None, 2, cfg)
    mid = save_checkpoint(out, model, None, 2, cfg, iteration=5)
    with caplog.at_level(logging.INFO):
        load_checkpoint(whole, model)
        load_checkpoint(mid, model)
    assert os.path.basename(whole) == "checkpoint_epoch_00003.pyth"
    assert os.path.basename(mid) == "checkpoint_epoch_00004_iter_000005.pyth"
    loaded = [r.getMessage() for r in caplog.records if "Loaded" in r.getMessage()]
    assert loaded == [
        f"Loaded checkpoint {whole} (after epoch 3)",
        f"Loaded checkpoint {mid} (after epoch 3 and 5 iterations of the next)",
    ]


def test_initial_weights_from_a_mid_epoch_checkpoint_continue_inside_its_epoch(
    tmp_path, cfg, caplog
):
    """TRAIN.CHECKPOINT_FILE_PATH: a mid-epoch file continues at its iteration
    (not at iteration 0 of its epoch, which would train those iterations twice);
    with TRAIN.CHECKPOINT_EPOCH_RESET the run starts at epoch 0."""
    model = TinyNet()
    mid = save_checkpoint(
        str(tmp_path), model, make_optimizer(model), 2, cfg, iteration=5
    )

    def start(*extra):
        run = load_config(
            [],
            ["NUM_GPUS", "0", "OUTPUT_DIR", str(tmp_path / "new"),
             "TRAIN.CHECKPOINT_FILE_PATH", mid, *extra],
        )  # fmt: skip
        fresh = TinyNet()
        return Checkpointer(
            run, RunContext(), fresh, make_optimizer(fresh), None
        ).resume_or_init()

    with caplog.at_level(logging.INFO):
        assert start() == ResumePoint(3, 5)
    assert f"initialised from {mid} (epoch 4, iteration 5 done)" in caplog.text
    assert start("TRAIN.CHECKPOINT_EPOCH_RESET", "True") == ResumePoint(0, 0)


def test_inflated_weights_start_a_fine_tuning_without_their_optimizer(tmp_path, cfg):
    """TRAIN.CHECKPOINT_INFLATE: a trained 2D-kernel run's checkpoint gives the
    3D model its weights only; its momentum buffers (2D shapes) and epoch stay
    behind, so the first step trains instead of failing on their shapes."""
    source = TinyNet(temporal=1)
    source_opt = make_optimizer(source)
    train_step(source, source_opt, seed=0)  # momentum buffers to carry
    path = save_checkpoint(str(tmp_path), source, source_opt, 4, cfg)
    run = load_config(
        [],
        ["NUM_GPUS", "0", "OUTPUT_DIR", str(tmp_path / "i3d"),
         "TRAIN.CHECKPOINT_FILE_PATH", path, "TRAIN.CHECKPOINT_INFLATE", "True"],
    )  # fmt: skip
    model = TinyNet(temporal=3)
    optimizer = make_optimizer(model)
    assert (
        Checkpointer(run, RunContext(), model, optimizer, None).resume_or_init()
        == ResumePoint()
    )
    assert optimizer.state_dict()["state"] == {}
    stem = model.state_dict()["stem.conv.weight"]
    torch.testing.assert_close(stem.sum(2, keepdim=True), source.stem.conv.weight)
    train_step(model, optimizer, seed=1)


def test_starting_over_moves_the_earlier_checkpoints_aside(tmp_path, cfg, caplog):
    """TRAIN.AUTO_RESUME False: the earlier attempt's checkpoints leave
    OUTPUT_DIR/checkpoints (kept, not mixed with the new run's: the tester and a
    later resume take the newest epoch); TRAIN.CHECKPOINT_FILE_PATH into them
    still loads."""
    out = str(tmp_path)
    model = TinyNet()
    saved = [save_checkpoint(out, model, None, e, cfg) for e in range(3)]
    opts = ["NUM_GPUS", "0", "OUTPUT_DIR", out, "TRAIN.AUTO_RESUME", "False"]

    def start(*extra):
        fresh = TinyNet()
        run = load_config([], opts + list(extra))
        return Checkpointer(
            run, RunContext(), fresh, make_optimizer(fresh), None
        ).resume_or_init()

    with caplog.at_level(logging.WARNING):
        assert start() == ResumePoint()
    assert list_checkpoints(out) == []
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("checkpoints.")]
    assert sorted(p.name for p in aside.iterdir()) == [
        os.path.basename(p) for p in saved
    ]
    assert (
        f"the 3 checkpoint(s) already in {out}/checkpoints are moved to" in caplog.text
    )

    again = save_checkpoint(out, model, make_optimizer(model), 1, cfg)
    assert start("TRAIN.CHECKPOINT_FILE_PATH", again) == ResumePoint(2, 0)
    assert list_checkpoints(out) == []  # moved again, and loaded from there
    assert (
        len([p for p in tmp_path.iterdir() if p.name.startswith("checkpoints.")]) == 2
    )


def test_reference_format_checkpoint_loads(tmp_path, caplog):
    """A PySlowFast checkpoint has no extras and no scaler state."""
    model = TinyNet()
    optimizer = make_optimizer(model)
    other = TinyNet()  # a different model's weights, to see them arrive
    path = str(tmp_path / "ref.pyth")
    torch.save(
        {
            "epoch": 9,
            "model_state": other.state_dict(),
            "optimizer_state": optimizer.state_dict(),
            "cfg": get_cfg().dump(),
        },
        path,
    )
    scaler = torch.amp.GradScaler("cpu")
    with caplog.at_level(logging.WARNING):
        info = load_checkpoint(path, model, optimizer=optimizer, scaler=scaler)
    assert set(info) == {"epoch", "cfg"} and info["epoch"] == 9
    assert_same_state(model.state_dict(), other.state_dict())
    assert "no grad-scaler state" in caplog.text


def test_resume_keeps_this_machines_optimizer_kernel(tmp_path, cfg):
    """A checkpoint saved with another SGD kernel loads its state, not its kernel."""
    from slowfast.models.describe import param_groups
    from slowfast.solver.optimizer import construct_optimizer

    model = TinyNet()
    groups = param_groups(model, cfg)
    old = torch.optim.SGD(groups, lr=0.1, momentum=0.9, foreach=True)
    train_step(model, old, 0)
    path = save_checkpoint(str(tmp_path), model, old, 3, cfg)
    fresh = TinyNet()
    opt = construct_optimizer(fresh, cfg)
    load_checkpoint(path, fresh, optimizer=opt)
    assert all(g["foreach"] is None for g in opt.param_groups)
    momentum = [s["momentum_buffer"] for s in opt.state.values()]
    assert len(momentum) == len(list(fresh.parameters()))
    assert all(m.abs().sum() > 0 for m in momentum)


def test_epoch_reset_loads_weights_only(tmp_path, cfg):
    model = TinyNet()
    optimizer = make_optimizer(model)
    train_step(model, optimizer, 0)
    path = save_checkpoint(
        str(tmp_path), model, optimizer, 3, cfg, extra={"iteration": 5}
    )
    fresh = TinyNet()
    fresh_opt = make_optimizer(fresh)
    info = load_checkpoint(path, fresh, optimizer=fresh_opt, epoch_reset=True)
    assert info["epoch"] == -1 and "iteration" not in info
    assert fresh_opt.state_dict()["state"] == {}
    assert_same_state(model.state_dict(), fresh.state_dict())


def test_extras_must_be_reserved_free_and_loadable(tmp_path, cfg):
    model = TinyNet()
    out = str(tmp_path)
    with pytest.raises(ValueError, match="model_state"):
        save_checkpoint(out, model, None, 0, cfg, extra={"model_state": 1})
    numpy_rng = {"np_rng": ("MT19937", np.zeros(3, dtype=np.uint32), 0)}
    with pytest.raises(ValueError, match="'np_rng' holds a ndarray"):
        save_checkpoint(out, model, None, 0, cfg, extra=numpy_rng)
    assert not has_checkpoint(out)


def test_crash_during_save_leaves_no_file(tmp_path, cfg, monkeypatch):
    out = str(tmp_path)
    model = TinyNet()
    good = save_checkpoint(out, model, make_optimizer(model), 0, cfg)
    real_save = torch.save

    def crashing_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 partial bytes")
        raise KeyboardInterrupt("killed mid-save")

    monkeypatch.setattr(torch, "save", crashing_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(out, model, make_optimizer(model), 1, cfg)
    monkeypatch.setattr(torch, "save", real_save)

    assert os.listdir(get_checkpoint_dir(out)) == [os.path.basename(good)]
    assert get_last_checkpoint(out) == good


def test_last_checkpoint_skips_truncated_and_temp_files(tmp_path, cfg, caplog):
    out = str(tmp_path)
    model = TinyNet()
    first = save_checkpoint(out, model, make_optimizer(model), 0, cfg)
    second = save_checkpoint(out, model, make_optimizer(model), 1, cfg)
    with open(second, "r+b") as f:
        f.truncate(os.path.getsize(second) // 2)
    # A temporary file left by a killed save is never a candidate.
    folder = get_checkpoint_dir(out)
    with open(os.path.join(folder, ".checkpoint_epoch_00003.pyth.1.ab.tmp"), "wb") as f:
        f.write(b"junk")
    assert list_checkpoints(out) == [first, second]
    with caplog.at_level(logging.WARNING):
        assert get_last_checkpoint(out) == first
    assert second in caplog.text


def test_no_checkpoint(tmp_path):
    out = str(tmp_path / "run")
    assert list_checkpoints(out) == []
    assert not has_checkpoint(out)
    assert get_last_checkpoint(out) is None


def test_ddp_save_and_load(tmp_path, cfg):
    init = f"file://{tmp_path / 'rendezvous'}"
    dist.init_process_group("gloo", init_method=init, world_size=1, rank=0)
    try:
        source = TinyNet()
        wrapped = nn.parallel.DistributedDataParallel(source)
        path = save_checkpoint(str(tmp_path), wrapped, make_optimizer(wrapped), 0, cfg)
        saved = torch.load(path, weights_only=True)["model_state"]
        assert not any(k.startswith("module.") for k in saved)
        target = nn.parallel.DistributedDataParallel(TinyNet())
        load_checkpoint(
            path, target, data_parallel=True, optimizer=make_optimizer(target)
        )
        assert_same_state(source.state_dict(), target.module.state_dict())
    finally:
        dist.destroy_process_group()
