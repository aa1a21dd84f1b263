"""run_state.json: written whole, read back, and what a rerun skips."""

import json
import os

import pytest
import torch

from slowfast.config import load_config
from slowfast.engine import run_state as rs
from slowfast.launch.run_lock import remove_stale_temp_files
from slowfast.models import describe_model
from tests.helpers.run_utils import one_epoch_cfg


def _checkpoint(folder, name="checkpoint_epoch_00002.pyth", data=b"weights"):
    path = folder / name
    path.write_bytes(data)
    return str(path)


def _test_record(path, settings="abc", top1=12.5):
    return {
        "_type": "test_final",
        "checkpoint": path,
        "checkpoint_file": rs.file_identity(path),
        "test_settings": settings,
        "top1_err": top1,
    }


def test_written_whole_and_read_back(tmp_path):
    path = _checkpoint(tmp_path)
    state = rs.RunState([2, 1, 2], [2], [_test_record(path)])
    rs.write_run_state(str(tmp_path), state)
    data = json.loads((tmp_path / rs.RUN_STATE_FILE).read_text())
    assert data["version"] == rs.VERSION
    assert data["trained_epochs"] == [1, 2]  # sorted, once each
    back = rs.read_run_state(str(tmp_path))
    assert back.trained_epochs == [1, 2] and back.validated_epochs == [2]
    assert back.find_test(path, "abc")["top1_err"] == 12.5
    assert back.find_test(path, "other settings") is None
    assert sorted(os.listdir(tmp_path)) == sorted(
        [rs.RUN_STATE_FILE, "checkpoint_epoch_00002.pyth"]
    )


def test_an_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch):
    rs.write_run_state(str(tmp_path), rs.RunState([1], [1], []))
    before = (tmp_path / rs.RUN_STATE_FILE).read_text()
    temps = []

    def killed(src, dst):
        temps.append(os.path.basename(src))
        raise KeyboardInterrupt  # as a kill between the write and the rename

    monkeypatch.setattr(rs.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        rs.write_run_state(str(tmp_path), rs.RunState([1, 2], [1, 2], []))
    assert (tmp_path / rs.RUN_STATE_FILE).read_text() == before
    assert os.listdir(tmp_path) == [rs.RUN_STATE_FILE]  # the temporary file is gone
    # Named so that a rerun removes it if the process died before cleaning up.
    (name,) = temps
    (tmp_path / name).write_text("{")
    assert remove_stale_temp_files(str(tmp_path)) == [str(tmp_path / name)]


def test_a_checkpoint_written_again_is_not_the_tested_one(tmp_path):
    path = _checkpoint(tmp_path)
    state = rs.RunState(tests=[_test_record(path, top1=10.0)])
    assert state.find_test(path, "abc")["top1_err"] == 10.0
    os.remove(path)
    assert state.find_test(path, "abc") is None
    _checkpoint(tmp_path, data=b"other weights, another size")
    assert state.find_test(path, "abc") is None
    state.tests.append(_test_record(path, top1=20.0))
    assert state.find_test(path, "abc")["top1_err"] == 20.0  # the newest


def test_only_rank_0_writes(tmp_path):
    recorder = rs.RunStateRecorder(str(tmp_path), enabled=False)
    recorder.trained(1)
    recorder.validated(1)
    recorder.tested({"checkpoint": "x"})
    recorder.training_from(0)
    assert not os.listdir(tmp_path)


def test_training_again_drops_the_later_epochs_records(tmp_path, caplog):
    path = _checkpoint(tmp_path)
    rs.write_run_state(
        str(tmp_path), rs.RunState([1, 2, 3], [2, 3], [_test_record(path)])
    )
    recorder = rs.RunStateRecorder(str(tmp_path), enabled=True)
    with caplog.at_level("INFO"):
        recorder.training_from(2)  # resumed after epoch 2: epoch 3 is trained again
    assert "epochs 3 are trained again" in caplog.text
    state = recorder.read()
    assert state.trained_epochs == [1, 2] and state.validated_epochs == [2]
    assert state.find_test(path, "abc") is not None  # tests are kept


def test_an_unreadable_state_is_refused_and_left_alone(tmp_path):
    for text in ("{not json", json.dumps({"version": 99}), json.dumps([1])):
        (tmp_path / rs.RUN_STATE_FILE).write_text(text)
        with pytest.raises(rs.RunStateError, match="move it away"):
            rs.read_run_state(str(tmp_path))
        with pytest.raises(rs.RunStateError):
            rs.RunStateRecorder(str(tmp_path), enabled=True).trained(1)
        assert (tmp_path / rs.RUN_STATE_FILE).read_text() == text


def test_a_run_dir_without_its_state_resumes_and_validates_again(
    demo_data, tmp_path, caplog
):
    from slowfast.engine.tester import test as run_test
    from slowfast.engine.trainer import train

    opts = ["TRAIN.BATCH_SIZE", "2", "BN.USE_PRECISE_STATS", "False"]
    cfg = one_epoch_cfg(demo_data, tmp_path, *opts)
    train(cfg)
    first = run_test(cfg)
    stats = tmp_path / "json_stats.log"

    def kinds():
        lines = stats.read_text().splitlines()
        return [json.loads(s)["_type"] for s in lines if s.strip()]

    # Moved away, as the message for an unreadable one says: the checkpoint
    # still holds the training; validation and test run again and are recorded.
    os.remove(tmp_path / rs.RUN_STATE_FILE)
    with caplog.at_level("INFO"):
        train(cfg)
        again = run_test(cfg)
    assert "running the final validation" in caplog.text
    assert kinds().count("train_epoch") == 1
    assert kinds().count("val_epoch") == 2 and kinds().count("test_final") == 2
    assert again["top1_err"] == first["top1_err"]
    state = rs.read_run_state(str(tmp_path))
    assert state.validated_epochs == [1] and len(state.tests) == 1


def test_test_settings_follow_the_test_precision_not_the_training_keys():
    from slowfast.checkpoint.fingerprint import test_settings

    base = test_settings(load_config([]))
    amp = test_settings(load_config([], ["TRAIN.MIXED_PRECISION", "True"]))
    lr = test_settings(load_config([], ["SOLVER.BASE_LR", "0.5"]))
    batch = test_settings(load_config([], ["TEST.BATCH_SIZE", "4"]))
    assert amp != base  # the test's forward runs under autocast
    assert lr == base and batch == base


def test_test_scalars_sit_at_the_checkpoints_finished_epochs(tmp_path, monkeypatch):
    from torch.utils import tensorboard

    from slowfast.engine import tester

    steps = []

    class Writer:  # records add_scalar calls
        def __init__(self, log_dir):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def add_scalar(self, tag, value, step):
            steps.append((tag, step))

    monkeypatch.setattr(tensorboard, "SummaryWriter", Writer)
    cfg = load_config([], ["OUTPUT_DIR", str(tmp_path)])
    for name in (
        "checkpoint_epoch_00040.pyth",
        "checkpoint_epoch_00041_iter_000120.pyth",
        "SLOWFAST_8x8_R50.pyth",  # a published model: not epoch 8
    ):
        tester._write_test_scalars(cfg, {"top1_err": 10.0}, f"/x/{name}")
    assert steps == [("Test/top1_err", 40), ("Test/top1_err", 40), ("Test/top1_err", 0)]


def test_results_of_another_kind_are_kept_not_read_as_ours(tmp_path):
    import pickle

    from slowfast.engine import tester

    cfg = load_config([], ["OUTPUT_DIR", str(tmp_path)])
    out = tmp_path / cfg.TEST.SAVE_RESULTS_PATH
    checkpoint = str(tmp_path / "checkpoints" / "checkpoint_epoch_00002.pyth")
    named = tmp_path / "test_results_checkpoint_epoch_00002.pyth"
    for content in (
        pickle.dumps([torch.zeros(2, 3), torch.ones(2)]),  # PySlowFast's results
        b"PK\x03\x04 cut short",  # a save that was killed
    ):
        out.write_bytes(content)
        assert tester._results_path(cfg, checkpoint) == str(named)
        assert out.read_bytes() == content
    torch.save({"checkpoint": checkpoint}, out)  # this checkpoint's own: replaced
    assert tester._results_path(cfg, checkpoint) == str(out)


def test_the_runs_own_checkpoint_is_tested_as_pyth_under_caffe2_type(tmp_path):
    """TEST.CHECKPOINT_TYPE caffe2 names TEST.CHECKPOINT_FILE_PATH's type; with
    that empty, the run's own .pyth checkpoint is tested (the reference's way)."""
    from slowfast.checkpoint.files import CheckpointError
    from slowfast.checkpoint.save import save_checkpoint
    from slowfast.engine import tester
    from slowfast.models import build_model

    opts = ["NUM_GPUS", "0", "OUTPUT_DIR", str(tmp_path), "TEST.CHECKPOINT_TYPE",
            "caffe2", "RESNET.WIDTH_PER_GROUP", "4", "RESNET.DEPTH", "18",
            "MODEL.ARCH", "c2d", "MODEL.MODEL_NAME", "ResNet"]  # fmt: skip
    cfg = load_config([], opts)
    trained = build_model(cfg)
    path = save_checkpoint(str(tmp_path), trained, None, 0, cfg)
    info = describe_model(cfg)
    model = tester._load_model(
        cfg, info, tester._checkpoint_to_test(cfg), torch.device("cpu")
    )
    for name, value in trained.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    cfg = load_config([], opts + ["TEST.CHECKPOINT_FILE_PATH", path])
    with pytest.raises(CheckpointError, match="not a Caffe2 checkpoint"):
        tester._load_model(cfg, info, path, torch.device("cpu"))
