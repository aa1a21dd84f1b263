"""Learning-rate policies (pure functions of explicit values), by registry."""

from slowfast.solver.lr_policy import (
    LR_POLICY_REGISTRY,
    LrPolicy,
    constant,
    cosine,
    linear_warmup,
    lr_policy_names,
    step_index,
    steps,
    steps_with_relative_lrs,
)

__all__ = [
    "LR_POLICY_REGISTRY",
    "LrPolicy",
    "constant",
    "cosine",
    "linear_warmup",
    "lr_policy_names",
    "step_index",
    "steps",
    "steps_with_relative_lrs",
]
