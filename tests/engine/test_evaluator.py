"""Evaluation: view ensembling, metrics and the multi-process gather."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Dataset

from slowfast.datasets import EvalShardSampler
from slowfast.engine.evaluator import ensemble_views, run_views, video_metrics
from slowfast.engine.metrics import mean_average_precision, topk_errors
from slowfast.utils.distributed import exit_without_teardown


def test_topk_errors():
    scores = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.05, 0.15], [0.2, 0.3, 0.5]])
    labels = torch.tensor([1, 2, 0])
    top1, top2 = topk_errors(scores, labels, (1, 2))
    assert top1 == pytest.approx(100 * 2 / 3)
    assert top2 == pytest.approx(100 * 1 / 3)


def test_map_leaves_out_classes_without_positives():
    targets = torch.tensor([[1, 0, 0], [0, 1, 0], [1, 0, 0]], dtype=torch.float)
    perfect = torch.tensor([[0.9, 0.1, 0.5], [0.1, 0.9, 0.5], [0.8, 0.2, 0.5]])
    assert mean_average_precision(perfect, targets) == pytest.approx(1.0)
    wrong = torch.tensor([[0.1, 0.9, 0.5], [0.9, 0.1, 0.5], [0.1, 0.9, 0.5]])
    assert mean_average_precision(wrong, targets) < 0.8


def test_ensemble_sum_and_max():
    video = torch.tensor([0, 0, 1, 1])
    scores = torch.tensor([[1.0, 0.0], [0.0, 3.0], [2.0, 1.0], [0.5, 0.5]])
    summed, counts = ensemble_views(video, scores, 2, "sum")
    assert torch.equal(summed, torch.tensor([[1.0, 3.0], [2.5, 1.5]]))
    assert counts.tolist() == [2, 2]
    maxed, _ = ensemble_views(video, scores, 2, "max")
    assert torch.equal(maxed, torch.tensor([[1.0, 3.0], [2.0, 1.0]]))
    metrics = video_metrics(summed, torch.tensor([1, 0]), multi_label=False)
    assert metrics["top1_err"] == 0.0


class _Views(Dataset):
    """7 views of 7 videos; the score of view i is one-hot at i % 3."""

    num_videos = 7

    def __len__(self):
        return 7

    def __getitem__(self, i):
        x = torch.full((1, 1, 1, 1), float(i))
        return [x], i % 3, i, {"video_idx": i}

    def video_labels(self):
        return [i % 3 for i in range(7)]


class _OneHot(nn.Module):
    def forward(self, inputs):
        idx = inputs[0].flatten(1)[:, 0].long() % 3
        return nn.functional.one_hot(idx, 3).float()


def _worker(rank, world, port, out):
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    data = _Views()
    sampler = EvalShardSampler(len(data), world, rank)
    loader = DataLoader(data, batch_size=3, sampler=sampler)
    video, scores = run_views(
        _OneHot(), loader, torch.device("cpu"), torch.autograd.grad_mode.no_grad
    )
    summed, counts = ensemble_views(video, scores, data.num_videos, "sum")
    maxed, _ = ensemble_views(video, scores, data.num_videos, "max")
    torch.save((video, summed, maxed, counts), out.format(rank))
    dist.barrier()  # both saved before either tears gloo down
    dist.destroy_process_group()
    exit_without_teardown()  # the rare abort at teardown is not under test


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_drop_padded_duplicates_and_reduce(tmp_path):
    out = os.path.join(tmp_path, "rank{}.pt")
    # 7 views over 2 processes: the sampler pads one duplicate (view 0) and the
    # last batches are uneven (3 + 1 views per process).
    mp.spawn(_worker, args=(2, _free_port(), out), nprocs=2)
    video0, summed, maxed, counts = torch.load(out.format(0))
    video1, summed1, maxed1, counts1 = torch.load(out.format(1))
    assert sorted(video0.tolist() + video1.tolist()) == list(range(7))
    assert counts.tolist() == [1] * 7 and torch.equal(counts, counts1)
    assert torch.equal(summed, summed1) and torch.equal(maxed, maxed1)
    assert summed.argmax(1).tolist() == [i % 3 for i in range(7)]
    assert torch.equal(summed, maxed)


@pytest.mark.parametrize("size, world", [(30, 3), (31, 8), (2, 3)])
def test_eval_shards_are_contiguous_blocks_that_cover_the_split_once(size, world):
    """Each process reads one run of consecutive entries (a video's crops of one
    temporal view stay together, decoded once); the padding, dropped by
    ``padded``, tops every process up to the same length."""
    shards = [EvalShardSampler(size, world, rank) for rank in range(world)]
    assert len({len(s) for s in shards}) == 1
    kept = []
    for sampler in shards:
        items = list(sampler)
        real = [i for i, pad in zip(items, sampler.padded(len(items))) if not pad]
        if real:
            assert real == list(range(real[0], real[-1] + 1))
        kept += real
    assert kept == list(range(size))


def test_chance_map_is_what_random_scores_get():
    from slowfast.engine.metrics import chance_map, mean_average_precision

    gen = torch.Generator().manual_seed(0)
    rates = torch.linspace(0.05, 0.5, 10)
    targets = (torch.rand(4000, 10, generator=gen) < rates).float()
    targets[:, 3] = 0  # a class without positives is left out, as in the mAP
    random_map = [
        mean_average_precision(torch.rand(4000, 10, generator=gen), targets)
        for _ in range(5)
    ]
    expected = float(rates[[i for i in range(10) if i != 3]].mean())
    assert chance_map(targets) == pytest.approx(expected, abs=0.01)
    assert sum(random_map) / 5 == pytest.approx(chance_map(targets), abs=0.01)
