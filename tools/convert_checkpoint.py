#!/usr/bin/env python3
"""Converts a Caffe2 model-zoo checkpoint (.pkl) into a .pyth for a config.

Usage:
    python tools/convert_checkpoint.py --cfg configs/Kinetics/SLOWFAST_8x8_R50.yaml \
        --pkl SLOWFAST_8x8_R50.pkl --out SLOWFAST_8x8_R50.pyth [KEY VALUE ...]

The model of the config is built and filled from the .pkl as
``TEST.CHECKPOINT_TYPE caffe2`` fills it (``slowfast/checkpoint/caffe2.py``: the
blobs must fill the whole model, classifier included, so the config must be the
checkpoint's, ``MODEL.NUM_CLASSES`` too); the .pyth holds its weights (epoch -1:
a run initialised from it starts at epoch 0) and loads with
``TRAIN.CHECKPOINT_FILE_PATH`` and the default ``CHECKPOINT_TYPE pytorch``.
"""

import argparse
import logging
import sys
from typing import List, Optional

from slowfast.config import ConfigError
from slowfast.launch.config import load_run_config
from slowfast.launch.parser import reject_options_among_overrides


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the command line (options first, then KEY VALUE overrides)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cfg", dest="cfg_files", action="append", required=True)
    parser.add_argument("--pkl", required=True, help="the Caffe2 checkpoint")
    parser.add_argument("--out", required=True, help="the .pyth to write")
    parser.add_argument("opts", nargs=argparse.REMAINDER, metavar="KEY VALUE")
    args = parser.parse_args(argv)
    reject_options_among_overrides(parser, args.opts)
    return args


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        cfg = load_run_config(args.cfg_files, list(args.opts) + ["NUM_GPUS", "0"])
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from slowfast.checkpoint.files import CheckpointError
    from slowfast.checkpoint.load import load_checkpoint
    from slowfast.checkpoint.save import save_weights
    from slowfast.models import build_model

    model = build_model(cfg)
    try:
        load_checkpoint(args.pkl, model, convert_from_caffe2=True)
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    save_weights(args.out, model, cfg)
    print(f"wrote {args.out} ({cfg.MODEL.MODEL_NAME} {cfg.MODEL.ARCH} from {args.pkl})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
