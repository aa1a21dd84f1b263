#!/usr/bin/env python3
"""Prints the top classes of video files under a trained model.

Usage:
    python tools/predict.py --cfg X.yaml --checkpoint Y.pyth video.mp4 [...]
        [--labels names.csv] [--json] [--top K] [KEY VALUE ...]

Each video is decoded into the tester's views (TEST.NUM_ENSEMBLE_VIEWS x
TEST.NUM_SPATIAL_CROPS, the config's sampling and crops), the model scores
them (on the GPU when NUM_GPUS > 0 and CUDA is present, else the CPU), and
their scores combine as the tester combines them (MODEL.HEAD_ACT: softmax, or
sigmoid for multi-label data; DATA.ENSEMBLE_METHOD "sum" shown as the mean).
Per video: a line naming it, then the top K classes with their scores
(names from ``--labels``, else class ids), or with ``--json`` one JSON
object. Logs go to stderr, results to stdout (``slowfast/launch/predict.py``).

Exit status: 0 done, 1 a checkpoint, video or label file the user can fix
(one ``error: ...`` line), 2 a bad config or command line.
"""

import sys
from typing import Optional, Sequence

from slowfast.launch.predict import main as predict_main
from slowfast.launch.predict import parse_args

__all__ = ["main", "parse_args"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the tool; returns the exit status (see the module docstring).

    Args:
        argv: arguments without the program name; None reads sys.argv.
    """
    return predict_main(argv)


if __name__ == "__main__":
    sys.exit(main())
