"""Headline rows: multigrid against its baseline, from the kept results.

A row pairs the baseline's runs of one folder of kept results
(``results/<folder>/*.json``, one per run) with the multigrid runs of
another, by seed (same seed, same test videos), and gives what the
documents' tables show: accuracy of each arm (mean over the paired seeds),
the paired difference with its 95% t interval over seeds, training
wall-clock of each arm and their ratio, and the one machine the runs share.

A run whose ``timing_disturbed`` field says why (another job ran beside it)
keeps its accuracy in the row and leaves its seed out of the wall-clock.

Pure functions: the caller reads the files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from multigrid_study.intervals import t_interval
from multigrid_study.machine import same_machine


@dataclass(frozen=True)
class HeadlineRow:
    """One model's multigrid-against-baseline result (see the module doc).

    Attributes:
        seeds: the paired seeds.
        timing_seeds: the seeds whose both runs are timed undisturbed.
        baseline_top1, multigrid_top1: mean test top-1 over ``seeds`` (%).
        difference: multigrid minus baseline, mean over ``seeds`` (points).
        interval: its 95% t interval (low, high), None with one seed.
        baseline_s, multigrid_s: mean training wall-clock over
            ``timing_seeds`` (s), None without one.
        machine: the machine every run ran on, in words.
        test_videos: the test set's size.
    """

    seeds: List[int]
    timing_seeds: List[int]
    baseline_top1: float
    multigrid_top1: float
    difference: float
    interval: Optional[tuple]
    baseline_s: Optional[float]
    multigrid_s: Optional[float]
    machine: str
    test_videos: int

    @property
    def speedup(self) -> Optional[float]:
        """Baseline wall-clock over multigrid's (None without timed seeds)."""
        if not self.baseline_s or not self.multigrid_s:
            return None
        return self.baseline_s / self.multigrid_s


def machine_words(machine: dict) -> str:
    """``2-core AMD EPYC (family 25 model 17, AVX512)`` from a run's machine
    (the CPU's name without its trademark signs: ``Intel Xeon Processor``)."""
    details = [v for v in (machine.get("cpu_id"), machine.get("cpu_isa")) if v]
    name = " ".join(re.sub(r"\((R|TM)\)", " ", machine["cpu"]).split())
    cpu = name + (f" ({', '.join(details)})" if details else "")
    if machine.get("gpus"):
        return f"{machine['gpus']}x {machine['gpu']}"
    return f"{machine['cpus']}-core {cpu}"


def _by_seed(results: Sequence[dict], arm_is_baseline: bool) -> Dict[int, dict]:
    runs = [
        r
        for r in results
        if (r["arm"] == "baseline") == arm_is_baseline
        and r["budget"] == 1
        and r.get("test_top1") is not None
    ]
    if not arm_is_baseline:
        runs = [r for r in runs if r["arm"] == "long_short"]
    return {r["seed"]: r for r in runs}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def headline_row(baseline: Sequence[dict], multigrid: Sequence[dict]) -> HeadlineRow:
    """The row of the baseline runs of ``baseline`` and the default multigrid
    (``long_short``, budget 1) runs of ``multigrid``, paired by seed.

    Raises:
        ValueError: no seed has both runs, the runs were tested on different
            test sets, or they ran on different machines (one line each).
    """
    base, multi = _by_seed(baseline, True), _by_seed(multigrid, False)
    seeds = sorted(set(base) & set(multi))
    if not seeds:
        raise ValueError("no seed has both a baseline and a multigrid run")
    pairs = [(base[s], multi[s]) for s in seeds]
    videos = {r["test_videos"] for pair in pairs for r in pair}
    if len(videos) != 1:
        raise ValueError(f"the runs were tested on {sorted(videos)} videos")
    records = [r["machine"] for pair in pairs for r in pair if r.get("machine")]
    if not records or not all(same_machine(records[0], m) for m in records):
        words = sorted({machine_words(m) for m in records})
        raise ValueError(
            f"the runs ran on several machines (or none recorded): {words}"
        )
    # The most detailed record names it (older runs lack the CPU's id).
    machine = max(records, key=lambda m: sum(1 for v in m.values() if v))
    diffs = [m["test_top1"] - b["test_top1"] for b, m in pairs]
    interval = t_interval(diffs)
    timed = [
        s for s, (b, m) in zip(seeds, pairs)
        if not b.get("timing_disturbed") and not m.get("timing_disturbed")
    ]  # fmt: skip
    return HeadlineRow(
        seeds=seeds,
        timing_seeds=timed,
        baseline_top1=_mean([b["test_top1"] for b, _ in pairs]),
        multigrid_top1=_mean([m["test_top1"] for _, m in pairs]),
        difference=_mean(diffs),
        interval=interval[1:] if interval else None,
        baseline_s=_mean([base[s]["train_s"] for s in timed]) if timed else None,
        multigrid_s=_mean([multi[s]["train_s"] for s in timed]) if timed else None,
        machine=machine_words(machine),
        test_videos=videos.pop(),
    )


def signed(value: float) -> str:
    """``+0.3``, ``-1.3``, ``0.0`` (one decimal; no ``-0.0``)."""
    value = round(value, 1) or 0.0
    return f"{value:+.1f}" if value else "0.0"


def difference_text(row: HeadlineRow) -> str:
    """``+0.3 [-0.3, +1.0]``, or ``+1.3 (one seed)``."""
    if row.interval is None:
        return f"{signed(row.difference)} (one seed)"
    low, high = row.interval
    return f"{signed(row.difference)} [{signed(low)}, {signed(high)}]"


def seeds_text(row: HeadlineRow) -> str:
    """``4``, or ``3 (wall-clock: seeds 0, 2)`` when some were not timed."""
    text = str(len(row.seeds))
    if row.timing_seeds != row.seeds:
        timed = ", ".join(str(s) for s in row.timing_seeds) or "none"
        text += f" (wall-clock: seeds {timed})"
    return text


def subset_range(results: Sequence[dict], first: int) -> Optional[tuple]:
    """(lowest, highest) top-1 (%) of the runs over their first ``first``
    test videos (per-video correctness); None when a run lacks it."""
    scores = []
    for r in results:
        correct = r.get("correct") or ""
        if len(correct) < first:
            return None
        scores.append(100.0 * correct[:first].count("1") / first)
    return (min(scores), max(scores)) if scores else None
