"""The study's per-shape table: throughput against the FLOP-ideal, data wait.

A shape's FLOP-ideal throughput is the baseline's clips/s at its base shape
times the ratio of the base clip's GFLOPs to this shape's: what the shape
would reach if a FLOP cost the same at every shape. Efficiency is the measured
clips/s over that; below 100% the shape runs slower than its FLOPs say
(per-iteration overheads, BN splits), above it faster (larger batches fill
the machine better).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence

from multigrid_study.compute import parse_shape
from multigrid_study.results import spread

if TYPE_CHECKING:
    from slowfast.models.model_stats import GflopsFn


def _base_rate(results: Sequence[dict]) -> Optional[tuple]:
    """(shape, mean clips/s, GFLOPs per clip) of the budget-1 baseline."""
    runs = [r for r in results if r["arm"] == "baseline" and r["budget"] == 1]
    rates = [r.get("clips_per_s") or {} for r in runs]
    shapes = {s for rate in rates for s in rate}
    if len(shapes) != 1:
        return None
    shape = shapes.pop()
    gflop = runs[0].get("gflop_per_clip", {}).get(shape)
    return shape, sum(rate[shape] for rate in rates) / len(rates), gflop


def shape_rows(results: Sequence[dict]) -> List[dict]:
    """One row per arm x budget x shape, in the order the runs logged them.

    Args:
        results: run results with ``clips_per_s``, ``data_wait_share_per_shape``
            and ``gflop_per_clip`` (shape -> value each).

    Returns:
        list: dicts with ``arm``, ``budget``, ``shape``, ``n``; ``spread``
        tuples (or None) of ``clips_per_s`` and ``data_wait``;
        ``gflop_per_clip``; ``efficiency`` against the FLOP-ideal (None
        without a budget-1 baseline).
    """
    base = _base_rate(results)
    groups: Dict[tuple, List[dict]] = {}
    for result in results:
        groups.setdefault((result["arm"], result["budget"]), []).append(result)
    rows = []
    for (arm, budget), runs in groups.items():
        shapes = dict.fromkeys(s for r in runs for s in r.get("clips_per_s") or {})
        for shape in shapes:
            rates = spread(r["clips_per_s"].get(shape) for r in runs)
            waits = spread(
                (r.get("data_wait_share_per_shape") or {}).get(shape) for r in runs
            )
            gflop = runs[0].get("gflop_per_clip", {}).get(shape)
            efficiency = None
            if base and base[2] and gflop and rates:
                ideal = base[1] * base[2] / gflop
                efficiency = rates[0] / ideal
            rows.append(
                {
                    "arm": arm,
                    "budget": budget,
                    "shape": shape,
                    "n": len(runs),
                    "clips_per_s": rates,
                    "gflop_per_clip": gflop,
                    "efficiency": efficiency,
                    "data_wait": waits,
                }
            )
    return rows


def gflop_per_shape(shapes: Iterable[str], gflops_fn: GflopsFn) -> Dict[str, float]:
    """Shape string -> forward GFLOPs of one clip (one call per frames x crop)."""
    cache: Dict[tuple, float] = {}
    out = {}
    for shape in shapes:
        _, frames, crop = parse_shape(shape)
        if (frames, crop) not in cache:
            cache[frames, crop] = gflops_fn(frames, crop)
        out[shape] = cache[frames, crop]
    return out


def format_shapes(rows: Sequence[dict]) -> str:
    """The Markdown table of ``shape_rows``, with a legend line."""
    headers = ["arm", "budget", "shape (clips x frames x crop)", "n", "clips/s"]
    headers += ["GFLOP/clip", "FLOP-ideal efficiency (%)", "data wait (%)"]
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    for row in rows:
        rate = row["clips_per_s"]
        wait = row["data_wait"]
        cells = [row["arm"], f"{row['budget']:g}x", row["shape"], str(row["n"])]
        cells.append(f"{rate[0]:.0f} ({rate[1]:.0f}-{rate[2]:.0f})" if rate else "-")
        gflop = row["gflop_per_clip"]
        cells.append(f"{gflop:.2f}" if gflop else "-")
        eff = row["efficiency"]
        cells.append(f"{100 * eff:.0f}" if eff is not None else "-")
        cells.append(f"{100 * wait[0]:.1f}" if wait else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "clips/s: clips over data + compute seconds at the shape, mean (min-max) "
        "over the n seeds. FLOP-ideal efficiency: clips/s over the baseline's "
        "base-shape clips/s x (base GFLOP/clip / this GFLOP/clip). Data wait: "
        "share of the shape's time spent waiting for the loader (mean)."
    )
    return "\n".join(lines) + "\n"
