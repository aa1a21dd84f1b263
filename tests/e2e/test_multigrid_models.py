"""Multigrid trains every model the paper names: SlowFast and I3D-NL twins.

``run_net`` trains the multigrid twins of the SlowFast and I3D-NL demo
configs (only MULTIGRID keys differ from their baselines) on tiny data, and
every long- and short-cycle shape of the schedule reaches the model: the clips
of each pathway (SlowFast's slow pathway ALPHA times fewer frames), the crops
and the BN splits the schedule plans.
"""

import importlib.util
import math
import os

import pytest

from slowfast.config import load_config
from slowfast.models import ResNet, SlowFast, SubBatchNorm3d
from slowfast.multigrid import MultigridSchedule
from tests.conftest import REPO_ROOT

DEMO = os.path.join(REPO_ROOT, "configs", "Demo")
OPTS = [
    "TRAIN.BATCH_SIZE", "1", "SOLVER.MAX_EPOCH", "8", "SOLVER.STEPS", "[0, 6]",
    "SOLVER.LRS", "[1, 0.1]", "SOLVER.WARMUP_EPOCHS", "0.5",
    # Groups of 2 clips, so that the coarse shapes have several BN splits.
    "MULTIGRID.BN_BASE_SIZE", "2",
    "TRAIN.EVAL_PERIOD", "100", "TRAIN.CHECKPOINT_PERIOD", "100",
    "TEST.ENABLE", "False", "DATA_LOADER.NUM_WORKERS", "0",
    "LOG_MODEL_INFO", "False", "NUM_GPUS", "0",
    # Only the training steps' forwards are recorded (no precise-BN passes).
    "BN.USE_PRECISE_STATS", "False",
    # The narrowest width both models take (SlowFast's fast pathway: 1/8 of
    # it): what reaches the model is the point, not what it learns.
    "RESNET.WIDTH_PER_GROUP", "8",
]  # fmt: skip


def _run_net():
    spec = importlib.util.spec_from_file_location(
        "run_net_tool", os.path.join(REPO_ROOT, "tools", "run_net.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recording(monkeypatch, cls, seen):
    forward = cls.forward

    def record(self, x):
        if self.training:
            bn = next(m for m in self.modules() if isinstance(m, SubBatchNorm3d))
            seen.add((tuple(tuple(p.shape) for p in x), bn.num_splits))
        return forward(self, x)

    monkeypatch.setattr(cls, "forward", record)


def _flat(node, prefix=""):
    out = {}
    for key, value in node.items():
        if hasattr(value, "items"):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _planned(cfg, dataset_size):
    """(clips, frames, crop, BN splits) of every iteration the schedule plans."""
    schedule = MultigridSchedule.from_cfg(cfg, 1)
    planned = set()
    for epoch in range(schedule.max_epoch):
        for shape in schedule.epoch_batches(epoch, dataset_size):
            planned.add(
                (
                    shape.per_proc_batch,
                    shape.num_frames,
                    shape.crop_size,
                    shape.bn_splits,
                )
            )
    return planned


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, cls",
    [
        ("Kinetics_SLOWFAST_tiny_multigrid.yaml", SlowFast),
        ("Kinetics_I3D_NLN_tiny_multigrid.yaml", ResNet),
    ],
)
def test_multigrid_twin_trains_every_shape(demo_data, tmp_path, monkeypatch, name, cls):
    data = demo_data / "kinetics_x6"
    opts = OPTS + [
        "DATA.PATH_TO_DATA_DIR", str(data),
        "DATA.PATH_PREFIX", str(demo_data / "kinetics"),
        "OUTPUT_DIR", str(tmp_path),
    ]  # fmt: skip
    path = os.path.join(DEMO, name)
    seen = set()
    _recording(monkeypatch, cls, seen)
    assert _run_net().main(["--cfg", path, *opts]) == 0

    cfg = load_config([path], opts)
    base = load_config([path.replace("_multigrid", "")], opts)
    changed = {k for k, v in _flat(cfg).items() if _flat(base).get(k) != v}
    assert changed == {"MULTIGRID.LONG_CYCLE", "MULTIGRID.SHORT_CYCLE"}
    size = sum(1 for _ in open(os.path.join(data, "train.csv")))
    planned = _planned(cfg, size)
    alpha = cfg.SLOWFAST.ALPHA if cls is SlowFast else 1
    got = set()
    for shapes, splits in seen:
        fast = shapes[-1]
        if cls is SlowFast:  # slow pathway: ALPHA times fewer frames, same clips
            assert shapes[0][0] == fast[0] and shapes[0][3:] == fast[3:]
            assert shapes[0][2] == max(1, math.ceil(fast[2] / alpha))
        got.add((fast[0], fast[2], fast[3], splits))
    assert got == planned
    # Every long-cycle frame count, every crop (long and short cycle) and
    # several BN split counts ran.
    frames = cfg.DATA.NUM_FRAMES
    assert {g[1] for g in got} == {frames // 4, frames // 2, frames}
    # The short cycle's views: 56 and 60 px (SHORT_CYCLE_MIN_MAP at stride 16).
    assert {g[2] for g in got} == {45, 56, 60, 64}
    assert {g[3] for g in got} >= {1, 2, 4}
