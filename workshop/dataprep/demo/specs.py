"""Sizes and difficulty of each demo dataset.

``tiny`` is for unit tests (seconds), ``small`` for the README demo (a tiny
model learns the Kinetics-format set in minutes on 2 cores), ``bench`` for the
loader benchmark and for comparing training methods (harder: smaller digits,
weaker contrast, pixel noise and clutter, so a tiny model stays clearly below
100%).
``study`` is for the multigrid speed-accuracy study (projects/multigrid/
study.py): in the SSv2 format, 1200 training and 600 test videos of motion
classes, enough that the long cycle's coarsest shape gets tens of iterations
per epoch and that one test video is 0.17 points; in the Kinetics format,
``small``'s training and validation videos (the same files) with 3000 test
videos, the first 500 of them ``small``'s, so that the test set's sampling
(about +-1 point on a paired difference) is small next to a seed's.
``study_112`` is the Kinetics ``study`` set at 4/3 the resolution (frames of
128 x 150, digits and motion scaled alike), for 112 px crops: at total stride
16 their last feature map is the paper's 7 x 7, so the paper's short-cycle
views (56 and 79 px) keep its 3.5 x 3.5 and about 5 x 5 maps.
"""

from dataclasses import dataclass, replace
from typing import Dict, Tuple

DATASETS = ("kinetics", "ssv2", "charades")
SIZES = ("tiny", "small", "bench", "study", "study_large", "study_112")

# Motion classes of the SSv2 format, in class-id order (digit identity is random).
SSV2_TEMPLATES = (
    "Moving [something] from left to right",
    "Moving [something] from right to left",
    "Moving [something] up",
    "Moving [something] down",
    "Moving [something] towards the camera",
    "Moving [something] away from the camera",
    "Turning [something] clockwise",
    "Turning [something] counterclockwise",
)

NUM_CLASSES = {"kinetics": 10, "ssv2": len(SSV2_TEMPLATES), "charades": 10}


@dataclass(frozen=True)
class Style:
    """How hard the videos are to read.

    Attributes:
        digit_size: (min, max) sprite side in pixels before any motion scaling.
        contrast: (min, max) luminance difference between digit and background.
        texture: amplitude of the background texture (0: flat colour).
        saturation: spread of the background colours around grey (0: grey);
            colourful, unique backgrounds let a small model memorise videos.
        polarity: digits darker (-1) or brighter (+1) than the background, or
            either (0); mixed polarity makes digits harder to learn.
        speed: (min, max) speed of the moving digit in pixels per frame
            (Kinetics only).
        noise_std: std of the per-pixel Gaussian noise, per frame.
        blobs: at most this many drifting clutter spots (uniform 0..blobs).
        margin: share of the width on each side the moving digit stays out of
            (Kinetics only), so that random training crops keep it in view.
    """

    digit_size: Tuple[int, int]
    contrast: Tuple[float, float]
    texture: float
    noise_std: float
    saturation: float = 0.3
    polarity: int = 0
    speed: Tuple[float, float] = (0.5, 2.5)
    blobs: int = 0
    margin: float = 0.0


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset at one size.

    Attributes:
        videos: split name -> number of videos (classes cycle for balance).
        num_frames: frames per video.
        height: frame height in pixels (even: yuv420p needs it).
        width: frame width in pixels (even).
        fps: frame rate written into the mp4 files.
        style: difficulty knobs.
    """

    videos: Dict[str, int]
    num_frames: int
    height: int
    width: int
    fps: int
    style: Style


# Grey-ish, mildly textured backgrounds and dark digits: a tiny model learns
# the digits instead of memorising each video's colours.
_EASY = Style(
    digit_size=(32, 42),
    contrast=(0.5, 0.7),
    texture=0.08,
    noise_std=0.0,
    saturation=0.08,
    polarity=-1,
)
# Kinetics format: digits nearly as tall as the frame, moving slowly inside the
# central 80% of the width, so that even multigrid's smallest clips (32-45 px
# crops of frames scaled to 32-64 px) keep a readable digit in view (with
# smaller sprites the multigrid demo tested far lower: docs/benchmarks/design-notes.md,
# "Demo data looks").
_KINETICS_EASY = replace(_EASY, digit_size=(64, 80), speed=(0.3, 1.0), margin=0.1)
# The same look at 4/3 the frame size (study_112).
_KINETICS_EASY_128 = replace(_KINETICS_EASY, digit_size=(85, 107), speed=(0.4, 1.33))
# Harder than the small look but with the same plain, grey-ish backgrounds:
# colourful unique backgrounds and a static distractor digit let the tiny I3D
# memorise the 1000 training videos and stay at chance on val.
_KINETICS_HARD = Style(
    digit_size=(28, 38),
    contrast=(0.35, 0.55),
    texture=0.1,
    noise_std=0.04,
    saturation=0.1,
    polarity=-1,
    speed=(0.5, 2.0),
    blobs=2,
    margin=0.1,
)
_HARD = Style(
    digit_size=(24, 32),
    contrast=(0.3, 0.5),
    texture=0.25,
    noise_std=0.05,
    saturation=0.25,
    blobs=3,
)
_MOTION_HARD = Style(
    digit_size=(20, 30), contrast=(0.25, 0.45), texture=0.3, noise_std=0.05, blobs=3
)

# Motion classes with digits of mixed size and contrast among clutter: large
# enough that the coarsest multigrid views (32 px of a 96 px frame) still show
# them (with smaller digits the tiny I3D learned nothing at 32 px while it
# learned at 64 px), faint often enough that full resolution still helps.
_MOTION_STUDY = Style(
    digit_size=(32, 56),
    contrast=(0.15, 0.7),
    texture=0.15,
    noise_std=0.05,
    saturation=0.1,
    blobs=2,
)

_SPECS = {
    ("kinetics", "tiny"): DatasetSpec(
        {"train": 10, "val": 5, "test": 5}, 48, 96, 112, 30, _KINETICS_EASY
    ),
    # 500 test videos: one video is 0.2 points, so the README demo's two runs
    # compare (with 50, one video would be 2 points).
    ("kinetics", "small"): DatasetSpec(
        {"train": 500, "val": 50, "test": 500}, 48, 96, 112, 30, _KINETICS_EASY
    ),
    ("kinetics", "study"): DatasetSpec(
        {"train": 500, "val": 50, "test": 3000}, 48, 96, 112, 30, _KINETICS_EASY
    ),
    ("kinetics", "study_112"): DatasetSpec(
        {"train": 500, "val": 50, "test": 3000}, 48, 128, 150, 30, _KINETICS_EASY_128
    ),
    ("kinetics", "bench"): DatasetSpec(
        {"train": 1000, "val": 200, "test": 200}, 64, 96, 112, 30, _KINETICS_HARD
    ),
    ("ssv2", "tiny"): DatasetSpec({"train": 8, "val": 4}, 32, 96, 128, 12, _EASY),
    ("ssv2", "small"): DatasetSpec({"train": 160, "val": 40}, 32, 96, 128, 12, _EASY),
    ("ssv2", "bench"): DatasetSpec(
        {"train": 480, "val": 120}, 32, 96, 128, 12, _MOTION_HARD
    ),
    ("ssv2", "study"): DatasetSpec(
        {"train": 1200, "val": 600}, 32, 96, 128, 12, _MOTION_STUDY
    ),
    # The study data at 4x the videos, for full-width models on a GPU
    # (configs/Demo/SSv2_I3D_R50_study_gpu.yaml).
    ("ssv2", "study_large"): DatasetSpec(
        {"train": 4800, "val": 1200}, 32, 96, 128, 12, _MOTION_STUDY
    ),
    # The Kinetics format's large digits, shown one after the other: with
    # smaller digits side by side (parts of them cropped out by 64 px training
    # crops) and fewer training videos, the tiny I3D stayed near its prior.
    ("charades", "tiny"): DatasetSpec(
        {"train": 4, "val": 2}, 48, 96, 112, 24, _KINETICS_EASY
    ),
    ("charades", "small"): DatasetSpec(
        {"train": 300, "val": 100}, 64, 96, 112, 24, _KINETICS_EASY
    ),
    ("charades", "bench"): DatasetSpec(
        {"train": 300, "val": 80}, 96, 96, 128, 24, _HARD
    ),
}


def get_spec(dataset: str, size: str) -> DatasetSpec:
    """Returns the spec of one dataset at one size.

    Args:
        dataset: one of ``DATASETS`` ("kinetics", "ssv2", "charades").
        size: one of ``SIZES``; "study" exists for "kinetics" and "ssv2",
            "study_large" for "ssv2" only, "study_112" for "kinetics" only.

    Returns:
        DatasetSpec: counts, frame geometry and style.
    """
    if dataset not in DATASETS:
        raise ValueError(
            f"demo dataset {dataset!r} unknown; expected one of {DATASETS}"
        )
    if size not in SIZES:
        raise ValueError(f"demo size {size!r} unknown; expected one of {SIZES}")
    if (dataset, size) not in _SPECS:
        have = sorted(name for name, sz in _SPECS if sz == size)
        raise ValueError(
            f"demo size {size!r} exists only for the datasets {have}; "
            f"pass --datasets {','.join(have)}"
        )
    return _SPECS[(dataset, size)]
