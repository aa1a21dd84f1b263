"""The files a study writes: runs.csv, runs.json, table.md, shapes.md, plot.png,
curves.png."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

from fvcore.common.config import CfgNode

from multigrid_study.machine import machine_text
from multigrid_study.results import aggregate, format_csv, markdown_table, metric_key
from multigrid_study.shapes import format_shapes, gflop_per_shape, shape_rows
from slowfast.models.model_stats import clip_gflops_fn


def plot_study(rows: list, path: str, multi_label: bool = False) -> None:
    """Test accuracy against training wall-clock, one line per arm, and each
    row's difference to the baseline at budget 1 (PNG).

    Points are labelled with their budget. Accuracy error bars: the 95% t
    interval over seeds (none with one seed); wall-clock bars: min-max. The
    lower panel: the paired difference with its 95% interval over seeds
    (thick) and the test-sampling interval (thin), with lines at 0 and -1.5.

    Args:
        rows: ``aggregate`` rows.
        path: output image file.
        multi_label: the accuracy is mAP (else top-1).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 8.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(2, 1, 1)
    for arm in dict.fromkeys(row["arm"] for row in rows):
        points = sorted(
            (r for r in rows if r["arm"] == arm and r["train_s"] and r["metric"]),
            key=lambda r: r["budget"],
        )
        if not points:
            continue
        xs = [r["train_s"][0] for r in points]
        ys = [r["metric"][0] for r in points]
        xerr = [[x - r["train_s"][1] for x, r in zip(xs, points)]]
        xerr.append([r["train_s"][2] - x for x, r in zip(xs, points)])
        intervals = [r["interval"] or (y, y, y) for y, r in zip(ys, points)]
        yerr = [[y - i[1] for y, i in zip(ys, intervals)]]
        yerr.append([i[2] - y for y, i in zip(ys, intervals)])
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, marker="o", capsize=3, label=arm)
        for x, y, r in zip(xs, ys, points):
            label = f"{r['budget']:g}x"
            ax.annotate(label, (x, y), xytext=(4, 4), textcoords="offset points")
    name = "test mAP" if multi_label else "test top-1"
    ax.set_xlabel("training wall-clock (s)")
    ax.set_ylabel(f"{name} (%)")
    ax.set_title("speed-accuracy (labels: budget; bars: 95% CI over seeds)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    _plot_differences(fig.add_subplot(2, 1, 2), rows, name)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)


def _plot_differences(ax, rows: list, name: str) -> None:
    """Each row's paired difference to the baseline, with its intervals."""
    rows = [r for r in rows if r["difference"] is not None]
    for i, row in enumerate(rows):
        diff = row["difference"]
        mean = diff["mean"]
        if diff["test_halfwidth"] is not None:
            half = diff["test_halfwidth"]
            ax.errorbar(i, mean, yerr=half, fmt="none", ecolor="0.6", capsize=6)
        low, high = (diff["interval"] or (mean, mean, mean))[1:]
        yerr = [[mean - low], [high - mean]]
        ax.errorbar(i, mean, yerr=yerr, fmt="o", color="C0", capsize=3, lw=2.5)
    ax.axhline(0.0, color="0.3", lw=0.8)
    ax.axhline(-1.5, color="C3", lw=0.8, ls="--")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r['arm']} {r['budget']:g}x" for r in rows], fontsize=8)
    ax.set_ylabel(f"{name} minus baseline (points)")
    ax.set_title("paired by seed: 95% CI over seeds (thick), test sampling (thin)")
    ax.grid(True, axis="y", alpha=0.3)


def plot_curves(results: list, path: str) -> None:
    """Training loss and LR per epoch against training-loop time (PNG).

    One line per run: colour by arm, line style by budget. Where a run's loss
    jumps (e.g. at a long-cycle shape's LR) shows when and at which LR.

    Args:
        results: run results with a ``curve`` (``parse_stats``; others are
            left out).
        path: output image file.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 7.2))
    FigureCanvasAgg(fig)
    loss_ax = fig.add_subplot(2, 1, 1)
    lr_ax = fig.add_subplot(2, 1, 2, sharex=loss_ax)
    arms = list(dict.fromkeys(r["arm"] for r in results))
    budgets = sorted({r["budget"] for r in results})
    for r in results:
        curve = [p for p in r.get("curve") or [] if p["loss"] is not None]
        if not curve:
            continue
        style: Dict[str, Any] = {
            "color": f"C{arms.index(r['arm']) % 10}",
            "marker": ".",
        }
        style["linestyle"] = ("-", "--", ":", "-.")[budgets.index(r["budget"]) % 4]
        label = f"{r['arm']} {r['budget']:g}x s{r['seed']}"
        times = [p["time_s"] for p in curve]
        loss_ax.plot(times, [p["loss"] for p in curve], label=label, **style)
        lr_ax.plot(times, [p["lr"] for p in curve], **style)
    loss_ax.set_ylabel("training loss (epoch mean)")
    loss_ax.set_title("training curves (labels: arm, budget, seed)")
    loss_ax.grid(True, alpha=0.3)
    if loss_ax.lines:
        loss_ax.legend(fontsize="small")
    lr_ax.set_ylabel("LR at the epoch's end")
    lr_ax.set_xlabel("training-loop time (s)")
    lr_ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _provenance(results: list) -> str:
    """The table's last line: machine(s), commit(s) and dates of the runs."""
    recorded = [r for r in results if r.get("machine")]
    if not recorded:
        return ""
    machines = dict.fromkeys(machine_text(r["machine"]) for r in recorded)
    commits = dict.fromkeys(r.get("commit") or "unknown" for r in recorded)
    dates = sorted(r["date"] for r in recorded)
    when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    line = f"\nTimed on {'; '.join(machines)}; code {', '.join(commits)}; {when}"
    if len(recorded) < len(results):
        line += f" ({len(recorded)} of the {len(results)} runs recorded it)"
    return line + ".\n"


def write_outputs(
    out: str, results: list, multi_label: bool, cfg: Optional[CfgNode] = None
) -> str:
    """Writes runs.csv, runs.json, table.md, shapes.md, plot.png and curves.png.

    Args:
        out: the study folder.
        results: the finished runs' results.
        multi_label: report mAP instead of top-1 / top-5.
        cfg: a run's config, to count the GFLOPs per clip of results made
            before runs recorded them.

    Returns:
        str: the Markdown table.
    """
    os.makedirs(out, exist_ok=True)
    missing = [r for r in results if "gflop_per_clip" not in r]
    if missing and cfg is not None:
        gflops_fn = clip_gflops_fn(cfg)
        for result in missing:
            shapes = result.get("clips_per_s") or {}
            result["gflop_per_clip"] = gflop_per_shape(shapes, gflops_fn)
    rows = aggregate(results, metric_key(multi_label))
    table = markdown_table(rows, multi_label)
    resumed = sum(r.get("train_processes", 1) > 1 for r in results)
    if resumed:
        table += (
            f"\n{resumed} run(s) trained in more than one process (stopped and "
            "resumed): their training wall-clock sums the processes', each "
            "restart's start-up included.\n"
        )
    table += _provenance(results)
    with open(os.path.join(out, "runs.csv"), "w") as f:
        f.write(format_csv(results))
    with open(os.path.join(out, "runs.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out, "shapes.md"), "w") as f:
        f.write(format_shapes(shape_rows(results)))
    plot_study(rows, os.path.join(out, "plot.png"), multi_label)
    plot_curves(results, os.path.join(out, "curves.png"))
    return table
