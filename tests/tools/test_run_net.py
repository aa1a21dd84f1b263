"""tools/run_net.py: argument parsing, config errors, the model-info run."""

import json
import logging
import subprocess
import sys

import pytest
import torch

from slowfast.launch.parser import parse_args
from slowfast.utils.logging import (
    error_line,
    format_json_stats,
    log_json_stats,
    setup_logging,
)
from tests.helpers.tool_utils import REPO_ROOT, load_tool, tool_path

RUN_NET = tool_path("run_net.py")


@pytest.fixture
def restore_logging():
    """Undoes setup_logging: removes its handlers, restores the root level."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


def _run_net_module():
    return load_tool("run_net.py")


def test_reference_arguments_and_defaults():
    args = parse_args([])
    assert args.cfg_files == [] and args.opts == []
    assert args.init_method == "tcp://localhost:9999"
    assert args.num_shards is None and args.shard_id is None

    args = parse_args(
        [
            "--cfg", "a.yaml",
            "--init_method", "tcp://host:1234",
            "--num_shards", "2",
            "--shard_id", "1",
            "TRAIN.ENABLE", "False",
            "--opts", "NUM_GPUS", "0",
        ]
    )  # fmt: skip
    assert args.cfg_files == ["a.yaml"]
    assert args.init_method == "tcp://host:1234"
    assert (args.num_shards, args.shard_id) == (2, 1)
    assert args.opts == ["TRAIN.ENABLE", "False", "NUM_GPUS", "0"]


def test_option_after_overrides_is_rejected(capsys):
    with pytest.raises(SystemExit) as err:
        parse_args(["NUM_GPUS", "0", "--num_shards", "2"])
    assert err.value.code == 2
    assert "--num_shards must come before" in capsys.readouterr().err


@pytest.mark.slow
def test_bad_config_prints_one_line_and_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("MODEL:\n  ARCH: foo\n")
    result = subprocess.run(
        [sys.executable, RUN_NET, "--cfg", str(bad)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: MODEL.ARCH = 'foo'")
    assert str(bad) in lines[0]
    assert "Traceback" not in result.stderr


def test_main_unknown_key_returns_2(capsys):
    run_net = _run_net_module()
    assert run_net.main(["SOLVER.BASE_LRR", "0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith("error: command line: unknown")


def test_main_logs_model_info(tmp_path, caplog, restore_logging):
    run_net = _run_net_module()
    argv = [
        "NUM_GPUS", "0",
        "OUTPUT_DIR", str(tmp_path),
        "MODEL.ARCH", "slow",
        "MODEL.MODEL_NAME", "ResNet",
        "MODEL.NUM_CLASSES", "3",
        "RESNET.WIDTH_PER_GROUP", "4",
        "DATA.INPUT_CHANNEL_NUM", "[3]",
        "DATA.NUM_FRAMES", "4",
        "DATA.TEST_CROP_SIZE", "32",
        "TRAIN.ENABLE", "False",
        "TEST.ENABLE", "False",
    ]  # fmt: skip
    with caplog.at_level(logging.INFO):
        assert run_net.main(argv) == 0
    assert "Params:" in caplog.text and "FLOPs:" in caplog.text
    assert "Params:" in (tmp_path / "stdout.log").read_text()


def test_setup_logging_ranks_and_idempotence(tmp_path, capsys, restore_logging):
    log = logging.getLogger("slowfast.test")
    setup_logging(str(tmp_path), rank=0)
    setup_logging(str(tmp_path), rank=0)
    log.info("hello from rank 0")
    out = capsys.readouterr().out
    assert out.count("hello from rank 0") == 1
    assert (tmp_path / "stdout.log").read_text().count("hello from rank 0") == 1

    other = tmp_path / "other"
    setup_logging(str(other), rank=1)
    log.info("quiet info")
    log.warning("loud warning")
    out = capsys.readouterr().out
    assert "quiet info" not in out and "[rank 1]" in out and "loud warning" in out
    # Other ranks keep their warnings (a failed rank's traceback) in their own log.
    rank_log = (other / "logs" / "rank_1.log").read_text()
    assert "loud warning" in rank_log and "quiet info" not in rank_log
    assert not (other / "stdout.log").exists()


def test_json_stats_line_and_file(tmp_path, caplog):
    stats = {
        "_type": "train_epoch",
        "epoch": "3/10",
        "loss": 1.234567891,
        "lr": torch.tensor(0.1),
        "top1_err": 45.0,
        "iter": 7,
        "per_class": [0.333333333, 1e-9],
    }
    line = format_json_stats(stats)
    assert json.loads(line) == {
        "_type": "train_epoch",
        "epoch": "3/10",
        "loss": 1.23457,
        "lr": 0.1,
        "top1_err": 45.0,
        "iter": 7,
        "per_class": [0.333333, 1e-9],
    }
    with caplog.at_level(logging.INFO):
        log_json_stats(stats, str(tmp_path), rank=0)
        log_json_stats(stats, str(tmp_path / "rank1"), rank=1)
    assert f"json_stats: {line}" in caplog.text
    assert (tmp_path / "json_stats.log").read_text() == line + "\n"
    assert not (tmp_path / "rank1").exists()


def test_non_finite_loss_is_one_error_line(demo_data, tmp_path, capsys):
    from tests.e2e.test_training_runs import DEMO, _opts

    extra = [
        "SOLVER.BASE_LR", "1e9", "SOLVER.WARMUP_EPOCHS", "0.0", "TRAIN.BATCH_SIZE",
        "2", "TEST.ENABLE", "False", "BN.USE_PRECISE_STATS", "False",
    ]  # fmt: skip
    argv = ["--cfg", f"{DEMO}/Kinetics_I3D_tiny.yaml"]
    argv += _opts(demo_data / "kinetics", tmp_path, extra)
    assert _run_net_module().main(argv) == 1
    out, err = capsys.readouterr()
    err = err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: loss is "), err
    assert "lower SOLVER.BASE_LR" in err[0]
    assert "no checkpoint was saved yet; traceback in " in err[0]
    # The console log says it in one line; the traceback is in the file only.
    assert "process rank 0 failed: loss is " in out and "Traceback" not in out
    assert "NonFiniteLossError" in (tmp_path / "stdout.log").read_text()


def test_error_line_is_the_errors_own_last_line():
    wrapped = (
        "Caught DataError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        '  File "base.py", line 316, in _get_train\n'
        "    raise DataError(\n"
        "slowfast.datasets.lists.DataError: Kinetics train: 11 videos in a row\n"
    )
    assert error_line(wrapped) == "Kinetics train: 11 videos in a row"
    assert error_line("ZeroDivisionError: division by zero") == (
        "ZeroDivisionError: division by zero"  # a builtin's name stays
    )
    assert error_line("data/0.mp4: empty file") == "data/0.mp4: empty file"
    assert error_line("x.mp4: empty file") == "x.mp4: empty file"
    assert error_line(" \n") == "unknown error"
