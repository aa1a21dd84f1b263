"""Shared pytest fixtures."""

import os
import subprocess
import sys

import pytest

# Triton kernels (sub-batch BN's GPU path) run on CPU tensors through Triton's
# interpreter in the tests; the variable must be set before Triton is imported.
os.environ["TRITON_INTERPRET"] = "1"

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE_DIR = os.path.join(os.path.dirname(REPO_ROOT), "shared", "reference")
# The multigrid study's package (projects/multigrid/multigrid_study).
sys.path.insert(0, os.path.join(REPO_ROOT, "projects", "multigrid"))


@pytest.fixture
def reference_dir():
    """The reference material beside the checkout; skips when it is absent."""
    if not os.path.isdir(REFERENCE_DIR):
        pytest.skip(f"reference folder {REFERENCE_DIR} not present")
    return REFERENCE_DIR


@pytest.fixture(autouse=True)
def _seed_torch():
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory):
    """Tiny data in all three datasets, plus a Kinetics train list repeated 6x
    so that multigrid's largest batches fit in one epoch."""
    root = tmp_path_factory.mktemp("demo")
    subprocess.run(
        [
            sys.executable,
            os.path.join(REPO_ROOT, "tools", "make_demo_data.py"),
            "--out",
            str(root),
            "--size",
            "tiny",
        ],
        check=True,
        capture_output=True,
    )
    big = root / "kinetics_x6"
    big.mkdir()
    for split in ("train", "val", "test"):
        lines = (root / "kinetics" / f"{split}.csv").read_text().splitlines()
        reps = 6 if split == "train" else 1
        (big / f"{split}.csv").write_text("\n".join(lines * reps) + "\n")
    return root
