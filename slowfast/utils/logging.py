"""Logging setup for every process and the ``json_stats`` lines of a run.

Process 0 logs INFO and above to stdout and, when an output folder is given,
appends to ``OUTPUT_DIR/stdout.log``. Other processes log WARNING and above
only, tagged with their rank, so that a multi-process run prints one copy of
the progress but every process's problems; they also append them to
``OUTPUT_DIR/logs/rank_<r>.log`` (created at the first warning), where a
failed process's traceback can be found (``process_log_path``).
"""

import logging
import math
import numbers
import os
import re
import sys
from typing import Any, Optional

import simplejson
from iopath.common.file_io import g_pathmgr

_FORMAT = "[%(asctime)s][%(levelname)s] %(filename)s: %(lineno)3d: %(message)s"
_DATE_FORMAT = "%m/%d %H:%M:%S"
# Marks the handlers installed here, so that a second call replaces them.
_HANDLER_TAG = "_slowfast_handler"
STDOUT_LOG = "stdout.log"
JSON_STATS_LOG = "json_stats.log"
JSON_STATS_PREFIX = "json_stats: "
# Significant digits kept for floats in json_stats lines.
_FLOAT_DIGITS = 6

logger = logging.getLogger(__name__)


# ``logger.error(..., extra=FILE_ONLY)``: the record goes to the log file, not to
# the console (e.g. the traceback of an error the console reports in one line).
FILE_ONLY = {"file_only": True}


# "slowfast.datasets.lists.DataError: " before a message (a traceback's last line).
_CLASS_PATH = re.compile(r"^(?:[A-Za-z_]\w*\.)+\w*Error: ")


def error_line(text: str) -> str:
    """The line that states an error: the last non-empty line of ``text``
    without a leading class path. An error raised in a DataLoader worker or
    in another process arrives with its traceback in the text; the last line
    is the error's own message.

    Args:
        text: ``str(error)``, or the text of a traceback.

    Returns:
        str: one line ("unknown error" for an empty text).
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return _CLASS_PATH.sub("", lines[-1]) if lines else "unknown error"


def _not_file_only(record: logging.LogRecord) -> bool:
    return not getattr(record, "file_only", False)


def _tagged(handler: logging.Handler) -> logging.Handler:
    setattr(handler, _HANDLER_TAG, True)
    return handler


def setup_logging(output_dir: Optional[str] = None, rank: int = 0) -> None:
    """Configures the root logger for this process; safe to call again.

    A second call replaces the handlers installed by the first (it never
    duplicates lines) and leaves handlers installed by others alone.

    Args:
        output_dir: the run's output folder; on rank 0 the log is also
            appended to ``output_dir/stdout.log``. None: stdout only.
        rank: global rank of this process. Rank 0 logs INFO and above, the
            others WARNING and above. Records logged with ``extra=FILE_ONLY``
            reach the file only.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_TAG, False):
            root.removeHandler(handler)
            handler.close()

    prefix = "" if rank == 0 else f"[rank {rank}]"
    formatter = logging.Formatter(prefix + _FORMAT, datefmt=_DATE_FORMAT)
    level = logging.INFO if rank == 0 else logging.WARNING
    root.setLevel(level)

    console = _tagged(logging.StreamHandler(stream=sys.stdout))
    console.setFormatter(formatter)
    console.addFilter(_not_file_only)
    root.addHandler(console)

    if output_dir:
        path = process_log_path(output_dir, rank)
        g_pathmgr.mkdirs(os.path.dirname(path))
        file_handler = _tagged(logging.FileHandler(path, mode="a", delay=rank > 0))
        file_handler.setFormatter(formatter)
        root.addHandler(file_handler)
    logging.captureWarnings(True)


def process_log_path(output_dir: str, rank: int) -> str:
    """Where process ``rank`` logs: ``stdout.log`` (rank 0) or ``logs/rank_<r>.log``."""
    if rank == 0:
        return os.path.join(output_dir, STDOUT_LOG)
    return os.path.join(output_dir, "logs", f"rank_{rank}.log")


def _round_floats(value: Any) -> Any:
    """Rounds floats (also inside lists and dicts) to a few significant digits."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy, torch
        value = value.tolist()
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value):
            return value
        return float(f"{value:.{_FLOAT_DIGITS}g}")
    if isinstance(value, dict):
        return {key: _round_floats(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round_floats(item) for item in value]
    return value


def format_json_stats(stats: dict) -> str:
    """Returns ``stats`` as one JSON line with keys sorted and floats rounded.

    Args:
        stats: flat or nested dict of numbers and strings (numpy and torch
            scalars are accepted).

    Returns:
        str: the JSON text (floats kept to 6 significant digits).
    """
    return simplejson.dumps(_round_floats(stats), sort_keys=True)


def log_json_stats(
    stats: dict, output_dir: Optional[str] = None, rank: int = 0
) -> None:
    """Logs ``json_stats: {...}`` and appends the JSON to ``json_stats.log``.

    Args:
        stats: the statistics to record (see ``format_json_stats``).
        output_dir: the run's output folder; None logs only.
        rank: global rank of this process; only rank 0 writes the file.
    """
    line = format_json_stats(stats)
    logger.info(JSON_STATS_PREFIX + line)
    if rank == 0 and output_dir:
        g_pathmgr.mkdirs(output_dir)
        with g_pathmgr.open(os.path.join(output_dir, JSON_STATS_LOG), "a") as f:
            f.write(line + "\n")
