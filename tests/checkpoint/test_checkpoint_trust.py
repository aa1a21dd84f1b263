"""Checkpoints prove whose and whole they are before a run resumes from them."""

import os
import shutil

import pytest
import torch

from slowfast.checkpoint import save as cs
from slowfast.checkpoint.files import CheckpointError, get_path_to_checkpoint
from slowfast.checkpoint.save import save_checkpoint
from slowfast.config import load_config
from slowfast.engine.checkpointer import find_resume_checkpoint
from slowfast.models import build_model
from tests.conftest import REPO_ROOT

TINY = os.path.join(REPO_ROOT, "configs", "Demo", "Kinetics_I3D_tiny.yaml")
MARK = 1.2345678  # a weight value whose bytes are found in the file


def _cfg(out_dir, *opts):
    return load_config([TINY], ["OUTPUT_DIR", str(out_dir), *opts])


def _save(cfg, epoch, mark=False):
    torch.manual_seed(epoch)
    model = build_model(cfg)
    if mark:
        with torch.no_grad():
            next(model.parameters()).fill_(MARK)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return save_checkpoint(cfg.OUTPUT_DIR, model, optimizer, epoch, cfg)


def test_another_runs_checkpoint_is_refused_naming_the_keys(tmp_path):
    ours = _cfg(tmp_path)
    _save(ours, 0)
    theirs = _cfg(tmp_path, "SOLVER.BASE_LR", "0.5", "MODEL.DROPOUT_RATE", "0.1")
    path = _save(theirs, 1)  # placed as the newest file
    with pytest.raises(CheckpointError) as info:
        find_resume_checkpoint(ours)
    message = str(info.value)
    assert message.startswith(f"{path} belongs to another run (fingerprint ")
    assert "SOLVER.BASE_LR 0.005 here, 0.5 in the checkpoint" in message
    assert "MODEL.DROPOUT_RATE" in message and "TRAIN.CHECKPOINT_FILE_PATH" in message
    assert "\n" not in message
    # What does not define the run may change: a resume on other machines.
    moved = _cfg(
        tmp_path,
        "NUM_CPU_PROCS",
        "2",
        "DATA.PATH_TO_DATA_DIR",
        "/new",
        "IMPORTS",
        "[json]",
    )
    os.remove(path)
    assert find_resume_checkpoint(moved).endswith("checkpoint_epoch_00001.pyth")


def test_a_flipped_byte_is_found_and_the_previous_checkpoint_used(tmp_path, caplog):
    cfg = _cfg(tmp_path)
    good = _save(cfg, 0)
    newest = _save(cfg, 1, mark=True)
    data = bytearray(open(newest, "rb").read())
    at = data.find(torch.tensor([MARK]).numpy().tobytes())
    assert at > 0
    data[at] ^= 0x01  # one bit of one weight
    open(newest, "wb").write(bytes(data))
    with caplog.at_level("WARNING"):
        assert find_resume_checkpoint(cfg) == good
    assert f"skipping checkpoint {newest}: its content does not match its checksum" in (
        caplog.text
    )


def test_a_checkpoint_whose_name_lies_is_skipped(tmp_path, caplog):
    cfg = _cfg(tmp_path)
    good = _save(cfg, 0)
    path = _save(cfg, 1)
    renamed = get_path_to_checkpoint(cfg.OUTPUT_DIR, 7)
    shutil.move(path, renamed)
    with caplog.at_level("WARNING"):
        assert find_resume_checkpoint(cfg) == good
    assert "its name says epoch 7 but it holds epoch 2" in caplog.text


def test_checkpoints_none_of_which_is_usable_stop_the_run(tmp_path):
    cfg = _cfg(tmp_path)
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for epoch in (1, 2):
        (folder / f"checkpoint_epoch_{epoch:05d}.pyth").write_bytes(b"\x00" * 64)
    with pytest.raises(CheckpointError) as info:
        find_resume_checkpoint(cfg)
    message = str(info.value)
    assert "holds 2 checkpoint(s) and none is usable" in message
    assert "truncated or damaged, or not a torch.save file" in message
    assert "TRAIN.AUTO_RESUME False" in message
    assert "weights_only" not in message  # no unrelated PyTorch advice
    assert find_resume_checkpoint(_cfg(tmp_path / "fresh")) is None


def test_a_full_disk_during_a_save_is_one_clear_line(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)

    def full(obj, f):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")

    usage = shutil.disk_usage(tmp_path)._replace(free=0)
    monkeypatch.setattr(cs.torch, "save", full)
    monkeypatch.setattr(cs.shutil, "disk_usage", lambda path: usage)
    with pytest.raises(CheckpointError, match="the disk is full \\(0 MiB free\\)"):
        _save(cfg, 0)
    assert os.listdir(tmp_path / "checkpoints") == []  # no temporary file left


def test_preflight_refuses_another_runs_checkpoint_before_any_work(tmp_path):
    from slowfast.launch.launcher import Layout
    from slowfast.launch.preflight import PreflightError, check_resume

    _save(_cfg(tmp_path, "SOLVER.MAX_EPOCH", "90"), 0)
    ours = _cfg(tmp_path)
    with pytest.raises(PreflightError, match="belongs to another run") as info:
        check_resume(ours)
    assert info.value.exit_status == 1
    assert Layout("plain", 1, 1, 0, "").spawns  # preflight runs this on rank 0
