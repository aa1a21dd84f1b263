"""Tests of construct_loader and GridBatchSampler."""

import os

import pytest
import torch

from slowfast.config.derived import worker_niceness
from slowfast.datasets import (
    BatchSpec,
    GridBatchSampler,
    SamplingGrid,
    construct_loader,
    loader_set_epoch,
    shutdown_workers,
)
from tests.helpers.video_utils import make_kinetics, tiny_cfg


class _Sampler:
    """A fixed-order sampler that records set_epoch."""

    def __init__(self, n):
        self.n, self.epoch = n, None

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("loader"))
    specs = [(f"v{i}.mp4", 24 + 4 * i, i % 3) for i in range(8)]
    return make_kinetics(path, specs, width=40, height=32)


def _cycling_batches(sizes, grids, extra=lambda epoch: 0):
    """Batches cycling through ``sizes`` / ``grids`` while they fit the shard."""

    def batches_fn(epoch, shard_size):
        out, used = [], 0
        while True:
            size = sizes[len(out) % len(sizes)] + extra(epoch)
            if used + size > shard_size:
                return out
            out.append((size, grids[len(out) % len(grids)]))
            used += size

    return batches_fn


def test_grid_batch_sampler_sizes_grids_and_seeds():
    grids = [SamplingGrid(2, 8, 1, 2, 10, 12), None, SamplingGrid(4, 16, 1, 1, 20, 20)]
    sampler = _Sampler(20)
    batches_fn = _cycling_batches((3, 2, 4), grids, extra=lambda epoch: epoch)
    batches = GridBatchSampler(sampler, batches_fn, seed=5)
    batches.set_epoch(0)
    out = list(batches)
    assert [len(b) for b in out] == [3, 2, 4, 3, 2, 4]  # 18 used, 2 dropped
    assert len(batches) == len(out)
    assert [b[0][1] for b in out] == grids * 2
    assert all(item[1] is batch[0][1] for batch in out for item in batch)
    assert [item[0] for b in out for item in b] == list(range(18))
    assert list(batches) == out  # same epoch: same seeds
    batches.set_epoch(1)
    assert sampler.epoch == 1
    out1 = list(batches)
    assert [len(b) for b in out1] == [4, 3, 5, 4, 3]
    assert out1[0][0][2] != out[0][0][2]  # seeds depend on the epoch
    bad = GridBatchSampler(_Sampler(4), lambda e, n: [(0, None)], seed=0)
    with pytest.raises(ValueError, match="sizes must be > 0"):
        list(bad)
    greedy = GridBatchSampler(_Sampler(4), lambda e, n: [(3, None)] * 2, seed=0)
    with pytest.raises(ValueError, match="needs 6 clips; the shard has 4"):
        len(greedy)


def _epoch(loader, epoch):
    loader_set_epoch(loader, epoch)
    return [(b[2].tolist(), b[0][0].clone()) for b in loader]


def test_train_loader_shapes_follow_the_epoch_batches(root):
    cfg = tiny_cfg(root, "kinetics", "TRAIN.BATCH_SIZE", 2)
    shapes = [(3, SamplingGrid.from_shape(cfg, 2, 12)), (1, None)]
    batches_fn = _cycling_batches([size for size, _ in shapes], [g for _, g in shapes])
    loader = construct_loader(cfg, "train", batches_fn=batches_fn)
    loader.batch_sampler.set_epoch(0)
    assert len(loader) == 4  # 3 + 1 + 3 + 1 = 8 clips
    batches = list(loader)
    assert len(batches) == 4
    for it, (inputs, labels, indices, extras) in enumerate(batches):
        size, grid = shapes[it % 2]
        t, s = (grid.num_frames, grid.crop_size) if grid else (4, 16)
        assert inputs[0].shape == (size, 3, t, s, s)
        assert labels.shape == indices.shape == extras["num_failed"].shape == (size,)
    seen = sorted(i for b in batches for i in b[2].tolist())
    assert seen == list(range(8))
    default = construct_loader(cfg, "train")
    default.batch_sampler.set_epoch(0)
    assert len(default) == 4 and next(iter(default))[0][0].shape == (2, 3, 4, 16, 16)


def test_epoch_samples_independent_of_worker_count(root):
    runs = []
    for workers in (0, 2):
        cfg = tiny_cfg(root, "kinetics", "DATA_LOADER.NUM_WORKERS", workers)
        loader = construct_loader(cfg, "train")
        runs.append([_epoch(loader, e) for e in (0, 1)])
    for (idx0, x0), (idx1, x1) in zip(runs[0][0] + runs[0][1], runs[1][0] + runs[1][1]):
        assert idx0 == idx1 and torch.equal(x0, x1)
    order = [[i for idx, _ in epoch for i in idx] for epoch in runs[0]]
    assert order[0] != order[1]  # reshuffled per epoch
    again = construct_loader(tiny_cfg(root), "train")
    assert [i for idx, _ in _epoch(again, 1) for i in idx] == order[1]


def test_a_span_of_epochs_streams_the_epochs_batches_in_order(root):
    """One iterator over epochs 1..3 (epoch 1 resumed at its second batch)
    yields exactly the batches of those epochs iterated one by one, with a
    multigrid-like batches whose shapes change between epochs."""
    cfg = tiny_cfg(root, "kinetics", "DATA_LOADER.NUM_WORKERS", 2)
    grids = [SamplingGrid.from_shape(cfg, 2, 12), None]
    batches_fn = _cycling_batches((3, 1), grids, extra=lambda epoch: epoch % 2)
    loader = construct_loader(cfg, "train", batches_fn=batches_fn)
    one_by_one = []
    for epoch in (1, 2, 3):
        loader.batch_sampler.set_epoch(epoch, start_iter=1 if epoch == 1 else 0)
        one_by_one += [(b[2].tolist(), b[0][0].clone()) for b in loader]
    loader.batch_sampler.set_epoch(1, start_iter=1, end_epoch=4)
    assert len(loader) == sum(len(batches_fn(e, 8)) for e in (1, 2, 3))
    stream = [(b[2].tolist(), b[0][0].clone()) for b in loader]
    assert len(stream) == len(one_by_one) == len(loader) - 1
    for (idx0, x0), (idx1, x1) in zip(one_by_one, stream):
        assert idx0 == idx1 and torch.equal(x0, x1)
    assert {x.shape[2] for _, x in stream} == {2, 4}  # both shapes in the stream
    with pytest.raises(ValueError, match="end_epoch 1 must be > epoch 1"):
        loader.batch_sampler.set_epoch(1, end_epoch=1)
    shutdown_workers(loader)


def test_shutdown_workers_stops_persistent_workers_and_loader_restarts(root):
    cfg = tiny_cfg(root, "kinetics", "DATA_LOADER.NUM_WORKERS", 2)
    loader = construct_loader(cfg, "val")
    first = [b[2].tolist() for b in loader]
    workers = list(loader._iterator._workers)
    assert len(workers) == 2 and all(w.is_alive() for w in workers)
    shutdown_workers(loader)
    assert not any(w.is_alive() for w in workers)
    shutdown_workers(loader)  # nothing left to stop: a no-op
    assert [b[2].tolist() for b in loader] == first  # new workers, same data


def test_two_process_shards_are_disjoint_and_equal(root):
    cfg = tiny_cfg(root, "kinetics", "TRAIN.BATCH_SIZE", 2)
    shards = []
    for rank in (0, 1):
        loader = construct_loader(cfg, "train", num_procs=2, rank=rank)
        loader.batch_sampler.set_epoch(3)
        assert len(loader) == 4
        shards.append([i for b in loader for i in b[2].tolist()])
    assert len(shards[0]) == len(shards[1]) == 4
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(8))


def test_eval_loaders(root):
    cfg = tiny_cfg(root)
    val = construct_loader(cfg, "val")
    loader_set_epoch(val, 2)  # harmless for sequential loaders
    batches = list(val)
    assert [b[2].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert batches[0][0][0].shape == (3, 3, 4, 20, 20)
    test_shards = [construct_loader(cfg, "test", num_procs=2, rank=r) for r in (0, 1)]
    assert [len(t.dataset) for t in test_shards] == [48, 48]
    assert [len(t) for t in test_shards] == [12, 12]  # 24 views each, batch 2
    first = next(iter(test_shards[1]))  # rank 1: the second half, in order
    assert first[2].tolist() == [24, 25]
    assert first[3]["video_idx"].tolist() == [4, 4]  # 6 views a video


def test_loader_config_errors(root):
    with pytest.raises(
        ValueError, match="TRAIN.BATCH_SIZE = 3 is not divisible by the 2 processes"
    ):
        construct_loader(tiny_cfg(root, "kinetics", "TRAIN.BATCH_SIZE", 3), "train",
                         num_procs=2)  # fmt: skip
    with pytest.raises(ValueError, match="fewer than one batch"):
        construct_loader(tiny_cfg(root, "kinetics", "TRAIN.BATCH_SIZE", 16), "train")
    with pytest.raises(ValueError, match="rank"):
        construct_loader(tiny_cfg(root), "val", num_procs=2, rank=2)


@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_batch_count_is_the_schedules_iteration_count(world_size):
    from slowfast.config import load_config
    from slowfast.models.describe import ModelInfo
    from slowfast.multigrid import MultigridSchedule

    cfg = load_config(
        opts=[
            "MULTIGRID.LONG_CYCLE", "True", "MULTIGRID.SHORT_CYCLE", "True",
            "TRAIN.BATCH_SIZE", "16", "DATA.NUM_FRAMES", "8",
            "DATA.TRAIN_CROP_SIZE", "32", "DATA.TRAIN_JITTER_SCALES", "[40, 48]",
            "SOLVER.LR_POLICY", "steps_with_relative_lrs", "SOLVER.STEPS", "[0, 6, 8]",
            "SOLVER.LRS", "[1, 0.1, 0.01]", "SOLVER.MAX_EPOCH", "10",
        ]
    )  # fmt: skip
    # Any model: small crops and clips keep the test fast.
    sched = MultigridSchedule.from_cfg(cfg, world_size, ModelInfo())
    for dataset_size in (97, 400, 1000, 4801):
        shard = -(-dataset_size // world_size)
        for epoch in range(sched.max_epoch):
            shapes = sched.epoch_batches(epoch, shard)
            assert len(shapes) == sched.iters_in_epoch(epoch, dataset_size)
            used = sum(s.per_proc_batch for s in shapes)
            nxt = sched.iter_shape(epoch, len(shapes)).per_proc_batch
            assert used <= shard < used + nxt  # no further whole batch fits
            assert shapes == [sched.iter_shape(epoch, i) for i in range(len(shapes))]


class _Niceness(torch.utils.data.Dataset):
    """Each item is the niceness of the process that loads it."""

    def __len__(self):
        return 2

    def __getitem__(self, index):
        return os.nice(0)


def test_workers_run_at_the_configured_lower_priority(root):
    from slowfast.datasets.loader import _WorkerInit

    cpu = tiny_cfg(root, "kinetics", "NUM_GPUS", 0)
    assert construct_loader(cpu, "val").worker_init_fn.nice == 19  # by device
    assert worker_niceness(tiny_cfg(root, "kinetics", "NUM_GPUS", 1)) == 0
    cfg = tiny_cfg(root, "kinetics", "NUM_GPUS", 0, "DATA_LOADER.WORKER_NICE", 3)
    assert construct_loader(cfg, "train").worker_init_fn.nice == 3
    base = os.nice(0)
    loader = torch.utils.data.DataLoader(
        _Niceness(),
        batch_size=None,
        num_workers=1,
        worker_init_fn=_WorkerInit(0, 0, nice=3),
    )
    assert list(loader) == [min(base + 3, 19)] * 2
    assert os.nice(0) == base  # the training process keeps its priority


def test_precise_bn_loader_shares_the_training_dataset(root, monkeypatch):
    from slowfast.datasets import loader as loader_module
    from slowfast.engine.builders import build_loaders
    from slowfast.models import describe_model
    from slowfast.utils.distributed import RunContext

    built = []
    build = loader_module.build_dataset
    monkeypatch.setattr(
        loader_module,
        "build_dataset",
        lambda name, cfg, split, model: (
            built.append(split) or build(name, cfg, split, model)
        ),
    )
    cfg = tiny_cfg(root, "kinetics", "BN.USE_PRECISE_STATS", True)
    batches_fn = lambda epoch, size: [BatchSpec(4, None)] * 2  # noqa: E731
    loaders = build_loaders(cfg, RunContext(), describe_model(cfg), batches_fn)
    assert built == ["train", "val"]  # the training split's annotations read once
    assert loaders.precise.dataset is loaders.train.dataset
    precise = next(iter(loaders.precise))  # its own batches, of TRAIN.BATCH_SIZE
    assert precise[0][0].shape == (2, 3, 4, 16, 16)
