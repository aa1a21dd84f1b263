"""The study's runs: arms, budgets and seeds, and each run's config overrides.

A study trains and tests *arms* that differ only in ``MULTIGRID`` keys, at
several *budgets* (multiples of the base config's SOLVER.MAX_EPOCH) and seeds.
This module builds each run's config overrides and compares a finished run's
config with the one the study builds; it starts no process and writes no file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Sequence

from fvcore.common.config import CfgNode

from slowfast.checkpoint import fingerprint as fp

# Arm name -> (MULTIGRID.LONG_CYCLE, MULTIGRID.SHORT_CYCLE).
ARMS = {
    "baseline": (False, False),
    "long": (True, False),
    "short": (False, True),
    "long_short": (True, True),
}
# TRAIN.CHECKPOINT_PERIOD of the study's training runs: larger than any run,
# so only the last epoch (always done by the trainer) saves. TRAIN.EVAL_PERIOD
# is 0: the training runs do not validate (the test process scores the final
# checkpoint on the same videos), so no evaluation counts as training time.
# The same values for every arm, so arms differ only in MULTIGRID.
LAST_EPOCH_ONLY = 1_000_000
RESULT_FILE = "study_result.json"


@dataclass(frozen=True)
class Run:
    """One training + test run of the study.

    Attributes:
        arm: a key of ``ARMS``.
        budget: multiple of the base config's SOLVER.MAX_EPOCH.
        seed: RNG_SEED.
    """

    arm: str
    budget: float
    seed: int

    @property
    def name(self) -> str:
        """Folder name of the run, e.g. ``long_short_b0.5_s0``."""
        return f"{self.arm}_b{self.budget:g}_s{self.seed}"


def _split(text: str, what: str) -> list:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"--{what}: empty list")
    return list(dict.fromkeys(items))  # drops repeats, keeps the order


def parse_arms(text: str) -> list:
    """Parses ``--arms`` ("baseline,long_short"); raises ValueError on a bad name."""
    arms = _split(text, "arms")
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        raise ValueError(f"--arms: unknown arm {unknown[0]!r}; known: {list(ARMS)}")
    return arms


def parse_budgets(text: str) -> list:
    """Parses ``--budgets`` ("0.5,1,2"); raises ValueError unless all are > 0."""
    budgets = []
    for item in _split(text, "budgets"):
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"--budgets: {item!r} is not a number") from None
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"--budgets: {item!r} must be a number > 0")
        budgets.append(value)
    return list(dict.fromkeys(budgets))


def parse_seeds(text: str) -> list:
    """Parses ``--seeds`` ("0,1"); raises ValueError on a non-integer."""
    try:
        return [int(item) for item in _split(text, "seeds")]
    except ValueError as err:
        raise ValueError(f"--seeds: {err}") from None


def list_runs(arms: Sequence[str], budgets: Sequence[float], seeds: Sequence[int]):
    """Returns the runs in the order they are made: seed, then budget, then arm.

    A whole sweep of the first seed comes first, so a stopped study already
    compares every arm.
    """
    return [Run(a, b, s) for s in seeds for b in budgets for a in arms]


def _round_half_up(value: float) -> int:
    return int(math.floor(value + 0.5))


def scale_steps(steps: Sequence[float], budget: float) -> list:
    """Scales SOLVER.STEPS by ``budget``: rounded half up, kept strictly increasing.

    Args:
        steps: the base config's SOLVER.STEPS (the first is usually 0).
        budget: the factor.

    Returns:
        list: the scaled steps (unchanged at budget 1).
    """
    if budget == 1:
        return list(steps)
    scaled: list = []
    for step in steps:
        value = _round_half_up(step * budget)
        scaled.append(max(value, scaled[-1] + 1) if scaled else value)
    return scaled


def budget_overrides(solver: CfgNode, budget: float) -> list:
    """SOLVER overrides of a budget (the same for every arm).

    MAX_EPOCH becomes ``round(budget * MAX_EPOCH)``; non-empty STEPS are scaled
    by ``scale_steps``, as is STEP_SIZE for a ``steps`` policy without STEPS.
    WARMUP_EPOCHS is kept; MULTIGRID.EPOCH_FACTOR still applies on top.

    Args:
        solver: the base config's SOLVER node.
        budget: multiple of SOLVER.MAX_EPOCH.

    Returns:
        list: KEY VALUE strings.

    Raises:
        ValueError: the budget leaves no epoch, or no room for the LR steps.
    """
    max_epoch = _round_half_up(budget * solver.MAX_EPOCH)
    if max_epoch < 1:
        raise ValueError(
            f"budget {budget:g}: {budget:g} x SOLVER.MAX_EPOCH "
            f"({solver.MAX_EPOCH}) rounds to 0 epochs"
        )
    opts = ["SOLVER.MAX_EPOCH", str(max_epoch)]
    if solver.STEPS:
        steps = scale_steps(solver.STEPS, budget)
        if steps[-1] >= max_epoch:
            raise ValueError(
                f"budget {budget:g}: SOLVER.STEPS {list(solver.STEPS)} scaled to "
                f"{steps} do not fit in {max_epoch} epochs; use a larger budget"
            )
        opts += ["SOLVER.STEPS", json.dumps(steps)]
    elif solver.LR_POLICY == "steps":
        step_size = max(1, _round_half_up(budget * solver.STEP_SIZE))
        opts += ["SOLVER.STEP_SIZE", str(step_size)]
    return opts


def run_overrides(
    run: Run, solver: CfgNode, run_dir: str, keep_periods: bool = False
) -> list:
    """The KEY VALUE overrides of a run, applied after the user's.

    Arms differ only in MULTIGRID.LONG_CYCLE / SHORT_CYCLE (the trainer turns
    BN into sub-batch BN by itself when multigrid is on); budget and seed keys
    are the same for every arm.

    Args:
        run: the run.
        solver: the base config's SOLVER node.
        run_dir: the run's OUTPUT_DIR.
        keep_periods: keep the config's TRAIN.EVAL_PERIOD / CHECKPOINT_PERIOD
            instead of saving at the last epoch only and not validating.

    Returns:
        list: KEY VALUE strings.
    """
    long_cycle, short_cycle = ARMS[run.arm]
    opts = ["MULTIGRID.LONG_CYCLE", str(long_cycle)]
    opts += ["MULTIGRID.SHORT_CYCLE", str(short_cycle)]
    opts += budget_overrides(solver, run.budget)
    opts += ["RNG_SEED", str(run.seed), "OUTPUT_DIR", run_dir]
    if not keep_periods:
        opts += ["TRAIN.EVAL_PERIOD", "0"]
        opts += ["TRAIN.CHECKPOINT_PERIOD", str(LAST_EPOCH_ONLY)]
    return opts


def config_differences(expected: CfgNode, stored: dict) -> list:
    """What a finished run was made with that the study's run would not be.

    Args:
        expected: the config the study builds for the run.
        stored: the finished run's ``config.yaml``, loaded.

    Returns:
        list: ``(key, expected value, stored value)``, by key, for every key of
        the run's definition or of its test's (``slowfast.checkpoint.fingerprint``:
        data paths, views) that differs; empty when the run can be reused.
    """
    diffs = fp.differences(expected, stored)
    seen = {key for key, _, _ in diffs}
    diffs += [
        diff
        for diff in fp.differences(expected, stored, fp.test_definition)
        if diff[0] not in seen
    ]
    return sorted(diffs, key=lambda diff: diff[0])
