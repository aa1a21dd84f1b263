"""Tests of tools/benchmark_loader.py on generated tiny Moving Digits data."""

import json
import os
import subprocess
import sys

import pytest

from slowfast.config import load_config
from tests.helpers.tool_utils import REPO_ROOT, load_tool, tool_path
from workshop.dataprep.demo import make_demo_data

TOOL = tool_path("benchmark_loader.py")
DEMO = os.path.join(REPO_ROOT, "configs", "Demo")
CFG = os.path.join(DEMO, "Kinetics_I3D_tiny.yaml")


def _load_tool():
    return load_tool("benchmark_loader.py")


def test_multigrid_shapes_follow_the_long_and_short_cycle():
    tool = _load_tool()
    cfg = load_config([CFG])  # T = 8, S = 64, B = 16
    shapes = [(s.frames, s.crop, s.batch) for s in tool.multigrid_shapes(cfg)]
    assert shapes == [
        (2, 45, 128),  # (1/4, 1/sqrt 2): batch factor round(8.09) = 8
        (4, 45, 64),
        (4, 64, 32),
        (8, 64, 16),  # the base shape
        # Short cycle: 56 and 60 px views (SHORT_CYCLE_MIN_MAP raises the
        # paper's S / 2 and S / sqrt 2 so that the last maps are 3.5 px wide
        # at stride 16), batch factors round(1.31) = round(1.14) = 1.
        (8, 56, 16),
        (8, 60, 16),
    ]


@pytest.mark.parametrize(
    "layout, procs",
    [
        ([], 1),
        (["NUM_GPUS", "2"], 2),  # 16 clips a machine, 8 a process
        (["NUM_GPUS", "4", "NUM_SHARDS", "2", "TRAIN.BATCH_SIZE", "32"], 8),
    ],
)
def test_run_shapes_are_every_batch_a_multigrid_run_trains(layout, procs):
    from slowfast.multigrid import MultigridSchedule
    from workshop.bench.model_step import run_shapes

    config = os.path.join(
        REPO_ROOT, "configs", "Demo", "Kinetics_I3D_tiny_multigrid.yaml"
    )
    cfg = load_config([config], layout)
    schedule = MultigridSchedule.from_cfg(cfg, num_procs=procs)
    trained = {
        (s.num_frames, s.crop_size, s.per_proc_batch, s.bn_splits)
        for s in (
            schedule.iter_shape(epoch, it)
            for epoch in range(schedule.max_epoch)
            for it in range(3)
        )
    }
    shapes = run_shapes(cfg)
    if procs == 1:
        # The short cycle's 56 / 60 px views at the 2x long-cycle shape; at
        # the 45 px shapes they are capped at 45 px, shapes already listed.
        assert [(s.frames, s.crop, s.batch, s.bn_splits) for s in shapes[6:]] == [
            (4, 56, 48, 4),
            (4, 60, 32, 4),
        ]
    else:  # a process's share: 8 clips at the base shape, 64 at the 8x shape
        assert [(s.frames, s.crop, s.batch) for s in (shapes[0], shapes[3])] == [
            (2, 45, 64),
            (8, 64, 8),
        ]
    assert {(s.frames, s.crop, s.batch, s.bn_splits) for s in shapes} == trained
    assert len(shapes) == len(trained)


def test_a_batch_the_processes_cannot_share_is_one_line_before_any_timing():
    command = [sys.executable, TOOL, "--model-only", "--cfg", CFG]
    command += ["NUM_GPUS", "0", "NUM_CPU_PROCS", "3"]  # 16 clips a machine
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "error: TRAIN.BATCH_SIZE = 16 is not divisible by the 3 processes per "
        "machine; use a multiple of 3\n"
    )


@pytest.fixture(scope="module")
def tiny_kinetics(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("bench_data"))
    make_demo_data(root, "tiny", datasets=["kinetics"])
    return os.path.join(root, "kinetics")


@pytest.mark.slow
def test_benchmark_runs_on_tiny_data(tiny_kinetics, tmp_path):
    out = str(tmp_path / "bench.json")
    command = [
        sys.executable, TOOL, "--cfg", CFG,
        "DATA.PATH_TO_DATA_DIR", tiny_kinetics, "DATA.PATH_PREFIX", tiny_kinetics,
        "TRAIN.BATCH_SIZE", "1", "MULTIGRID.SHORT_CYCLE_MIN_MAP", "0",
        "--iters", "2", "--warmup", "1", "--workers", "0", "--cache", "off,on",
        "--stage-items", "2", "--model", "--json", out,
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Loader (1 warm-up + 2 timed batches" in result.stdout
    data = json.load(open(out))
    assert [s["batch"] for s in data["shapes"]] == [8, 4, 2, 1, 4, 2]
    assert len(data["model"]) == 6
    for row, shape in zip(data["model"], data["shapes"]):
        fmt, kind, _, _, batch, splits, ms, spread, clips, gflop, rate, eff = row
        assert fmt == "default: contiguous" and kind == shape["kind"]
        assert batch == shape["batch"]
        assert splits == shape["bn_splits"] and spread >= 0
        assert clips == pytest.approx(batch / ms * 1000)
        assert 0 < gflop < 1 and rate == pytest.approx(3 * clips * gflop)
        assert eff > 0
    assert data["model"][3][-1] == pytest.approx(100)  # the base shape
    assert "GFLOP/s" in result.stdout and "efficiency %" in result.stdout
    assert len(data["stages"]) == 12 and len(data["loader"]) == 12
    for row in data["loader"]:
        cache, workers, _, _, _, batch, ms, clips, overall, fed, wait = row
        assert cache in ("off", "on") and workers == 0
        assert ms > 0 and clips == pytest.approx(batch / ms * 1000)
        assert overall > 0 and fed > 0 and 0 <= wait <= 100
    for rows in (data["stages"][:6], data["stages"][6:]):
        batches = [row[4] for row in rows]
        assert batches == [s["batch"] for s in data["shapes"]]
        assert [row[5] for row in rows] == ["full"] * 6  # no renditions.json
        for row in rows:  # loader CPU per iteration = ms per clip x batch
            assert row[10] == pytest.approx(row[8] * row[4])
            assert row[11] == f"{row[10] / rows[3][10]:.2f}x"
        assert rows[3][11] == "1.00x"  # the base shape
    # Capacity: the measured model speeds against the loader's per-core speed
    # (DATA_LOADER.NUM_WORKERS of the config).
    assert [row[0] for row in data["capacity"]] == [s["kind"] for s in data["shapes"]]
    for cap, model, stage in zip(data["capacity"], data["model"], data["stages"]):
        assert cap[4] == pytest.approx(model[8])
        assert cap[5] == pytest.approx(1000 / stage[8])
        assert 0 <= cap[9] <= 100
    assert "loader workers (cores) per training process keep" in result.stdout
    decode_off = [row[6] for row in data["stages"] if row[0] == "off"]
    decode_on = [row[6] for row in data["stages"] if row[0] == "on"]
    # A warm cache skips decoding: clips come out much faster than from mp4.
    assert sum(decode_on) < sum(decode_off) / 3


@pytest.mark.slow
def test_all_shapes_size_the_loader_for_every_batch_a_run_trains(
    tiny_kinetics, tmp_path
):
    out = str(tmp_path / "all.json")
    command = [
        sys.executable, TOOL, "--cfg", CFG,
        "DATA.PATH_TO_DATA_DIR", tiny_kinetics, "DATA.PATH_PREFIX", tiny_kinetics,
        "TRAIN.BATCH_SIZE", "8", "MULTIGRID.SHORT_CYCLE_MIN_MAP", "0",
        "--iters", "1", "--warmup", "0", "--workers", "0",
        "--cache", "off", "--stage-items", "2", "--all-shapes",
        "--model-clips-per-s", "100", "--json", out,
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.load(open(out))
    assert len(data["shapes"]) == 10  # with their BN splits
    # Shapes that differ only in BN splits load alike: 8 loader rows.
    kinds = [row[1] for row in data["stages"]]
    assert kinds[:6] == [s["kind"] for s in data["shapes"][:6]]
    assert kinds[6:] == ["long 1/4 short 1", "long 2/4 short 1"]
    assert [row[0] for row in data["capacity"]] == kinds
    # The 8x long-cycle shape at the short cycle's crop: 16x the base batch.
    assert data["capacity"][6][3:5] == [128, 1600.0]


@pytest.mark.slow
def test_all_shapes_capacity_takes_the_measured_model_speeds(tiny_kinetics, tmp_path):
    # With these factors the short cycle's 45 px batch has the clips of long
    # 3/4 (other BN splits): one loader row for both, not the last one, while
    # the model rows keep both; each loader row still finds its model speed.
    factors = [[0.25, 0.7071], [0.5, 0.7071], [1, 0.7071], [1, 1]]
    opts = ["TRAIN.BATCH_SIZE", "8", "MULTIGRID.LONG_CYCLE_FACTORS", str(factors)]
    opts += ["MULTIGRID.SHORT_CYCLE_MIN_MAP", "0"]  # the paper's 32 / 45 px views
    tool = _load_tool()
    shapes = tool.run_shapes(load_config([CFG], opts))
    kept = [s.kind for s in tool.distinct_clips(shapes)]
    assert "short 2" in [s.kind for s in shapes] and "short 2" not in kept
    out = str(tmp_path / "measured.json")
    command = [
        sys.executable, TOOL, "--cfg", CFG, *opts,
        "DATA.PATH_TO_DATA_DIR", tiny_kinetics, "DATA.PATH_PREFIX", tiny_kinetics,
        "--iters", "1", "--warmup", "0", "--workers", "0", "--cache", "off",
        "--stage-items", "1", "--all-shapes", "--model", "--json", out,
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.load(open(out))
    assert len(data["model"]) == len(shapes)
    assert [row[0] for row in data["capacity"]] == kept


@pytest.mark.slow
def test_model_only_needs_no_data_and_compares_memory_formats(tmp_path):
    out = str(tmp_path / "model.json")
    command = [
        sys.executable, TOOL, "--cfg", CFG, "DATA.PATH_TO_DATA_DIR", "/nonexistent",
        "TRAIN.BATCH_SIZE", "1", "--iters", "1", "--warmup", "0", "--model-only",
        "--memory-format", "contiguous,channels_last_3d", "--json", out,
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Loader" not in result.stdout
    rows = json.load(open(out))["model"]
    assert [row[0] for row in rows] == ["contiguous"] * 6 + ["channels_last_3d"] * 6
    # FLOPs per clip do not depend on the memory format; the 8x shape has
    # 7.17x fewer (not 8x: the 45 px crop's maps round up at the strides).
    assert [row[9] for row in rows[:6]] == [row[9] for row in rows[6:]]
    assert rows[3][9] / rows[0][9] == pytest.approx(7.17, abs=0.01)


@pytest.mark.slow
def test_model_only_compares_sub_batch_bn_with_plain_bn(tmp_path):
    out = str(tmp_path / "bn.json")
    command = [
        sys.executable, TOOL, "--cfg", CFG, "TRAIN.BATCH_SIZE", "1", "--iters", "1",
        "--warmup", "0", "--model-only", "--bn", "sub,plain", "--json", out,
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ResNet on CPU" in result.stdout
    data = json.load(open(out))
    rows = data["model"]
    labels = ["default: contiguous"] * 6 + ["default: contiguous, plain BN"] * 6
    assert [row[0] for row in rows] == labels
    assert [row[5] for row in rows[:6]] == [s["bn_splits"] for s in data["shapes"]]
    assert [row[5] for row in rows[6:]] == [1] * 6
    assert rows[9][-1] == pytest.approx(100)  # each variant's own base shape


def test_multigrid_shapes_carry_the_bn_splits_of_a_multigrid_run():
    tool = _load_tool()
    cfg = load_config([CFG])  # B = 16, MULTIGRID.BN_BASE_SIZE = 8
    assert [s.bn_splits for s in tool.multigrid_shapes(cfg)] == [16, 8, 4, 2, 2, 2]


def test_bad_cache_setting_is_rejected():
    tool = _load_tool()
    with pytest.raises(SystemExit):
        tool.parse_args(["--cfg", CFG, "--cache", "maybe"])
    with pytest.raises(SystemExit):
        tool.parse_args(["--cfg", CFG, "--memory-format", "nhwc"])
    with pytest.raises(SystemExit):
        tool.parse_args(["--cfg", CFG, "--bn", "sync"])
    args = tool.parse_args(["--cfg", CFG, "TRAIN.BATCH_SIZE", "4", "--workers", "0,2"])
    assert args.opts == ["TRAIN.BATCH_SIZE", "4"] and args.workers == [0, 2]


def test_model_rows_time_the_trainers_step_eager_and_compiled(monkeypatch):
    """The benchmark's step is the trainer's; ``compile`` runs it through
    ``torch.compile`` with static shapes (recorded here, not compiled: a real
    compile takes a minute per shape on a CPU), with room for every shape's
    graph and no silent fallback to eager."""
    import torch

    from slowfast.engine.loop import StepStats
    from slowfast.engine.step import TrainStep as Step
    from slowfast.models.norm import SubBatchNorm3d
    from workshop.bench import model_step as benchmark

    compiled, splits_seen = [], []

    class Recorded(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.inner = model

        def forward(self, inputs):
            config = torch._dynamo.config
            assert config.cache_size_limit >= 2 and config.fail_on_cache_limit_hit
            bn = next(m for m in self.modules() if isinstance(m, SubBatchNorm3d))
            splits_seen.append((inputs[0].shape[0], bn.num_splits))
            return self.inner(inputs)

    def fake_compile(model, **kwargs):
        compiled.append(Recorded(model))
        assert kwargs == {"dynamic": False}
        return compiled[-1]

    monkeypatch.setattr(torch, "compile", fake_compile)
    cfg = load_config([CFG])  # batch 16
    shapes = [benchmark.multigrid_shapes(cfg)[i] for i in (0, 3)]  # 16, 2 splits
    rows = benchmark.model_rows(
        cfg, shapes, warmup=0, iters=1, step_modes=("eager", "compile")
    )
    assert [row[0] for row in rows] == ["default: contiguous"] * 2 + [
        "default: contiguous, torch.compile"
    ] * 2
    assert len(compiled) == 1
    assert splits_seen == [(s.batch, s.bn_splits) for s in shapes]  # one step each
    assert [s.bn_splits for s in shapes] == [16, 2]
    assert all(row[6] > 0 for row in rows)
    assert torch._dynamo.config.cache_size_limit == 8  # restored

    step = benchmark.TimedStep(cfg)
    assert type(step.step) is Step and step.step.model is step.model
    assert step.step.multi_label is False and not step.step.clip
    skipped = StepStats(float("nan"), 0.0, 0.0, 0.0, applied=False)
    monkeypatch.setattr(step, "step", lambda batch: skipped)
    with pytest.raises(RuntimeError, match="non-finite training loss"):
        step(*benchmark.synthetic_batch(cfg, shapes[1]))
    with pytest.raises(ValueError, match="CUDA graphs need a GPU"):
        benchmark.TimedStep(cfg, mode="graphs")
    with pytest.raises(ValueError, match="step mode 'jit'"):
        benchmark.TimedStep(cfg, mode="jit")


def test_compile_and_graphs_need_a_warm_up_step():
    tool = _load_tool()
    with pytest.raises(SystemExit):
        tool.parse_args(["--cfg", CFG, "--step", "eager,compile", "--warmup", "0"])
    assert tool.parse_args(["--cfg", CFG, "--step", "eager", "--warmup", "0"])
