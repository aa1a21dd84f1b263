"""Training statistics: smoothed values, timers and JSON stat lines."""

import resource
import time
from collections import deque
from typing import Any, Deque, Dict, Optional

import numpy as np
import torch


def memory_mb() -> float:
    """Peak memory of this process in MiB (GPU when used, else host RSS)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 1024**2
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class ScalarMeter:
    """Median over a window and mean over the whole epoch of a scalar."""

    def __init__(self, window: int) -> None:
        self.window: Deque[float] = deque(maxlen=window)
        self.total = 0.0
        self.weight = 0.0

    def add(self, value: float, weight: float = 1.0) -> None:
        """Adds a value with a weight (e.g. its batch size)."""
        self.window.append(value)
        self.total += value * weight
        self.weight += weight

    def median(self) -> float:
        """Median of the window."""
        return float(np.median(self.window)) if self.window else float("nan")

    def mean(self) -> float:
        """Weighted mean since the last reset."""
        return self.total / self.weight if self.weight else float("nan")


class TrainMeter:
    """Collects per-iteration training statistics of one epoch.

    Args:
        log_period: iterations between logged lines (window of the medians).
        iters_per_epoch: iterations in the epoch, for the ETA.
        iters_left_after_epoch: iterations in the later epochs, for the ETA.
    """

    def __init__(
        self, log_period: int, iters_per_epoch: int, iters_left_after_epoch: int
    ) -> None:
        self.iters_per_epoch = iters_per_epoch
        self.iters_left_after = iters_left_after_epoch
        self.loss = ScalarMeter(log_period)
        self.top1_err = ScalarMeter(log_period)
        self.top5_err = ScalarMeter(log_period)
        self.data_time = ScalarMeter(log_period)
        self.compute_time = ScalarMeter(log_period)
        self.clips = 0
        # shape string -> {"iters", "clips", "time" (data + compute seconds),
        # "data" (seconds waiting for the loader)}
        self.shapes: dict = {}
        self.start = time.perf_counter()

    def add(
        self,
        loss: float,
        batch_size: int,
        data_time: float,
        compute_time: float,
        top1_err: Optional[float] = None,
        top5_err: Optional[float] = None,
        shape: Optional[str] = None,
    ) -> None:
        """Records one iteration (values are global over processes).

        ``shape`` (e.g. ``"128x2x45"``: clips x frames x crop) also counts the
        iteration, its clips, its data + compute time and its data wait under
        that shape.
        """
        self.loss.add(loss, batch_size)
        if top1_err is not None:
            assert top5_err is not None  # the two come together
            self.top1_err.add(top1_err, batch_size)
            self.top5_err.add(top5_err, batch_size)
        self.data_time.add(data_time)
        self.compute_time.add(compute_time)
        self.clips += batch_size
        if shape is not None:
            totals = self.shapes.setdefault(
                shape, {"iters": 0, "clips": 0, "time": 0.0, "data": 0.0}
            )
            totals["iters"] += 1
            totals["clips"] += batch_size
            totals["time"] += data_time + compute_time
            # A meter resumed from an older mid-epoch checkpoint has no "data".
            totals["data"] = totals.get("data", 0.0) + data_time

    def state_dict(self) -> dict:
        """The epoch's totals so far (plain values), for a mid-epoch checkpoint."""
        meters = ("loss", "top1_err", "top5_err", "data_time", "compute_time")
        state: Dict[str, Any] = {
            n: [getattr(self, n).total, getattr(self, n).weight] for n in meters
        }
        state.update(
            clips=self.clips,
            shapes={k: dict(v) for k, v in self.shapes.items()},
            elapsed=time.perf_counter() - self.start,
        )
        return state

    def load_state_dict(self, state: dict) -> None:
        """Continues the totals of ``state_dict`` (windows start empty)."""
        for name in ("loss", "top1_err", "top5_err", "data_time", "compute_time"):
            meter = getattr(self, name)
            meter.total, meter.weight = (float(v) for v in state[name])
        self.clips = int(state["clips"])
        self.shapes = {k: dict(v) for k, v in state["shapes"].items()}
        self.start = time.perf_counter() - float(state["elapsed"])

    def _eta_seconds(self, it: int) -> float:
        elapsed = time.perf_counter() - self.start
        per_iter = elapsed / max(it + 1, 1)
        return per_iter * (self.iters_per_epoch - it - 1 + self.iters_left_after)

    def iter_stats(self, epoch: str, it: int, lr: float, shape: str) -> dict:
        """The JSON stat line of an iteration."""
        stats = {
            "_type": "train_iter",
            "epoch": epoch,
            "iter": f"{it + 1}/{self.iters_per_epoch}",
            "shape": shape,
            "loss": self.loss.median(),
            "lr": lr,
            "time_data": self.data_time.median(),
            "time_compute": self.compute_time.median(),
            "clips_per_s": self.clips / max(time.perf_counter() - self.start, 1e-9),
            "eta": _format_seconds(self._eta_seconds(it)),
            "mem_mb": round(memory_mb()),
        }
        if self.top1_err.window:
            stats["top1_err"] = self.top1_err.median()
            stats["top5_err"] = self.top5_err.median()
        return stats

    def epoch_stats(self, epoch: str, lr: float) -> dict:
        """The JSON stat line of the epoch."""
        elapsed = time.perf_counter() - self.start
        data = self.data_time.total
        stats = {
            "_type": "train_epoch",
            "epoch": epoch,
            "loss": self.loss.mean(),
            "lr": lr,
            "time_epoch": elapsed,
            "time_data": data,
            "data_wait_share": data / elapsed if elapsed > 0 else 0.0,
            "clips_per_s": self.clips / max(elapsed, 1e-9),
            "eta": _format_seconds(self._eta_seconds(self.iters_per_epoch - 1)),
            "mem_mb": round(memory_mb()),
        }
        if self.top1_err.weight:
            stats["top1_err"] = self.top1_err.mean()
            stats["top5_err"] = self.top5_err.mean()
        if self.shapes:
            stats["shapes"] = self.shapes
        return stats


def data_wait_text(shapes: dict) -> str:
    """One line of the share of time each shape waited for data, e.g.
    ``"16x2x158 12.0%, 2x8x224 0.5%"`` (largest batch first).

    Args:
        shapes: ``TrainMeter.shapes``.
    """
    parts = []
    for shape, totals in sorted(
        shapes.items(), key=lambda kv: -int(kv[0].split("x")[0])
    ):
        share = totals.get("data", 0.0) / totals["time"] if totals["time"] else 0.0
        parts.append(f"{shape} {100 * share:.1f}%")
    return ", ".join(parts)


def _format_seconds(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours:d}:{rest // 60:02d}:{rest % 60:02d}"
