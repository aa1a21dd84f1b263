"""Trains the eager and the CUDA-graph step side by side and compares them.

Used by ``tools/dev/check_cuda_graphs.py``. Two copies of the config's model
(sub-batch BN layers, memory format and precision as a multigrid run has them)
train on the same synthetic batches: one with the eager step
(``engine/step.py``), one with the graphed step (``engine/graphed_step.py``,
one CUDA graph per batch shape). Every round visits every batch shape a
multigrid run trains (``bench.model_step.run_shapes``, and the base shape with
one BN split when no shape has one: a baseline's native batch norm), in
another order each round, so that graphs replay in another order than
captured. Before each step the graphed copy gets the eager copy's state
(weights, BN buffers, optimizer and GradScaler state, copied in place) and
both the same random-number state (dropout); after it the loss, the
gradients, what the step changed in the BN running statistics and in the
weights, and the GradScaler's scale are compared. After the first round both
copies recompute their BN statistics as BN.USE_PRECISE_STATS does
(``engine/precise_bn.py``), and the scale (fp16) is halved, as an overflow
halves it. A thread pins host memory throughout, as the loader's pin-memory
thread does while the trainer captures. A difference is the largest relative
L2 difference of one tensor (:func:`relative_difference`); the check fails
above the tolerance of the run's precision (:data:`TOLERANCE`).
"""

import contextlib
import copy
import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import torch
from fvcore.common.config import CfgNode

from slowfast.engine.bn_grouping import convert_to_sub_bn
from slowfast.engine.graphed_step import GraphedTrainStep
from slowfast.engine.precise_bn import update_bn_stats_in_place
from slowfast.engine.precision import autocast_factory, make_grad_scaler
from slowfast.engine.step import TrainStep
from slowfast.models import build_model, describe_model
from slowfast.models.memory_format import choose_channels_last
from slowfast.models.norm import set_bn_splits
from slowfast.solver.losses import get_loss_func
from slowfast.solver.optimizer import construct_optimizer
from slowfast.utils.distributed import RunContext, get_device
from workshop.bench.model_step import (
    Shape,
    base_shape_index,
    run_shapes,
    synthetic_batch,
)

# Relative L2 differences allowed, by the autocast of the run (fp32: GPU
# convolutions run in TF32 by default, and atomics differ in the last bits).
TOLERANCE = {"fp32": 1e-3, "mixed": 2e-2}
KINDS = ("loss", "grads", "bn", "weights", "scale")


@dataclass
class ShapeResult:
    """The largest differences of one shape's steps and their times.

    Attributes:
        shape: the batch shape.
        diffs: kind -> largest relative difference over the shape's steps:
            "loss", "grads", the step's changes of the BN running statistics
            ("bn") and of the weights ("weights"), and the GradScaler's scale
            after it ("scale": both must skip an overflowing step alike).
        eager_ms, graphed_ms: step times after the first round.
    """

    shape: Shape
    diffs: Dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    eager_ms: List[float] = field(default_factory=list)
    graphed_ms: List[float] = field(default_factory=list)


def relative_difference(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """The largest difference of one tensor of ``a`` from its match in ``b``.

    Tensor ``i`` differs by ``||a_i - b_i|| / max(||a_i||, ||a|| / sqrt(n))``
    (float64; the second term keeps near-zero tensors from dominating): one
    wrong tensor among hundreds shows. Non-finite values must sit at the same
    places in both (fp16 overflows); the finite ones are compared.
    """
    diffs, norms = [], []
    for x, y in zip(a, b):
        x, y = x.double(), y.double()
        finite = torch.isfinite(x)
        if not torch.equal(finite, torch.isfinite(y)):
            return math.inf
        x, y = x[finite], y[finite]
        diffs.append(float((x - y).norm()))
        norms.append(float(x.norm()))
    floor = math.sqrt(sum(n * n for n in norms) / max(len(norms), 1))
    worst = 0.0
    for diff, norm in zip(diffs, norms):
        if diff > 0:
            scale = max(norm, floor)
            worst = max(worst, diff / scale if scale > 0 else math.inf)
    return worst


def _worse(current: float, value: float) -> float:
    """The larger of two differences; NaN (a broken comparison) sticks."""
    if math.isnan(current) or math.isnan(value):
        return math.nan
    return max(current, value)


def _bn_tensors(model: torch.nn.Module) -> List[torch.Tensor]:
    return [
        b
        for m in model.modules()
        if isinstance(m, torch.nn.modules.batchnorm._NormBase)
        for b in (m.running_mean, m.running_var)
        if b is not None
    ]


def _params(model: torch.nn.Module) -> List[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _grads(model: torch.nn.Module) -> List[torch.Tensor]:
    """Gradients, zeros for a parameter the step left without one."""
    return [
        p.grad if p.grad is not None else torch.zeros_like(p) for p in _params(model)
    ]


def _scale(step: TrainStep) -> List[torch.Tensor]:
    """The GradScaler's scale after the step (it halves on an overflow)."""
    return [torch.tensor(step.scaler.get_scale() if step.scaler else 1.0)]


def _state(model: torch.nn.Module) -> Dict[str, List[torch.Tensor]]:
    """Copies of the weights and the BN running statistics."""
    return {
        "weights": [p.detach().clone() for p in _params(model)],
        "bn": [b.clone() for b in _bn_tensors(model)],
    }


def _changes(after: dict, before: dict) -> Dict[str, List[torch.Tensor]]:
    """What a step changed: ``after - before`` per tensor (float32)."""
    return {
        kind: [a.float() - b.float() for a, b in zip(after[kind], before[kind])]
        for kind in after
    }


def build_steps(cfg: CfgNode, graphed_class: Callable = GraphedTrainStep) -> tuple:
    """The eager step and the ``graphed_class`` step, on two equal models."""
    ctx = RunContext(device=get_device(cfg))
    model = convert_to_sub_bn(
        build_model(cfg, choose_channels_last(cfg, describe_model(cfg)))
    )
    model = model.to(ctx.device).train()
    twin = copy.deepcopy(model)

    def step(cls, net):
        return cls(
            net,
            construct_optimizer(net, cfg),
            get_loss_func(cfg.MODEL.LOSS_FUNC),
            ctx,
            autocast_factory(cfg, ctx.device),
            make_grad_scaler(cfg, ctx.device),
            cfg.SOLVER.CLIP_GRAD_L2NORM,
            cfg.DATA.MULTI_LABEL,
        )

    return step(TrainStep, model), step(graphed_class, twin)


def _copy_state(src: TrainStep, dst: TrainStep) -> None:
    """Gives ``dst`` the state of ``src``: weights and buffers in place."""
    dst.model.load_state_dict(src.model.state_dict())
    # Deep copies: loading keeps a state tensor of the right device and dtype
    # itself, and the two optimizers would share their momentum buffers.
    dst.optimizer.load_state_dict(copy.deepcopy(src.optimizer.state_dict()))
    if src.scaler is not None and dst.scaler is not None:
        dst.scaler.load_state_dict(src.scaler.state_dict())


def _rng_state(device: torch.device) -> torch.Tensor:
    """The generator state dropout draws from on ``device``."""
    cuda = device.type == "cuda"
    return torch.cuda.get_rng_state(device) if cuda else torch.get_rng_state()


def _set_rng_state(device: torch.device, state: torch.Tensor) -> None:
    """Sets what :func:`_rng_state` returned."""
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def _timed(step: TrainStep, batch, device: torch.device) -> tuple:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    stats = step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return stats, 1000 * (time.perf_counter() - start)


def _precise_bn(cfg: CfgNode, steps: Sequence[TrainStep], shape: Shape) -> None:
    """The trainer's precise BN on each model, on the same batches (1 BN split)."""
    batches = [synthetic_batch(cfg, shape)[0] for _ in range(2)]
    for step in steps:
        set_bn_splits(step.model, 1)
        inputs = ([x.to(step.device) for x in batch] for batch in batches)
        with step.autocast():
            update_bn_stats_in_place(step.model, inputs, len(batches))


@contextlib.contextmanager
def pinning_thread(device: torch.device):
    """A thread pinning batches of host memory meanwhile (on a GPU only)."""
    if device.type != "cuda":
        yield
        return
    stop = threading.Event()

    def pin() -> None:
        while not stop.is_set():
            torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
            time.sleep(0.001)

    thread = threading.Thread(target=pin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def check_shapes(cfg: CfgNode) -> List[Shape]:
    """``run_shapes``, and the base shape with one BN split (native batch norm,
    as a baseline run has it) when no shape has one."""
    shapes = run_shapes(cfg)
    if all(s.bn_splits > 1 for s in shapes):
        base = shapes[base_shape_index(cfg, shapes)]
        shapes.append(Shape("base, 1 BN split", base.frames, base.crop, base.batch))
    return shapes


def check(
    cfg: CfgNode,
    rounds: int,
    graphed_class: Callable = GraphedTrainStep,
    on_shape: Optional[Callable[[List[ShapeResult]], None]] = None,
) -> List[ShapeResult]:
    """Runs the eager and the graphed step side by side (see the module doc).

    Args:
        cfg: the config.
        rounds: visits of every shape.
        graphed_class: the step class to check against the eager one.
        on_shape: called with the results so far after every shape's step
            (a caller that saves them as they come loses nothing to a cut).

    Returns:
        list: a :class:`ShapeResult` per multigrid shape.
    """
    torch.manual_seed(cfg.RNG_SEED)
    eager, graphed = build_steps(cfg, graphed_class)
    results = [ShapeResult(shape) for shape in check_shapes(cfg)]
    with pinning_thread(eager.device):
        _run_rounds(cfg, rounds, (eager, graphed), results, on_shape)
    return results


def _run_rounds(cfg, rounds, steps, results, on_shape=None) -> None:
    eager, graphed = steps
    shapes = [res.shape for res in results]
    for r in range(rounds):
        order = list(range(len(shapes)))
        order = order[r % len(order) :] + order[: r % len(order)]
        order = order if r % 2 == 0 else order[::-1]
        for i in order:
            inputs, labels = synthetic_batch(cfg, shapes[i])
            batch = (inputs, labels, None, {"num_failed": torch.zeros(1)})
            _copy_state(eager, graphed)
            for step in (eager, graphed):
                set_bn_splits(step.model, shapes[i].bn_splits)
            before = _state(eager.model)
            rng = _rng_state(eager.device)
            stats_e, ms_e = _timed(eager, batch, eager.device)
            _set_rng_state(eager.device, rng)  # the same dropout masks
            stats_g, ms_g = _timed(graphed, batch, graphed.device)
            diffs = results[i].diffs
            loss = [torch.tensor(stats_e.loss)], [torch.tensor(stats_g.loss)]
            grads = [_grads(s.model) for s in (eager, graphed)]
            change_e = _changes(_state(eager.model), before)
            change_g = _changes(_state(graphed.model), before)
            pairs = {
                "loss": relative_difference(*loss),
                "grads": relative_difference(*grads),
                "bn": relative_difference(change_e["bn"], change_g["bn"]),
                "weights": relative_difference(
                    change_e["weights"], change_g["weights"]
                ),
                "scale": relative_difference(*[_scale(s) for s in (eager, graphed)]),
            }
            for kind, value in pairs.items():
                diffs[kind] = _worse(diffs[kind], value)
            if r > 0:
                results[i].eager_ms.append(ms_e)
                results[i].graphed_ms.append(ms_g)
            if on_shape is not None:
                on_shape(results)
        if r == 0:
            _precise_bn(cfg, (eager, graphed), shapes[-1])
            if eager.scaler is not None:  # the graphs must read the live scale
                eager.scaler.update(new_scale=eager.scaler.get_scale() / 2)


def failures(results: Sequence[ShapeResult], tolerance: float) -> List[str]:
    """One line per shape and kind whose difference exceeds ``tolerance``."""
    return [
        f"{res.shape.kind}: {kind} differ by {value:.2e} (tolerance {tolerance:.0e})"
        for res in results
        for kind, value in res.diffs.items()
        if not value <= tolerance
    ]


def table(results: Sequence[ShapeResult]) -> str:
    """The per-shape table the tool prints."""
    header = ["shape", "clips x frames x crop", "BN splits"]
    header += [f"{k} diff" for k in KINDS] + ["eager ms", "graphed ms"]
    lines = [" | ".join(header)]
    for res in results:
        s = res.shape
        times = [
            f"{statistics.median(ms):.1f}" if ms else "-"
            for ms in (res.eager_ms, res.graphed_ms)
        ]
        cells = [s.kind, f"{s.batch} x {s.frames} x {s.crop}", str(s.bn_splits)]
        cells += [f"{res.diffs[k]:.1e}" for k in KINDS] + times
        lines.append(" | ".join(cells))
    return "\n".join(lines)
