"""Moving Digits: small synthetic video datasets in three on-disk formats.

Real handwritten digits (sklearn's UCI 8x8 set) animated on textured
backgrounds, written as Kinetics (mp4 + csv), SSv2 (JPEG frames + json) and
Charades (JPEG frames + multi-label frame lists) data. See
``tools/make_demo_data.py`` and DATASET.md.
"""

from workshop.dataprep.demo.generate import (
    MANIFEST,
    DatasetSummary,
    make_dataset,
    make_demo_data,
    video_rng,
)
from workshop.dataprep.demo.specs import (
    DATASETS,
    NUM_CLASSES,
    SIZES,
    SSV2_TEMPLATES,
    DatasetSpec,
    Style,
    get_spec,
)

__all__ = [
    "DATASETS",
    "MANIFEST",
    "NUM_CLASSES",
    "SIZES",
    "SSV2_TEMPLATES",
    "DatasetSpec",
    "DatasetSummary",
    "Style",
    "get_spec",
    "make_dataset",
    "make_demo_data",
    "video_rng",
]
