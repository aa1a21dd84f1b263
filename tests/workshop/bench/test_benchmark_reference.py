"""tools/dev/benchmark_reference.py against a stand-in reference package.

The stand-in is a minimal package named ``slowfast`` (a config with a few of
the reference's keys and a one-layer model registered as the reference's 1.0
``model_builder`` does), so the test checks the tool's mechanics: both
packages named ``slowfast`` in one process, the reference's config read from
the same YAML, the two models stepped in turns, the table.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.tool_utils import REPO_ROOT

TOOL = os.path.join(REPO_ROOT, "tools", "dev", "benchmark_reference.py")
CFG = os.path.join(REPO_ROOT, "configs", "Demo", "Kinetics_I3D_tiny_multigrid.yaml")

FILES = {
    "slowfast/__init__.py": "",
    "slowfast/config/__init__.py": "",
    "slowfast/config/defaults.py": """
        from fvcore.common.config import CfgNode

        def get_cfg():
            return CfgNode({
                "NUM_GPUS": 1,
                "DATA": {"NUM_FRAMES": 4},
                "MODEL": {"ARCH": "slowfast", "NUM_CLASSES": 400},
                "SOLVER": {"MOMENTUM": 0.5, "WEIGHT_DECAY": 0.0},
            })
    """,
    "slowfast/models/__init__.py": "",
    "slowfast/models/model_builder.py": """
        import torch

        class Net(torch.nn.Module):
            def __init__(self, cfg):
                super().__init__()
                assert cfg.NUM_GPUS == 0
                self.frames = cfg.DATA.NUM_FRAMES
                self.fc = torch.nn.Linear(3, cfg.MODEL.NUM_CLASSES)

            def forward(self, x):
                assert x[0].dtype == torch.float32
                assert x[0].shape[2] == self.frames
                x[0] = x[0].mean((2, 3, 4))  # assigns into its input, as PySlowFast
                return self.fc(x[0])

        _MODEL_TYPES = {"i3d": Net}
    """,
}


@pytest.mark.slow
def test_times_a_reference_package_and_ours_in_turns(tmp_path):
    for name, text in FILES.items():
        path = tmp_path / "ref" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    out = tmp_path / "rows.json"
    command = [
        sys.executable, TOOL, "--reference", str(tmp_path / "ref"), "--cfg", CFG,
        "--iters", "2", "--warmup", "0", "--threads", "1",
        "--memory-format", "default,channels_last_3d", "--precision", "fp32,bf16",
        "--json", str(out),
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # The reference's model read NUM_CLASSES (10) and the frames (8) from the
    # YAML and its _BASE_; ours is the tiny demo I3D, from our own package.
    assert "parameters reference 40, ours " in result.stdout
    assert "parameters reference 40, ours 40" not in result.stdout
    assert "keys the reference's config lacks: MODEL.MODEL_NAME" in result.stdout
    rows = json.loads(out.read_text())["rows"]
    labels = [
        "default: contiguous",
        "default: contiguous, bf16",
        "channels_last_3d",
        "channels_last_3d, bf16",
    ]
    assert [(r[1], r[3]) for r in rows] == [("train", x) for x in labels] + [
        ("eval", x) for x in labels
    ]
    for row in rows:
        assert row[0] == "Kinetics_I3D_tiny_multigrid.yaml" and row[2] == 64
        assert row[4] > 0 and row[6] > 0
        assert abs(row[8] - row[4] / row[6]) < 1e-6


def test_names_a_reference_folder_without_the_package(tmp_path):
    command = [sys.executable, TOOL, "--reference", str(tmp_path), "--cfg", CFG]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"--reference {tmp_path}: no slowfast package folder in it" in result.stderr
    assert "Traceback" not in result.stderr


def test_bf16_rows_run_ours_under_the_trainers_cpu_autocast():
    import torch

    from tests.helpers.tool_utils import load_tool

    tool = load_tool("dev/benchmark_reference.py")
    seen = []
    for precision in ("fp32", "bf16"):
        with tool._autocast(CFG, precision)():
            seen.append(
                (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
            )
    assert seen[0][0] is False
    assert seen[1] == (True, torch.bfloat16)


def test_names_an_unknown_precision(tmp_path):
    (tmp_path / "slowfast").mkdir()
    command = [
        sys.executable, TOOL, "--reference", str(tmp_path), "--cfg", CFG,
        "--precision", "fp16",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "--precision 'fp16': use fp32 or bf16" in result.stderr
