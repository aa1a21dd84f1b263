"""Timing the training data loader per mini-batch shape (tools/benchmark_loader.py).

``time_stages`` times single items in this process, split into decode and
transform; ``time_loader`` times whole batches from a loader whose shape
``ShapeSwitch`` sets between epochs, optionally each followed by a model step.
"""

import contextlib
import statistics
import time
from typing import Dict, List

import torch

from slowfast.datasets.grid import SamplingGrid
from slowfast.datasets.loader import loader_set_epoch


class ShapeSwitch:
    """``batches_fn`` for ``construct_loader``: whole batches of the shape set before
    an epoch.

    The batch sampler calls it in the main process when an epoch starts, so
    setting ``shape`` between epochs switches the loader's shape. A shape has
    ``frames``, ``crop`` and ``batch`` (``workshop.bench.model_step.Shape``).
    """

    def __init__(self, cfg, shape):
        self.cfg = cfg
        self.shape = shape

    def __call__(self, epoch: int, shard_size: int):
        grid = SamplingGrid.from_shape(self.cfg, self.shape.frames, self.shape.crop)
        return [(self.shape.batch, grid)] * (shard_size // self.shape.batch)


class Batches:
    """Endless batches from a training loader, starting a new epoch as needed."""

    def __init__(self, loader):
        self.loader = loader
        self.epoch = 0
        self._it = None

    def restart(self) -> None:
        """Drops the rest of the current epoch (the next batch starts a new one)."""
        self._it = None

    def next(self):
        """The next batch (the first of an epoch includes the pipeline start)."""
        while True:
            if self._it is None:
                loader_set_epoch(self.loader, self.epoch)
                self.epoch += 1
                self._it = iter(self.loader)
            try:
                return next(self._it)
            except StopIteration:
                self._it = None


@contextlib.contextmanager
def torch_threads(num: int):
    """Temporarily sets torch's intra-op threads (0 leaves them alone)."""
    before = torch.get_num_threads()
    if num > 0:
        torch.set_num_threads(num)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def time_stages(dataset, grids, items: int, seed: int) -> List[Dict[str, float]]:
    """Times decode and transform of single items in this process (1 thread).

    The dataset's clip loader (``_load_clip``: decode and temporal sampling)
    is wrapped with a timer; transform is the rest of the item (spatial
    resize/crop/flip, pathway packing, label). The grids take turns in
    rounds of 8 items after 4 untimed items each, so that a drift of the
    machine's speed spreads over all of them.

    Returns:
        list: per grid, the median ms per clip of "decode", "transform" and
        "total" over ``items`` items spread over the dataset.
    """
    decode_s: List[float] = []
    inner = dataset._load_clip

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            decode_s.append(time.perf_counter() - start)

    def one(grid, k: int):
        decode_s.clear()
        start = time.perf_counter()
        dataset[((k * 7919) % len(dataset), grid, seed + k)]
        return time.perf_counter() - start, sum(decode_s)

    dataset._load_clip = timed
    samples: List[List[tuple]] = [[] for _ in grids]
    try:
        with torch_threads(1):
            for grid in grids:
                for k in range(4):
                    one(grid, items + k)
            for first in range(0, items, 8):
                for g, grid in enumerate(grids):
                    for k in range(first, min(first + 8, items)):
                        samples[g].append(one(grid, k))
    finally:
        del dataset._load_clip
    results = []
    for timings in samples:
        totals = [t for t, _ in timings]
        results.append(
            {
                "decode": 1000 * statistics.median(d for _, d in timings),
                "transform": 1000 * statistics.median(t - d for t, d in timings),
                "total": 1000 * statistics.median(totals),
            }
        )
    return results


def prefill_cache(dataset, seed: int, grids=()) -> float:
    """Loads every training video once so the frame cache is warm, at the
    base grid and at each of ``grids`` that reads another rendition.

    Called before the loader starts its workers, which are forked with the
    filled cache (so the timed batches show the steady state of a cache).

    Returns:
        float: seconds spent.
    """
    start = time.perf_counter()
    sources, picked = {None}, [None]
    for grid in grids:
        if dataset.rendition(grid) not in sources:
            sources.add(dataset.rendition(grid))
            picked.append(grid)
    for grid in picked:
        for index in range(len(dataset)):
            dataset[(index, grid, seed + index)]
    return time.perf_counter() - start


def time_loader(batches: Batches, shape, warmup: int, iters: int, step=None):
    """Times batches of one shape, optionally each followed by a model step.

    Returns:
        dict: median ms per batch (or per iteration with a step), clips/s from
        it, clips/s over all timed batches (including epoch starts), and with a
        step the share of time spent waiting for data.
    """
    batches.restart()
    if step is not None:
        step.set_shape(shape)
    intervals, waits = [], []
    last = time.perf_counter()
    for k in range(warmup + iters):
        inputs, labels, _, _ = batches.next()
        got = time.perf_counter()
        if inputs[0].shape[0] != shape.batch or inputs[-1].shape[-1] != shape.crop:
            raise RuntimeError(f"loader gave {inputs[-1].shape}, expected {shape}")
        if step is not None:
            step(inputs, labels)
            step.synchronize()
        now = time.perf_counter()
        if k >= warmup:
            intervals.append(now - last)
            waits.append(got - last)
        last = now
    median = statistics.median(intervals)
    result = {
        "ms_per_batch": 1000 * median,
        "clips_per_s": shape.batch / median,
        "clips_per_s_overall": shape.batch * len(intervals) / sum(intervals),
    }
    if step is not None:
        result["data_wait_pct"] = 100 * sum(waits) / sum(intervals)
    return result
