"""A training step reads nothing back to the host: sync BN in groups of 2.

Two CPU processes over gloo run the real training step on the GPU path
(fused SGD, the skip decided on the device, sub-batch BN synchronised over
both processes, DDP) and count the values read back to the host
(``aten._local_scalar_dense``: ``float(t)``, ``t.item()``), each of which a
GPU would make the host wait for. Only the first step may read (its verdict,
before the optimizer's state exists: ``engine/step.py``).
"""

import contextlib
import os

import pytest
import torch
from torch import nn

from slowfast.config import load_config
from slowfast.engine import step as step_module
from slowfast.engine.step import TrainStep
from slowfast.launch import spawn
from slowfast.models.norm import SubBatchNorm3d, set_bn_process_group
from slowfast.utils.distributed import RunContext
from tests.helpers.host_reads import HostReads

STEPS = 4


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 4, 1)
        self.bn = SubBatchNorm3d(4, num_splits=2)
        self.head = nn.Linear(4, 5)

    def forward(self, inputs):
        x = torch.relu(self.bn(self.conv(inputs[0])))
        return self.head(x.mean(dim=(2, 3, 4)))


def _job(cfg, rank, world_size):
    import torch.distributed as dist

    # The GPU path on the CPU: fused SGD skips a bad step on the device.
    step_module.skips_on_device = lambda optimizer, device: bool(optimizer.state)
    torch.manual_seed(0)
    net = _Net()
    set_bn_process_group(net, dist.group.WORLD)  # sync BN, a group of 2
    model = nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    ctx = RunContext(rank, world_size, rank, torch.device("cpu"), True)
    step = TrainStep(
        model, optimizer, nn.CrossEntropyLoss(), ctx, contextlib.nullcontext
    )
    gen = torch.Generator().manual_seed(rank)
    reads = []
    for _ in range(STEPS):
        inputs = [torch.randn(4, 3, 2, 3, 3, generator=gen)]
        labels = torch.randint(0, 5, (4,), generator=gen)
        batch = (inputs, labels, None, {"num_failed": torch.zeros(4)})
        with HostReads() as mode:
            stats = step(batch)
        reads.append(mode.count)
    assert stats.applied  # a read-back (every LOG_PERIOD steps), outside the count
    torch.save(reads, os.path.join(cfg.OUTPUT_DIR, f"reads{rank}.pt"))


@pytest.mark.slow
def test_steps_after_the_first_read_nothing_back(tmp_path):
    cfg = load_config(
        [], ["NUM_GPUS", "0", "NUM_CPU_PROCS", "2", "OUTPUT_DIR", str(tmp_path)]
    )
    spawn.launch_job(cfg, f"file://{tmp_path / 'rendezvous'}", _job)
    for rank in range(2):
        reads = torch.load(tmp_path / f"reads{rank}.pt")
        assert reads == [1] + [0] * (STEPS - 1), reads
