"""Human- and machine-readable views of a ``MultigridSchedule``.

``describe`` gives one row per entry, ``to_dict`` a JSON-ready summary (used by
``tools/plan_multigrid.py --json`` and for the OUTPUT_DIR dump) and
``format_table`` an aligned text table.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Optional, Sequence

from slowfast.utils import table

if TYPE_CHECKING:
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
        iteration) and, with a size, ``iters``.
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
            row["iters"] = sum(
                s.iters_in_epoch(e, dataset_size) for e in range(start, end)
            )
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
    out = dict(
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


def format_table(
    schedule: MultigridSchedule,
    dataset_size: int,
    clip_gflops: Optional[float] = None,
) -> str:
    """Returns the schedule as an aligned text table with totals.

    Args:
        schedule: the schedule.
        dataset_size: training clips the iteration counts are computed for.
        clip_gflops: GFLOPs of one clip at the base train shape; when given,
            the cost column is GFLOPs per iteration (an estimate scaled by
            ``batch * t * s^2``), otherwise cost relative to a baseline
            iteration.

    Returns:
        str: the table, one line per entry, then the totals.
    """
    s = schedule
    info = to_dict(s, dataset_size)
    cost_head = "GFLOPs/it" if clip_gflops else "cost/it"
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
        if clip_gflops:
            cost = f"{r['rel_cost'] * clip_gflops * s.base_batch:.0f}"
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
        _compute_text(info, clip_gflops, s.base_batch),
        f"resolved {s.policy.name}: STEPS {_fmt_list(s.steps)} "
        f"LRS {_fmt_list(s.lrs)} (x BASE_LR {s.policy.base_lr:g})",
    ]
    return text + "\n" + "\n".join(footer)


def _compute_text(info: dict, clip_gflops: Optional[float], batch: int) -> str:
    """Total training compute against the baseline's (same per-clip cost model)."""
    cost = sum(r["iters"] * r["rel_cost"] for r in info["rows"])
    base = info["baseline_iters"]
    ratio = f"{base / cost:.2f}x less" if cost else "n/a"
    if clip_gflops:
        scale = clip_gflops * batch  # GFLOPs of one baseline iteration
        return (
            f"compute (forward): {cost * scale:.4g} GFLOPs vs {base * scale:.4g} "
            f"for the baseline ({ratio})"
        )
    return f"compute: {cost:.0f} baseline-iteration equivalents vs {base} ({ratio})"


def _ratio_text(ratio: Optional[float]) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def _fmt_list(values: Sequence) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"
