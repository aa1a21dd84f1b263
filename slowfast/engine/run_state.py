"""The run's state: what OUTPUT_DIR's run has trained, validated and tested.

``OUTPUT_DIR/run_state.json`` is the small file a rerun reads to decide what
is left to do (the final validation, a test already done); ``json_stats.log``
stays the run's log only. It is written whole (a temporary file, then
``os.replace``), by rank 0, after each change::

    {"version": 1,
     "trained_epochs": [1, 2],
     "validated_epochs": [2],
     "tests": [{"checkpoint": ".../checkpoint_epoch_00002.pyth",
                "checkpoint_file": "<size>-<mtime_ns>",
                "test_settings": "<hash>", "top1_err": 12.5, ...}]}

Epochs are counted from 1, as in ``json_stats.log``.
"""

import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import List, Optional

import simplejson

from slowfast.utils.errors import UserError

logger = logging.getLogger(__name__)

RUN_STATE_FILE = "run_state.json"
VERSION = 1


class RunStateError(UserError, ValueError):
    """run_state.json cannot be read; the message is one line."""


def file_identity(path: str) -> str:
    """Size and modification time: a checkpoint written again is another one."""
    info = os.stat(path)
    return f"{info.st_size}-{info.st_mtime_ns}"


@dataclass
class RunState:
    """What a run directory's runs have done.

    Attributes:
        trained_epochs: epochs whose training finished (counted from 1).
        validated_epochs: epochs whose validation was logged (counted from 1).
        tests: one ``test_final`` record per test (``checkpoint``,
            ``checkpoint_file``, ``test_settings`` and the metrics), oldest first.
    """

    trained_epochs: List[int] = field(default_factory=list)
    validated_epochs: List[int] = field(default_factory=list)
    tests: List[dict] = field(default_factory=list)

    def find_test(self, checkpoint: str, settings: str) -> Optional[dict]:
        """The newest test of ``checkpoint``, as the file is now, with ``settings``.

        Args:
            checkpoint: the checkpoint's path.
            settings: ``checkpoint.fingerprint.test_settings`` of the config.

        Returns:
            dict | None: the test's record; None when there is none (or the
            file was written again since, or is gone).
        """
        if not os.path.exists(checkpoint):
            return None
        wanted = (checkpoint, settings, file_identity(checkpoint))
        for record in reversed(self.tests):
            seen = (
                record.get("checkpoint"),
                record.get("test_settings"),
                record.get("checkpoint_file"),
            )
            if seen == wanted:
                return record
        return None

    def to_json(self) -> dict:
        """The file's content."""
        return {
            "version": VERSION,
            "trained_epochs": sorted(set(self.trained_epochs)),
            "validated_epochs": sorted(set(self.validated_epochs)),
            "tests": list(self.tests),
        }


def run_state_path(output_dir: str) -> str:
    """OUTPUT_DIR/run_state.json."""
    return os.path.join(output_dir, RUN_STATE_FILE)


def read_run_state(output_dir: str) -> RunState:
    """The state of ``output_dir``'s run, from its run_state.json.

    Args:
        output_dir: the run's OUTPUT_DIR.

    Returns:
        RunState: empty where there is no run_state.json (a new run directory).

    Raises:
        RunStateError: run_state.json exists and is not a state this version
            reads (it is left as it is).
    """
    path = run_state_path(output_dir)
    if not os.path.exists(path):
        return RunState()
    try:
        with open(path) as f:
            data = simplejson.load(f)
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
        return RunState(
            [int(e) for e in data["trained_epochs"]],
            [int(e) for e in data["validated_epochs"]],
            [dict(t) for t in data["tests"]],
        )
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise RunStateError(
            f"{path} cannot be read ({err}); move it away (the run then "
            "resumes from its last checkpoint, validating and testing again)"
        ) from err


def write_run_state(output_dir: str, state: RunState) -> None:
    """Writes run_state.json whole: a temporary file, then ``os.replace``.

    The temporary file is named as ``launch/run_lock`` expects of an
    interrupted write (``.<name>.<pid>.<8 hex digits>.tmp``).

    Args:
        output_dir: the run's OUTPUT_DIR.
        state: the state to write.
    """
    os.makedirs(output_dir, exist_ok=True)
    path = run_state_path(output_dir)
    tmp = os.path.join(
        output_dir, f".{RUN_STATE_FILE}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    )
    try:
        with open(tmp, "w") as f:
            simplejson.dump(state.to_json(), f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class RunStateRecorder:
    """Records what a run does in run_state.json (rank 0 writes; the others
    do nothing). Each record reads the file, changes it and writes it whole.

    Args:
        output_dir: the run's OUTPUT_DIR.
        enabled: whether this process writes (rank 0).
    """

    def __init__(self, output_dir: str, enabled: bool) -> None:
        self.output_dir = output_dir
        self.enabled = enabled

    def read(self) -> RunState:
        """The current state (see ``read_run_state``)."""
        return read_run_state(self.output_dir)

    def _update(self, change) -> None:
        if not self.enabled:
            return
        state = self.read()
        change(state)
        write_run_state(self.output_dir, state)

    def trained(self, epoch: int) -> None:
        """Epoch ``epoch`` (counted from 1) is trained."""
        self._update(lambda s: s.trained_epochs.append(epoch))

    def validated(self, epoch: int) -> None:
        """Epoch ``epoch`` (counted from 1) is validated."""
        self._update(lambda s: s.validated_epochs.append(epoch))

    def tested(self, record: dict) -> None:
        """A test's ``test_final`` record (checkpoint, its identity, settings,
        metrics)."""
        self._update(lambda s: s.tests.append(dict(record)))

    def training_from(self, start_epoch: int) -> None:
        """Training restarts at epoch index ``start_epoch``: the records of the
        later epochs are of an earlier attempt and are dropped (with a log
        line); those of the earlier epochs and the tests are kept.

        Args:
            start_epoch: index (from 0) of the first epoch trained now.
        """
        if not self.enabled:
            return
        state = self.read()
        stale = sorted(
            {e for e in state.trained_epochs + state.validated_epochs}
            - set(range(1, start_epoch + 1))
        )
        if not stale:
            return
        logger.info(
            "%s: epochs %s are trained again; their earlier records are dropped",
            RUN_STATE_FILE,
            ", ".join(map(str, stale)),
        )
        state.trained_epochs = [e for e in state.trained_epochs if e <= start_epoch]
        state.validated_epochs = [e for e in state.validated_epochs if e <= start_epoch]
        write_run_state(self.output_dir, state)
