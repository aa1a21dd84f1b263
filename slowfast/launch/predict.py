"""The command line of ``tools/predict.py``: classify video files with a checkpoint.

    python tools/predict.py --cfg X.yaml --checkpoint Y.pyth video.mp4 [...]
        [--labels names.csv] [--json] [--top K] [KEY VALUE ...]

Options may come before or after the videos; the first argument that reads
as a config key (``TEST.NUM_SPATIAL_CROPS``, ``NUM_GPUS``: capitals, digits,
underscores and dots) and is not a file starts the ``KEY VALUE`` overrides.
Without ``--checkpoint``: TEST.CHECKPOINT_FILE_PATH, else the newest epoch
checkpoint in OUTPUT_DIR, as the tester chooses.

Label files (``--labels``): a JSON ``{name: id}`` mapping (PySlowFast's
``kinetics_classnames.json``; ids may be strings, as in SSv2's labels JSON),
``{id: name}`` or a list of names; a CSV of ``id,name`` rows (a header row
is allowed); or one name per line, in class order. It must name
MODEL.NUM_CLASSES classes.

A problem the user can fix (config, checkpoint, video, label file) is one
``error: ...`` line on stderr, found before the model is built where it can
be; exit status 2 for a bad config or command line, 1 otherwise (also when a
video fails to decode midway: the other videos are still scored).
"""

import argparse
import json
import logging
import os
import re
import sys
from typing import List, Optional, Sequence, Tuple

from fvcore.common.config import CfgNode
from iopath.common.file_io import g_pathmgr

from slowfast.checkpoint.files import CheckpointError
from slowfast.checkpoint.load import get_last_checkpoint
from slowfast.datasets.class_names import check_class_count, read_class_names
from slowfast.datasets.video_files import check_videos
from slowfast.engine import predict as engine
from slowfast.launch.config import load_run_config
from slowfast.launch.job import one_line, report
from slowfast.launch.parser import add_cfg_argument, add_debug_argument
from slowfast.models.describe import describe_model
from slowfast.utils.errors import EXIT_FAILED, EXIT_OK, UserError

logger = logging.getLogger(__name__)

# A config key starts the overrides: "TEST.NUM_SPATIAL_CROPS", "NUM_GPUS".
_KEY = re.compile(r"[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*")


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of ``tools/predict.py``."""
    parser = argparse.ArgumentParser(
        prog="predict.py",
        usage="%(prog)s --cfg FILE [--checkpoint FILE] [--labels FILE] [--json] "
        "[--top K] VIDEO [VIDEO ...] [KEY VALUE ...]",
        description="Print the top classes of video files under a trained model.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 1)[1],
    )
    add_cfg_argument(
        parser,
        "the config the checkpoint was trained with; repeat to merge several",
        required=True,
    )
    parser.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="the checkpoint (.pyth; a Caffe2 .pkl with TEST.CHECKPOINT_TYPE "
        "caffe2); default: TEST.CHECKPOINT_FILE_PATH, else OUTPUT_DIR's newest",
    )
    parser.add_argument(
        "--labels", metavar="FILE", help="class names (formats: see below)"
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per video (a line each)"
    )
    parser.add_argument(
        "--top", type=int, default=5, metavar="K", help="classes shown (default 5)"
    )
    add_debug_argument(
        parser, "show the traceback of an error too (or SLOWFAST_DEBUG=1)"
    )
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="VIDEO",
        help="video files (frame folders with DATA.DECODING_BACKEND frames), "
        "then config overrides as KEY VALUE pairs",
    )
    return parser


def split_inputs(inputs: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Splits the positional arguments into videos and ``KEY VALUE`` overrides.

    Args:
        inputs: the positional arguments in order.

    Returns:
        tuple: (videos, overrides); the overrides start at the first argument
        that reads as a config key and is no existing file or folder.
    """
    for index, token in enumerate(inputs):
        if _KEY.fullmatch(token) and not os.path.exists(token):
            return list(inputs[:index]), list(inputs[index:])
    return list(inputs), []


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parses the command line.

    Args:
        argv: the arguments (without the program name); None reads sys.argv.

    Returns:
        argparse.Namespace: ``cfg_files``, ``checkpoint``, ``labels``,
        ``json``, ``top``, ``debug``, ``videos`` and ``opts`` (the KEY VALUE
        overrides).
    """
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    args.videos, args.opts = split_inputs(args.inputs)
    del args.inputs
    if not args.videos:
        parser.error("give at least one video file before the KEY VALUE overrides")
    if args.top < 1:
        parser.error(f"--top {args.top}: must be at least 1")
    return args


def checkpoint_to_use(cfg: CfgNode, given: Optional[str]) -> str:
    """``--checkpoint``, else TEST.CHECKPOINT_FILE_PATH, else OUTPUT_DIR's newest
    epoch checkpoint (a mid-epoch one when there is no other); checked to exist.

    Raises:
        CheckpointError: there is none, or the file is missing (one line).
    """
    path = given or cfg.TEST.CHECKPOINT_FILE_PATH
    if not path:
        path = get_last_checkpoint(cfg.OUTPUT_DIR, epochs_only=True)
        path = path or get_last_checkpoint(cfg.OUTPUT_DIR)
    if not path:
        raise CheckpointError(
            f"no checkpoint given and OUTPUT_DIR = {cfg.OUTPUT_DIR!r} holds none; "
            "give --checkpoint FILE.pyth"
        )
    if not g_pathmgr.isfile(path):
        raise CheckpointError(
            f"{path}: checkpoint file not found; give --checkpoint a checkpoint "
            "written by tools/run_net.py (OUTPUT_DIR/checkpoints/*.pyth)"
        )
    return path


def _class_names(args: argparse.Namespace, cfg: CfgNode) -> Optional[List[str]]:
    if not args.labels:
        return None
    names = read_class_names(args.labels)
    check_class_count(args.labels, names, cfg.MODEL.NUM_CLASSES)
    return names


def predict(args: argparse.Namespace) -> int:
    """Checks the inputs, loads the model, prints each video's top classes.

    Args:
        args: the result of ``parse_args``.

    Returns:
        int: 0, or 1 when a video failed to decode (its error line printed).

    Raises:
        UserError: a bad config, checkpoint, video or label file (one line).
    """
    cfg = load_run_config(args.cfg_files, args.opts)
    path = checkpoint_to_use(cfg, args.checkpoint)
    check_videos(args.videos, cfg.DATA.DECODING_BACKEND == "frames")
    names = _class_names(args, cfg)
    device = engine.prediction_device(cfg)
    info = describe_model(cfg)
    model = engine.load_model(cfg, info, path, device)
    status = EXIT_OK
    for result in engine.predict_videos(cfg, info, model, args.videos, device):
        if isinstance(result, UserError):
            report(f"error: {one_line(result)}")
            status = EXIT_FAILED
        elif args.json:
            record = engine.prediction_record(result, args.top, names)
            print(json.dumps(record), flush=True)
        else:
            print(engine.format_prediction(result, args.top, names), flush=True)
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``tools/predict.py``; returns the exit status.

    Args:
        argv: arguments without the program name; None reads sys.argv.
    """
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s"
    )
    try:
        return predict(args)
    except UserError as err:
        if args.debug:
            raise
        report(f"error: {one_line(err)}")
        return err.exit_status
