"""The study's results: a finished run's ``json_stats.log`` read, runs
aggregated over seeds, the table and the CSV file formatted. Pure functions:
no process, no clock, no file.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Dict, Iterable, List, Optional, Sequence

from multigrid_study.intervals import accuracy_interval, paired_difference

CSV_FIELDS = (
    "arm", "budget", "seed", "epochs", "epochs_planned", "iterations",
    "iterations_planned", "train_s", "train_processes", "test_s", "epoch_time_s",
    "data_wait_share", "train_gflop",
    "val_top1", "val_top5", "val_map", "test_top1", "test_top5", "test_map",
    "clips_per_s", "run_dir",
)  # fmt: skip


def _metrics(prefix: str, stats: Optional[dict]) -> dict:
    """``{prefix}_top1/_top5/_map`` in percent (None when absent)."""
    stats = stats or {}
    out = {f"{prefix}_{key}": None for key in ("top1", "top5", "map")}
    for key in ("top1", "top5"):
        if f"{key}_err" in stats:
            out[f"{prefix}_{key}"] = 100.0 - stats[f"{key}_err"]
    if "map" in stats:
        out[f"{prefix}_map"] = 100.0 * stats["map"]
    return out


def _curve(epochs: list) -> list:
    """Per epoch: number, training-loop seconds at its end, loss, LR, top-1 error."""
    elapsed, curve = 0.0, []
    for stats in epochs:
        elapsed += stats["time_epoch"]
        point = {"epoch": int(stats["epoch"].split("/")[0]), "time_s": elapsed}
        point.update({key: stats.get(key) for key in ("loss", "lr", "top1_err")})
        curve.append(point)
    return curve


def parse_stats(lines: Iterable[str]) -> dict:
    """Summarises a run's ``json_stats.log``.

    Args:
        lines: the file's lines (``train_epoch``, ``val_epoch`` and
            ``test_final`` lines are read; a ``resume`` line drops the
            ``train_epoch`` lines after its checkpoint's epoch, which the
            resumed run writes again; the others are skipped).

    Returns:
        dict: ``epochs`` (train_epoch lines), ``iterations`` (from their
        ``shapes``; None without), ``epoch_time_s`` (sum of ``time_epoch``),
        ``data_wait_share`` (sum of ``time_data`` / sum of ``time_epoch``),
        ``clips_per_s`` (shape -> clips / data+compute seconds),
        ``clips_per_shape`` (shape -> clips trained),
        ``data_wait_share_per_shape`` (shape -> data wait / data+compute
        seconds), ``curve`` (per epoch: its number, the training-loop time
        at its end, its mean loss, its LR and top-1 error; None where the
        log has none), and the last val and test metrics as ``val_top1`` ...
        ``test_map`` (percent).
    """
    epochs: List[Dict[str, Any]] = []
    last: Dict[str, Dict[str, Any]] = {}
    for line in lines:
        if not line.strip():
            continue
        stats = json.loads(line)
        kind = stats.get("_type")
        if kind == "resume":  # the epochs after the checkpoint are run again
            done = int(stats["epoch"])
            epochs = [s for s in epochs if int(s["epoch"].split("/")[0]) <= done]
        elif kind == "train_epoch":
            epochs.append(stats)
        elif kind in ("val_epoch", "test_final"):
            last[kind] = stats
    shapes: dict = {}
    for stats in epochs:
        for shape, part in stats.get("shapes", {}).items():
            total = shapes.setdefault(
                shape, {"iters": 0, "clips": 0, "time": 0.0, "data": 0.0}
            )
            for key in total:
                total[key] += part.get(key, 0.0)  # no "data" in older logs
    time_epoch = sum(stats["time_epoch"] for stats in epochs)
    time_data = sum(stats["time_data"] for stats in epochs)
    result = {
        "epochs": len(epochs),
        "iterations": sum(s["iters"] for s in shapes.values()) if shapes else None,
        "epoch_time_s": time_epoch,
        "data_wait_share": time_data / time_epoch if time_epoch > 0 else None,
        "clips_per_s": {
            shape: s["clips"] / s["time"] for shape, s in shapes.items() if s["time"]
        },
        "clips_per_shape": {shape: s["clips"] for shape, s in shapes.items()},
        "data_wait_share_per_shape": {
            shape: s["data"] / s["time"] for shape, s in shapes.items() if s["time"]
        },
    }
    result["curve"] = _curve(epochs)
    result.update(_metrics("val", last.get("val_epoch")))
    result.update(_metrics("test", last.get("test_final")))
    return result


def estimate_eta(done: Sequence[tuple], todo: Sequence[tuple]) -> Optional[float]:
    """Seconds left, from the wall-clock of finished runs per unit of budget.

    Args:
        done: ``(arm, budget, seconds)`` of finished runs.
        todo: ``(arm, budget)`` of the runs still to make.

    Returns:
        float: the estimate (the arm's own rate when it has finished runs,
        else the rate over all arms); None when no run has finished.
    """
    if not done:
        return None
    rates: dict = {}
    for arm, budget, seconds in done:
        total = rates.setdefault(arm, [0.0, 0.0])
        total[0] += seconds
        total[1] += budget
    overall = sum(t[0] for t in rates.values()) / sum(t[1] for t in rates.values())
    return sum(
        budget * (rates[arm][0] / rates[arm][1] if arm in rates else overall)
        for arm, budget in todo
    )


def spread(values: Iterable[Optional[float]]) -> Optional[tuple]:
    """``(mean, min, max)`` of the values that are not None, else None."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return sum(known) / len(known), min(known), max(known)


def metric_key(multi_label: bool) -> str:
    """The result field of the test accuracy: ``test_map`` or ``test_top1``."""
    return "test_map" if multi_label else "test_top1"


def aggregate(results: Sequence[dict], metric: str) -> list:
    """One row per arm x budget (arms in first-seen order, budgets sorted).

    Args:
        results: run results (``arm``, ``budget``, ``epochs``, ``iterations``,
            ``train_s``, ``data_wait_share``, the metric, ``test_top5``;
            ``train_gflop`` and ``epoch_time_s`` optional).
        metric: the accuracy field (see ``metric_key``).

    Returns:
        list: dicts with ``arm``, ``budget``, ``n``; ``spread`` tuples (or
        None) for ``epochs``, ``iterations``, ``train_s``, ``epoch_time_s``,
        ``data_wait_share``, ``train_gflop``, ``metric`` and ``top5``;
        ``interval`` (the metric's 95% t interval over seeds, or None);
        ``difference`` (``intervals.paired_difference`` against the baseline
        at budget 1; None for that row or without a paired seed);
        ``speedup_time``, ``speedup_iters`` and ``speedup_compute`` against
        the baseline at budget 1 (None when it is not in the study).
    """
    arms = list(dict.fromkeys(r["arm"] for r in results))
    groups: dict = {}
    for result in results:
        groups.setdefault((result["arm"], result["budget"]), []).append(result)
    rows = []
    for arm, budget in sorted(groups, key=lambda k: (arms.index(k[0]), k[1])):
        runs = groups[arm, budget]
        row = {"arm": arm, "budget": budget, "n": len(runs)}
        for key in ("epochs", "iterations", "train_s", "data_wait_share"):
            row[key] = spread(r[key] for r in runs)
        row["epoch_time_s"] = spread(r.get("epoch_time_s") for r in runs)
        row["train_gflop"] = spread(r.get("train_gflop") for r in runs)
        row["metric"] = spread(r[metric] for r in runs)
        row["top5"] = spread(r["test_top5"] for r in runs)
        row["interval"] = accuracy_interval(
            [r[metric] for r in runs if r[metric] is not None]
        )
        reference = arm == "baseline" and budget == 1
        row["difference"] = (
            None if reference else paired_difference(results, metric, arm, budget)
        )
        rows.append(row)
    ref = next((r for r in rows if r["arm"] == "baseline" and r["budget"] == 1), None)
    speedups = (
        ("speedup_time", "train_s"),
        ("speedup_iters", "iterations"),
        ("speedup_compute", "train_gflop"),
    )
    for row in rows:
        for key, field in speedups:
            if ref is not None and ref[field] and row[field] and row[field][0]:
                row[key] = ref[field][0] / row[field][0]
            else:
                row[key] = None
    return rows


def _cell(value: Optional[tuple], fmt: str = ".1f", scale: float = 1.0) -> str:
    """``mean (min-max)`` of a spread, or the mean alone when all are equal."""
    if value is None:
        return "-"
    mean, low, high = (v * scale for v in value)
    if format(low, fmt) == format(high, fmt):
        return format(mean, fmt)
    return f"{mean:{fmt}} ({low:{fmt}}-{high:{fmt}})"


def _interval_cell(mean: Optional[float], interval: Optional[tuple]) -> str:
    """``mean [low, high]``, or the mean alone without an interval."""
    if mean is None:
        return "-"
    mean = round(mean, 1) or 0.0  # no "-0.0"
    if interval is None:
        return f"{mean:.1f}"
    return f"{mean:.1f} [{interval[1]:.1f}, {interval[2]:.1f}]"


def _difference_cells(difference: Optional[dict]) -> list:
    """The difference to the baseline and its test-sampling half-width."""
    if difference is None:
        return ["-", "-"]
    mean = difference["mean"]
    cell = _interval_cell(mean, difference["interval"])
    if mean is not None and mean > 0:
        cell = "+" + cell
    width = difference["test_halfwidth"]
    return [cell, f"±{width:.1f}" if width is not None else "-"]


def markdown_table(
    rows: Sequence[dict], multi_label: bool = False, reference: str = "baseline"
) -> str:
    """The Markdown table of ``aggregate`` rows, with a legend line.

    Args:
        rows: ``aggregate``'s rows.
        multi_label: mAP instead of top-1 and top-5.
        reference: the arm ``aggregate``'s baseline rows stand for, named
            in the headers and the reference row (the baseline, unless
            ``compare.py`` was given another arm).
    """
    name = "test mAP" if multi_label else "test top-1"
    acc = [f"{name} (%) [95% CI]"] + ([] if multi_label else ["test top-5 (%)"])
    acc += [f"{name} minus {reference} (points) [95% CI]", "test sampling (points)"]
    headers = ["arm", "budget", "n", "epochs", "iterations", "train wall-clock (s)"]
    headers += ["training loop (s)"]
    headers += ["speedup (wall-clock)", "speedup (iterations)", "speedup (compute)"]
    headers += ["data wait (%)", *acc]
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    for row in rows:
        speedups = [
            f"{row[k]:.2f}x" if row[k] is not None else "-"
            for k in ("speedup_time", "speedup_iters", "speedup_compute")
        ]
        label = row["arm"]
        if reference != "baseline" and label == "baseline" and row["budget"] == 1:
            label = f"{reference} (reference)"
        cells = [label, f"{row['budget']:g}x", str(row["n"])]
        cells += [_cell(row["epochs"], ".0f"), _cell(row["iterations"], ".0f")]
        cells += [_cell(row["train_s"]), _cell(row["epoch_time_s"]), *speedups]
        cells.append(_cell(row["data_wait_share"], scale=100.0))
        metric = row["metric"][0] if row["metric"] else None
        cells.append(_interval_cell(metric, row["interval"]))
        if not multi_label:
            cells.append(_cell(row["top5"]))
        cells += _difference_cells(row["difference"])
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Mean over the n seeds (min-max); accuracy with its 95% Student t "
        "interval over seeds (none with one seed), and the difference to the "
        "baseline at budget 1 with the t interval over seeds of the per-seed "
        "paired difference (same seed, same test videos); test sampling: "
        "the half-width of the 95% interval that the test set's size alone "
        "gives the difference (per-video paired, mean over seeds). Budget: "
        "multiple of the base "
        "SOLVER.MAX_EPOCH (multigrid's EPOCH_FACTOR applies on top). Training "
        "loop: the epochs' time (json_stats time_epoch), without what the "
        "wall-clock adds around it (process start, model build, precise BN, "
        "checkpoints). Speedups: "
        "the baseline at budget 1 over this row (means); compute: clips trained x "
        "fvcore GFLOPs per clip at each shape (the speedup a perfectly efficient "
        "machine would show); data wait: time waiting for the loader / "
        "training-loop time."
        + ("" if reference == "baseline" else f" The baseline here: {reference}.")
    )
    return "\n".join(lines) + "\n"


def format_csv(results: Sequence[dict]) -> str:
    """``runs.csv``: one row per run, ``clips_per_s`` as a JSON object."""
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for result in results:
        row = dict(result, clips_per_s=json.dumps(result.get("clips_per_s", {})))
        writer.writerow(row)
    return out.getvalue()
