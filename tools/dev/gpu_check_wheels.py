"""The wheels ``tools/dev/gpu_check.py`` needs beyond PyTorch and Triton.

``pack`` (on a machine with a package index) writes them into ``.gpu_wheels/``
of the checkout, for the GPU machine's Python: fvcore and iopath, which PyPI
has as source only, are built into pure-Python wheels; the rest (and their
dependencies) are downloaded as binary wheels for manylinux x86_64. ``unpack``
(on the GPU machine, no network) extracts the wheels of what this Python
lacks into ``.gpu_wheels/site-pyX.Y``, which the check's processes get on
their path. PyAV, scikit-learn, matplotlib and TensorBoard are not needed:
the check reads JPEG frames and writes no plots or event files.
"""

import importlib.machinery
import os
import platform
import subprocess
import sys
import zipfile
from typing import Dict, List, Optional, Sequence, Tuple

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = os.path.join(REPO_ROOT, ".gpu_wheels")
# What the check imports beyond torch and triton (pip adds their dependencies).
REQUIREMENTS: Tuple[str, ...]
REQUIREMENTS = ("fvcore", "iopath", "numpy", "Pillow", "PyYAML", "simplejpeg")
REQUIREMENTS += ("simplejson",)
SOURCE_ONLY = ("fvcore", "iopath")  # built here into pure-Python wheels
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
# Modules the check's processes import (checked before any stage runs).
MODULES: Tuple[str, ...]
MODULES = ("fvcore", "iopath", "yaml", "numpy", "PIL", "simplejpeg", "simplejson")
MODULES += ("tabulate", "termcolor", "tqdm", "portalocker", "yacs", "torch")


def pack(python_version: str, folder: str = FOLDER) -> int:
    """Writes the wheels for a Python version into ``folder`` (needs pip and a
    package index; prints pip's commands and the folder's size).

    Args:
        python_version: the GPU machine's, e.g. "3.10".
        folder: where the wheels go.

    Returns:
        int: pip's exit status (0: done).
    """
    pip = [sys.executable, "-m", "pip"]
    os.makedirs(folder, exist_ok=True)
    build = pip + ["wheel", "--no-deps", "-w", folder, *SOURCE_ONLY]
    download = pip + ["download", "-d", folder, "--find-links", folder]
    download += ["--only-binary=:all:", "--python-version", python_version]
    download += ["--implementation", "cp"]
    for tag in PLATFORMS:
        download += ["--platform", tag]
    for cmd in (build, download + list(REQUIREMENTS)):
        print("+", " ".join(cmd[2:]), flush=True)
        status = subprocess.run(cmd).returncode
        if status:
            return status
    wheels = [w for w in os.listdir(folder) if w.endswith(".whl")]
    size = sum(os.path.getsize(os.path.join(folder, w)) for w in wheels)
    print(
        f"{len(wheels)} wheels, {size / 2**20:.1f} MiB in {folder}; copy the "
        "checkout with this folder to the GPU machine and run "
        "python tools/dev/gpu_check.py --out DIR there"
    )
    return 0


def _tags(wheel: str) -> Tuple[str, List[str], List[str], List[str]]:
    """A wheel file's distribution name and its python, ABI and platform tags."""
    parts = os.path.basename(wheel)[: -len(".whl")].split("-")
    name = parts[0].lower().replace("_", "-")
    python, abi, platform_tags = (tag.split(".") for tag in parts[-3:])
    return name, python, abi, platform_tags


def fits(wheel: str) -> bool:
    """Whether this Python on this machine can use ``wheel``."""
    _, pythons, abis, platforms = _tags(wheel)
    major, minor = sys.version_info[:2]
    cpython = f"cp{major}{minor}"
    python_ok = any(t in (cpython, f"py{major}", f"py{major}{minor}") for t in pythons)
    if "abi3" in abis:  # stable ABI: any CPython from the tagged one on
        python_ok = any(t.startswith("cp3") and int(t[3:]) <= minor for t in pythons)
    machine = platform.machine()
    platform_ok = any(
        p == "any" or (sys.platform == "linux" and p.endswith(machine))
        for p in platforms
    )
    return python_ok and platform_ok


def top_level(wheel: str) -> List[str]:
    """The importable top-level names a wheel installs."""
    names = set()
    with zipfile.ZipFile(wheel) as archive:
        for entry in archive.namelist():
            head, _, rest = entry.partition("/")
            if head.endswith((".dist-info", ".data", ".libs")):
                continue
            if rest:
                names.add(head)
            elif head.endswith((".py", ".so")):
                names.add(head.split(".")[0])
    return sorted(names)


def site_folder(folder: str = FOLDER) -> str:
    """Where this Python's unpacked wheels go."""
    return os.path.join(folder, "site-py{}.{}".format(*sys.version_info[:2]))


def _importable(name: str, extra: Sequence[str] = ()) -> bool:
    for folder in extra:  # forget a look made before the folder was written
        sys.path_importer_cache.pop(folder, None)
    path = list(extra) + sys.path
    return importlib.machinery.PathFinder.find_spec(name, path) is not None


def unpack(folder: str = FOLDER) -> Tuple[Optional[str], List[str]]:
    """Extracts the packed wheels of what this Python lacks.

    Returns:
        tuple: the site folder to put on the path (None when there is
        none) and the wheels extracted now.
    """
    if not os.path.isdir(folder):
        return None, []
    site = site_folder(folder)
    latest: Dict[str, str] = {}
    for wheel in sorted(os.listdir(folder)):
        if wheel.endswith(".whl") and fits(wheel):
            latest[_tags(wheel)[0]] = os.path.join(folder, wheel)
    extracted = []
    for wheel in latest.values():
        names = top_level(wheel)
        if all(_importable(n) or _importable(n, [site]) for n in names):
            continue  # installed here, or unpacked by an earlier check
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
        extracted.append(os.path.basename(wheel))
    return (site if os.path.isdir(site) else None), extracted


def missing(site: Optional[str]) -> List[str]:
    """The check's modules (``MODULES``) that neither this Python nor ``site``
    provides.

    Args:
        site: a folder of unpacked wheels, or None.

    Returns:
        list: the missing module names.
    """
    return [m for m in MODULES if not _importable(m, [site] if site else [])]
