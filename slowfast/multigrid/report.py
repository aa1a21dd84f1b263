"""Human- and machine-readable views of a ``MultigridSchedule``.

``describe`` gives one row per entry, ``to_dict`` a JSON-ready summary (used by
``tools/plan_multigrid.py --json`` and for the OUTPUT_DIR dump) and
``schedule_table`` an aligned text table.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from slowfast.utils import table

if TYPE_CHECKING:
    from slowfast.models.model_stats import GflopsFn
    from slowfast.multigrid.long_cycle import ScheduleEntry
    from slowfast.multigrid.schedule import MultigridSchedule


def describe(schedule: MultigridSchedule, dataset_size: Optional[int] = None) -> list:
    """Returns one row per entry of a schedule.

    Args:
        schedule: the schedule.
        dataset_size: training clips; adds ``iters`` per entry when given.

    Returns:
        list: dicts with ``index, lr_stage, phase`` ("long", "fine-tune" or
        "base"), ``batch_factor, num_frames, crop_size, start_epoch,
        end_epoch, epochs, global_batch, per_proc_batch`` (at the long-cycle
        shape), ``short_crops, short_batch_factors, bn_splits, bn_sync_size,
        lr`` (stage LR at the entry's start, no warm-up), ``lr_end`` (just
        before its end; differs in the fine-tuning entry and under cosine),
        ``rel_cost`` (mean compute of an iteration relative to a baseline
        iteration, a clip costing ``frames x crop^2``) and, with a size,
        ``iters`` and ``cycle_iters`` (iterations at each position of the
        short cycle; ``rel_cost`` is then weighted by them).
    """
    s = schedule
    base_cost = s.num_frames * s.crop_size**2
    rows, start = [], 0
    last = len(s.entries) - 1
    for index, entry in enumerate(s.entries):
        cycle = s.cycle(entry)
        splits, sync = s.bn_groups(entry)
        end = entry.end_epoch
        cost = [f * t * c**2 / base_cost for _, t, c, f in cycle]
        if not s.long_cycle:
            phase = "base"
        else:
            phase = "fine-tune" if index == last else "long"
        row = dict(
            index=index,
            lr_stage=entry.lr_stage,
            phase=phase,
            batch_factor=entry.batch_factor,
            num_frames=entry.num_frames,
            crop_size=entry.crop_size,
            start_epoch=start,
            end_epoch=end,
            epochs=max(end - start, 0),
            global_batch=s.base_batch * entry.batch_factor,
            per_proc_batch=s.base_batch * entry.batch_factor // s.num_procs,
            short_crops=[c for i, _, c, _ in cycle if i in (0, 1)],
            short_batch_factors=[f for i, _, _, f in cycle if i in (0, 1)],
            bn_splits=splits,
            bn_sync_size=sync,
            lr=s.stage_lr(start),
            lr_end=s.stage_lr(max(end - 1e-6, start)),
            rel_cost=sum(cost) / len(cost),
        )
        if dataset_size is not None:
            counts = [0] * len(cycle)
            for epoch in range(start, end):
                for position, n in enumerate(s.cycle_iters(epoch, dataset_size)):
                    counts[position] += n
            row["iters"] = sum(counts)
            row["cycle_iters"] = counts
            row["rel_cost"] = _weighted_mean(cost, counts)
        rows.append(row)
        start = max(start, end)
    return rows


def to_dict(schedule: MultigridSchedule, dataset_size: Optional[int] = None) -> dict:
    """Returns a schedule as a JSON-ready dict.

    Args:
        schedule: the schedule.
        dataset_size: training clips; adds iteration counts when given.

    Returns:
        dict: ``max_epoch, iteration_ratio`` (eq. 1 measure), ``schedule``
        (entries as dicts ``lr_stage, batch_factor, num_frames, crop_size,
        end_epoch``, fine-tuning last), ``steps, lrs, lr_policy, base_lr,
        baseline_max_epoch, num_procs, long_cycle, short_cycle,
        short_cycle_crop_mode, rows`` (``describe``) and, with a size,
        ``dataset_size, total_iters, baseline_iters, iteration_ratio_real``
        (None when the dataset is too small for one iteration).
    """
    s = schedule
    out: Dict[str, Any] = dict(
        max_epoch=s.max_epoch,
        iteration_ratio=s.iteration_ratio(),
        schedule=[asdict(e) for e in s.entries],
        steps=list(s.steps),
        lrs=list(s.lrs),
        lr_policy=s.policy.name,
        base_lr=s.policy.base_lr,
        baseline_max_epoch=s.baseline_max_epoch,
        num_procs=s.num_procs,
        long_cycle=s.long_cycle,
        short_cycle=s.short_cycle,
        short_cycle_crop_mode=s.short_mode,
        rows=describe(s, dataset_size),
    )
    if dataset_size is not None:
        total = sum(r["iters"] for r in out["rows"])
        out["dataset_size"] = dataset_size
        out["total_iters"] = total
        out["baseline_iters"] = s.baseline_iters(dataset_size)
        ratio = out["baseline_iters"] / total if total else None
        out["iteration_ratio_real"] = ratio
    return out


def _lr_text(row: dict) -> str:
    if abs(row["lr"] - row["lr_end"]) <= 1e-12 * max(abs(row["lr"]), 1e-30):
        return f"{row['lr']:.4g}"
    return f"{row['lr']:.4g}->{row['lr_end']:.4g}"


def schedule_table(
    schedule: MultigridSchedule,
    dataset_size: int,
    gflops_fn: Optional[GflopsFn] = None,
) -> str:
    """Returns the schedule as an aligned text table with totals.

    Args:
        schedule: the schedule.
        dataset_size: training clips the iteration counts are computed for.
        gflops_fn: ``(num_frames, crop_size) -> GFLOPs`` of one clip
            (``models.model_stats.clip_gflops_fn``); when given, the cost
            column is the forward GFLOPs of an iteration, counted at each
            shape of its short cycle, and the compute line compares counted
            totals. Otherwise costs are relative to a baseline iteration,
            assuming a clip costs ``t * s^2``.

    Returns:
        str: the table, one line per entry, then the totals.
    """
    s = schedule
    info = to_dict(s, dataset_size)
    if gflops_fn:
        _add_gflops(info["rows"], s, gflops_fn)
    cost_head = "GFLOPs/it" if gflops_fn else "cost/it"
    head = [
        "#",
        "stage",
        "phase",
        "batch",
        "frames",
        "crop",
        "short crops",
        "epochs",
        "end",
        "iters",
        "LR",
        "BN splits",
        "BN sync",
        cost_head,
    ]
    lines = []
    for r in info["rows"]:
        if gflops_fn:
            cost = f"{r['gflops']:.0f}"
        else:
            cost = f"{r['rel_cost']:.3f}"
        short = "/".join(str(c) for c in r["short_crops"]) or "-"
        lines.append(
            [
                str(r["index"]),
                str(r["lr_stage"]),
                r["phase"],
                f"{r['global_batch']} ({r['batch_factor']}x)",
                str(r["num_frames"]),
                str(r["crop_size"]),
                short,
                str(r["epochs"]),
                str(r["end_epoch"]),
                str(r["iters"]),
                _lr_text(r),
                str(r["bn_splits"]),
                str(r["bn_sync_size"]),
                cost,
            ]
        )
    text = table.format_table(head, lines)
    baseline_epochs = s.baseline_max_epoch
    footer = [
        f"total: {s.max_epoch} epochs, {info['total_iters']} iterations; baseline: "
        f"{baseline_epochs} epochs, {info['baseline_iters']} iterations",
        f"iteration ratio: {info['iteration_ratio']:.2f}x fewer (eq. 1 batch "
        f"scaling), {_ratio_text(info['iteration_ratio_real'])} with the integer "
        f"batch sizes on {dataset_size} clips",
        *_compute_text(info, s, gflops_fn),
        f"resolved {s.policy.name}: STEPS {_fmt_list(s.steps)} "
        f"LRS {_fmt_list(s.lrs)} (x BASE_LR {s.policy.base_lr:g})",
    ]
    return text + "\n" + "\n".join(footer)


def _weighted_mean(values: Sequence[float], weights: Sequence[int]) -> float:
    """Mean of ``values`` weighted by ``weights``; the plain mean when they sum
    to zero (an entry without iterations)."""
    total = sum(weights)
    if not total:
        return sum(values) / len(values)
    return sum(v * w for v, w in zip(values, weights)) / total


def _iteration_gflops(
    schedule: MultigridSchedule,
    entry: ScheduleEntry,
    cycle_iters: Sequence[int],
    gflops_fn: GflopsFn,
) -> float:
    """Mean forward GFLOPs of an iteration at an entry, each shape of its
    short cycle weighted by the iterations it gets."""
    cycle = schedule.cycle(entry)
    costs = [f * schedule.base_batch * gflops_fn(t, c) for _, t, c, f in cycle]
    return _weighted_mean(costs, cycle_iters)


def compute_totals(
    schedule: MultigridSchedule, dataset_size: int, gflops_fn: GflopsFn
) -> Tuple[float, float]:
    """Forward GFLOPs of all training iterations of a schedule and of its
    baseline (backward costs about twice as much at every shape, so their
    ratio is the training compute saved).

    Args:
        schedule: the schedule.
        dataset_size: training clips.
        gflops_fn: ``(num_frames, crop_size) -> GFLOPs`` of one clip.

    Returns:
        tuple: ``(schedule GFLOPs, baseline GFLOPs)``.
    """
    rows = describe(schedule, dataset_size)
    _add_gflops(rows, schedule, gflops_fn)
    return _totals(rows, schedule, dataset_size, gflops_fn)


def _add_gflops(rows: list, schedule: MultigridSchedule, gflops_fn: GflopsFn) -> None:
    """Adds ``gflops`` (``_iteration_gflops``) to ``describe``'s rows."""
    for row, entry in zip(rows, schedule.entries):
        counts = row["cycle_iters"]
        row["gflops"] = _iteration_gflops(schedule, entry, counts, gflops_fn)


def _totals(
    rows: list, schedule: MultigridSchedule, dataset_size: int, gflops_fn: GflopsFn
) -> Tuple[float, float]:
    """``compute_totals`` from rows that carry ``gflops``."""
    s = schedule
    per_iter = s.base_batch * gflops_fn(s.num_frames, s.crop_size)
    total = sum(r["iters"] * r["gflops"] for r in rows)
    return total, s.baseline_iters(dataset_size) * per_iter


def _compute_text(
    info: dict, schedule: MultigridSchedule, gflops_fn: Optional[GflopsFn]
) -> List[str]:
    """Total training compute against the baseline's: counted GFLOPs when a
    counter is given (and the ``frames x crop^2`` estimate beside them when a
    cycle is on), otherwise baseline-iteration equivalents."""
    area = sum(r["iters"] * r["rel_cost"] for r in info["rows"])
    base = info["baseline_iters"]
    area_ratio = f"{base / area:.2f}x less" if area else "n/a"
    if not gflops_fn:
        return [
            f"compute: {area:.0f} baseline-iteration equivalents vs {base} "
            f"({area_ratio})"
        ]
    s = schedule
    counted, base_gflops = _totals(info["rows"], s, info["dataset_size"], gflops_fn)
    ratio = f"{base_gflops / counted:.2f}x less" if counted else "n/a"
    lines = [
        f"compute (forward, counted at each shape): {counted:.4g} GFLOPs vs "
        f"{base_gflops:.4g} for the baseline ({ratio})"
    ]
    if s.long_cycle or s.short_cycle:
        lines.append(
            f"  if a clip's cost scaled with frames x crop^2: {area_ratio} (the "
            "gap: feature maps rounded up at the network's strides)"
        )
    return lines


def _ratio_text(ratio: Optional[float]) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def _fmt_list(values: Sequence) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


# (clips per process, frames, crop, BN splits) of an iteration.
StepShape = Tuple[int, int, int, int]
# ``step_ms(shape) -> (milliseconds, measured)`` for one process's step.
StepMsFn = Callable[[StepShape], Tuple[float, bool]]


def shape_iterations(schedule: MultigridSchedule, dataset_size: int) -> dict:
    """Iterations of one process at each step shape over the whole schedule.

    Returns:
        dict: ``StepShape -> iterations``, in the order the shapes first come.
    """
    counts: dict = {}
    for epoch in range(schedule.max_epoch):
        for position, n in enumerate(schedule.cycle_iters(epoch, dataset_size)):
            shape = schedule.iter_shape(epoch, position)
            key = (
                shape.per_proc_batch,
                shape.num_frames,
                shape.crop_size,
                shape.bn_splits,
            )
            counts[key] = counts.get(key, 0) + n
    return counts


def training_time(
    schedule: MultigridSchedule, dataset_size: int, step_ms: StepMsFn
) -> dict:
    """The schedule's and its baseline's training steps' time on one process.

    Args:
        schedule: the schedule.
        dataset_size: training clips.
        step_ms: one process's step time at a shape, and whether it was
            measured (else estimated).

    Returns:
        dict: ``run`` and ``baseline``, each ``{"seconds", "iterations",
        "shapes": [{"shape", "iterations", "ms", "measured"}]}``; the baseline
        trains every iteration at the base shape with one BN group.
    """
    base = (
        schedule.base_batch // schedule.num_procs,
        schedule.num_frames,
        schedule.crop_size,
        1,
    )
    arms = {
        "run": shape_iterations(schedule, dataset_size),
        "baseline": {base: schedule.baseline_iters(dataset_size)},
    }
    out = {}
    for arm, counts in arms.items():
        shapes = []
        for shape, iters in counts.items():
            ms, measured = step_ms(shape)
            shapes.append(
                {"shape": shape, "iterations": iters, "ms": ms, "measured": measured}
            )
        seconds = sum(s["iterations"] * s["ms"] for s in shapes) / 1000
        out[arm] = {
            "seconds": seconds,
            "iterations": sum(counts.values()),
            "shapes": shapes,
        }
    return out
