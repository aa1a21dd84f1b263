"""Tiny models of every family: build, forward/backward, shapes, eval, init."""

import glob
import logging
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slowfast.config import get_cfg, load_config
from slowfast.models import MODEL_REGISTRY, build_model
from slowfast.models.arch import block_temporal_kernels
from slowfast.models.model_stats import (
    gflops,
    log_model_info,
    network_stride,
    params_count,
    pathway_inputs,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUM_CLASSES = 5

_TINY = [
    "RESNET.DEPTH", "18", "RESNET.TRANS_FUNC", "basic_transform",
    "RESNET.WIDTH_PER_GROUP", "8", "MODEL.NUM_CLASSES", str(NUM_CLASSES),
    "DATA.NUM_FRAMES", "4", "DATA.TRAIN_CROP_SIZE", "32",
    "DATA.TEST_CROP_SIZE", "32", "MODEL.DROPOUT_RATE", "0.0",
]  # fmt: skip
_RESNET = ["MODEL.MODEL_NAME", "ResNet", "DATA.INPUT_CHANNEL_NUM", "[3]"]
_SLOWFAST = [
    "MODEL.MODEL_NAME", "SlowFast", "MODEL.ARCH", "slowfast",
    "SLOWFAST.ALPHA", "2", "SLOWFAST.BETA_INV", "4",
    "SLOWFAST.FUSION_KERNEL_SZ", "5",
    "RESNET.SPATIAL_STRIDES", "[[1, 1], [2, 2], [2, 2], [2, 2]]",
]  # fmt: skip
FAMILIES = {
    "c2d": _RESNET + ["MODEL.ARCH", "c2d"],
    "i3d": _RESNET + ["MODEL.ARCH", "i3d"],
    "i3d_nl": _RESNET
    + ["MODEL.ARCH", "i3d", "NONLOCAL.LOCATION", "[[[]], [[1]], [[0]], [[]]]"],
    "slow": _RESNET + ["MODEL.ARCH", "slow"],
    "slowfast": _SLOWFAST,
    "slowfast_nl": _SLOWFAST
    + ["NONLOCAL.LOCATION", "[[[], []], [[1], []], [[0], []], [[], []]]"],
}

# Parameter counts of our full-size configs (equal to the reference models').
OUR_CONFIG_PARAMS = {
    "Kinetics/C2D_8x8_R50": 24327632,
    "Kinetics/I3D_8x8_R50": 28043472,
    "Kinetics/I3D_NLN_8x8_R50": 35401936,
    "Kinetics/SLOW_8x8_R50": 32454096,
    "Kinetics/SLOWFAST_8x8_R50": 34566488,
    "SSv2/SLOWFAST_16x8_R50": 34045558,
    "Charades/SLOWFAST_16x8_R50": 34006373,
}


def tiny_cfg(family, *opts):
    return load_config(opts=_TINY + FAMILIES[family] + list(opts))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tiny_model_forward_backward(family):
    cfg = tiny_cfg(family)
    model = build_model(cfg)
    inputs = pathway_inputs(cfg, 2, 4, 32)
    logits = model(inputs)
    assert logits.shape == (2, NUM_CLASSES)
    F.cross_entropy(logits, torch.tensor([0, 3])).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("family", ["i3d_nl", "slowfast_nl", "c2d"])
def test_one_model_takes_multigrid_shapes(family):
    cfg = tiny_cfg(family)
    model = build_model(cfg)
    for frames, height, width in [(4, 32, 32), (8, 24, 24), (2, 40, 40), (4, 24, 40)]:
        out = model(pathway_inputs(cfg, 2, frames, (height, width)))
        assert out.shape == (2, NUM_CLASSES)


def test_non_local_blocks_are_placed_and_grouped():
    cfg = tiny_cfg("i3d_nl", "NONLOCAL.GROUP", "[[1], [2], [1], [1]]")
    model = build_model(cfg)
    names = [n for n, _ in model.named_children()]
    # The reference's order; build_model adds input_norm (no state-dict entries).
    assert names == [
        "s1", "s2", "pathway0_pool", "s3", "s4", "s5", "head", "input_norm"
    ]  # fmt: skip
    assert (
        hasattr(model.s3, "pathway0_nonlocal1")
        and model.s3.pathway0_nonlocal1.group == 2
    )
    assert hasattr(model.s4, "pathway0_nonlocal0")
    assert not hasattr(model.s3, "pathway0_nonlocal0")
    assert model(pathway_inputs(cfg, 1, 4, 32)).shape == (1, NUM_CLASSES)
    sf = build_model(tiny_cfg("slowfast_nl"))
    assert hasattr(sf.s3, "pathway0_nonlocal1") and not hasattr(
        sf.s3, "pathway1_nonlocal1"
    )


@pytest.mark.parametrize("act", ["softmax", "sigmoid"])
def test_eval_output_is_activated(act):
    cfg = tiny_cfg("i3d", "MODEL.HEAD_ACT", act)
    torch.manual_seed(1)
    model = build_model(cfg)
    torch.manual_seed(1)
    raw = build_model(tiny_cfg("i3d", "MODEL.HEAD_ACT", "none"))
    nn.init.normal_(model.head.projection.weight, std=1.0)
    raw.load_state_dict(model.state_dict())
    model.eval()
    raw.eval()
    x = pathway_inputs(cfg, 3, 4, 32)
    with torch.no_grad():
        scores, logits = model(x), raw(x)
    if act == "softmax":
        torch.testing.assert_close(scores.sum(1), torch.ones(3))
        torch.testing.assert_close(scores, logits.softmax(1))
    else:
        torch.testing.assert_close(scores, logits.sigmoid())
    model.train()
    with torch.no_grad():
        train_out = model(x)
    assert not torch.allclose(train_out.sum(1), torch.ones(3))


@pytest.mark.parametrize("norm", ["batchnorm", "sub_batchnorm"])
def test_channels_last_matches_default_format(norm):
    opts = ["BN.NORM_TYPE", norm, "BN.NUM_SPLITS", "2"]
    cfg = tiny_cfg("slowfast_nl", *opts)
    ref = build_model(cfg)
    cl = build_model(tiny_cfg("slowfast_nl", *opts, "MODEL.CHANNELS_LAST_3D", "True"))
    cl.load_state_dict(ref.state_dict())
    cl.to(torch.device("cpu"))  # as the trainer moves it: the format stays
    weight = cl.s2.pathway0_res0.branch2.a.weight
    assert weight.is_contiguous(memory_format=torch.channels_last_3d)
    stem = "s1.pathway0_stem.conv.weight"
    assert cl.get_parameter(stem).is_contiguous(memory_format=torch.channels_last_3d)
    assert ref.get_parameter(stem).is_contiguous()  # the default format
    x = pathway_inputs(cfg, 4, 4, 32)
    out_ref, out_cl = ref(x), cl(x)
    torch.testing.assert_close(out_cl, out_ref, rtol=1e-4, atol=1e-5)
    out_ref.square().sum().backward()
    out_cl.square().sum().backward()
    for name in ("s1.pathway1_stem.conv.weight", "head.projection.weight"):
        g_ref = ref.get_parameter(name).grad
        g_cl = cl.get_parameter(name).grad
        scale = g_ref.abs().max().item()  # Deep BN nets amplify rounding.
        torch.testing.assert_close(g_cl, g_ref, rtol=1e-3, atol=2e-3 * scale)
    ref.eval()
    cl.eval()
    with torch.no_grad():
        torch.testing.assert_close(cl(x), ref(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", ["i3d", "slowfast"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_uint8_clips_are_normalised_in_the_model(family, channels_last):
    opts = ["DATA.MEAN", "[0.4, 0.5, 0.6]", "DATA.STD", "[0.2, 0.25, 0.3]"]
    opts += ["MODEL.CHANNELS_LAST_3D", str(channels_last)]
    cfg = tiny_cfg(family, *opts)
    model = build_model(cfg).eval()
    assert not any("input_norm" in key for key in model.state_dict())
    torch.manual_seed(0)
    clip = torch.randint(0, 256, (2, 3, 4, 32, 32), dtype=torch.uint8)
    inputs = [clip[:, :, ::2], clip] if family == "slowfast" else [clip]
    mean = torch.tensor([0.4, 0.5, 0.6]).view(1, 3, 1, 1, 1)
    std = torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1, 1)
    floats = [(x.float() / 255 - mean) / std for x in inputs]
    with torch.no_grad():
        torch.testing.assert_close(model(inputs), model(floats), rtol=1e-4, atol=1e-5)


def test_weight_init_follows_reference():
    cfg = tiny_cfg(
        "i3d_nl", "RESNET.ZERO_INIT_FINAL_BN", "True", "MODEL.FC_INIT_STD", "0.02"
    )
    model = build_model(cfg)
    block = model.s3.pathway0_res0
    assert torch.all(block.branch2.b_bn.weight == 0)  # Final BN of the block.
    assert torch.all(block.branch2.a_bn.weight == 1)
    assert torch.all(block.branch1_bn.weight == 1)
    assert torch.all(model.s3.pathway0_nonlocal1.bn.weight == 0)
    assert torch.all(model.s3.pathway0_nonlocal1.conv_g.bias == 0)
    assert torch.all(model.head.projection.bias == 0)
    assert model.head.projection.weight.std().item() == pytest.approx(0.02, rel=0.3)
    conv = model.s5.pathway0_res0.branch2.a.weight  # fan_out = out * k.
    fan_out = conv.shape[0] * conv[0, 0].numel()
    assert conv.std().item() == pytest.approx((2.0 / fan_out) ** 0.5, rel=0.1)
    plain = build_model(tiny_cfg("i3d", "RESNET.ZERO_INIT_FINAL_BN", "False"))
    assert torch.all(plain.s3.pathway0_res0.branch2.b_bn.weight == 1)


def test_bottleneck_depths_and_temporal_kernels():
    cfg = tiny_cfg(
        "i3d", "RESNET.DEPTH", "101", "RESNET.TRANS_FUNC", "bottleneck_transform",
        "RESNET.WIDTH_PER_GROUP", "2", "RESNET.NUM_GROUPS", "2",
    )  # fmt: skip
    model = build_model(cfg)
    blocks = [n for n, _ in model.s4.named_children() if "_res" in n]
    assert len(blocks) == 23
    kernels = [model.s4.get_submodule(f"{b}.branch2.a").kernel_size[0] for b in blocks]
    assert kernels == [3, 1, 3, 1, 3, 1] + [1] * 17
    assert model.s2.pathway0_res0.branch2.b.groups == 2
    assert model(pathway_inputs(cfg, 1, 4, 32)).shape == (1, NUM_CLASSES)
    assert block_temporal_kernels([1, 3], 3, 3) == [1, 3, 1]
    assert block_temporal_kernels([3], 2, 6) == [3, 3]


def test_invalid_configs_fail_with_the_key():
    with pytest.raises(ValueError, match="MODEL.ARCH"):
        build_model(load_config(opts=_TINY + ["MODEL.MODEL_NAME", "ResNet"]))
    with pytest.raises(ValueError, match="NONLOCAL.LOCATION"):
        build_model(tiny_cfg("i3d", "NONLOCAL.LOCATION", "[[[]], [[5]], [[]], [[]]]"))
    with pytest.raises(ValueError, match="RESNET.SPATIAL_STRIDES"):
        build_model(tiny_cfg("slowfast", "RESNET.SPATIAL_STRIDES", "[[1], [2], [2]]"))
    cfg = get_cfg()
    cfg.MODEL.MODEL_NAME = "Missing"
    with pytest.raises(ValueError, match="MODEL.MODEL_NAME"):
        build_model(cfg)
    assert {"ResNet", "SlowFast"} <= {name for name, _ in MODEL_REGISTRY}


def test_input_errors_are_clear():
    cfg = tiny_cfg("slowfast")
    model = build_model(cfg)
    slow, fast = pathway_inputs(cfg, 1, 4, 32)
    with pytest.raises(ValueError, match="1 pathway tensor.*takes 2"):
        model([fast])
    with pytest.raises(TypeError, match="list"):
        model(fast)
    with pytest.raises(ValueError, match="ALPHA"):
        model([slow, fast[:, :, :2]])


def test_model_stats_helpers(caplog):
    cfg = tiny_cfg("slowfast")
    slow, fast = pathway_inputs(cfg, 2, 8, (24, 32))
    assert fast.shape == (2, 3, 8, 24, 32) and slow.shape == (2, 3, 4, 24, 32)
    assert network_stride(cfg) == 32
    dilated = tiny_cfg("i3d", "RESNET.SPATIAL_STRIDES", "[[1], [2], [2], [1]]")
    assert network_stride(dilated) == 16
    model = build_model(cfg)
    assert params_count(model) == sum(p.numel() for p in model.parameters())
    flops = gflops(model, cfg, 4, 32)
    assert 0 < flops < 1 and model.training
    with caplog.at_level(logging.INFO, logger="slowfast.models.model_stats"):
        log_model_info(model, cfg)
    assert "Params" in caplog.text and "FLOPs" in caplog.text


OUR_CONFIG_DIRS = ("Kinetics", "SSv2", "Charades")


def _our_configs():
    paths = []
    for folder in OUR_CONFIG_DIRS:
        paths += glob.glob(os.path.join(REPO, "configs", folder, "*.yaml"))
    return sorted(paths)


@pytest.mark.parametrize("path", _our_configs())
def test_our_configs_load_and_build(path):
    cfg = load_config([path])
    name = os.path.relpath(path, os.path.join(REPO, "configs"))[: -len(".yaml")]
    expected = OUR_CONFIG_PARAMS[
        name.replace("_multigrid", "").replace("_stepwise", "")
    ]
    with torch.device("meta"):  # Structure and counts only; no memory, no init cost.
        model = build_model(cfg)
    assert params_count(model) == expected
    if name.endswith("_multigrid"):
        assert cfg.MULTIGRID.LONG_CYCLE and cfg.MULTIGRID.SHORT_CYCLE
        assert cfg.BN.USE_PRECISE_STATS
        assert cfg.SOLVER.LR_POLICY == "steps_with_relative_lrs"


def test_all_our_configs_exist():
    found = {
        os.path.relpath(p, os.path.join(REPO, "configs"))[: -len(".yaml")]
        for p in _our_configs()
    }
    expected = set(OUR_CONFIG_PARAMS) | {f"{k}_multigrid" for k in OUR_CONFIG_PARAMS}
    assert expected <= found


def test_import_needs_no_vision_libraries():
    code = (
        "import sys; from slowfast.models import build_model; "
        "bad = [m for m in ('torchvision', 'detectron2', 'pytorchvideo') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_memory_format_default_picks_by_device_and_the_key_overrides():
    from slowfast.config import load_config
    from slowfast.models import describe_model
    from slowfast.models.memory_format import choose_channels_last

    picks = {}
    for gpus in ("0", "1"):
        for key in (None, "True", "False"):
            opts = ["NUM_GPUS", gpus] + (
                [] if key is None else ["MODEL.CHANNELS_LAST_3D", key]
            )
            cfg = load_config(opts=opts)
            picks[(gpus, key)] = choose_channels_last(cfg, describe_model(cfg))
    assert picks == {
        # CPU, full width (64), one BN group: channels_last_3d (measured faster)
        ("0", None): True,
        # GPU: channels_last_3d (measured faster); NUM_GPUS 1 (the default) on
        # a machine without CUDA builds for the CPU
        ("1", None): torch.cuda.is_available(),
        ("0", "True"): True,
        ("1", "True"): True,
        ("0", "False"): False,
        ("1", "False"): False,
    }


def test_cpu_memory_format_default_follows_the_width_alone():
    from slowfast.config import load_config
    from slowfast.models import describe_model
    from slowfast.models.memory_format import choose_channels_last

    def pick(*opts):
        cfg = load_config(opts=["NUM_GPUS", "0", *opts])
        return choose_channels_last(cfg, describe_model(cfg))

    mg = ["MULTIGRID.LONG_CYCLE", "True", "MULTIGRID.SHORT_CYCLE", "True"]
    sub = ["BN.NORM_TYPE", "sub_batchnorm", "BN.NUM_SPLITS", "2"]
    assert not pick("RESNET.WIDTH_PER_GROUP", "8")  # the demo models: contiguous
    assert pick("RESNET.WIDTH_PER_GROUP", "16")
    assert pick("RESNET.WIDTH_PER_GROUP", "8", "RESNET.NUM_GROUPS", "2")
    # Neither multigrid's BN groups nor the recipe's split BN change it.
    assert pick(*mg, "TRAIN.BATCH_SIZE", "16") and pick(*sub)
    assert not pick(*mg, "TRAIN.BATCH_SIZE", "16", "RESNET.WIDTH_PER_GROUP", "8")
    slowfast = ["MODEL.ARCH", "slowfast", "MODEL.MODEL_NAME", "SlowFast"]
    assert not pick(*slowfast, "RESNET.WIDTH_PER_GROUP", "8")
    assert pick(*slowfast)
    # Each demo's multigrid twin runs in its baseline's format.
    demos = os.path.join(REPO, "configs", "Demo")
    for name, expected in (
        ("Kinetics_I3D_tiny", False),
        ("Kinetics_I3D_NLN_tiny", False),
        ("Kinetics_SLOWFAST_tiny", True),  # 16 wide
    ):
        for suffix in ("", "_multigrid"):
            cfg = load_config([os.path.join(demos, f"{name}{suffix}.yaml")])
            assert choose_channels_last(cfg, describe_model(cfg)) is expected, (
                name + suffix
            )
    r50 = load_config(
        [os.path.join(REPO, "configs/Kinetics/I3D_8x8_R50.yaml")], ["NUM_GPUS", "0"]
    )
    assert choose_channels_last(r50, describe_model(r50))

    # A YAML value loads as a bool over the None default.
    assert (
        load_config(opts=["MODEL.CHANNELS_LAST_3D", "True"]).MODEL.CHANNELS_LAST_3D
        is True
    )


def test_build_model_follows_the_callers_memory_format():
    from slowfast.config import load_config
    from slowfast.models import build_model, describe_model
    from slowfast.models.memory_format import choose_channels_last

    def channels_last(model):
        conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv3d))
        return conv.weight.is_contiguous(memory_format=torch.channels_last_3d)

    cfg = load_config(
        [os.path.join(REPO, "configs/Demo/Kinetics_I3D_tiny.yaml")], ["NUM_GPUS", "0"]
    )
    assert cfg.MODEL.CHANNELS_LAST_3D is None
    assert channels_last(build_model(cfg, True))
    assert not channels_last(build_model(cfg, False))
    assert not channels_last(build_model(cfg))  # None alone: contiguous
    picked = choose_channels_last(cfg, describe_model(cfg))
    assert channels_last(build_model(cfg, True)) != picked
