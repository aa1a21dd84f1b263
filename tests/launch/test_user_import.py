"""The user's own modules (IMPORTS, --import) reach every process of a run."""

import os
import socket
import subprocess
import sys

import pytest
import yaml

from slowfast.config import load_config
from slowfast.launch.job import run_job
from slowfast.launch.launcher import Layout
from tests.conftest import REPO_ROOT
from tests.helpers.tool_utils import load_tool

RUN_NET = os.path.join(REPO_ROOT, "tools", "run_net.py")
EXAMPLE = os.path.join("projects", "extend_example", "tiny_c3d_moving_squares.yaml")
ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
}
# Given with --import from PYTHONPATH: the example's model, which leaves a
# mark in OUTPUT_DIR from every process that builds it.
PROBE = """
import os

import torch.distributed as dist

from projects.extend_example.tiny_model import TinyC3D
from slowfast.models import MODEL_REGISTRY


@MODEL_REGISTRY.register()
class ProbedTinyC3D(TinyC3D):
    def __init__(self, cfg):
        super().__init__(cfg)
        rank = dist.get_rank() if dist.is_initialized() else 0
        with open(os.path.join(cfg.OUTPUT_DIR, f"built_by_rank_{rank}"), "w") as f:
            f.write(str(os.getpid()))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_the_example_trains_in_two_processes_that_both_build_its_model(tmp_path):
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "extend_probe.py").write_text(PROBE)
    out = tmp_path / "run"
    cmd = [sys.executable, RUN_NET, "--import", "extend_probe", "--cfg", EXAMPLE]
    cmd += ["--init_method", f"tcp://127.0.0.1:{_free_port()}"]
    cmd += [
        "OUTPUT_DIR", str(out), "NUM_CPU_PROCS", "2",
        "MODEL.MODEL_NAME", "ProbedTinyC3D", "SOLVER.MAX_EPOCH", "1",
        "SOLVER.WARMUP_EPOCHS", "0.0", "TRAIN.BATCH_SIZE", "16",
        "DATA.NUM_FRAMES", "4", "DATA.TRAIN_JITTER_SCALES", "[16, 16]",
        "DATA.TRAIN_CROP_SIZE", "16", "DATA.TEST_CROP_SIZE", "16",
        "TEST.ENABLE", "False",
    ]  # fmt: skip
    path = [str(tmp_path / "probe"), ENV.get("PYTHONPATH", "")]
    env = dict(ENV, PYTHONPATH=os.pathsep.join(p for p in path if p))
    done = subprocess.run(
        cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pids = {(out / f"built_by_rank_{r}").read_text() for r in (0, 1)}
    assert len(pids) == 2 and str(os.getpid()) not in pids
    log = (out / "stdout.log").read_text()
    assert "launcher plain: 1 node(s) x 2 CPU process(es) = 2" in log
    assert "TinyC3D built: widths [8, 16, 32]" in log
    assert (
        "user modules (IMPORTS): projects.extend_example.tiny_model "
        "(projects/extend_example/tiny_model.py), projects.extend_example."
        "moving_squares (projects/extend_example/moving_squares.py), extend_probe ("
    ) in log
    assert '"_type": "val_epoch", "epoch": "1/1", "num_videos": 64' in log
    assert (out / "checkpoints" / "checkpoint_epoch_00001.pyth").is_file()
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["IMPORTS"][-1] == "extend_probe"


BROKEN = "import os\nraise RuntimeError('boom')\n"


@pytest.mark.parametrize(
    "options,overrides,expected",
    [
        (
            ["--import", "no_such_module_xyz"],
            [],
            "error: --import 'no_such_module_xyz': no such module on the search "
            "path (PYTHONPATH, the installed packages, the current directory ",
        ),
        (
            [],
            ["IMPORTS", "[projects.extend_example.tiny_modle]"],
            "error: IMPORTS 'projects.extend_example.tiny_modle': no such module "
            "(did you mean projects.extend_example.tiny_model?) on the search path",
        ),
        (
            ["--import", "projects/extend_example/tiny_model.py"],
            [],
            "error: --import 'projects/extend_example/tiny_model.py': a file path, "
            "not a module name; give its module name "
            "projects.extend_example.tiny_model",
        ),
        (
            ["--import", "broken_user_module"],
            [],
            "error: --import 'broken_user_module': importing it failed: "
            "RuntimeError: boom (",
        ),
    ],
)
def test_a_module_that_does_not_import_is_one_line_before_any_work(
    options, overrides, expected, tmp_path, monkeypatch, capsys
):
    (tmp_path / "broken_user_module.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(REPO_ROOT)
    out = tmp_path / "run"
    argv = [*options, "--cfg", EXAMPLE, *overrides, "OUTPUT_DIR", str(out)]
    assert load_tool("run_net.py").main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1, err
    assert not out.exists()


def test_submit_adds_import_to_the_jobs_config_and_refuses_a_missing_one(
    tmp_path, monkeypatch, capsys
):
    from slowfast.launch.submit import job_config, main, parse_args

    monkeypatch.chdir(REPO_ROOT)
    base = ["--cfg", EXAMPLE, "--executor", "local", "--dry-run"]
    out = ["OUTPUT_DIR", str(tmp_path / "run")]
    args = parse_args(["--import", "projects.extend_example.tiny_model", *base, *out])
    assert job_config(args).IMPORTS == [
        "projects.extend_example.tiny_model",
        "projects.extend_example.moving_squares",
    ]
    assert main(["--import", "no_such_module_xyz", *base, *out]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --import 'no_such_module_xyz': no such module")


def test_a_job_handed_a_loaded_config_imports_its_modules(tmp_path, monkeypatch):
    """submitit's tasks get the config, not the command line: run_job imports."""
    (tmp_path / "handed_model.py").write_text(
        "import torch\nfrom slowfast.models import MODEL_REGISTRY\n\n\n"
        "@MODEL_REGISTRY.register()\nclass HandedNet(torch.nn.Linear):\n"
        "    def __init__(self, cfg):\n        super().__init__(3, 2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    opts = ["IMPORTS", "[handed_model]", "MODEL.MODEL_NAME", "HandedNet"]
    opts += ["TRAIN.ENABLE", "False", "TEST.ENABLE", "False", "NUM_GPUS", "0"]
    opts += ["LOG_MODEL_INFO", "False", "OUTPUT_DIR", str(tmp_path / "run")]
    cfg = load_config(opts=opts)  # no registry checks: nothing imported yet
    assert "handed_model" not in sys.modules
    assert run_job(cfg, Layout("submitit", 1, 1, 0, "", 0, 0)) == 0
    assert "handed_model" in sys.modules
