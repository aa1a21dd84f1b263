"""Moving Digits: small synthetic video datasets in the three on-disk layouts.

Real handwritten digits (sklearn's UCI 8x8 set) animated on textured
backgrounds, written as Kinetics (mp4 + csv), SSv2 (JPEG frames + json) and
Charades (JPEG frames + multi-label frame lists) data. See
``tools/make_demo_data.py`` and DATASET.md.
"""

from workshop.dataprep.demo.generate import (
    MANIFEST,
    LayoutSummary,
    make_demo_data,
    make_layout,
    video_rng,
)
from workshop.dataprep.demo.specs import (
    LAYOUTS,
    NUM_CLASSES,
    SIZES,
    SSV2_TEMPLATES,
    LayoutSpec,
    Style,
    get_spec,
)

__all__ = [
    "LAYOUTS",
    "MANIFEST",
    "NUM_CLASSES",
    "SIZES",
    "SSV2_TEMPLATES",
    "LayoutSpec",
    "LayoutSummary",
    "Style",
    "get_spec",
    "make_demo_data",
    "make_layout",
    "video_rng",
]
