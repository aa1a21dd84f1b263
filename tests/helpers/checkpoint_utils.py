"""Helpers for the checkpoint tests: a tiny stand-in model, its optimizer and a
state-dict comparison."""

import torch
from torch import nn

NUM_CLASSES = 5


class Stem(nn.Module):
    def __init__(self, temporal: int, dims: int = 3, width: int = 4) -> None:
        super().__init__()
        if dims == 3:
            self.conv = nn.Conv3d(
                3, width, (temporal, 3, 3), padding=(0, 1, 1), bias=False
            )
            self.bn = nn.BatchNorm3d(width)
        else:
            self.conv = nn.Conv2d(3, width, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(width)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class TinyNet(nn.Module):
    """Stand-in model: conv + BN + linear head; dims=2 is its image twin."""

    def __init__(self, temporal: int = 1, dims: int = 3, width: int = 4) -> None:
        super().__init__()
        self.stem = Stem(temporal, dims, width)
        self.head = nn.Linear(width, NUM_CLASSES)

    def forward(self, x):
        y = self.stem(x)
        return self.head(y.flatten(2).mean(-1))


def randomize_bn(model: nn.Module) -> None:
    """Gives every BN layer non-trivial running statistics."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """Nesterov SGD with momentum and weight decay (state worth saving)."""
    return torch.optim.SGD(
        model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4
    )


def train_step(model, optimizer, seed: int) -> None:
    """One step on a random batch drawn from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 3, 6, 6, generator=gen)
    y = torch.randint(0, NUM_CLASSES, (2,), generator=gen)
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


def assert_same_state(a: dict, b: dict) -> None:
    """Asserts two (nested) state dicts are equal, tensors exactly."""
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        elif isinstance(a[key], dict):
            assert_same_state(a[key], b[key])
        else:
            assert a[key] == b[key], key
