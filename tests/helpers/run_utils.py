"""Helpers for the tests that train and test a tiny model: one-epoch configs."""

import os

from slowfast.config import load_config
from tests.conftest import REPO_ROOT

TINY = os.path.join(REPO_ROOT, "configs", "Demo", "Kinetics_I3D_tiny.yaml")

# One epoch at the base learning rate (one step, at epoch 0).
ONE_EPOCH = ["SOLVER.MAX_EPOCH", "1", "SOLVER.STEPS", "[0]", "SOLVER.LRS", "[1]"]


def one_epoch_cfg(demo_data, out_dir, *opts):
    """The tiny Kinetics I3D demo config for one epoch on the CPU: the demo
    Kinetics data, ``out_dir``, one test view per video (override with opts)."""
    kinetics = str(demo_data / "kinetics")
    base = [
        "NUM_GPUS", "0", "DATA.PATH_TO_DATA_DIR", kinetics,
        "DATA.PATH_PREFIX", kinetics, "OUTPUT_DIR", str(out_dir), *ONE_EPOCH,
        "TEST.BATCH_SIZE", "4", "TEST.NUM_ENSEMBLE_VIEWS", "1",
        "TEST.NUM_SPATIAL_CROPS", "1", "LOG_MODEL_INFO", "False",
        "DATA_LOADER.NUM_WORKERS", "0",
    ]  # fmt: skip
    return load_config([TINY], base + [str(o) for o in opts])
