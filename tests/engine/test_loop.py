"""Tests of the training loop and its hooks with fake steps and loaders."""

import copy
import math

import pytest
import torch
from torch import nn

from slowfast.config import load_config
from slowfast.engine.bn_grouping import BNGrouping
from slowfast.engine.hooks import NonFiniteGuard, NonFiniteLossError, ScheduleHook
from slowfast.engine.loop import HookBase, StepStats, TrainLoop
from slowfast.engine.step import TrainStep
from slowfast.models.describe import ModelInfo
from slowfast.models.norm import SubBatchNorm3d
from slowfast.multigrid import MultigridSchedule
from slowfast.utils.distributed import RunContext

DATASET_SIZE = 96


def _schedule(*opts):
    cfg = load_config(
        opts=[
            "MULTIGRID.LONG_CYCLE", "True", "MULTIGRID.SHORT_CYCLE", "True",
            "TRAIN.BATCH_SIZE", "2", "DATA.NUM_FRAMES", "8",
            "DATA.TRAIN_CROP_SIZE", "32", "DATA.TRAIN_JITTER_SCALES", "[40, 48]",
            "MULTIGRID.BN_BASE_SIZE", "2",
            "SOLVER.LR_POLICY", "steps_with_relative_lrs", "SOLVER.BASE_LR", "0.1",
            "SOLVER.STEPS", "[0, 6, 8]", "SOLVER.LRS", "[1, 0.1, 0.01]",
            "SOLVER.MAX_EPOCH", "10", "SOLVER.WARMUP_EPOCHS", "1.0",
            "SOLVER.WARMUP_START_LR", "0.01", *opts,
        ]
    )  # fmt: skip
    return MultigridSchedule.from_cfg(cfg, 1, ModelInfo())  # any model


class _Sampler:
    """Records the span of epochs the schedule hook selects."""

    def __init__(self, schedule=None):
        self.spans = []
        self.schedule = schedule

    def set_epoch(self, epoch, start_iter=0, end_epoch=None):
        assert start_iter == 0
        self.spans.append((epoch, end_epoch))


class _Loader:
    """Batches of the sizes the schedule plans for the sampler's epochs;
    ``extra`` batches more (or fewer) at the end of the stream."""

    def __init__(self, schedule, sampler, extra=0):
        self.schedule, self.sampler, self.extra = schedule, sampler, extra

    def __iter__(self):
        first, end = self.sampler.spans[-1]
        sizes = []
        for epoch in range(first, end):
            iters = self.schedule.iters_in_epoch(epoch, DATASET_SIZE)
            sizes += [
                self.schedule.iter_shape(epoch, it).per_proc_batch
                for it in range(iters)
            ]
        sizes = sizes + sizes[-1:] * self.extra if self.extra >= 0 else sizes[:-1]
        for size in sizes:
            yield [torch.zeros(size, 1)], torch.zeros(size), None, {"num_failed": 0}


class _CountingGrouping(BNGrouping):
    """A BN grouping that counts the times it actually regroups."""

    def __init__(self, model):
        super().__init__(model, {1}, world_size=1, rank=0)
        self.changes = 0

    def apply(self, num_splits, sync_size):
        before = self._state
        super().apply(num_splits, sync_size)
        self.changes += self._state != before


class _Events(HookBase):
    def __init__(self, log):
        self.log = log

    def before_epoch(self, state):
        self.log.append(("before_epoch", state.epoch))

    def after_step(self, state):
        self.log.append(("after_step", state.epoch, state.iter))

    def after_epoch(self, state):
        self.log.append(("after_epoch", state.epoch))

    def after_train(self, state):
        self.log.append(("after_train",))


def test_loop_sets_the_schedules_lr_and_regroups_bn_only_on_shape_changes():
    sched = _schedule()
    sampler = _Sampler(sched)
    param = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    bn_model = nn.Sequential(SubBatchNorm3d(2))
    grouping = _CountingGrouping(bn_model)
    seen = []

    def step(batch):
        seen.append(optimizer.param_groups[0]["lr"])
        return StepStats(loss=1.0, top1_err=0.0, top5_err=0.0, failed=0.0)

    events = []
    hooks = [ScheduleHook(sched, sampler, optimizer, grouping, 2), _Events(events)]
    loop = TrainLoop(
        step,
        _Loader(sched, sampler),
        lambda e: sched.iters_in_epoch(e, DATASET_SIZE),
        hooks,
    )
    state = loop.run(0, sched.max_epoch)

    planned, groupings = [], []
    for epoch in range(sched.max_epoch):
        iters = sched.iters_in_epoch(epoch, DATASET_SIZE)
        for it in range(iters):
            planned.append(sched.lr_at(epoch + it / iters))
            shape = sched.iter_shape(epoch, it)
            groupings.append((shape.bn_splits, sched.bn_sync_size(epoch)))
    assert seen == planned and len(set(seen)) > 5
    assert state.global_iter == len(planned)
    assert sampler.spans == [(0, sched.max_epoch)]
    transitions = 1 + sum(a != b for a, b in zip(groupings, groupings[1:]))
    assert grouping.changes == transitions < len(groupings)
    assert events[0] == ("before_epoch", 0) and events[-1] == ("after_train",)
    assert events.count(("after_epoch", 3)) == 1


@pytest.mark.parametrize(
    "extra, message",
    [(-1, "epoch 2: the loader gave"), (1, "more batches than the schedule plans")],
)
def test_loop_refuses_a_loader_that_disagrees_with_the_schedule(extra, message):
    sched = _schedule()
    sampler = _Sampler(sched)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    events = []
    loop = TrainLoop(
        lambda batch: StepStats(1.0, 0.0, 0.0, 0.0),
        _Loader(sched, sampler, extra=extra),
        lambda e: sched.iters_in_epoch(e, DATASET_SIZE),
        [ScheduleHook(sched, sampler, optimizer, None, 2), _Events(events)],
    )
    with pytest.raises(RuntimeError, match=message):
        loop.run(0, 2)
    assert sampler.spans == [(0, 2)]
    assert ("after_epoch", 0) in events and events[-1] == ("after_train",)
    assert (("after_epoch", 1) in events) == (extra > 0)


class _Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, inputs):
        return self.fc(inputs[0])


class _ToyBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(3)
        self.fc = nn.Linear(3, 2)

    def forward(self, inputs):
        return self.fc(self.bn(inputs[0]))


def _state(model, optimizer):
    """Weights, BN buffers and momentum buffers, copied."""
    tensors = list(model.parameters()) + list(model.buffers())
    tensors += [s["momentum_buffer"] for s in optimizer.state.values()]
    return [t.detach().clone() for t in tensors]


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _bad_step_is_skipped(make_bad, fused=None):
    """A good step, then a bad one (``make_bad(step)`` returns its loss
    function): the bad one changes no weight, BN buffer or momentum."""
    torch.manual_seed(0)
    model = _ToyBN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=fused)
    step = TrainStep(
        model, optimizer, lambda p, y: p.sum(), RunContext(), _null_context
    )
    batch = ([torch.randn(4, 3)], torch.zeros(4, dtype=torch.long), None, {})
    batch[3]["num_failed"] = torch.zeros(4)
    model.eval()  # as evaluation leaves it: the step trains in training mode
    first = step(batch)
    assert model.training
    assert first.applied and math.isfinite(first.loss)
    before = _state(model, optimizer)
    step.loss_fn = make_bad(step)
    second = step(batch)
    assert not second.applied
    assert _same(_state(model, optimizer), before)
    step.loss_fn = lambda p, y: p.sum()
    assert step(batch).applied  # and the run could go on
    assert not _same(_state(model, optimizer), before)
    return second


def _nan_loss(step):
    return lambda p, y: p.sum() * float("nan")


def _inf_gradient(step):
    def loss_fn(preds, labels):
        preds.register_hook(lambda g: g * float("inf"))
        return preds.sum()

    return loss_fn


def test_the_step_trains_a_ddp_model_that_evaluation_left_in_eval_mode(tmp_path):
    """Evaluation puts the bare model in eval mode, not its DDP wrapper."""
    import torch.distributed as dist

    init = f"file://{tmp_path / 'rendezvous'}"
    dist.init_process_group("gloo", init_method=init, world_size=1, rank=0)
    try:
        net = _ToyBN()
        ddp = nn.parallel.DistributedDataParallel(net)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        step = TrainStep(
            ddp, optimizer, lambda p, y: p.sum(), RunContext(), _null_context
        )
        batch = ([torch.randn(4, 3)], torch.zeros(4, dtype=torch.long), None, {})
        batch[3]["num_failed"] = torch.zeros(4)
        net.eval()  # as the evaluator and precise BN leave it
        assert ddp.training  # the wrapper's flag says nothing
        before = net.bn.running_mean.clone()
        step(batch)
        assert net.training and all(m.training for m in net.modules())
        assert not torch.equal(net.bn.running_mean, before)  # BN in training mode
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("make_bad", [_nan_loss, _inf_gradient])
def test_a_non_finite_step_leaves_weights_bn_and_optimizer_state(make_bad):
    stats = _bad_step_is_skipped(make_bad)
    assert math.isnan(stats.loss) == (make_bad is _nan_loss)


@pytest.mark.parametrize("make_bad", [_nan_loss, _inf_gradient])
def test_the_skip_on_the_device_never_reads_the_verdict(make_bad, monkeypatch):
    """The GPU path (fused SGD's found_inf, BN buffers kept by torch.where),
    run on the CPU: nothing reads the step's statistics back."""
    from slowfast.engine import step as step_module

    monkeypatch.setattr(
        step_module, "skips_on_device", lambda opt, dev: bool(opt.state)
    )
    reads = []
    real = StepStats.read_all
    monkeypatch.setattr(
        StepStats, "read_all", staticmethod(lambda s: reads.append(1) or real(s))
    )

    def make_bad_unread(step):
        reads.clear()
        return make_bad(step)

    original = step_module.TrainStep.finish

    def finish(self, *args):
        stats = original(self, *args)
        if self.optimizer.state and not reads:  # after the first step
            assert stats._host is None  # still pending on the device
        return stats

    monkeypatch.setattr(step_module.TrainStep, "finish", finish)
    _bad_step_is_skipped(make_bad_unread, fused=True)


def test_guard_names_the_first_bad_step_when_statistics_are_read_back(tmp_path):
    batch = ([torch.ones(2, 3)], torch.zeros(2, dtype=torch.long), None, {})
    values = iter([1.0, float("nan"), 2.0, float("inf"), 1.0, 1.0])

    def step(b):
        loss = next(values)
        ok = float(math.isfinite(loss))
        return StepStats.pending(torch.tensor([loss, 0.0, 0.0, 0.0, ok]).double())

    events = []
    loop = TrainLoop(
        step,
        [batch] * 6,
        lambda e: 6,
        [NonFiniteGuard(str(tmp_path)), _Events(events)],
        sync_period=3,
    )
    with pytest.raises(NonFiniteLossError, match=r"loss is nan .* iteration 2/6") as e:
        loop.run(0, 1)
    assert str(e.value).endswith("no checkpoint was saved yet")
    assert "global iteration 2)" in str(e.value)
    # The guard acted at the read-back after the third step, before the others.
    assert [e for e in events if e[0] == "after_step"] == [
        ("after_step", 0, 0),
        ("after_step", 0, 1),
    ]
    assert len(list(values)) == 3  # three steps ran


def test_statistics_are_read_back_every_sync_period_and_at_the_epochs_end():
    read = []

    class Reader(HookBase):
        def after_step(self, state):
            read.append((state.iter, [r.iter for r in state.readback]))

    loop = TrainLoop(
        lambda b: StepStats.pending(torch.zeros(5).double()),
        [([torch.zeros(1)],)] * 7,
        lambda e: 7,
        [Reader()],
        sync_period=3,
    )
    loop.run(0, 1)
    assert read == [
        (0, []),
        (1, []),
        (2, [0, 1, 2]),
        (3, []),
        (4, []),
        (5, [3, 4, 5]),
        (6, [6]),
    ]


def _null_context():
    import contextlib

    return contextlib.nullcontext()


def test_optimizer_groups_come_from_the_model():
    from slowfast.solver.optimizer import construct_optimizer

    cfg = load_config(opts=["SOLVER.WEIGHT_DECAY", "0.001", "BN.WEIGHT_DECAY", "0.0"])
    plain = nn.Sequential(nn.Conv3d(3, 4, 1), nn.BatchNorm3d(4))
    groups = construct_optimizer(plain, cfg).param_groups
    assert [len(g["params"]) for g in groups] == [2, 2]  # norm first, then the rest
    assert [g["weight_decay"] for g in groups] == [0.0, 0.001]

    class OwnGroups(_Toy):
        def param_groups(self, cfg):
            return [{"params": list(self.parameters()), "weight_decay": 0.5}]

    own = construct_optimizer(OwnGroups(), cfg).param_groups
    assert len(own) == 1 and own[0]["weight_decay"] == 0.5


def test_sgd_gives_the_same_result_with_any_update_implementation():
    from slowfast.solver.optimizer import construct_optimizer

    cfg = load_config(opts=["SOLVER.WEIGHT_DECAY", "0.001", "SOLVER.MOMENTUM", "0.9"])
    torch.manual_seed(0)
    start = nn.Sequential(nn.Conv3d(3, 4, 3), nn.BatchNorm3d(4), nn.Conv3d(4, 2, 1))
    x = torch.randn(2, 3, 4, 6, 6)
    finals = []
    for foreach in (True, False):
        model = copy.deepcopy(start)
        opt = construct_optimizer(model, cfg)
        assert all(g["foreach"] is None for g in opt.param_groups)  # torch's choice
        for g in opt.param_groups:
            g["foreach"] = foreach
        for _ in range(3):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    initial = torch.cat([p.detach().flatten() for p in start.parameters()])
    assert not torch.equal(finals[0], initial)
    assert torch.equal(finals[0], finals[1])
