"""SubBatchNorm3d: plain BN at one split, per-split statistics, gloo sync."""

import copy
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slowfast.config import load_config
from slowfast.models import build_model
from slowfast.models.norm import (
    SubBatchNorm3d,
    get_norm,
    set_bn_process_group,
    set_bn_splits,
)
from slowfast.utils.distributed import exit_without_teardown
from tests.helpers.host_reads import HostReads
from tests.helpers.norm_utils import assert_trained_alike

C = 3


def _pair(momentum=0.1):
    """A SubBatchNorm3d and a BatchNorm3d with the same random affine params."""
    sub = SubBatchNorm3d(C, momentum=momentum)
    ref = nn.BatchNorm3d(C, momentum=momentum)
    with torch.no_grad():
        sub.weight.copy_(torch.rand(C) + 0.5)
        sub.bias.copy_(torch.randn(C))
    ref.load_state_dict(sub.state_dict())
    return sub, ref


def _input(n=8):
    return torch.randn(n, C, 2, 3, 3) * 2.0 + 1.5


def test_same_state_dict_keys_as_batchnorm():
    sub, ref = _pair()
    assert list(sub.state_dict()) == list(ref.state_dict())
    assert isinstance(sub, nn.BatchNorm3d)


def test_one_split_equals_batchnorm():
    sub, ref = _pair()
    x = _input()
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.randn_like(x)
    for _ in range(2):
        y_sub, y_ref = sub(x1), ref(x2)
        torch.testing.assert_close(y_sub, y_ref)
    (y_sub * grad).sum().backward()
    (y_ref * grad).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(sub.weight.grad, ref.weight.grad)
    torch.testing.assert_close(sub.running_mean, ref.running_mean)
    torch.testing.assert_close(sub.running_var, ref.running_var)
    sub.eval()
    ref.eval()
    torch.testing.assert_close(sub(x), ref(x))


@pytest.mark.parametrize("splits", [2, 4])
def test_k_splits_use_per_split_statistics(splits):
    sub, ref = _pair(momentum=0.3)
    sub.num_splits = splits
    x = _input(8)
    x[1::splits] += 3.0  # Make the splits' statistics differ.
    x_sub = x.clone().requires_grad_()
    y = sub(x_sub)
    grad = torch.randn_like(x)
    (y * grad).sum().backward()

    parts = [x[j::splits].clone().requires_grad_() for j in range(splits)]
    weight = sub.weight.detach().clone().requires_grad_()
    bias = sub.bias.detach().clone().requires_grad_()
    loss = 0.0
    for j, part in enumerate(parts):
        y_j = F.batch_norm(part, None, None, weight, bias, True, 0.0, sub.eps)
        torch.testing.assert_close(y[j::splits], y_j)
        loss = loss + (y_j * grad[j::splits]).sum()
    loss.backward()
    for j, part in enumerate(parts):
        torch.testing.assert_close(x_sub.grad[j::splits], part.grad)
    torch.testing.assert_close(sub.weight.grad, weight.grad)
    torch.testing.assert_close(sub.bias.grad, bias.grad)

    # Running stats: mean of split means; total variance, unbiased over all
    # elements -- which equals plain BN over the whole batch.
    dims = (0, 2, 3, 4)
    means = torch.stack([x[j::splits].mean(dims) for j in range(splits)])
    vars_ = torch.stack([x[j::splits].var(dims, unbiased=False) for j in range(splits)])
    total_var = vars_.mean(0) + ((means - means.mean(0)) ** 2).mean(0)
    n = x.numel() // C
    expected_var = 0.7 * 1.0 + 0.3 * total_var * n / (n - 1)
    torch.testing.assert_close(sub.running_mean, 0.3 * means.mean(0))
    torch.testing.assert_close(sub.running_var, expected_var)
    ref(x)
    torch.testing.assert_close(sub.running_mean, ref.running_mean)
    torch.testing.assert_close(sub.running_var, ref.running_var)
    assert int(sub.num_batches_tracked) == 1


def test_eval_is_plain_batchnorm_whatever_the_splits():
    sub, ref = _pair()
    sub(_input())
    ref(_input())
    ref.load_state_dict(sub.state_dict())
    sub.num_splits = 4
    sub.eval()
    ref.eval()
    x = _input(3)  # Not divisible by 4: fine at eval.
    torch.testing.assert_close(sub(x), ref(x))


def test_cumulative_average_when_momentum_is_none():
    sub, ref = _pair(momentum=None)
    sub.num_splits = 2
    for _ in range(3):
        x = _input()
        sub(x)
        ref(x)
    torch.testing.assert_close(sub.running_mean, ref.running_mean)
    torch.testing.assert_close(sub.running_var, ref.running_var)


def test_batch_not_divisible_raises_naming_both_numbers():
    sub, _ = _pair()
    sub.num_splits = 3
    with pytest.raises(ValueError, match=r"8 clips.*num_splits=3"):
        sub(_input(8))


def test_channels_last_input_keeps_format_and_values():
    sub, _ = _pair()
    sub.num_splits = 2
    x = _input()
    y = sub(x)
    y_cl = sub(x.contiguous(memory_format=torch.channels_last_3d))
    assert y_cl.is_contiguous(memory_format=torch.channels_last_3d)
    torch.testing.assert_close(y_cl, y)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("splits", [2, 4, 8])
def test_native_split_path_matches_the_generic_one(splits, channels_last):
    # Local statistics take the fused batch-norm path (a channels-last input
    # is made contiguous for it); the generic var_mean path (used with a
    # process group) must give the same values, gradients and statistics.
    native, _ = _pair(momentum=0.3)
    generic = copy.deepcopy(native)
    for layer in (native, generic):
        layer.num_splits = splits
    generic._forward_split = generic._forward_split_generic
    x = _input(8)
    x[1::2] += 3.0
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    x_n = x.clone().requires_grad_()
    x_g = x.clone().requires_grad_()
    assert native._native_split_ok(x_n)
    grad = torch.randn_like(x)
    for _ in range(2):
        y_n, y_g = native(x_n), generic(x_g)
        torch.testing.assert_close(y_n, y_g)
    assert y_n.is_contiguous(
        memory_format=torch.channels_last_3d
        if channels_last
        else torch.contiguous_format
    )
    (y_n * grad).sum().backward()
    (y_g * grad).sum().backward()
    torch.testing.assert_close(x_n.grad, x_g.grad)
    assert_trained_alike(native, generic, 2)


def test_native_split_path_takes_bfloat16_with_float32_statistics():
    # Mixed precision: a bf16 input (CPU autocast) is normalised by the fused
    # path with float32 split statistics, close to the float32 computation.
    half, _ = _pair(momentum=0.5)
    full = copy.deepcopy(half)
    for layer in (half, full):
        layer.num_splits = 4
    x = _input(8)
    x[::2] -= 2.0
    y = half(x.bfloat16())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), full(x), atol=0.05, rtol=0.02)
    assert half.running_mean.dtype == torch.float32
    torch.testing.assert_close(
        half.running_mean, full.running_mean, atol=0.02, rtol=0.02
    )
    torch.testing.assert_close(half.running_var, full.running_var, atol=0.05, rtol=0.02)


def _tiny_cfg(*opts):
    return load_config(
        opts=[
            "MODEL.MODEL_NAME", "ResNet", "MODEL.ARCH", "i3d",
            "DATA.INPUT_CHANNEL_NUM", "[3]", "RESNET.DEPTH", "18",
            "RESNET.TRANS_FUNC", "basic_transform", "RESNET.WIDTH_PER_GROUP", "4",
            "MODEL.NUM_CLASSES", "3", *opts,
        ]
    )  # fmt: skip


def test_norm_type_picks_the_layer():
    assert get_norm(_tiny_cfg())(4).__class__ is nn.BatchNorm3d
    layer = get_norm(_tiny_cfg("BN.NORM_TYPE", "sub_batchnorm", "BN.NUM_SPLITS", "2"))(
        4
    )
    assert isinstance(layer, SubBatchNorm3d) and layer.num_splits == 2
    assert (layer.eps, layer.momentum) == (1e-5, 0.1)
    layer = get_norm(_tiny_cfg("BN.NORM_TYPE", "sync_batchnorm"))(4)
    assert isinstance(layer, SubBatchNorm3d) and layer.process_group is None


def test_splits_change_between_iterations_without_rebuild():
    model = build_model(_tiny_cfg("BN.NORM_TYPE", "sub_batchnorm"))
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    for splits, batch in [(1, 2), (2, 4), (4, 8), (2, 2), (1, 3)]:
        count = set_bn_splits(model, splits)
        assert count > 0
        x = torch.randn(batch, 3, 4, 32, 32)
        loss = F.cross_entropy(model([x]), torch.arange(batch) % 3)
        opt.zero_grad()
        loss.backward()
        before = params[0].detach().clone()
        opt.step()
        assert torch.isfinite(loss)
        assert not torch.equal(before, params[0])
        assert [id(p) for p in model.parameters()] == [id(p) for p in params]
        assert all(
            m.num_splits == splits
            for m in model.modules()
            if isinstance(m, SubBatchNorm3d)
        )


def test_helpers_refuse_plain_batchnorm_models():
    model = build_model(_tiny_cfg())
    assert set_bn_splits(model, 1) == 0
    with pytest.raises(ValueError, match="BN.NORM_TYPE"):
        set_bn_splits(model, 2)
    with pytest.raises(ValueError, match="num_splits must be >= 1"):
        set_bn_splits(model, 0)
    assert set_bn_process_group(model, None) == 0


def _sync_worker(rank, world, init_file, out_dir):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    try:
        for splits in SYNC_SPLITS:
            torch.manual_seed(0)
            x, grad = _sync_data()
            sub, _ = _pair()
            sub.num_splits = splits
            set_bn_process_group(sub, dist.group.WORLD)
            assert copy.deepcopy(sub).process_group is dist.group.WORLD
            half = x.shape[0] // world
            local = x[rank * half : (rank + 1) * half].clone().requires_grad_()
            with HostReads() as reads:
                y = sub(local)
                (y * grad[rank * half : (rank + 1) * half]).sum().backward()
            result = {
                "host_reads": reads.count,
                "y": y.detach(),
                "x_grad": local.grad,
                "w_grad": sub.weight.grad,
                "b_grad": sub.bias.grad,
                "running_mean": sub.running_mean,
                "running_var": sub.running_var,
            }
            torch.save(result, os.path.join(out_dir, f"split{splits}_rank{rank}.pt"))
        # Both ranks leave together: a rank tearing gloo down while the other
        # still talks to it can abort that one ("terminate called without an
        # active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_without_teardown()  # the rare abort at teardown is not under test


SYNC_SPLITS = (1, 2)


def _sync_data():
    x = _input(8)
    x[1::2] += 3.0
    return x, torch.randn_like(x)


def _expected_global(x, grad, splits):
    """Single-process reference: per-split BN over the union of both halves."""
    sub, ref = _pair()
    xs = x.clone().requires_grad_()
    # Global split j = clips j, j+k, ... of each half (clip i of a half goes to
    # split i % k); gather them per split and run plain BN on each.
    world, half = 2, x.shape[0] // 2
    groups = [
        [r * half + i for r in range(world) for i in range(j, half, splits)]
        for j in range(splits)
    ]
    y = torch.empty_like(x)
    for idx in groups:
        y_j = F.batch_norm(xs[idx], None, None, sub.weight, sub.bias, True, 0.0, 1e-5)
        y = y.index_put((torch.tensor(idx),), y_j)
    (y * grad).sum().backward()
    ref(x)  # Running stats equal plain BN's over the whole batch.
    return y.detach(), xs.grad, sub.weight.grad, sub.bias.grad, ref


@pytest.mark.slow
def test_process_group_sync_matches_single_process(tmp_path):
    """Two gloo processes with half the batch each equal one with all of it."""
    import torch.multiprocessing as mp

    mp.spawn(
        _sync_worker,
        args=(2, str(tmp_path / "init"), str(tmp_path)),
        nprocs=2,
        join=True,
    )
    for splits in SYNC_SPLITS:
        torch.manual_seed(0)
        x, grad = _sync_data()
        y, x_grad, w_grad, b_grad, ref = _expected_global(x, grad, splits)
        outs = [torch.load(tmp_path / f"split{splits}_rank{r}.pt") for r in range(2)]
        torch.testing.assert_close(torch.cat([o["y"] for o in outs]), y)
        torch.testing.assert_close(torch.cat([o["x_grad"] for o in outs]), x_grad)
        torch.testing.assert_close(outs[0]["w_grad"] + outs[1]["w_grad"], w_grad)
        torch.testing.assert_close(outs[0]["b_grad"] + outs[1]["b_grad"], b_grad)
        for o in outs:
            assert o["host_reads"] == 0  # the layer never waits for the device
            torch.testing.assert_close(o["running_mean"], ref.running_mean)
            torch.testing.assert_close(o["running_var"], ref.running_var)
