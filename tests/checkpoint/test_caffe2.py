"""Caffe2 model-zoo checkpoints (.pkl) load into each model family."""

import logging
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from slowfast.checkpoint import caffe2
from slowfast.checkpoint.files import CheckpointError
from slowfast.checkpoint.load import get_last_checkpoint, load_checkpoint
from slowfast.checkpoint.save import save_checkpoint
from slowfast.config import load_config
from slowfast.models import build_model
from tests.conftest import REPO_ROOT

DEMO = os.path.join(REPO_ROOT, "configs", "Demo")
REFERENCE = os.path.join(REPO_ROOT, "..", "shared", "reference")
FAMILIES = {
    "i3d": ("Kinetics_I3D_tiny.yaml", []),
    "i3d_nl": ("Kinetics_I3D_NLN_tiny.yaml", []),
    "slow": ("Kinetics_I3D_tiny.yaml", ["MODEL.ARCH", "slow"]),
    "slowfast": ("Kinetics_SLOWFAST_tiny.yaml", []),
}
BN = {"weight": "s", "bias": "b", "running_mean": "rm", "running_var": "riv"}
PARAM = {"weight": "w", "bias": "b"}


def blob_name(key: str, last_block: dict):
    """The reference's Caffe2 blob name of one of our keys (the documented
    table, written out independently of ``checkpoint/caffe2.py``)."""
    module, param = key.rsplit(".", 1)
    patterns = [  # (our module, Caffe2 base name, conv or BN)
        (r"s1\.pathway(?P<p>\d)_stem\.conv", "{t}conv1", PARAM),
        (r"s1\.pathway(?P<p>\d)_stem\.bn", "{t}res_conv1_bn", BN),
        (
            r"s(?P<x>\d)\.pathway(?P<p>\d)_res(?P<y>\d+)\.branch1",
            "{t}res{x}_{y}_branch1",
            PARAM,
        ),
        (
            r"s(?P<x>\d)\.pathway(?P<p>\d)_res(?P<y>\d+)\.branch1_bn",
            "{t}res{x}_{y}_branch1_bn",
            BN,
        ),
        (
            r"s(?P<x>\d)\.pathway(?P<p>\d)_res(?P<y>\d+)\.branch2\.(?P<k>[abc])",
            "{t}res{x}_{y}_branch2{k}",
            PARAM,
        ),
        (
            r"s(?P<x>\d)\.pathway(?P<p>\d)_res(?P<y>\d+)\.branch2\.(?P<k>[abc])_bn",
            "{t}res{x}_{y}_branch2{k}_bn",
            BN,
        ),
        (
            r"s(?P<x>\d)\.pathway0_nonlocal(?P<y>\d+)\.conv_(?P<k>\w+)",
            "nonlocal_conv{x}_{y}_{k}",
            PARAM,
        ),
        (r"s(?P<x>\d)\.pathway0_nonlocal(?P<y>\d+)\.bn", "nonlocal_conv{x}_{y}_bn", BN),
        (r"s1_fuse\.conv_f2s", "t_pool1_subsample", PARAM),
        (r"s1_fuse\.bn", "t_pool1_subsample_bn", BN),
        (r"s(?P<x>\d)_fuse\.conv_f2s", "t_res{x}_{last}_branch2c_bn_subsample", PARAM),
        (r"s(?P<x>\d)_fuse\.bn", "t_res{x}_{last}_branch2c_bn_subsample_bn", BN),
        (r"head\.projection", "pred", PARAM),
    ]  # noqa: E501
    for pattern, base, suffixes in patterns:
        match = re.fullmatch(pattern, module)
        if match and param in suffixes:
            values = match.groupdict()
            values["t"] = "t_" if values.get("p") == "1" else ""
            values["last"] = last_block.get(values.get("x"), 0)
            return base.format(**values) + "_" + suffixes[param]
    return None


def write_pkl(model, path, extra=True):
    """A Caffe2 checkpoint of ``model`` in the reference's format."""
    state = model.state_dict()
    last = {}  # stage -> last block index of pathway 1 (the fuse blob names it)
    for key in state:
        match = re.match(r"s(\d)\.pathway1_res(\d+)\.", key)
        if match:
            last[match.group(1)] = max(last.get(match.group(1), 0), int(match.group(2)))
    blobs = {}
    for key, value in state.items():
        if key.endswith("num_batches_tracked"):
            continue
        name = blob_name(key, last)
        assert name is not None, key
        blobs[name] = value.detach().cpu().numpy().astype(np.float32)
        if extra and not name.endswith(("_rm", "_riv")):
            blobs[f"{name}_momentum"] = np.zeros_like(blobs[name])
    if extra:
        blobs["lr"] = np.array([0.1], dtype=np.float32)
        blobs["model_iter"] = np.array([123456])
    with open(path, "wb") as f:
        pickle.dump({"blobs": blobs}, f, protocol=2)
    return blobs


def _cfg(family, *opts):
    name, extra = FAMILIES[family]
    return load_config([os.path.join(DEMO, name)], extra + list(opts))


def _inputs(cfg, model):
    from slowfast.models.model_stats import pathway_inputs

    torch.manual_seed(3)
    return pathway_inputs(cfg, 2, cfg.DATA.NUM_FRAMES, cfg.DATA.TRAIN_CROP_SIZE)


def _randomized(cfg, seed):
    torch.manual_seed(seed)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.weight.uniform_(0.5, 1.5)
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.slow
def test_caffe2_checkpoint_gives_the_same_model_as_the_pyth(family, tmp_path, caplog):
    cfg = _cfg(family, "OUTPUT_DIR", str(tmp_path))
    source = _randomized(cfg, 0)
    pkl = str(tmp_path / "model.pkl")
    write_pkl(source, pkl)
    pyth = save_checkpoint(str(tmp_path), source, None, 0, cfg)

    from_pkl, from_pyth = _randomized(cfg, 1), _randomized(cfg, 2)
    with caplog.at_level(logging.INFO):
        info = load_checkpoint(pkl, from_pkl, convert_from_caffe2=True)
    assert info["epoch"] == -1  # weights only: training starts at epoch 0
    assert "does not name" not in caplog.text  # momentum, lr, model_iter ignored
    assert "classifier left" not in caplog.text
    load_checkpoint(pyth, from_pyth)
    for key, value in source.state_dict().items():
        assert torch.equal(from_pkl.state_dict()[key].float(), value.float()) or (
            key.endswith("num_batches_tracked")
        ), key
    inputs = _inputs(cfg, source)
    with torch.no_grad():
        assert torch.equal(from_pkl(inputs), from_pyth(inputs))
        assert torch.equal(from_pkl(inputs), source(inputs))


@pytest.mark.slow
def test_fine_tuning_loads_everything_but_the_classifier(tmp_path, caplog):
    kinetics = _cfg("slowfast")
    source = _randomized(kinetics, 0)
    pkl = str(tmp_path / "SLOWFAST_8x8_R50.pkl")
    write_pkl(source, pkl)
    ssv2 = _cfg("slowfast", "MODEL.NUM_CLASSES", "7")
    target = _randomized(ssv2, 1)
    head_before = target.head.projection.weight.clone()
    with caplog.at_level(logging.INFO):
        load_checkpoint(pkl, target, convert_from_caffe2=True, epoch_reset=True)
    assert (
        "classifier left as initialised (pred_w (10, 640) -> head.projection.weight"
        " (7, 640))" in caplog.text
    )
    assert "classifier left as initialised (pred_b (10,)" in caplog.text
    assert torch.equal(target.head.projection.weight, head_before)
    for key, value in source.state_dict().items():
        if not key.startswith("head.") and not key.endswith("num_batches_tracked"):
            assert torch.equal(target.state_dict()[key], value), key


@pytest.mark.slow
def test_a_classifier_for_other_classes_is_refused_outside_fine_tuning(tmp_path):
    source = _randomized(_cfg("i3d"), 0)
    pkl = str(tmp_path / "I3D_8x8_R50.pkl")
    write_pkl(source, pkl)
    target = _randomized(_cfg("i3d", "MODEL.NUM_CLASSES", "7"), 1)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(CheckpointError) as err:  # as TEST.CHECKPOINT_TYPE loads
        load_checkpoint(pkl, target, convert_from_caffe2=True)
    assert str(err.value).startswith(f"{pkl}: Caffe2 checkpoint does not match")
    assert "2 blobs of another shape: pred_b (10,) -> head.projection.bias (7,)" in (
        str(err.value)
    )
    assert "a classifier for 10 classes: set MODEL.NUM_CLASSES 10" in str(err.value)
    for key, value in target.state_dict().items():
        assert torch.equal(value, before[key]), key  # nothing loaded


@pytest.mark.slow
@pytest.mark.parametrize(
    "source_family, target_family, expected",
    [
        ("i3d", "i3d_nl", "model keys no blob fills: s3.pathway0_nonlocal"),
        ("i3d_nl", "i3d", "blobs for parts the model lacks: nonlocal_conv3_"),
        ("i3d", "slowfast", "model keys no blob fills: s1.pathway1_stem.conv.weight"),
    ],
)
def test_a_checkpoint_of_another_architecture_is_refused(
    source_family, target_family, expected, tmp_path
):
    source = _randomized(_cfg(source_family), 0)
    pkl = str(tmp_path / "zoo.pkl")
    write_pkl(source, pkl)
    target = _randomized(_cfg(target_family), 1)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(CheckpointError) as err:  # even when fine-tuning
        load_checkpoint(pkl, target, convert_from_caffe2=True, epoch_reset=True)
    message = str(err.value)
    assert "\n" not in message and expected in message, message
    assert "use the config it was trained with" in message
    for key, value in target.state_dict().items():
        assert torch.equal(value, before[key]), key


def _head(classes: int) -> torch.nn.Module:
    model = torch.nn.Module()
    model.head = torch.nn.Module()
    model.head.projection = torch.nn.Linear(3, classes)
    return model


def _write_blobs(path, **blobs):
    with open(path, "wb") as f:
        pickle.dump({"blobs": blobs}, f, protocol=2)


def test_fine_tuning_needs_the_classifier_blobs_and_drops_both(tmp_path, caplog):
    pkl = str(tmp_path / "no_head.pkl")
    _write_blobs(pkl, pred_w=np.ones((2, 3), np.float32))  # no pred_b
    with pytest.raises(CheckpointError, match="1 model keys no blob fills: head"):
        load_checkpoint(pkl, _head(2), convert_from_caffe2=True, epoch_reset=True)
    # A bias that happens to fit is not loaded beside a weight that does not.
    _write_blobs(pkl, pred_w=np.ones((2, 4), np.float32), pred_b=np.ones(2, np.float32))
    model = _head(2)
    bias = model.head.projection.bias.clone()
    with caplog.at_level(logging.WARNING):
        load_checkpoint(pkl, model, convert_from_caffe2=True, epoch_reset=True)
    assert "classifier left as initialised (pred_w (2, 4) -> head" in caplog.text
    assert torch.equal(model.head.projection.bias, bias)


def test_blobs_the_table_does_not_name_are_ignored_with_a_warning(tmp_path, caplog):
    model = _head(2)
    pkl = str(tmp_path / "head.pkl")
    _write_blobs(
        pkl,
        pred_w=np.ones((2, 3), np.float32),
        pred_b=np.zeros(2, np.float32),
        data_mean=np.zeros(3, np.float32),
    )
    with caplog.at_level(logging.WARNING):
        load_checkpoint(pkl, model, convert_from_caffe2=True)
    assert "1 blob(s) the reference's table does not name are ignored: data_mean" in (
        caplog.text
    )
    assert torch.equal(model.head.projection.weight, torch.ones(2, 3))


def test_blob_names_of_the_reference_table():
    assert caffe2.blob_to_key("res4_5_branch2b_bn_riv") == (
        "s4.pathway0_res5.branch2.b_bn.running_var"
    )
    assert caffe2.blob_to_key("t_res3_0_branch1_w") == "s3.pathway1_res0.branch1.weight"
    assert caffe2.blob_to_key("nonlocal_conv3_1_theta_w") == (
        "s3.pathway0_nonlocal1.conv_theta.weight"
    )
    assert caffe2.blob_to_key("t_res4_5_branch2c_bn_subsample_bn_rm") == (
        "s4_fuse.bn.running_mean"
    )
    assert caffe2.blob_to_key("res2_0_branch2a_w_momentum") is None
    assert caffe2.is_training_state("model_iter") and caffe2.is_training_state("lr")
    # BN statistics shorter by an exact factor are tiled; others must fit.
    tiled = caffe2._fit(np.arange(4, dtype=np.float32), "a.running_var", torch.zeros(8))
    assert tiled.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    conv = caffe2._fit(np.zeros((4, 3)), "a.weight", torch.zeros(4, 3, 1, 1, 1))
    assert conv.shape[-1] == 1
    assert caffe2._fit(np.zeros(3), "a.running_mean", torch.zeros(8)) is None
    # Only statistics are tiled: a 10-class bias is no 20-class bias.
    assert caffe2._fit(np.zeros(10), "head.projection.bias", torch.zeros(20)) is None


@pytest.mark.parametrize("name", ["I3D_8x8_R50", "I3D_NLN_8x8_R50", "SLOWFAST_8x8_R50"])
def test_every_reference_key_has_a_blob_name(name):
    path = os.path.join(REFERENCE, f"{name}.state_dict.txt")
    if not os.path.exists(path):
        pytest.skip(f"{path} not found (the shared reference material)")
    keys = [line.split()[0] for line in open(path) if line.strip()[:1] not in ("#", "")]
    last = {}
    for key in keys:
        match = re.match(r"s(\d)\.pathway1_res(\d+)\.", key)
        if match:
            last[match.group(1)] = max(last.get(match.group(1), 0), int(match.group(2)))
    for key in keys:
        if key.endswith("num_batches_tracked"):
            continue
        blob = blob_name(key, last)
        assert blob is not None and caffe2.blob_to_key(blob) == key, key


@pytest.mark.slow
def test_convert_checkpoint_writes_a_pyth(tmp_path):
    cfg = _cfg("i3d")
    source = _randomized(cfg, 0)
    pkl = str(tmp_path / "I3D.pkl")
    write_pkl(source, pkl)
    out = str(tmp_path / "I3D.pyth")
    tool = os.path.join(REPO_ROOT, "tools", "convert_checkpoint.py")
    cmd = [sys.executable, tool, "--cfg", os.path.join(DEMO, FAMILIES["i3d"][0])]
    cmd += ["--pkl", pkl, "--out", out]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"wrote {out}" in result.stdout
    converted = _randomized(cfg, 5)
    info = load_checkpoint(out, converted)
    assert info["epoch"] == -1
    for key, value in source.state_dict().items():
        assert torch.equal(converted.state_dict()[key], value), key


@pytest.mark.slow
def test_a_run_fine_tunes_from_a_caffe2_checkpoint(demo_data, tmp_path, caplog):
    from slowfast.engine.trainer import train

    source = _randomized(_cfg("i3d", "MODEL.NUM_CLASSES", "12"), 0)  # 12-class zoo
    pkl = str(tmp_path / "I3D_8x8_R50.pkl")
    write_pkl(source, pkl)
    multigrid = os.path.join(DEMO, "Kinetics_I3D_tiny_multigrid.yaml")  # sub-batch BN
    cfg = load_config(
        [multigrid],
        ["DATA.PATH_TO_DATA_DIR", str(demo_data / "kinetics_x6"),
         "DATA.PATH_PREFIX", str(demo_data / "kinetics"), "OUTPUT_DIR", str(tmp_path),
         "TRAIN.CHECKPOINT_FILE_PATH", pkl, "TRAIN.CHECKPOINT_TYPE", "caffe2",
         "TRAIN.BATCH_SIZE", "2", "SOLVER.MAX_EPOCH", "1",
         "SOLVER.STEPS", "[0]", "SOLVER.LRS", "[1]", "MULTIGRID.LONG_CYCLE", "False",
         "DATA_LOADER.NUM_WORKERS", "0", "LOG_MODEL_INFO", "False"],
    )  # fmt: skip
    with caplog.at_level(logging.INFO):
        train(cfg)
    assert f"initialised from {pkl}" in caplog.text
    assert "classifier left as initialised (pred_w" in caplog.text  # 12-class head
    assert "training epochs 1..1 of 1" in caplog.text
    assert get_last_checkpoint(str(tmp_path)).endswith("checkpoint_epoch_00001.pyth")
