"""Tests of the LR policies (pure functions) and of ``LrPolicy``."""

import math

import pytest

from slowfast.solver import (
    LrPolicy,
    constant,
    cosine,
    linear_warmup,
    step_index,
    steps,
    steps_with_relative_lrs,
)


def test_step_index_boundaries():
    assert step_index(0, [0, 10, 20]) == 0
    assert step_index(9.999, [0, 10, 20]) == 0
    assert step_index(10, [0, 10, 20]) == 1
    assert step_index(25, [0, 10, 20]) == 2
    # A zero-length stage is skipped (the later one wins).
    assert step_index(10, [0, 10, 10, 20]) == 2


def test_steps_with_relative_lrs():
    kwargs = dict(base_lr=0.1, steps=[0, 94, 154, 196], lrs=[1, 0.1, 0.01, 0.001])
    assert steps_with_relative_lrs(0, **kwargs) == pytest.approx(0.1)
    assert steps_with_relative_lrs(93.99, **kwargs) == pytest.approx(0.1)
    assert steps_with_relative_lrs(94, **kwargs) == pytest.approx(0.01)
    assert steps_with_relative_lrs(200, **kwargs) == pytest.approx(1e-4)


def test_steps_gamma_with_and_without_steps():
    assert steps(5, base_lr=1.0, gamma=0.1, steps=[0, 10, 20]) == pytest.approx(1.0)
    assert steps(10, base_lr=1.0, gamma=0.1, steps=[0, 10, 20]) == pytest.approx(0.1)
    assert steps(25, base_lr=1.0, gamma=0.1, steps=[10, 20]) == pytest.approx(0.01)
    assert steps(7.5, base_lr=2.0, gamma=0.5, step_size=3) == pytest.approx(0.5)


def test_cosine_endpoints_and_midpoint():
    kwargs = dict(base_lr=0.4, end_lr=0.004, max_epoch=100)
    assert cosine(0, **kwargs) == pytest.approx(0.4)
    assert cosine(50, **kwargs) == pytest.approx((0.4 + 0.004) / 2)
    assert cosine(100, **kwargs) == pytest.approx(0.004)
    assert cosine(25, **kwargs) == pytest.approx(
        0.004 + 0.396 * (math.cos(math.pi / 4) + 1) / 2
    )


def test_constant():
    assert constant(123.4, base_lr=0.05) == 0.05


def test_linear_warmup_is_linear_to_the_policy_at_its_end():
    def policy(epoch):
        return cosine(epoch, base_lr=1.0, end_lr=0.0, max_epoch=100)

    target = policy(10)
    kwargs = dict(warmup_epochs=10, warmup_start_lr=0.01)
    assert linear_warmup(0, policy, **kwargs) == pytest.approx(0.01)
    assert linear_warmup(5, policy, **kwargs) == pytest.approx(
        0.01 + (target - 0.01) / 2
    )
    assert linear_warmup(2.5, policy, **kwargs) == pytest.approx(
        0.01 + (target - 0.01) / 4
    )
    assert linear_warmup(10, policy, **kwargs) == pytest.approx(target)
    assert linear_warmup(50, policy, **kwargs) == pytest.approx(policy(50))
    # No warm-up: the policy itself.
    assert linear_warmup(0, policy, warmup_epochs=0, warmup_start_lr=9) == 1.0


def test_lr_policy_object_applies_warmup():
    policy = LrPolicy(
        name="steps_with_relative_lrs",
        base_lr=0.1,
        max_epoch=30,
        steps=(0, 10, 20),
        lrs=(1, 0.1, 0.01),
        warmup_epochs=4,
        warmup_start_lr=0.02,
    )
    assert policy(0) == pytest.approx(0.02)
    assert policy(2) == pytest.approx(0.06)
    assert policy(4) == pytest.approx(0.1)
    assert policy(15) == pytest.approx(0.01)
    assert policy.base(2) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="exp"), "SOLVER.LR_POLICY"),
        (dict(name="steps", steps=(0, 20, 10)), "SOLVER.STEPS"),
        (dict(name="steps_with_relative_lrs", steps=(5, 10), lrs=(1, 1)), "start"),
        (dict(name="steps_with_relative_lrs", steps=(0, 10), lrs=(1,)), "SOLVER.LRS"),
    ],
)
def test_lr_policy_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LrPolicy(base_lr=0.1, max_epoch=30, **kwargs)
