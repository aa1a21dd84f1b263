"""Plot of the mini-batch shapes over training (the paper's Figure 2, as steps).

Uses matplotlib's object API with the Agg canvas, so no display and no global
pyplot state are involved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from slowfast.multigrid.schedule import MultigridSchedule


def _epoch_to_x(schedule: MultigridSchedule, dataset_size: Optional[int]) -> list:
    """Returns x positions of epochs ``0..max_epoch`` (iterations or epochs)."""
    if dataset_size is None:
        return list(range(schedule.max_epoch + 1))
    xs = [0]
    for epoch in range(schedule.max_epoch):
        xs.append(xs[-1] + schedule.iters_in_epoch(epoch, dataset_size))
    return xs


def plot_schedule(
    schedule: MultigridSchedule, path: str, dataset_size: Optional[int] = None
) -> None:
    """Draws frames, crops, batch size and LR over training into a PNG.

    Each panel is a step plot over the long-cycle entries; the short cycle is
    drawn as a shaded band (its crops and batch sizes within each entry).

    Args:
        schedule: the schedule.
        path: output image file (format from the extension, e.g. ``.png``).
        dataset_size: training clips; x is then iterations, else epochs.
    """
    xs = _epoch_to_x(schedule, dataset_size)
    edges, frames, crops, crop_lo, batches, batch_hi = [], [], [], [], [], []
    start = 0
    for entry in schedule.entries:
        end = max(entry.end_epoch, start)
        cycle = schedule.cycle(entry)
        edges.append(xs[start])
        frames.append(entry.num_frames)
        crops.append(entry.crop_size)
        crop_lo.append(min(c for _, _, c, _ in cycle))
        batches.append(schedule.base_batch * entry.batch_factor)
        batch_hi.append(schedule.base_batch * max(f for *_, f in cycle))
        start = end
    edges.append(xs[-1])

    def steps(values: list) -> list:
        return values + values[-1:]

    fig = Figure(figsize=(10, 8))
    FigureCanvasAgg(fig)
    axes = fig.subplots(4, 1, sharex=True)
    axes[0].step(edges, steps(frames), where="post", color="C0")
    axes[0].set_ylabel("frames")
    axes[1].step(edges, steps(crops), where="post", color="C1", label="base crop")
    if schedule.short_cycle:
        axes[1].fill_between(
            edges,
            steps(crop_lo),
            steps(crops),
            step="post",
            alpha=0.3,
            color="C1",
            label="short cycle",
        )
        axes[1].legend(loc="lower right")
    axes[1].set_ylabel("crop")
    axes[2].step(edges, steps(batches), where="post", color="C2")
    if schedule.short_cycle:
        axes[2].fill_between(
            edges, steps(batches), steps(batch_hi), step="post", alpha=0.3, color="C2"
        )
    axes[2].set_yscale("log", base=2)
    axes[2].set_ylabel("global batch")
    samples = max(200, 4 * schedule.max_epoch)
    epochs = [schedule.max_epoch * i / samples for i in range(samples)]
    lr_x = [_interp(xs, e) for e in epochs]
    axes[3].plot(lr_x, [schedule.lr_at(e) for e in epochs], color="C3")
    axes[3].set_yscale("log")
    axes[3].set_ylabel("LR")
    axes[3].set_xlabel("iteration" if dataset_size is not None else "epoch")
    title = (
        f"multigrid: long cycle {'on' if schedule.long_cycle else 'off'}, "
        f"short cycle {'on' if schedule.short_cycle else 'off'}, "
        f"{schedule.max_epoch} epochs"
    )
    axes[0].set_title(title)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def _interp(xs: list, epoch: float) -> float:
    """Maps a fractional epoch to the x axis (linear within an epoch)."""
    low = int(epoch)
    if low >= len(xs) - 1:
        return float(xs[-1])
    return xs[low] + (xs[low + 1] - xs[low]) * (epoch - low)
