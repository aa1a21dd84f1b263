"""tools/dev/gpu_check.py: the smoke check end to end, its stages, the wheels."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from slowfast.engine.step import TrainStep
from slowfast.launch.config import load_run_config
from tests.helpers.tool_utils import REPO_ROOT, load_tool
from workshop.bench import graph_check

gpu_check = load_tool("dev/gpu_check.py")
stages = gpu_check._sibling("gpu_check_stages")
train = gpu_check._sibling("gpu_check_train")
wheels = gpu_check._sibling("gpu_check_wheels")


@pytest.mark.slow
def test_smoke_check_writes_every_stage(tmp_path):
    out = tmp_path / "check"
    assert gpu_check.main(["--smoke", "--out", str(out)]) == 0
    report = json.loads((out / "gpu_check.json").read_text())
    env = report["environment"]
    assert env["status"] == "ok" and env["smoke"] and env["cpus"] >= 1
    assert env["torch"] and env["gpus"] == 0 and env["gpu"] is None
    assert list(report["stages"]) == list(gpu_check.STAGES[1:])
    for name in ("triton_warmup", "split_bn", "graphs", "compile"):  # GPU only
        skipped = report["stages"][name]
        assert skipped["status"] == "skipped"
        assert skipped["reason"] == stages.SMOKE_SKIPS[name]
    steps = report["stages"]["model_step"]
    assert steps["status"] == "ok" and steps["seconds"] > 0
    assert set(steps["configs"]) == {
        "Kinetics_SLOWFAST_tiny_multigrid",
        "Kinetics_I3D_tiny_multigrid",
    }
    for entry in steps["configs"].values():
        cells = entry["cells"]
        assert len(cells) == 2 * 6  # plain and sub-batch BN, eager, at 6 shapes
        assert all(c["status"] == "ok" and c["ms"] > 0 for c in cells)
        base = [c for c in cells if c["shape"] == entry["base_shape"]]
        assert base[0]["variant"] == entry["reference"] == "plain BN, eager"
        assert base[0]["efficiency"] == 1.0
        for cell in cells:
            paths = set(cell["bn_paths"])
            split = cell["bn"] == "sub" and cell["bn_splits"] > 1
            assert paths == ({"native"} if split else {"batch_norm"}), cell
    runs = report["stages"]["train"]["runs"]
    assert report["stages"]["train"]["status"] == "ok"
    listed = train.all_runs(smoke=True)
    assert list(runs) == [key for key, *_ in listed]
    assert listed[-1] == ("torchrun_2_processes_graphs_on", "torchrun", True, 2)
    for key, launcher, graphs, processes in listed:
        run = runs[key]
        assert run["launcher"] == launcher and run["cuda_graphs"] == graphs
        assert run["world_size"] == processes
        if graphs:  # the trainer refuses CUDA graphs on the CPU
            assert run["status"] == "skipped" and "CUDA_GRAPHS" in run["reason"]
            continue
        assert run["status"] == "ok" and run["exit_status"] == 0
        assert run["ddp"] == (launcher == "torchrun"), run
        assert run["iters"] == sum(s["iters"] for s in run["shapes"].values()) == 17
        coarsest = f"{16 * processes}x2x16"  # the long cycle's, all processes' clips
        assert coarsest in run["shapes"]
        assert 0 <= run["data_wait"] <= 1
    compared = {tuple(c["runs"]): c for c in report["stages"]["train"]["comparisons"]}
    assert len(compared) == 4
    alike = compared[("one_process_graphs_off", "torchrun_graphs_off")]
    assert alike["ok"] and alike["iters"] == 17  # DDP over 1 process changes nothing
    assert alike["loss_max"] == alike["weights"] == 0.0
    pair = ("torchrun_2_processes_graphs_off", "torchrun_2_processes_graphs_on")
    assert compared[pair]["ok"] is None  # no graphs on the CPU
    left = [p for p in out.rglob("*.tmp")]
    assert not left  # every JSON file written whole


def _stage(tmp_path, name):
    return stages.Stage(name, str(tmp_path), 300, smoke=False)


def _figures(tmp_path, name):
    return json.loads((tmp_path / "stages" / f"{name}.json").read_text())


def test_split_bn_stage_counts_cases_and_the_worst_error(tmp_path, monkeypatch):
    cases = [
        {"dtype": "fp16", "errors": {"y": 1e-3, "dx": 2e-3}, "tolerance": 4e-2},
        {"dtype": "bf16", "errors": {"y": 0.72, "dx": float("nan")}, "tolerance": 0.24},
    ]
    for case in cases:
        case["ok"] = case["dtype"] == "fp16"

    class Tool:
        CompileCounter = load_tool("dev/check_split_bn.py").CompileCounter

        @staticmethod
        def check_cases(device):
            for case in cases:
                yield {**case, "seconds": 0.25}

    monkeypatch.setattr(stages.Stage, "unavailable", lambda self, why: None)
    monkeypatch.setattr(stages, "_triton_version", lambda: "3.0.0")
    monkeypatch.setattr(stages, "load_tool", lambda name: Tool)
    stages.stage_split_bn(_stage(tmp_path, "split_bn"))
    figures = _figures(tmp_path, "split_bn")
    assert figures["status"] == "failed" and figures["passed"] == 1
    assert figures["summary"] == (
        "1/2 cases pass in 0.5 s; largest error 300% of tolerance"
    )
    assert figures["compiles"] == 0  # nothing built (Triton counts them here)
    assert figures["cases"][1]["errors"] == {"y": 0.72, "dx": "nan"}


def test_side_by_side_stops_what_runs_past_its_time(tmp_path):
    quick = [sys.executable, "-c", "print('first'); print('{\"compiles\": 3}')"]
    slow = [
        sys.executable,
        "-c",
        "import time; print('started', flush=True); time.sleep(60)",
    ]
    logs = [str(tmp_path / "quick.log"), str(tmp_path / "slow.log")]
    done, stopped = stages.run_side_by_side([quick, slow], logs, seconds=5)
    assert done["exit_status"] == 0 and done["last_line"] == '{"compiles": 3}'
    assert stopped["exit_status"] is None and stopped["last_line"] == "started"
    assert 5 <= stopped["seconds"] < 10


def test_triton_warmup_runs_one_part_per_cpu(tmp_path, monkeypatch):
    """The real parts on a machine without a GPU: each says so and fails."""
    monkeypatch.setattr(stages.Stage, "unavailable", lambda self, why: None)
    monkeypatch.setattr(stages, "_triton_version", lambda: "3.0.0")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    os.makedirs(tmp_path / "logs")
    stages.stage_triton_warmup(_stage(tmp_path, "triton_warmup"))
    figures = _figures(tmp_path, "triton_warmup")
    assert figures["status"] == "failed" and figures["processes"] == 2
    assert figures["cases"] == 24 and figures["cache_entries_before"] == 0
    for worker in figures["workers"]:
        assert worker["exit_status"] == 2
        assert worker["last_line"].endswith("the kernels run on GPUs only")
    assert figures["summary"].endswith("0 stopped at the cap, 2 failed")


def _write_losses(folder, values):
    folder.mkdir()
    lines = [
        {"_type": "train_iter", "epoch": "1/2", "iter": f"{i + 1}/9", "loss": v}
        for i, v in enumerate(values)
    ]
    text = "\n".join(json.dumps(line) for line in lines)
    (folder / "json_stats.log").write_text(text + "\n")


def test_runs_compare_by_their_first_losses(tmp_path):
    losses = [2.0, 1.9, 1.8, 1.7, 1.6, 1.5]
    _write_losses(tmp_path / "a", losses)
    _write_losses(tmp_path / "b", losses[:5] + [1.6])  # later drift is allowed
    _write_losses(tmp_path / "c", [2.0, 1.9 * 1.01] + losses[2:])
    same = train.compare_pair(str(tmp_path / "a"), str(tmp_path / "b"), 1e-3)
    assert same["ok"] and same["iters"] == 6 and same["loss_first"] == 0.0
    assert same["loss_max"] == 0.0667 and same["weights"] is None
    differ = train.compare_pair(str(tmp_path / "a"), str(tmp_path / "c"), 1e-3)
    assert not differ["ok"] and differ["loss_first"] == 0.01
    _write_losses(tmp_path / "d", losses[:3])  # too few iterations to tell
    assert not train.compare_pair(str(tmp_path / "a"), str(tmp_path / "d"), 1)["ok"]


def test_graphs_stage_reports_each_config(tmp_path, monkeypatch):
    """The GPU stage on the CPU: the eager step against itself stands in for
    the graphed one, and a config whose check crashes is that config's result."""
    opts = stages.SMOKE_OPTS + [
        "MULTIGRID.LONG_CYCLE_FACTORS",
        "[[0.5, 0.7071], [1, 1]]",
    ]
    slowfast, i3d = (
        load_run_config([os.path.join(REPO_ROOT, path)], opts)
        for path in stages.SMOKE_CONFIGS
    )
    configs = {"I3D": i3d, "BROKEN": slowfast}

    real_check = graph_check.check
    saved = []  # the stage's file after each shape's step: a cut loses nothing

    def check(cfg, rounds, on_shape=None):
        if cfg is slowfast:
            raise RuntimeError("CUDA error: an illegal memory access\ndetails")

        def watch(so_far):
            on_shape(so_far)
            saved.append(_figures(tmp_path, "graphs"))

        return real_check(cfg, 1, graphed_class=TrainStep, on_shape=watch)

    monkeypatch.setattr(stages.Stage, "unavailable", lambda self, why: None)
    monkeypatch.setattr(stages, "load_configs", lambda smoke: configs)
    monkeypatch.setattr(stages, "split_bn_path", lambda: "native BN (no Triton)")
    monkeypatch.setattr(graph_check, "check", check)
    stages.stage_graphs(_stage(tmp_path, "graphs"))
    figures = _figures(tmp_path, "graphs")
    assert figures["status"] == "failed"
    got, broken = figures["configs"]["I3D"], figures["configs"]["BROKEN"]
    assert broken["error"] == "RuntimeError: CUDA error: an illegal memory access"
    assert got["failures"] == [] and got["tolerance"] == 1e-3
    shapes = [s.kind for s in graph_check.check_shapes(i3d)]
    assert [s["shape"] for s in got["shapes"]] == shapes
    assert all(s["ok"] and set(s["diffs"].values()) == {0.0} for s in got["shapes"])
    assert got["table"][0].startswith("shape | clips x frames x crop")
    assert figures["summary"].startswith(f"{len(shapes)} shapes, 1 failures")
    assert len(saved) == len(shapes)  # one round: a save per shape
    assert all(f["status"] == "running" for f in saved)
    assert [len(f["configs"]["I3D"]["shapes"]) for f in saved] == [len(shapes)] * len(
        shapes
    )


def test_train_figures_per_shape_from_json_stats(tmp_path):
    lines = [
        {
            "_type": "train_iter",
            "shape": "8x4x16",
            "time_data": 0.01,
            "time_compute": 0.09,
        },
        {
            "_type": "train_iter",
            "shape": "32x2x16",
            "time_data": 0.05,
            "time_compute": 0.15,
        },
        {"_type": "train_epoch", "shape": "ignored"},
        {
            "_type": "train_iter",
            "shape": "8x4x16",
            "time_data": 0.03,
            "time_compute": 0.07,
        },
        {
            "_type": "train_iter",
            "shape": "8x4x16",
            "time_data": 0.0,
            "time_compute": 0.2,
        },
    ]
    log = tmp_path / "json_stats.log"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    times = train.shape_times(str(log))
    assert list(times["shapes"]) == ["32x2x16", "8x4x16"]  # largest batch first
    small = times["shapes"]["8x4x16"]
    assert small == {
        "iters": 3,
        "ms_per_iter": 100.0,
        "data_ms": 10.0,
        "compute_ms": 90.0,
        "data_wait": 0.1,  # 0.04 s of 0.4 s
    }
    assert times["iters"] == 4 and times["data_wait"] == 0.15  # 0.09 s of 0.6 s
    assert train.shape_times(str(tmp_path / "none.log")) == {"iters": 0, "shapes": {}}


def _wheel(folder, name, files):
    path = os.path.join(folder, name)
    with zipfile.ZipFile(path, "w") as archive:
        for entry, text in files.items():
            archive.writestr(entry, text)
    return path


def test_wheels_fit_this_python_and_unpack_what_it_lacks(tmp_path):
    major, minor = sys.version_info[:2]
    cp = f"cp{major}{minor}"
    assert wheels.fits(f"a-1.0-{cp}-{cp}-manylinux_2_17_x86_64.whl") == (
        sys.platform == "linux" and os.uname().machine == "x86_64"
    )
    assert wheels.fits("a-1.0-py3-none-any.whl")
    assert not wheels.fits(f"a-1.0-cp{major}{minor + 1}-cp{major}{minor + 1}-any.whl")
    assert wheels.fits(f"a-1.0-cp3{minor - 1}-abi3-any.whl")
    fresh = _wheel(
        tmp_path,
        "gpucheck_fake-1.0-py3-none-any.whl",
        {
            "gpucheck_fake/__init__.py": "VALUE = 1\n",
            "gpucheck_solo.py": "",
            "gpucheck_fake-1.0.dist-info/METADATA": "Name: gpucheck-fake\n",
            "gpucheck_fake.libs/lib.so": "",
        },
    )
    _wheel(tmp_path, "json-9.0-py3-none-any.whl", {"json/__init__.py": ""})
    assert wheels.top_level(fresh) == ["gpucheck_fake", "gpucheck_solo"]
    site, unpacked = wheels.unpack(str(tmp_path))
    assert unpacked == ["gpucheck_fake-1.0-py3-none-any.whl"]  # json is here
    assert os.path.isfile(os.path.join(site, "gpucheck_fake", "__init__.py"))
    assert wheels.unpack(str(tmp_path)) == (site, [])  # unpacked once
    assert "gpucheck_fake" not in wheels.missing(site)
    assert wheels.unpack(str(tmp_path / "none")) == (None, [])


def test_the_check_imports_only_packed_packages():
    """What the stages and the training runs import beyond the standard
    library and torch is in the packed wheels; never PyAV or report libraries."""
    code = (
        "import sys, runpy; before = set(sys.modules); "
        "runpy.run_path(sys.argv[1]); runpy.run_path(sys.argv[2]); "
        "import slowfast.engine.trainer, workshop.bench.step_cells, "
        "workshop.bench.graph_check, workshop.dataprep.demo.footage, "
        "slowfast.launch.start, slowfast.launch.preflight, fvcore.nn; "
        "print(' '.join({m.split('.')[0] for m in set(sys.modules) - before}"
        " - set(sys.stdlib_module_names)))"
    )
    tools = [
        os.path.join(REPO_ROOT, "tools", t)
        for t in ("run_net.py", "dev/check_split_bn.py")
    ]
    done = subprocess.run(
        [sys.executable, "-c", code, *tools],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,  # the workshop is not installed: ``-c`` finds it here
    )
    names = {n for n in done.stdout.split() if not n.startswith("_")}
    allowed = set(wheels.MODULES) | {"slowfast", "workshop", "torchgen"}
    allowed |= {"typing_extensions"}
    allowed |= {"wcwidth", "cython_runtime", "triton"}  # optional, or torch's own
    assert names <= allowed, sorted(names - allowed)
    assert not names & {"av", "sklearn", "matplotlib", "tensorboard", "scipy"}


def test_arguments_and_folder_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gpu_check.parse_args([])
    assert "--out DIR is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--out", "x", "--budget", "30"])
    assert "at least 60 seconds" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("mine\n")
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --out {tmp_path} holds files this check did not write; " + (
        "pass a new folder"
    )
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]
