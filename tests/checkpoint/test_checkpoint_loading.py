"""Checkpoint loading: clear one-line errors for missing, damaged, foreign and
mismatched files (architecture, optimizer, Caffe2 paths), key prefixes and
renames, and inflation of 2D weights into 3D models (tiny and real models)."""

import pytest
import torch
from torch import nn

from slowfast.checkpoint.files import CheckpointError
from slowfast.checkpoint.inflate import inflate_weight
from slowfast.checkpoint.load import load_checkpoint
from slowfast.checkpoint.save import save_checkpoint
from slowfast.config import load_config
from slowfast.models import build_model
from tests.helpers.checkpoint_utils import (
    Stem,
    TinyNet,
    assert_same_state,
    make_optimizer,
    randomize_bn,
)


def test_missing_truncated_and_foreign_files_fail_clearly(tmp_path, cfg):
    model = TinyNet()
    missing = str(tmp_path / "nope.pyth")
    with pytest.raises(CheckpointError, match=f"{missing}: checkpoint file not found"):
        load_checkpoint(missing, model)

    good = save_checkpoint(str(tmp_path), model, None, 0, cfg)
    truncated = str(tmp_path / "truncated.pyth")
    with open(good, "rb") as src, open(truncated, "wb") as dst:
        dst.write(src.read()[:300])
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint\n")
    no_state = str(tmp_path / "no_state.pyth")
    torch.save({"epoch": 1, "weights": {}}, no_state)
    tensor_file = str(tmp_path / "tensor.pyth")
    torch.save(torch.zeros(2), tensor_file)

    cases = [
        (truncated, "cannot be read: truncated or damaged, or not a torch.save file"),
        (str(text), "cannot be read: truncated or damaged, or not a torch.save file"),
        (no_state, "no 'model_state'"),
        (tensor_file, "expected a dict, got Tensor"),
    ]
    for path, why in cases:
        with pytest.raises(CheckpointError) as err:
            load_checkpoint(path, model)
        message = str(err.value)
        assert message.startswith(f"{path}: ") and why in message
        assert "\n" not in message


def test_wrong_architecture_names_keys_and_shapes(tmp_path, cfg):
    path = save_checkpoint(str(tmp_path), TinyNet(temporal=1), None, 0, cfg)
    model = TinyNet(temporal=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path, model)
    message = str(err.value)
    assert message.startswith(path)
    assert (
        "stem.conv.weight: checkpoint (4, 3, 1, 3, 3) vs model (4, 3, 3, 3, 3)"
        in message
    )
    assert "TRAIN.CHECKPOINT_INFLATE" in message
    assert_same_state(before, model.state_dict())  # nothing was loaded

    wider = nn.Sequential()
    wider.add_module("stem", Stem(1))
    wider.add_module("extra", nn.Linear(4, 4))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path, wider)
    message = str(err.value)
    assert "missing keys: extra.weight, extra.bias" in message
    assert "unexpected keys: head.weight, head.bias" in message
    assert "CHECKPOINT_INFLATE" not in message


def test_optimizer_mismatch_fails_clearly(tmp_path, cfg):
    model = TinyNet()
    path = save_checkpoint(str(tmp_path), model, make_optimizer(model), 0, cfg)
    fresh = TinyNet()
    groups = [{"params": fresh.stem.parameters()}, {"params": fresh.head.parameters()}]
    with pytest.raises(CheckpointError, match="optimizer state does not fit"):
        load_checkpoint(path, fresh, optimizer=torch.optim.SGD(groups, lr=0.1))


def test_a_caffe2_path_that_is_not_one_is_one_line(tmp_path):
    missing = str(tmp_path / "model.pkl")
    with pytest.raises(CheckpointError, match="model.pkl: checkpoint file not found"):
        load_checkpoint(missing, TinyNet(), convert_from_caffe2=True)
    other = tmp_path / "other.pkl"
    other.write_bytes(b"not a pickle")
    with pytest.raises(CheckpointError, match="other.pkl: not a Caffe2 checkpoint"):
        load_checkpoint(str(other), TinyNet(), convert_from_caffe2=True)


def test_module_prefix_and_clear_name_pattern(tmp_path):
    source = TinyNet()
    prefixed = str(tmp_path / "ddp.pyth")
    state = {"module." + k: v for k, v in source.state_dict().items()}
    torch.save({"epoch": 0, "model_state": state}, prefixed)
    model = TinyNet()
    load_checkpoint(prefixed, model)
    assert_same_state(source.state_dict(), model.state_dict())

    renamed = str(tmp_path / "renamed.pyth")
    state = {"backbone." + k: v for k, v in source.state_dict().items()}
    torch.save({"epoch": 0, "model_state": state}, renamed)
    model = TinyNet()
    load_checkpoint(renamed, model, clear_name_pattern=("backbone.",))
    assert_same_state(source.state_dict(), model.state_dict())

    collide = str(tmp_path / "collide.pyth")
    state = dict(source.state_dict(), **{"module.head.bias": source.head.bias})
    torch.save({"epoch": 0, "model_state": state}, collide)
    with pytest.raises(CheckpointError, match="becomes 'head.bias'"):
        load_checkpoint(collide, TinyNet())

    with pytest.raises(ValueError, match="data_parallel=True"):
        load_checkpoint(prefixed, TinyNet(), data_parallel=True)


def test_inflate_weight_static_clip_matches_2d():
    conv2d = nn.Conv2d(3, 4, 3, padding=1, bias=False)
    conv3d = nn.Conv3d(3, 4, (3, 3, 3), padding=(0, 1, 1), bias=False)
    with torch.no_grad():
        conv3d.weight.copy_(inflate_weight(conv2d.weight, 3))
    frame = torch.randn(2, 3, 8, 8)
    clip = frame.unsqueeze(2).repeat(1, 1, 5, 1, 1)
    out = conv3d(clip)
    assert out.shape[2] == 3
    for t in range(3):
        torch.testing.assert_close(out[:, :, t], conv2d(frame), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("source_kind", ["2d", "3d_t1"])
def test_inflation_from_2d_checkpoint(tmp_path, cfg, source_kind):
    source = TinyNet(dims=2) if source_kind == "2d" else TinyNet(temporal=1)
    randomize_bn(source)
    path = str(tmp_path / "image_model.pyth")
    torch.save({"epoch": 0, "model_state": source.state_dict()}, path)

    model = TinyNet(temporal=3)
    info = load_checkpoint(path, model, inflation=True)
    assert info["epoch"] == 0
    source.eval()
    model.eval()
    frame = torch.randn(2, 3, 8, 8)
    clip = frame.unsqueeze(2).repeat(1, 1, 5, 1, 1)
    expected = source(frame) if source_kind == "2d" else source(frame.unsqueeze(2))
    torch.testing.assert_close(model(clip), expected, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- #
# Real models.
# --------------------------------------------------------------------------- #
def _tiny_cfg(arch: str, num_classes: int = 3):
    opts = [
        "NUM_GPUS", "0",
        "MODEL.ARCH", arch,
        "MODEL.MODEL_NAME", "SlowFast" if arch == "slowfast" else "ResNet",
        "MODEL.NUM_CLASSES", str(num_classes),
        "RESNET.DEPTH", "50",
        "RESNET.WIDTH_PER_GROUP", "4",
        "SLOWFAST.BETA_INV", "4",
        "DATA.NUM_FRAMES", "8",
        "DATA.TRAIN_CROP_SIZE", "32",
        "DATA.TEST_CROP_SIZE", "32",
        "DATA.INPUT_CHANNEL_NUM", "[3, 3]" if arch == "slowfast" else "[3]",
    ]  # fmt: skip
    return load_config([], opts)


def test_real_model_round_trip_and_architecture_mismatch(tmp_path):
    c2d_cfg, i3d_cfg = _tiny_cfg("c2d"), _tiny_cfg("i3d")
    c2d = build_model(c2d_cfg)
    path = save_checkpoint(str(tmp_path), c2d, make_optimizer(c2d), 0, c2d_cfg)

    same = build_model(c2d_cfg)
    load_checkpoint(path, same, optimizer=make_optimizer(same))
    assert_same_state(c2d.state_dict(), same.state_dict())

    i3d = build_model(i3d_cfg)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path, i3d)
    assert "s1.pathway0_stem.conv.weight: checkpoint (" in str(err.value)
    load_checkpoint(path, i3d, inflation=True)
    stem = i3d.state_dict()["s1.pathway0_stem.conv.weight"]
    source = c2d.state_dict()["s1.pathway0_stem.conv.weight"]
    torch.testing.assert_close(stem.sum(2, keepdim=True), source)

    slowfast_cfg = _tiny_cfg("slowfast")
    with pytest.raises(CheckpointError, match="missing keys: .*pathway1"):
        load_checkpoint(path, build_model(slowfast_cfg))


@pytest.mark.parametrize("arch", ["c2d", "i3d"])  # i3d: inflated from the C2D
def test_fine_tuning_starts_another_datasets_classifier_afresh(tmp_path, arch, caplog):
    source_cfg = _tiny_cfg("c2d", num_classes=3)
    source = build_model(source_cfg)
    path = save_checkpoint(str(tmp_path), source, None, 0, source_cfg)
    torch.manual_seed(1)
    model = build_model(_tiny_cfg(arch, num_classes=5))
    init = {k: v.clone() for k, v in model.state_dict().items()}
    inflate = arch == "i3d"
    with pytest.raises(CheckpointError) as err:  # resuming: strict
        load_checkpoint(path, model, inflation=inflate)
    assert "head.projection.weight: checkpoint (3, " in str(err.value)
    assert "classifier for 3 classes: set MODEL.NUM_CLASSES 3, or" in str(err.value)
    assert "TRAIN.CHECKPOINT_EPOCH_RESET True" in str(err.value)

    with caplog.at_level("WARNING"):
        info = load_checkpoint(path, model, inflation=inflate, epoch_reset=True)
    assert info["epoch"] == -1
    loaded, trained = model.state_dict(), source.state_dict()
    for key in ("head.projection.weight", "head.projection.bias"):
        assert torch.equal(loaded[key], init[key])  # as initialised
        assert f"classifier left as initialised ({key}: checkpoint (3" in caplog.text
    stem = "s1.pathway0_stem.conv.weight"
    torch.testing.assert_close(loaded[stem].sum(2, keepdim=True), trained[stem])
    bn = "s2.pathway0_res0.branch2.a_bn.running_var"
    assert torch.equal(loaded[bn], trained[bn])


def test_fine_tuning_still_refuses_a_backbone_that_does_not_fit(tmp_path, caplog):
    source_cfg = _tiny_cfg("c2d")
    path = save_checkpoint(str(tmp_path), build_model(source_cfg), None, 0, source_cfg)
    model = build_model(_tiny_cfg("i3d", 5))
    with pytest.raises(CheckpointError, match="s1.pathway0_stem.conv.weight"):
        with caplog.at_level("WARNING"):
            load_checkpoint(path, model, epoch_reset=True)
    assert "classifier left as initialised" not in caplog.text  # nothing loaded
