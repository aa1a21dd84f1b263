"""One run per OUTPUT_DIR: a lock file held for the run's life.

``OUTPUT_DIR/.run.lock`` holds who runs there (host, pid, start time, SLURM
job id, command). A second start with the same OUTPUT_DIR refuses with one
line naming the directory and the holder. A lock whose process is gone is
taken over: on the same host when its pid no longer runs, on any host when
it belongs to the same SLURM job (a requeued job restarts elsewhere) or to a
SLURM job that squeue says has ended (a failed job's next submission). The
lock is released when the run ends, whatever the reason (also on a signal
that ends the process through Python).
"""

import atexit
import datetime
import json
import logging
import os
import re
import socket
import subprocess
import sys
from typing import List, Optional

from slowfast.utils.errors import UserError

logger = logging.getLogger(__name__)

LOCK_NAME = ".run.lock"
# Temporary files of our atomic writes (``checkpoint/save.atomic_save``,
# ``engine/run_state``).
_TEMP_RE = re.compile(r"^\..+\.\d+\.[0-9a-f]{8}\.tmp$")


class RunLockError(UserError, RuntimeError):
    """OUTPUT_DIR is in use by another run; the message is one line."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


# squeue's states of a job that has ended; any other state counts as alive.
_ENDED_JOB_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
     "BOOT_FAIL", "DEADLINE"}
)  # fmt: skip


def _slurm_job_ended(job_id: str) -> bool:
    """Whether SLURM says job ``job_id`` has ended (False when it cannot tell)."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):  # no SLURM here: cannot tell
        return False
    if out.returncode != 0:
        # squeue refuses an id it no longer knows: the job ended long enough
        # ago to be purged (MinJobAge).
        return "invalid job id" in out.stderr.lower()
    states = set(out.stdout.split())
    return bool(states) and states <= _ENDED_JOB_STATES


def _holder_text(holder: dict) -> str:
    job = f", SLURM job {holder['slurm_job']}" if holder.get("slurm_job") else ""
    return (
        f"host {holder.get('host')}, pid {holder.get('pid')}{job}, since "
        f"{holder.get('since')}"
    )


class RunLock:
    """The lock of one OUTPUT_DIR.

    Args:
        output_dir: the run's OUTPUT_DIR.
    """

    def __init__(self, output_dir: str) -> None:
        self.output_dir = output_dir
        self.path = os.path.join(output_dir, LOCK_NAME)
        self.held = False
        # Why a stale lock was taken over (for the caller's log), or "".
        self.took_over = ""

    def _me(self) -> dict:
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": datetime.datetime.now().isoformat(timespec="seconds"),
            "slurm_job": os.environ.get("SLURM_JOB_ID", ""),
            "slurm_cluster": os.environ.get("SLURM_CLUSTER_NAME", ""),
            "slurm_restart": os.environ.get("SLURM_RESTART_COUNT", "0"),
            "command": " ".join(sys.argv),
        }

    def read(self) -> Optional[dict]:
        """The current holder, or None (no lock, or an unreadable one)."""
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}

    def _stale(self, holder: dict) -> Optional[str]:
        """Why ``holder``'s lock may be taken over, or None when it is alive."""
        if not holder:
            return "it is unreadable (an interrupted write)"
        me = self._me()
        same_job = holder.get("slurm_job") and holder["slurm_job"] == me["slurm_job"]
        if same_job and holder.get("slurm_restart", "0") != me["slurm_restart"]:
            return f"it belongs to this SLURM job ({me['slurm_job']}), restarted"
        if holder.get("host") == me["host"] and not _pid_alive(int(holder["pid"])):
            return f"its process {holder['pid']} on this host has ended"
        # A SLURM job that failed on other nodes (a task killed, a node lost)
        # leaves its lock behind: the next submission takes it over.
        same_cluster = holder.get("slurm_cluster", "") == me["slurm_cluster"]
        if holder.get("slurm_job") and not same_job and same_cluster:
            if _slurm_job_ended(holder["slurm_job"]):
                return f"its SLURM job {holder['slurm_job']} has ended"
        return None

    def in_use(self) -> Optional[str]:
        """Who holds the lock, in one line, while that process lives; else None."""
        holder = self.read()
        if holder is None or self._stale(holder):
            return None
        return _holder_text(holder)

    def acquire(self) -> None:
        """Takes the lock, or raises ``RunLockError`` naming its holder.

        A stale lock is taken over; ``took_over`` then says why (log it).
        """
        os.makedirs(self.output_dir, exist_ok=True)
        # Written whole, then linked into place: the lock never exists empty.
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self._me(), f)
        try:
            self._link(tmp)
        finally:
            os.remove(tmp)
        self.held = True
        atexit.register(self.release)

    def _create(self, tmp: str) -> bool:
        """Puts ``tmp`` in place as the lock; False when a lock exists."""
        try:
            os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w") as f, open(tmp) as src:
                f.write(src.read())
            return True

    def _link(self, tmp: str) -> None:
        for _ in range(3):
            if self._create(tmp):
                return
            holder = self.read()
            if holder is None:
                continue  # released meanwhile
            reason = self._stale(holder)
            if reason is None:
                raise RunLockError(
                    f"OUTPUT_DIR {self.output_dir} is in use by another run "
                    f"({_holder_text(holder)}); wait for it to end or choose "
                    f"another OUTPUT_DIR (if that run is dead, delete {self.path})"
                )
            self.took_over = f"took over the lock of {self.output_dir}: {reason}"
            try:
                os.remove(self.path)
            except FileNotFoundError:  # another start took it over first
                pass
        raise RunLockError(f"could not take the lock {self.path}; try again")

    def release(self) -> None:
        """Removes the lock if this process holds it (safe to call twice)."""
        if not self.held:
            return
        holder = self.read()
        if holder and holder.get("pid") == os.getpid():
            os.remove(self.path)
        self.held = False

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def remove_stale_temp_files(output_dir: str) -> List[str]:
    """Removes our interrupted writes' temporary files (call with the lock held).

    Only files named as our atomic writes name their temporary files
    (``.<name>.<pid>.<8 hex digits>.tmp``) in OUTPUT_DIR and its checkpoint
    folder are removed.

    Returns:
        list[str]: the removed paths.
    """
    removed = []
    for folder in (output_dir, os.path.join(output_dir, "checkpoints")):
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if _TEMP_RE.match(name):
                path = os.path.join(folder, name)
                os.remove(path)
                removed.append(path)
    return removed
