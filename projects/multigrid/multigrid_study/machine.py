"""The machine a study's runs are timed on, and the code they ran.

Wall-clocks compare only between runs timed on one kind of machine: the same
CPU model (with its family, model number and vector instructions, which a
virtual machine's model name may not tell apart) and number of usable cores,
the same GPU model and count (GPU runs) and the same PyTorch. A study records
the machine with each run's processes and results; it neither resumes a run
nor adds new runs to a study timed on another kind (the host's name may
differ: another node of the same kind is the same machine here).
"""

from __future__ import annotations

import platform
import subprocess
from typing import Optional

import torch

from slowfast.launch.spawn import available_cores


def _cpuinfo() -> dict:
    """The first processor's fields of /proc/cpuinfo (empty elsewhere)."""
    fields: dict = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def _cpu_model(info: dict) -> str:
    return info.get("model name") or (
        platform.processor() or platform.machine() or "unknown CPU"
    )


def _cpu_id(info: dict) -> Optional[str]:
    """``family F model M``, or None where /proc/cpuinfo does not say."""
    if "cpu family" not in info or "model" not in info:
        return None
    return f"family {info['cpu family']} model {info['model']}"


def describe_machine(gpus: int) -> dict:
    """This machine, as far as it sets a run's speed.

    Args:
        gpus: the GPUs a run uses per machine (NUM_GPUS; 0 for a CPU run,
            which leaves the GPU fields None).

    Returns:
        dict: ``cpu`` (model name), ``cpu_id`` (family and model number),
        ``cpu_isa`` (the vector instructions PyTorch uses, e.g. AVX512),
        ``cpus`` (cores this process may use, as the launcher counts them:
        ``launch.spawn.available_cores``), ``gpu`` (model) and ``gpus``
        (NUM_GPUS), ``torch`` (version).
    """
    gpu = None
    if gpus > 0 and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
    info = _cpuinfo()
    return {
        "cpu": _cpu_model(info),
        "cpu_id": _cpu_id(info),
        "cpu_isa": torch.backends.cpu.get_cpu_capability(),
        "cpus": available_cores(),
        "gpu": gpu,
        "gpus": gpus if gpus > 0 else None,
        "torch": torch.__version__,
    }


def machine_text(machine: dict) -> str:
    """One line, e.g. ``"NVIDIA H100 80GB HBM3 x1, 16 cores (...), torch 2.13.0"``."""
    cpu = ", ".join(
        str(v)
        for v in (machine["cpu"], machine.get("cpu_id"), machine.get("cpu_isa"))
        if v
    )
    cpus = f"{machine['cpus']} cores ({cpu})"
    if machine.get("gpu"):
        return f"{machine['gpu']} x{machine['gpus']}, {cpus}, torch {machine['torch']}"
    return f"{cpus}, torch {machine['torch']}"


def same_machine(a: Optional[dict], b: Optional[dict]) -> bool:
    """Whether two records describe one kind of machine (an absent record,
    from an older study, matches any; so does a field only one records)."""
    if not a or not b:
        return True
    keys = ("cpu", "cpus", "gpu", "gpus", "torch")
    if not all(a.get(key) == b.get(key) for key in keys):
        return False
    newer = ("cpu_id", "cpu_isa")
    return all(a.get(k) == b.get(k) for k in newer if k in a and k in b)


def code_version(repo: str) -> Optional[str]:
    """The repository's commit (``+changes`` when tracked files differ from it);
    None without git or outside a checkout."""
    try:
        commit = subprocess.run(
            ["git", "-C", repo, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        changes = subprocess.run(
            ["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+changes" if changes else "")
