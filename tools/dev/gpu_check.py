#!/usr/bin/env python3
r"""Checks a GPU machine in one call and writes what it measured to one JSON file.

Stages, in order of value, each in a process of its own and with its own cap
(a share of ``--budget``; a stage that runs past it is recorded as
``timeout`` and the check goes on with the next):

1. ``environment``: GPU, driver and CUDA, Python, torch, Triton, CPUs, commit.
2. ``triton_warmup``: the next stage's Triton kernels (72 variants) built
   into Triton's cache by one process per CPU side by side, so that a cold
   cache costs seconds, not minutes: kernels built, seconds, per process.
3. ``split_bn``: sub-batch BN's Triton kernels against the reference
   computation, fp32 / fp16 / bf16 in both memory formats, seconds per case
   (``tools/dev/check_split_bn.py``).
4. ``model_step``: the training step of SlowFast and I3D R50 multigrid (8
   clips at the base shape, one GPU) at every multigrid shape: sub-batch
   against plain BN, eager against CUDA graphs; ms per step, efficiency
   (FLOP rate relative to plain BN's graphed step at the base shape), peak
   memory, the path of the BN layers; "oom" where a shape does not fit
   (``workshop/bench/model_step.py``, ``workshop/bench/step_cells.py``).
5. ``graphs``: graphed against eager training at those configs' shapes:
   losses, gradients, BN statistics, weights
   (``workshop/bench/graph_check.py``).
6. ``train``: short I3D R50 multigrid trainings from generated JPEG frame
   folders, CUDA graphs off and on, in one process and under torchrun with
   one process: ms per iteration and data wait per shape
   (``tools/run_net.py``, ``gpu_check_train.py``).
7. ``compile``: the step through torch.compile, with the time left (at
   least a minute).

``DIR/gpu_check.json`` is rewritten (atomically) after every stage, so that a
cut check still holds what it measured; ``DIR/logs/`` has each stage's output.
``--smoke`` runs the same stages on the CPU at toy size (the test suite does);
the GPU-only ones report ``skipped`` with the reason. Exit status: 0 when no
stage failed or timed out, 1 otherwise, 2 for a bad argument or a missing
package.

The check needs torch and, beyond it, a few small packages: where they are
missing it extracts the wheels that ``--pack-wheels`` wrote into the
checkout's ``.gpu_wheels/`` (on a machine with a package index, for the GPU
machine's Python), and gives its processes the checkout and those on their
path: nothing is installed.

Examples:
    python tools/dev/gpu_check.py --pack-wheels --python-version 3.10,3.11,3.12
    python tools/dev/gpu_check.py --out gpu_check
    python tools/dev/gpu_check.py --smoke --out /tmp/gpu_check_smoke
"""

import argparse
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import time
from typing import List, Optional, Tuple

TOOLS = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(TOOLS))
STAGES: Tuple[str, ...]
STAGES = ("environment", "triton_warmup", "split_bn", "model_step", "graphs")
STAGES += ("train", "compile")
# Each stage's cap as a share of --budget; compile gets what is left.
SHARES = {"environment": 0.04, "triton_warmup": 0.12, "split_bn": 0.08}
SHARES.update(model_step=0.25, graphs=0.19, train=0.32)
MIN_CAP_S = 15  # a stage's cap at the least (while the budget lasts)
MIN_COMPILE_S = 60
KILL_GRACE_S = 10  # between SIGTERM and SIGKILL for a stage past its cap
MARKER = ".gpu_check"  # marks an --out folder this check writes


def _sibling(name: str):
    """Imports ``tools/<name>.py`` by its path, once (the tools are no package)."""
    if name not in sys.modules:
        path = os.path.join(TOOLS, f"{name}.py")
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None  # a .py file's
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # gpu_check_train imports gpu_check_stages
        spec.loader.exec_module(module)
    return sys.modules[name]


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the command line: ``--out``, ``--budget``, ``--smoke`` and the rest."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", help="folder for gpu_check.json, logs, data, runs")
    parser.add_argument(
        "--budget",
        type=float,
        default=420.0,
        help="seconds for the whole check (default 420)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="the stages on the CPU at toy size"
    )
    parser.add_argument(
        "--pack-wheels",
        action="store_true",
        help="write the wheels the check needs into .gpu_wheels/ and stop "
        "(needs a package index)",
    )
    parser.add_argument(
        "--python-version",
        help="the GPU machine's Python for --pack-wheels, X.Y (several: "
        "3.10,3.11,3.12)",
    )
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not (args.out or args.pack_wheels):
        parser.error("--out DIR is required (where the results go)")
    if args.pack_wheels and not args.python_version:
        parser.error(
            "--pack-wheels needs --python-version X.Y: the GPU machine's Python "
            "(python3 --version there), or several if unsure (3.10,3.11,3.12)"
        )
    if args.budget < 60:
        parser.error(f"--budget {args.budget:g}: give the check at least 60 seconds")
    return args


def _claim(out: str) -> Optional[str]:
    """Makes ``out`` this check's folder; why not, when it holds other files."""
    if os.path.isdir(out) and os.listdir(out):
        if not os.path.exists(os.path.join(out, MARKER)):
            return (
                f"--out {out} holds files this check did not write; pass a new folder"
            )
    os.makedirs(out, exist_ok=True)
    open(os.path.join(out, MARKER), "w").close()
    return None


def _git(*args: str) -> Optional[str]:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _basics(args: argparse.Namespace, site: Optional[str], unpacked: list) -> dict:
    """What this process knows of the machine (the environment stage adds more)."""
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "commit": _git("rev-parse", "HEAD"),
        "uncommitted_changes": bool(changes) if changes is not None else None,
        "budget_s": args.budget,
        "smoke": args.smoke,
        "wheels_site": os.path.relpath(site, REPO_ROOT) if site else None,
        "wheels_unpacked": unpacked,
    }


def _wait(proc: subprocess.Popen, cap: float) -> Optional[int]:
    """The child's exit status, or None after stopping it at its cap."""
    try:
        return proc.wait(timeout=max(cap, 1.0))
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):  # SIGKILL: what is left of it
        try:
            os.killpg(proc.pid, sig)  # the stage's group: its helpers too
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    return None


def _last_line(path: str) -> str:
    with open(path, errors="replace") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    return lines[-1] if lines else ""


def _run_child(name: str, args, out: str, env: dict, cap: float) -> dict:
    """Runs one stage in its own process; its figures, status and seconds."""
    figures_path = os.path.join(out, "stages", f"{name}.json")
    if os.path.exists(figures_path):
        os.remove(figures_path)
    log = os.path.join(out, "logs", f"{name}.log")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--stage", name, "--out", out]
    cmd += ["--seconds", f"{cap:.1f}"] + (["--smoke"] if args.smoke else [])
    start = time.monotonic()
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            cmd,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
            start_new_session=True,  # a group of its own, stopped as a whole
        )
        status = _wait(proc, cap)
    figures = {}
    if os.path.exists(figures_path):
        with open(figures_path) as handle:
            figures = json.load(handle)
    result = {"status": figures.pop("status", "failed")}
    result["seconds"] = round(time.monotonic() - start, 1)
    if status is None:
        result["status"] = "timeout"
        figures["reason"] = f"ran past its cap of {cap:.0f} s; its figures so far kept"
    elif status != 0 or result["status"] == "running":
        result["status"] = "failed"
        figures["reason"] = _last_line(log) or f"exit status {status}"
    result["summary"] = figures.pop("summary", "") or figures.get("reason", "")
    return {**result, **figures, "log": os.path.relpath(log, out)}


def _stage(name: str, args, out: str, env: dict, left: float) -> dict:
    """A stage's result: run in a child, or skipped without one (``env``'s
    ``GPU_CHECK_LACKING``: the packages every stage but environment needs)."""
    reason = _sibling("gpu_check_stages").SMOKE_SKIPS.get(name) if args.smoke else None
    share = max(SHARES.get(name, 0) * args.budget, MIN_CAP_S)
    cap = left if name == "compile" else min(share, left)
    if not reason and name != "environment" and env.get("GPU_CHECK_LACKING"):
        reason = env["GPU_CHECK_LACKING"]
    elif not reason and name == "compile" and cap < MIN_COMPILE_S:
        reason = f"{max(cap, 0):.0f} s of --budget left, torch.compile needs more"
    elif not reason and cap < 5:
        reason = "no time left of --budget"
    if reason:
        return {
            "status": "skipped",
            "seconds": 0.0,
            "summary": reason,
            "reason": reason,
        }
    return _run_child(name, args, out, env, cap)


def _packed_site() -> Tuple[Optional[str], List[str], List[str]]:
    """The folder of unpacked wheels the check's processes need on their path
    (None: this Python has everything), the wheels unpacked now, and the
    modules missing still."""
    wheels = _sibling("gpu_check_wheels")
    if not wheels.missing(None):
        return None, [], []
    site, unpacked = wheels.unpack()
    return site, unpacked, wheels.missing(site)


def _lacking(modules: List[str]) -> str:
    """Why the stages that import slowfast are skipped, in one line."""
    version = "{}.{}".format(*sys.version_info[:2])
    return (
        f"{', '.join(modules)} missing for Python {version} and not in "
        ".gpu_wheels/: run python tools/dev/gpu_check.py --pack-wheels "
        f"--python-version {version} where pip reaches a package index, and "
        "copy .gpu_wheels/ into this checkout"
    )


def _child_env(site: Optional[str], lacking: Optional[str]) -> dict:
    """The stages' environment: the checkout and ``site`` on the path."""
    paths = [REPO_ROOT] + ([site] if site else []) + [os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    env["PYTHONUNBUFFERED"] = "1"
    if lacking:
        env["GPU_CHECK_LACKING"] = lacking
    return env


def run_check(args: argparse.Namespace) -> int:
    """The check: every stage in turn; returns the exit status."""
    out = os.path.abspath(args.out)
    error = _claim(out)
    site, unpacked, lacking = (None, [], []) if error else _packed_site()
    if "torch" in lacking:
        error = "torch is not installed: install this machine's build (INSTALL.md)"
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    env = _child_env(site, _lacking(lacking) if lacking else None)
    report = {"environment": _basics(args, site, unpacked), "stages": {}}
    path = os.path.join(out, "gpu_check.json")
    write_json = _sibling("gpu_check_stages").write_json
    write_json(path, report)
    mode = "smoke (CPU, toy size)" if args.smoke else "full"
    print(f"gpu_check: {mode}, budget {args.budget:g} s, results in {path}")
    deadline = time.monotonic() + args.budget
    for name in STAGES:
        result = _stage(name, args, out, env, deadline - time.monotonic())
        if name == "environment":
            report["environment"].update(result)
        else:
            report["stages"][name] = result
        write_json(path, report)
        line = f"{name:<12} {result['status']:<8} {result['seconds']:6.1f} s"
        print(f"{line}  {result['summary']}", flush=True)
    if lacking:
        return 2
    bad = [s for s in report["stages"].values() if s["status"] in ("failed", "timeout")]
    return 1 if bad or report["environment"]["status"] != "ok" else 0


def _stop_on_term(signum, frame) -> None:
    raise SystemExit(128 + signum)  # finally-clauses stop a stage's own runs


def run_stage(args: argparse.Namespace) -> int:
    """``--stage NAME``: one stage in this process (the check's child)."""
    signal.signal(signal.SIGTERM, _stop_on_term)
    if args.smoke:  # one core, one thread: beside other work, more threads spin
        import torch

        if hasattr(os, "sched_setaffinity"):  # the training runs count the cores
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        torch.set_num_threads(1)
    stages = _sibling("gpu_check_stages")
    stage = stages.Stage(
        args.stage, os.path.abspath(args.out), args.seconds, args.smoke
    )
    if args.stage == "train":
        _sibling("gpu_check_train").stage_train(stage)
    else:
        getattr(stages, f"stage_{args.stage}")(stage)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the exit status."""
    args = parse_args(argv)
    if args.pack_wheels:
        wheels = _sibling("gpu_check_wheels")
        for version in args.python_version.split(","):
            status = wheels.pack(version.strip())
            if status:
                return status
        return 0
    return run_stage(args) if args.stage else run_check(args)


if __name__ == "__main__":
    sys.exit(main())
