"""Shared pytest fixtures."""

import os

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE_DIR = os.path.join(os.path.dirname(REPO_ROOT), "shared", "reference")


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
