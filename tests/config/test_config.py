"""Config loading through the command line: errors, overrides, merge order."""

import glob
import os

import pytest

from slowfast.config import ConfigError, get_cfg, load_config
from slowfast.config.validate import unread_keys_set
from slowfast.launch.parser import load_config_from_args, parse_args


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _load(argv):
    return load_config_from_args(parse_args(argv))


def test_unknown_key_names_key_and_file(tmp_path):
    path = _write(tmp_path / "bad.yaml", "SOLVER:\n  BASE_LRR: 0.1\n")
    with pytest.raises(ConfigError) as err:
        _load(["--cfg", path])
    message = str(err.value)
    assert path in message and "SOLVER.BASE_LRR" in message
    assert "SOLVER.BASE_LR" in message.split("did you mean")[1]


def test_wrong_type_names_key(tmp_path):
    path = _write(tmp_path / "typed.yaml", "TRAIN:\n  BATCH_SIZE: sixteen\n")
    with pytest.raises(ConfigError, match="TRAIN.BATCH_SIZE expects int") as err:
        _load(["--cfg", path])
    assert path in str(err.value)
    with pytest.raises(ConfigError, match="command line: SOLVER.STEPS expects list"):
        _load(["SOLVER.STEPS", "3"])


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("MODEL.ARCH", "foo", "must be one of"),
        ("SLOWFAST.SLOW_SAMPLING", "even", "must be one of"),
        ("SOLVER.STEPS", "[0, 5, 3]", "strictly increasing"),
        ("SHARD_ID", "3", "must be < NUM_SHARDS"),
        ("TRAIN.EVAL_PERIOD", "-1", "must be >= 0 (0: never)"),
        ("TRAIN.CHECKPOINT_PERIOD", "0", "must be positive"),
        ("MODEL.LOSS_FUNC", "bce", "use bce_logit"),  # training on logits
    ],
)
def test_bad_value_names_key(key, value, why):
    with pytest.raises(ConfigError) as err:
        _load([key, value])
    message = str(err.value)
    assert message.startswith(f"{key} = ") and why in message
    assert "\n" not in message


def test_inflating_caffe2_weights_is_refused():
    with pytest.raises(ConfigError, match="convert the Caffe2 .pkl first"):
        _load(["TRAIN.CHECKPOINT_TYPE", "caffe2", "TRAIN.CHECKPOINT_INFLATE", "True"])


def test_reference_keys_nothing_reads_are_named_when_set():
    """begin_run logs these lines (on the first process, in the run's log)."""
    lines = unread_keys_set(_load(["MULTIGRID.EVAL_FREQ", "5"]), get_cfg())
    assert lines == [
        "MULTIGRID.EVAL_FREQ = 5 has no effect here: TRAIN.EVAL_PERIOD and "
        "CHECKPOINT_PERIOD set when to validate and save, in baseline epochs of "
        "training"
    ]
    assert unread_keys_set(_load([]), get_cfg()) == []  # the defaults: none


def test_bce_on_probabilities_is_allowed_for_testing_only():
    cfg = load_config([], ["MODEL.LOSS_FUNC", "bce", "TRAIN.ENABLE", "False"])
    assert cfg.MODEL.LOSS_FUNC == "bce"


def test_overrides_trailing_and_opts():
    args = parse_args(["SOLVER.BASE_LR", "0.5", "--opts", "NUM_GPUS", "0"])
    assert args.opts == ["SOLVER.BASE_LR", "0.5", "NUM_GPUS", "0"]
    cfg = load_config_from_args(args)
    assert cfg.SOLVER.BASE_LR == 0.5 and cfg.NUM_GPUS == 0

    cfg = _load(["--opts", "SOLVER.STEPS", "[0, 10]", "SOLVER.MAX_EPOCH", "20"])
    assert list(cfg.SOLVER.STEPS) == [0, 10] and cfg.SOLVER.MAX_EPOCH == 20
    cfg = _load(["DATA.MEAN", "[0.1, 0.2, 0.3]", "OUTPUT_DIR", "/tmp/x y"])
    assert list(cfg.DATA.MEAN) == [0.1, 0.2, 0.3] and cfg.OUTPUT_DIR == "/tmp/x y"

    with pytest.raises(ConfigError, match="has no value"):
        _load(["SOLVER.BASE_LR"])


def test_cfg_files_merge_in_order(tmp_path):
    a = _write(tmp_path / "a.yaml", "SOLVER:\n  BASE_LR: 0.2\n  MAX_EPOCH: 7\n")
    b = _write(tmp_path / "b.yaml", "SOLVER:\n  BASE_LR: 0.3\n")
    for argv in (["--cfg", a, "--cfg", b], ["--cfg", a, b], ["--cfg_files", a, b]):
        args = parse_args(argv + ["TRAIN.BATCH_SIZE", "4"])
        assert args.cfg_files == [a, b] and args.opts == ["TRAIN.BATCH_SIZE", "4"]
        cfg = load_config_from_args(args)
        assert cfg.SOLVER.BASE_LR == 0.3 and cfg.SOLVER.MAX_EPOCH == 7
        assert cfg.TRAIN.BATCH_SIZE == 4
    cfg = _load(["--cfg", b, "--cfg", a])
    assert cfg.SOLVER.BASE_LR == 0.2
    # Overrides win over every file.
    assert _load(["--cfg", a, "SOLVER.BASE_LR", "0.9"]).SOLVER.BASE_LR == 0.9


def test_missing_cfg_file_names_file(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=f"{missing}: config file not found"):
        _load(["--cfg", missing])


def test_shard_arguments_become_overrides():
    args = parse_args(["--num_shards", "4", "--shard_id", "3", "NUM_SHARDS", "2"])
    assert args.num_shards == 4 and args.shard_id == 3
    cfg = load_config_from_args(args)
    assert cfg.NUM_SHARDS == 4 and cfg.SHARD_ID == 3 and cfg.is_frozen()
    with pytest.raises(ConfigError, match="SHARD_ID = 4"):
        _load(["--num_shards", "2", "--shard_id", "4"])
    defaults = _load([])
    assert defaults.NUM_SHARDS == 1 and defaults.SHARD_ID == 0


def test_frozen_config_refuses_mutation():
    cfg = _load([])
    assert cfg.is_frozen()
    with pytest.raises(AttributeError):
        cfg.SOLVER.BASE_LR = 1.0
    with pytest.raises(AttributeError):
        cfg.NUM_GPUS = 3
    assert cfg.SOLVER.BASE_LR == load_config().SOLVER.BASE_LR


def test_every_reference_config_loads(reference_dir):
    paths = sorted(glob.glob(os.path.join(reference_dir, "configs", "*.yaml")))
    assert paths, "no reference configs found"
    for path in paths:
        cfg = _load(["--cfg", path, "NUM_GPUS", "0"])
        assert cfg.is_frozen() and cfg.NUM_GPUS == 0, path


@pytest.mark.parametrize(
    "name", ["SSv2_I3D_R50_study_gpu.yaml", "SSv2_I3D_R50_study_gpu_5k.yaml"]
)
def test_gpu_study_configs_decode_every_frame_from_disk(name):
    # The GPU study measures the loader as on a real dataset: no in-memory
    # frame cache (the tiny configs it inherits from turn one on).
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cfg = _load(["--cfg", os.path.join(repo, "configs", "Demo", name)])
    assert cfg.DATA_LOADER.FRAME_CACHE is False
    assert cfg.TRAIN.DATASET == "ssv2"  # JPEG frame folders


def test_unknown_dataset_is_one_line_before_any_work():
    from slowfast.launch.config import load_run_config

    with pytest.raises(ConfigError, match=r"TRAIN.DATASET = 'kinetic': must be one"):
        load_run_config(opts=["TRAIN.DATASET", "kinetic"])
    cfg = load_run_config(opts=["TEST.DATASET", "Charades"])
    assert cfg.TEST.DATASET == "Charades"


@pytest.mark.parametrize(
    "key, value, hint",
    [
        ("MODEL.MODEL_NAME", "ResNt", "ResNet"),
        ("SOLVER.LR_POLICY", "cosin", "cosine"),
        ("MODEL.LOSS_FUNC", "cros_entropy", "cross_entropy"),
        ("SOLVER.OPTIMIZING_METHOD", "sgdd", "sgd"),
        ("TEST.DATASET", "ssv", "ssv2"),
    ],
)
def test_registries_reject_unknown_names_at_load_with_a_hint(key, value, hint):
    from slowfast.launch.config import load_run_config

    with pytest.raises(ConfigError) as err:
        load_run_config(opts=[key, value])
    message = str(err.value)
    assert message.startswith(f"{key} = {value!r}: must be one of")
    assert f"(did you mean {hint}?)" in message and "\n" not in message
    # The config layer alone checks values, not the registries' names.
    assert _get_value(load_config(opts=[key, value]), key) == value


def _get_value(cfg, key):
    for part in key.split("."):
        cfg = cfg[part]
    return cfg


def test_missing_base_and_yaml_syntax_errors_name_file_and_line(tmp_path):
    child = tmp_path / "child.yaml"
    child.write_text("_BASE_: nothere.yaml\nSOLVER:\n  BASE_LR: 0.1\n")
    with pytest.raises(ConfigError, match=r"child.yaml: _BASE_ file .*nothere.yaml"):
        load_config([str(child)])
    base = tmp_path / "base.yaml"
    base.write_text("SOLVER:\n  BASE_LR: [0.1\n  MAX_EPOCH: 3\n")
    child.write_text("_BASE_: base.yaml\n")
    with pytest.raises(ConfigError, match=r"base.yaml, line 3, column \d+: not valid"):
        load_config([str(child)])
