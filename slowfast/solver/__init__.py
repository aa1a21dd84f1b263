"""Learning-rate policies (pure functions of explicit values)."""

from slowfast.solver.lr_policy import (
    POLICIES,
    LrPolicy,
    constant,
    cosine,
    linear_warmup,
    step_index,
    steps,
    steps_with_relative_lrs,
)

__all__ = [
    "POLICIES",
    "LrPolicy",
    "constant",
    "cosine",
    "linear_warmup",
    "step_index",
    "steps",
    "steps_with_relative_lrs",
]
