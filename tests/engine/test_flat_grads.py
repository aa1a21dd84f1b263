"""Gradients averaged in one flat buffer (the graphed step's path with
several processes) against DistributedDataParallel, on 2 CPU processes."""

import os

import pytest
import torch
from torch import nn

from slowfast.config import load_config
from slowfast.engine.flat_grads import FlatGrads
from slowfast.launch import spawn
from slowfast.utils import distributed as du


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv3d(3, 4, 3),
        nn.BatchNorm3d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(4, 5),
    )
    return model.to(memory_format=torch.channels_last_3d)


def _batch(rank: int):
    gen = torch.Generator().manual_seed(10 + rank)
    x = torch.randn(2, 3, 4, 5, 5, generator=gen)
    return x.contiguous(memory_format=torch.channels_last_3d), torch.tensor([rank, 3])


def _grads_job(cfg, rank, world_size):
    """DDP's gradients, then the unwrapped model's averaged by FlatGrads."""
    ddp = nn.parallel.DistributedDataParallel(_model())
    x, y = _batch(rank)
    nn.functional.cross_entropy(ddp(x), y).backward()
    params = [p for p in ddp.parameters() if p.requires_grad]
    expected = [p.grad.clone() for p in params]
    flat = FlatGrads(params)  # the grads become views, zeroed
    assert all(p.grad.abs().sum() == 0 for p in params)
    # This process's own gradients, from a model outside any process group.
    alone = _model()
    nn.functional.cross_entropy(alone(x), y).backward()
    own = [p.grad for p in alone.parameters()]
    idle = []
    for _ in range(2):  # the second round starts from zeroed views
        flat.zero()
        nn.functional.cross_entropy(ddp.module(x), y).backward()
        # DDP's reducer stays idle: the gradients are still this process's.
        idle.append(all(torch.equal(p.grad, g) for p, g in zip(params, own)))
        flat.average(world_size)
    got = [p.grad.clone() for p in params]
    strides = [p.grad.stride() == p.stride() for p in params]
    torch.save(
        {"expected": expected, "got": got, "strides": strides, "idle": idle},
        os.path.join(cfg.OUTPUT_DIR, f"rank{rank}.pyth"),
    )


def test_one_process_keeps_its_gradients():
    model = _model()
    params = list(model.parameters())
    flat = FlatGrads(params)
    x, y = _batch(0)
    nn.functional.cross_entropy(model(x), y).backward()
    before = [p.grad.clone() for p in params]
    flat.average(1)
    assert all(torch.equal(p.grad, b) for p, b in zip(params, before))
    assert sum(b.numel() for b in flat.buffers) == sum(p.numel() for p in params)
    params[0].grad = None  # anything that drops a gradient: zero() puts it back
    flat.zero()
    assert params[0].grad is flat.views[flat.order.index(params[0])]
    assert all(p.grad.abs().sum() == 0 for p in params)


@pytest.mark.slow
def test_flat_average_equals_ddp_on_two_processes(tmp_path):
    cfg = load_config(
        [], ["NUM_GPUS", "0", "NUM_CPU_PROCS", "2", "OUTPUT_DIR", str(tmp_path)]
    )
    spawn.launch_job(cfg, f"file://{tmp_path / 'rendezvous'}", _grads_job)
    results = [torch.load(tmp_path / f"rank{r}.pyth") for r in range(2)]
    for result in results:
        assert all(result["strides"]) and result["idle"] == [True, True]
        for want, got in zip(result["expected"], result["got"]):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    # Both processes end with the same (averaged) gradients, as under DDP.
    for a, b in zip(results[0]["got"], results[1]["got"]):
        assert torch.equal(a, b)
    assert not du.is_initialized()
