"""95% intervals of the study's accuracies and of multigrid's difference.

Two sources of noise move a run's test accuracy: the seed (initialisation,
clip sampling, data order) and the test set (a finite sample of videos). The
estimators:

* an arm's accuracy: Student's t interval over its seeds' accuracies (one
  value per seed; at least two seeds), cut to [0, 100]
  (``accuracy_interval``): with few seeds t's interval can reach past 100%,
  an accuracy cannot;
* multigrid minus baseline: Student's t interval over seeds of the paired
  difference, arm and baseline trained with the same seed and tested on the
  same videos (``paired_difference``). The seed-to-seed spread of the
  difference contains both sources;
* test sampling alone (``test_sampling_halfwidth``): from the per-video
  correctness of the two runs of a seed, the normal interval's half-width of
  the mean per-video difference (pairs of videos, so what both arms get
  right or wrong cancels). It says how much of the interval the test set's
  size accounts for; with one seed it is the only interval there is, and it
  leaves the seed's noise out.

Pure functions: no file, no clock.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Sequence, Tuple

from scipy import stats

LEVEL = 0.95

Interval = Tuple[float, float, float]  # mean, low, high


def t_interval(values: Sequence[float], level: float = LEVEL) -> Optional[Interval]:
    """Mean and Student's t interval of ``values``; None with fewer than two.

    Args:
        values: one value per seed.
        level: the coverage.

    Returns:
        tuple: (mean, low, high).
    """
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def accuracy_interval(
    values: Sequence[float], level: float = LEVEL
) -> Optional[Interval]:
    """``t_interval`` of accuracies in percent, its ends cut to [0, 100].

    Args:
        values: one accuracy (%) per seed.
        level: the coverage.

    Returns:
        tuple: (mean, low, high), or None with fewer than two values.
    """
    interval = t_interval(values, level)
    if interval is None:
        return None
    mean, low, high = interval
    return mean, max(low, 0.0), min(high, 100.0)


def correctness(scores, labels) -> str:
    """Per-video top-1 correctness as a string of ``0`` and ``1``, in the
    test set's video order (``TEST.SAVE_RESULTS_PATH``'s scores and labels)."""
    right = scores.argmax(dim=1) == labels
    return "".join("1" if r else "0" for r in right.tolist())


def test_sampling_halfwidth(
    arm: str, reference: str, level: float = LEVEL
) -> Optional[float]:
    """Half-width (points) of the test-sampling interval of the accuracy
    difference of two runs tested on the same videos.

    Args:
        arm, reference: per-video correctness strings (``correctness``).
        level: the coverage.

    Returns:
        float: z x the standard error of the mean per-video difference, in
        percentage points; None when the strings differ in length or are
        shorter than two videos.
    """
    n = len(arm)
    if n != len(reference) or n < 2:
        return None
    diffs = [int(a) - int(b) for a, b in zip(arm, reference)]
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1)
    return 100.0 * float(stats.norm.ppf(0.5 + level / 2)) * math.sqrt(var / n)


def paired_difference(
    results: Sequence[dict], metric: str, arm: str, budget: float
) -> Optional[dict]:
    """Accuracy of ``arm`` at ``budget`` minus the baseline's at budget 1, by seed.

    Args:
        results: run results (``arm``, ``budget``, ``seed``, the metric and,
            where tested with per-video correctness, ``correct``).
        metric: the accuracy field (``test_top1``, ...).
        arm, budget: the row.

    Returns:
        dict: ``seeds`` (paired), ``mean`` (mean difference, points),
        ``interval`` (t over seeds, or None with one seed), ``test_halfwidth``
        (mean over seeds of ``test_sampling_halfwidth``, or None without
        per-video correctness); None when no seed has both runs.
    """
    base: Dict[int, dict] = {
        r["seed"]: r for r in results if r["arm"] == "baseline" and r["budget"] == 1
    }
    pairs = [
        (r, base[r["seed"]])
        for r in results
        if r["arm"] == arm and r["budget"] == budget and r["seed"] in base
    ]
    pairs = [
        (r, b) for r, b in pairs if r[metric] is not None and b[metric] is not None
    ]
    if not pairs:
        return None
    diffs = [r[metric] - b[metric] for r, b in pairs]
    widths = [
        test_sampling_halfwidth(r.get("correct") or "", b.get("correct") or "")
        for r, b in pairs
    ]
    known = [w for w in widths if w is not None]
    return {
        "seeds": sorted(r["seed"] for r, _ in pairs),
        "mean": sum(diffs) / len(diffs),
        "interval": t_interval(diffs),
        "test_halfwidth": sum(known) / len(known) if known else None,
    }
