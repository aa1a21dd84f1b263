"""A skipped training step leaves no trace: fp16 scaler or not, fused or not.

Each run trains a small BN model for a few steps, with a gradient overflow
forced at some of them; its weights, BN buffers and optimizer state must
equal those of a run in which those steps never happened. The fused SGD of
GPU runs runs here on the CPU, and so does a GradScaler.
"""

import contextlib

import pytest
import torch
from torch import nn

from slowfast.engine.step import TrainStep
from slowfast.utils.distributed import RunContext

STEPS = 4


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, inputs):
        return self.fc2(torch.relu(self.bn(self.fc1(inputs[0]))))


def _batches():
    gen = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        inputs = torch.randn(8, 6, generator=gen)
        labels = torch.randint(0, 3, (8,), generator=gen)
        yield [inputs], labels, None, {"num_failed": torch.zeros(8)}


def _overflowing(loss_fn, overflow: bool):
    """The loss; with ``overflow`` its gradient overflows (infinite), as a
    too-high fp16 scale makes it, while the loss itself stays finite."""

    def loss(preds, labels):
        if overflow:
            preds.register_hook(lambda grad: grad * float("inf"))
        return loss_fn(preds, labels)

    return loss


def _train(skipped, fused, scaler, clip):
    """Trains STEPS steps, skipping the batches in ``skipped`` by overflowing
    their gradients (``skipped=None``: those batches are left out)."""
    torch.manual_seed(0)
    model = _Net()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, fused=fused
    )
    grad_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8) if scaler else None
    step = TrainStep(
        model,
        optimizer,
        nn.CrossEntropyLoss(),
        RunContext(),
        contextlib.nullcontext,
        scaler=grad_scaler,
        clip_grad_norm=clip,
    )
    ce = nn.CrossEntropyLoss()
    for i, batch in enumerate(_batches()):
        if skipped.get("leave_out") and i in skipped["at"]:
            continue
        step.loss_fn = _overflowing(ce, i in skipped["at"])
        step(batch)
    return model, optimizer


def _state(model, optimizer):
    state = {f"param.{k}": v for k, v in model.state_dict().items()}
    for i, values in enumerate(optimizer.state.values()):
        for key, value in values.items():
            if torch.is_tensor(value):
                state[f"optim.{i}.{key}"] = value
    return state


@pytest.mark.parametrize("at", [(0,), (2,), (0, 1)])
@pytest.mark.parametrize("fused", [None, True])
@pytest.mark.parametrize("scaler,clip", [(False, None), (True, None), (True, 1.0)])
def test_skipped_steps_leave_weights_buffers_and_optimizer_state(
    at, fused, scaler, clip
):
    run = _train({"at": at}, fused, scaler, clip)
    without = _train({"at": at, "leave_out": True}, fused, scaler, clip)
    got, expected = _state(*run), _state(*without)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.isfinite(got[key]).all(), key
        # A scaler scales by powers of 2: exact; a leaf's unscaled gradient
        # may round differently in the last bit under clipping.
        torch.testing.assert_close(got[key], value, rtol=1e-6, atol=1e-7, msg=key)
