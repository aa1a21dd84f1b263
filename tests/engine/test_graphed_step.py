"""TRAIN.CUDA_GRAPHS: refused where it cannot run; BN buffers kept around
capture and across precise BN.

The graphs themselves need a GPU (tools/dev/check_cuda_graphs.py exercises them
there); these tests pin what holds on any machine, and the check tool's
comparison.
"""

import math
import os

import pytest
import torch
from fvcore.nn.precise_bn import update_bn_stats
from torch import nn

from slowfast.config import ConfigError, load_config
from slowfast.engine.graphed_step import (
    GraphedTrainStep,
    _bn_state,
    _restore_bn_state,
)
from slowfast.engine.precise_bn import update_bn_stats_in_place
from slowfast.engine.step import TrainStep
from slowfast.launch.launcher import Layout
from slowfast.launch.preflight import PreflightError, check_cuda_graphs
from slowfast.models.norm import SubBatchNorm3d
from slowfast.multigrid import MultigridSchedule
from slowfast.utils.distributed import RunContext
from tests.helpers.tool_utils import REPO_ROOT, load_tool
from workshop.bench import graph_check as checker


def test_config_refuses_cuda_graphs_without_a_gpu():
    with pytest.raises(ConfigError, match="TRAIN.CUDA_GRAPHS"):
        load_config([], ["TRAIN.CUDA_GRAPHS", "True", "NUM_GPUS", "0"])


@pytest.mark.parametrize(
    "procs, opts, refused",
    [
        (1, [], None),
        (2, [], None),
        (2, ["BN.NORM_TYPE", "sync_batchnorm"], "BN.NORM_TYPE sync_batchnorm"),
        (
            8,
            ["TRAIN.BATCH_SIZE", "32"],
            "syncs them over 2 processes",
        ),
    ],
)
def test_preflight_wants_bn_statistics_per_process_with_graphs(procs, opts, refused):
    kinetics = os.path.join(REPO_ROOT, "configs", "Kinetics")
    cfg = load_config(
        [os.path.join(kinetics, "SLOWFAST_8x8_R50_multigrid.yaml")],
        ["TRAIN.CUDA_GRAPHS", "True", "NUM_GPUS", str(procs), *opts],
    )
    layout = Layout("plain", 1, procs, 0, "tcp://localhost:9999")
    schedule = MultigridSchedule.from_cfg(cfg, procs)
    if refused is None:
        check_cuda_graphs(cfg, layout, schedule)
        return
    with pytest.raises(PreflightError, match="TRAIN.CUDA_GRAPHS") as err:
        check_cuda_graphs(cfg, layout, schedule)
    assert err.value.exit_status == 2 and refused in str(err.value)
    assert "\n" not in str(err.value)


def test_graphed_step_needs_a_cuda_model():
    model = nn.Sequential(nn.Conv3d(3, 4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx = RunContext(device=torch.device("cpu"))
    with pytest.raises(ValueError, match="needs a GPU"):
        GraphedTrainStep(model, optimizer, nn.CrossEntropyLoss(), ctx, None)


def _model() -> nn.Module:
    model = nn.Sequential(nn.Conv3d(3, 4, 1), SubBatchNorm3d(4, num_splits=2))
    model.add_module("plain", nn.BatchNorm3d(4))
    return model


def _bn_buffers(model: nn.Module) -> list:
    return [
        b for m in model.modules() if isinstance(m, nn.BatchNorm3d) for b in m.buffers()
    ]


def test_bn_state_is_restored_in_place():
    model = _model()
    buffers = _bn_buffers(model)
    before = [b.clone() for b in buffers]
    saved = _bn_state(model)
    assert len(saved) == 6  # running mean, var and batches tracked of both layers
    model.train()(torch.randn(4, 3, 2, 3, 3))
    assert any(not torch.equal(b, c) for b, c in zip(buffers, before))
    _restore_bn_state(model, saved)
    live = _bn_buffers(model)
    assert all(a is b for a, b in zip(live, buffers))  # the same tensors
    assert all(torch.equal(b, c) for b, c in zip(buffers, before))


def test_precise_bn_keeps_the_buffer_tensors_a_graph_holds():
    # fvcore assigns new running-statistics tensors (a CUDA graph would go on
    # updating the old ones); the in-place version copies into the old ones.
    batches = [torch.randn(4, 3, 2, 3, 3) + 1 for _ in range(3)]
    torch.manual_seed(0)
    fvcore_model = _model().train()
    torch.manual_seed(0)
    model = _model().train()
    old = _bn_buffers(fvcore_model)
    update_bn_stats(fvcore_model, batches, 3)
    replaced = sum(a is not b for a, b in zip(_bn_buffers(fvcore_model), old))
    assert replaced == 4  # running mean and var of both layers
    held = _bn_buffers(model)
    update_bn_stats_in_place(model, batches, 3)
    live = _bn_buffers(model)
    assert all(a is b for a, b in zip(live, held))
    assert all(torch.equal(a, b) for a, b in zip(live, _bn_buffers(fvcore_model)))
    assert not torch.equal(live[0], torch.zeros(4))  # precise BN's statistics
    before = live[0].clone()
    model(batches[0])  # training updates the held tensors
    assert not torch.equal(live[0], before)


class _FrozenBNStep(TrainStep):
    """A step whose BN running statistics never change (a broken graph)."""

    def __call__(self, batch):
        saved = _bn_state(self.model)
        stats = super().__call__(batch)
        _restore_bn_state(self.model, saved)
        return stats


class _StaleInputStep(TrainStep):
    """A step that trains on each shape's first batch (stale graph inputs)."""

    def __call__(self, batch):
        if not hasattr(self, "first"):
            self.first = {}
        first = self.first.setdefault(batch[0][0].shape, batch)
        return super().__call__(first)


class _FrozenDropoutStep(TrainStep):
    """A step that draws each shape's first dropout masks again (a graph
    replaying frozen random numbers)."""

    def __call__(self, batch):
        if not hasattr(self, "rng"):
            self.rng = {}
        torch.set_rng_state(
            self.rng.setdefault(batch[0][0].shape, torch.get_rng_state())
        )
        return super().__call__(batch)


class _StaleWeightsStep(TrainStep):
    """A step whose forward and backward see each shape's first weights (a
    graph computing with casts of the weights made at its capture); the
    update applies to the live weights."""

    def __call__(self, batch):
        if not hasattr(self, "first"):
            self.first = {}
        params = list(self.model.parameters())
        live = [p.detach().clone() for p in params]
        first = self.first.setdefault(batch[0][0].shape, live)
        inputs, labels, extras = self.prepare(batch)
        self.buffers.take()
        with torch.no_grad():
            for param, old in zip(params, first):
                param.copy_(old)
        with self.autocast():
            preds = self.model(inputs)
            loss = self.loss_fn(preds.float(), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            for param, now in zip(params, live):
                param.copy_(now)
        return self.finish(loss.detach(), preds.detach(), labels, extras["num_failed"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "step_class, failing, tolerance",
    [
        (TrainStep, set(), 1e-4),
        (_FrozenBNStep, {"bn"}, 1e-4),
        (_StaleInputStep, {"loss"}, 1e-4),
        (_FrozenDropoutStep, {"loss"}, 1e-4),
        # Seen at the tolerance of mixed precision, where a GPU checks it,
        # with the small LR a warm-up starts from.
        (_StaleWeightsStep, {"grads", "weights"}, 2e-2),
    ],
)
def test_check_tool_compares_steps_kind_by_kind(step_class, failing, tolerance):
    config = os.path.join(REPO_ROOT, "configs/Demo/Kinetics_I3D_tiny_multigrid.yaml")
    opts = ["TRAIN.BATCH_SIZE", "2", "MODEL.DROPOUT_RATE", "0.5", "NUM_GPUS", "0"]
    if step_class is _StaleWeightsStep:
        opts += ["SOLVER.BASE_LR", "0.001"]
    cfg = load_config([config], opts)
    results = checker.check(cfg, rounds=2, graphed_class=step_class)
    assert [r.shape.kind for r in results][:2] == ["long 1/4", "long 2/4"]
    assert all(len(r.eager_ms) == 1 for r in results)  # timed after round 1
    failed = checker.failures(results, tolerance)
    bad = {line.split(": ")[1].split()[0] for line in failed}
    assert bad >= failing and (bad == set()) == (failing == set())
    if step_class is TrainStep:  # the same computation on CPU: equal to the bit
        assert all(v == 0.0 for r in results for v in r.diffs.values())


@pytest.mark.parametrize("batch, added", [("16", True), ("2", False)])
def test_check_tool_adds_native_bn_where_every_shape_splits(batch, added):
    config = os.path.join(REPO_ROOT, "configs/Demo/Kinetics_I3D_tiny_multigrid.yaml")
    shapes = checker.check_shapes(load_config([config], ["TRAIN.BATCH_SIZE", batch]))
    last = shapes[-1]
    assert (last.kind == "base, 1 BN split") == added
    assert any(s.bn_splits == 1 for s in shapes)  # a baseline run's batch norm
    if added:
        assert (last.frames, last.crop, last.batch, last.bn_splits) == (8, 64, 16, 1)


def test_check_tool_sees_one_wrong_tensor_and_keeps_nan():
    good = [torch.ones(50) for _ in range(300)]
    bad = [t.clone() for t in good]
    bad[7].zero_()  # one gradient of 300 lost: a small part of the total norm
    assert checker.relative_difference(good, bad) == pytest.approx(1.0)
    assert checker.relative_difference(good, [t.clone() for t in good]) == 0.0
    bad[7] = torch.full((50,), float("inf"))
    assert checker.relative_difference(good, bad) == float("inf")
    assert checker.relative_difference([torch.tensor(2.0)], [torch.tensor(2.2)]) == (
        pytest.approx(0.1)  # one tensor: relative to itself
    )
    both = [torch.tensor([1.0, float("inf")]), torch.tensor([1.0, float("inf")])]
    assert checker.relative_difference(both[:1], both[1:]) == 0.0  # overflowed alike
    assert math.isnan(checker._worse(0.0, float("nan")))
    assert math.isnan(checker._worse(float("nan"), 1.0))


def test_check_tool_says_what_ran_sub_batch_bn_and_needs_a_gpu(monkeypatch, capsys):
    tool = load_tool("dev/check_cuda_graphs.py")
    base = checker.ShapeResult(checker.Shape("base", 8, 64, 16, 1))
    split = checker.ShapeResult(checker.Shape("long 1/4", 2, 45, 128, 16))
    line = tool.header(2, "GPU X", 2e-2, [base, split], triton=True)
    assert line.startswith("2 rounds on GPU X, sub-batch BN in Triton kernels;")
    assert "(tolerance 2e-02)" in line
    assert "native BN (no Triton)" in tool.header(2, "X", 1e-3, [split], False)
    assert "no sub-batch BN" in tool.header(2, "X", 1e-3, [base], True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = os.path.join(REPO_ROOT, "configs/Demo/Kinetics_I3D_tiny_multigrid.yaml")
    assert tool.main(["--cfg", config]) == 2
    assert "need a GPU" in capsys.readouterr().err
