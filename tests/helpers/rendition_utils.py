"""Helpers for the rendition tests: the scales they prepare and a small clip
config."""

from tests.helpers.video_utils import tiny_cfg

SCALES = (0.7071, 0.5)


def clip_cfg(root, *opts):
    """Kinetics config over ``root``: 4 x 56 px clips from 64-80 px frames."""
    return tiny_cfg(
        str(root),
        "kinetics",
        "DATA.TRAIN_JITTER_SCALES", "[64, 80]", "DATA.TRAIN_CROP_SIZE", "56",
        "DATA.TEST_CROP_SIZE", "56", "DATA.RANDOM_FLIP", "False", *opts,
    )  # fmt: skip
