"""Learning-rate policies as pure functions of explicit values.

Each policy maps a (fractional) epoch to a learning rate. A policy is one
function registered with ``@LR_POLICY_REGISTRY.register()``: its name is the
SOLVER.LR_POLICY value, its first argument the epoch, and its keyword-only
arguments are taken by name from the run's :class:`LrPolicy` values
(``base_lr``, ``max_epoch``, ``steps``, ``lrs``, ``gamma``, ``step_size``,
``end_lr``). ``linear_warmup``
wraps any policy with PySlowFast's linear warm-up::

    lr = start + (policy(WARMUP_EPOCHS) - start) * epoch / WARMUP_EPOCHS

for ``epoch < WARMUP_EPOCHS``. ``LrPolicy`` bundles the values of one run (built
once, e.g. by the multigrid schedule) and evaluates the full LR. Nothing here
reads a config: callers pass the values.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Callable, Sequence, Tuple

from fvcore.common.config import CfgNode
from fvcore.common.registry import Registry

from slowfast.utils.registry import check_registered

LR_POLICY_REGISTRY = Registry("LR_POLICY")
LR_POLICY_REGISTRY.__doc__ = "LR policies ``f(epoch, *, <LrPolicy fields>)`` by name."


def lr_policy_names() -> Tuple[str, ...]:
    """The registered SOLVER.LR_POLICY values, sorted."""
    return tuple(sorted(name for name, _ in LR_POLICY_REGISTRY))


def step_index(epoch: float, steps: Sequence[float]) -> int:
    """Returns the index of the LR stage that ``epoch`` falls in.

    Args:
        epoch: fractional epoch.
        steps: start epochs of the stages, non-decreasing, ``steps[0] == 0``.

    Returns:
        int: the last ``i`` with ``steps[i] <= epoch`` (0 before the first step).
    """
    index = 0
    for i, start in enumerate(steps):
        if start <= epoch:
            index = i
        else:
            break
    return index


@LR_POLICY_REGISTRY.register()
def steps_with_relative_lrs(
    epoch: float, *, base_lr: float, steps: Sequence[float], lrs: Sequence[float]
) -> float:
    """Piecewise-constant LR: ``base_lr * lrs[i]`` in stage ``i``.

    Args:
        epoch: fractional epoch.
        base_lr: SOLVER.BASE_LR.
        steps: SOLVER.STEPS, stage start epochs beginning with 0.
        lrs: SOLVER.LRS, the LR of each stage relative to ``base_lr``.

    Returns:
        float: the learning rate.
    """
    return base_lr * lrs[step_index(epoch, steps)]


@LR_POLICY_REGISTRY.register()
def steps(
    epoch: float,
    *,
    base_lr: float,
    gamma: float,
    steps: Sequence[float] = (),
    step_size: float = 1.0,
) -> float:
    """Step decay: ``base_lr * gamma ** k``.

    ``k`` counts the entries of ``steps`` in ``(0, epoch]`` (a leading 0 is
    allowed and ignored); with no ``steps``, ``k = floor(epoch / step_size)``.

    Args:
        epoch: fractional epoch.
        base_lr: SOLVER.BASE_LR.
        gamma: SOLVER.GAMMA, the decay factor.
        steps: SOLVER.STEPS, decay epochs (may be empty).
        step_size: SOLVER.STEP_SIZE, epochs between decays when ``steps`` is empty.

    Returns:
        float: the learning rate.
    """
    if steps:
        decays = sum(1 for s in steps if 0 < s <= epoch)
    else:
        decays = int(math.floor(epoch / step_size))
    return base_lr * gamma**decays


@LR_POLICY_REGISTRY.register()
def cosine(epoch: float, *, base_lr: float, end_lr: float, max_epoch: float) -> float:
    """Half-cosine from ``base_lr`` at epoch 0 to ``end_lr`` at ``max_epoch``.

    Args:
        epoch: fractional epoch (clamped to ``[0, max_epoch]``).
        base_lr: SOLVER.BASE_LR.
        end_lr: SOLVER.COSINE_END_LR.
        max_epoch: SOLVER.MAX_EPOCH.

    Returns:
        float: the learning rate.
    """
    progress = min(max(epoch / max_epoch, 0.0), 1.0)
    return end_lr + (base_lr - end_lr) * (math.cos(math.pi * progress) + 1.0) * 0.5


@LR_POLICY_REGISTRY.register()
def constant(epoch: float, *, base_lr: float) -> float:
    """Constant LR.

    Args:
        epoch: fractional epoch (unused).
        base_lr: SOLVER.BASE_LR.

    Returns:
        float: ``base_lr``.
    """
    del epoch
    return base_lr


def linear_warmup(
    epoch: float,
    lr_fn: Callable[[float], float],
    *,
    warmup_epochs: float,
    warmup_start_lr: float,
) -> float:
    """Applies PySlowFast's linear warm-up to a policy.

    Args:
        epoch: fractional epoch.
        lr_fn: the policy (epoch -> LR) without warm-up.
        warmup_epochs: SOLVER.WARMUP_EPOCHS (0 disables the warm-up).
        warmup_start_lr: SOLVER.WARMUP_START_LR, the LR at epoch 0.

    Returns:
        float: the warmed-up LR before ``warmup_epochs``, else ``lr_fn(epoch)``.
    """
    if epoch < warmup_epochs:
        end = lr_fn(warmup_epochs)
        return warmup_start_lr + (end - warmup_start_lr) * epoch / warmup_epochs
    return lr_fn(epoch)


@dataclass(frozen=True)
class LrPolicy:
    """The LR policy of one run, with every value explicit.

    Attributes:
        name: a name registered in ``LR_POLICY_REGISTRY``.
        base_lr: SOLVER.BASE_LR.
        max_epoch: epochs of the run (cosine's period).
        steps: stage start epochs (step policies).
        lrs: relative LR per stage (``steps_with_relative_lrs``).
        gamma: decay factor (``steps``).
        step_size: epochs between decays when ``steps`` is empty (``steps``).
        end_lr: final LR of ``cosine``.
        warmup_epochs: length of the linear warm-up (0: none).
        warmup_start_lr: LR at epoch 0 when warming up.
    """

    name: str
    base_lr: float
    max_epoch: float
    steps: tuple = ()
    lrs: tuple = ()
    gamma: float = 0.1
    step_size: float = 1.0
    end_lr: float = 0.0
    warmup_epochs: float = 0.0
    warmup_start_lr: float = 0.0

    def __post_init__(self) -> None:
        if self.name not in LR_POLICY_REGISTRY:
            raise ValueError(
                f"SOLVER.LR_POLICY = {self.name!r}: must be one of "
                f"{list(lr_policy_names())}"
            )
        steps_ = list(self.steps)
        if any(a > b for a, b in zip(steps_, steps_[1:])):
            raise ValueError(f"SOLVER.STEPS = {steps_}: must be increasing")
        if self.name == "steps_with_relative_lrs":
            if not steps_ or steps_[0] != 0:
                raise ValueError(
                    f"SOLVER.STEPS = {steps_}: must start with 0 for "
                    "steps_with_relative_lrs"
                )
            if len(self.lrs) < len(steps_):
                raise ValueError(
                    f"SOLVER.LRS = {list(self.lrs)}: needs one value per "
                    f"SOLVER.STEPS entry ({len(steps_)})"
                )
        if self.name == "steps" and not steps_ and self.step_size <= 0:
            raise ValueError(f"SOLVER.STEP_SIZE = {self.step_size}: must be positive")

    def base(self, epoch: float) -> float:
        """Returns the policy's LR at ``epoch`` without warm-up.

        Args:
            epoch: fractional epoch.

        Returns:
            float: the learning rate.
        """
        fn = LR_POLICY_REGISTRY.get(self.name)
        names = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        return fn(epoch, **{name: getattr(self, name) for name in names})

    def __call__(self, epoch: float) -> float:
        """Returns the full LR at ``epoch``, warm-up included.

        Args:
            epoch: fractional epoch (``epoch + iter / iters_per_epoch``).

        Returns:
            float: the learning rate.
        """
        return linear_warmup(
            epoch,
            self.base,
            warmup_epochs=self.warmup_epochs,
            warmup_start_lr=self.warmup_start_lr,
        )


def check_lr_policy_name(cfg: CfgNode) -> None:
    """Raises a one-line ValueError unless SOLVER.LR_POLICY is registered."""
    check_registered("SOLVER.LR_POLICY", cfg.SOLVER.LR_POLICY, lr_policy_names())
