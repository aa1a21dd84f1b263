"""Fixtures shared by the checkpoint tests."""

import pytest

from slowfast.config import load_config


@pytest.fixture
def cfg():
    """The default config, on the CPU (NUM_GPUS 0)."""
    return load_config([], ["NUM_GPUS", "0"])
