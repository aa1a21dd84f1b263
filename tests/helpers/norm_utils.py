"""Helpers for the batch-norm tests: two layers trained alike."""

import torch
from torch import nn


def assert_trained_alike(layer: nn.Module, reference: nn.Module, batches: int) -> None:
    """Asserts that ``layer`` holds ``reference``'s affine gradients and
    running statistics after ``batches`` training forwards."""
    torch.testing.assert_close(layer.weight.grad, reference.weight.grad)
    torch.testing.assert_close(layer.bias.grad, reference.bias.grad)
    torch.testing.assert_close(layer.running_mean, reference.running_mean)
    torch.testing.assert_close(layer.running_var, reference.running_var)
    assert int(layer.num_batches_tracked) == batches
