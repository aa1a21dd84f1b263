"""The stages of ``tools/dev/gpu_check.py``, each run in a process of its own.

``python tools/dev/gpu_check.py --stage NAME --out DIR --seconds CAP [--smoke]``
runs one stage here and rewrites ``DIR/stages/NAME.json`` (atomically) as it
goes, so that a stage stopped at its cap still leaves what it measured. The
stages drive what exists: ``tools/dev/check_split_bn.py`` (``check_cases``),
``workshop/bench/model_step.py`` through ``workshop/bench/step_cells.py`` (the
model step per multigrid shape), ``workshop/bench/graph_check.py`` (graphed
against eager training) and, in ``gpu_check_train.py``, ``tools/run_net.py``.
Only the standard library is imported at the top: ``gpu_check.py`` loads this
file before the packed wheels are on the path.
"""

import importlib.util
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

if TYPE_CHECKING:
    from fvcore.common.config import CfgNode

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The workshop package is not installed: it lies at the repository root.
sys.path.insert(0, REPO_ROOT)
CONFIGS = (
    "configs/Kinetics/SLOWFAST_8x8_R50_multigrid.yaml",
    "configs/Kinetics/I3D_8x8_R50_multigrid.yaml",
)
SMOKE_CONFIGS = (
    "configs/Demo/Kinetics_SLOWFAST_tiny_multigrid.yaml",
    "configs/Demo/Kinetics_I3D_tiny_multigrid.yaml",
)
# 8 clips per GPU at the base shape, one process.
FULL_OPTS = ["NUM_GPUS", "1", "TRAIN.BATCH_SIZE", "8"]
# On the CPU: one clip at the base shape, 32 px crops, 8 channels per group,
# BN groups of 2 clips (so that the coarse shapes still split their batches).
SMOKE_OPTS = ["NUM_GPUS", "0", "NUM_CPU_PROCS", "1", "TRAIN.BATCH_SIZE", "1"]
SMOKE_OPTS += ["DATA.TRAIN_CROP_SIZE", "32", "DATA.TRAIN_JITTER_SCALES", "[32, 32]"]
SMOKE_OPTS += ["MULTIGRID.BN_BASE_SIZE", "2", "RESNET.WIDTH_PER_GROUP", "8"]
GRAPH_ROUNDS = 2
# (warm-up, timed) steps per cell: the first graphed step captures.
STEPS = {"full": (2, 5), "smoke": (1, 1), "compile": (2, 3)}
# Stages that --smoke leaves out, and why (they need a GPU or take minutes).
SMOKE_SKIPS = {
    "triton_warmup": "--smoke runs on the CPU; Triton builds kernels for GPUs only",
    "split_bn": "--smoke runs on the CPU; the Triton kernels run on GPUs only",
    "graphs": "--smoke runs on the CPU; CUDA graphs need a GPU",
    "compile": "--smoke leaves torch.compile out (minutes per shape on a CPU)",
}


def write_json(path: str, data: dict) -> None:
    """Writes ``data`` to ``path`` atomically (a temporary file, then a rename)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=False)
        handle.write("\n")
    os.replace(tmp, path)


def number(value: Optional[float], digits: int = 4) -> Union[float, str, None]:
    """A float for JSON.

    Args:
        value: a number, or None.
        digits: significant digits kept.

    Returns:
        The rounded float; NaN and infinities as strings (JSON has none);
        None for None.
    """
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    return float(f"{value:.{digits}g}")


def one_line(err: BaseException) -> str:
    """An exception as one line: its type and its message's first line."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


class Stage:
    """A running stage: its figures, rewritten to its file at every update.

    Args:
        name: the stage.
        out: the check's folder (``--out``).
        seconds: the stage's cap (``--seconds``).
        smoke: ``--smoke``: on the CPU, at toy size.
    """

    def __init__(self, name: str, out: str, seconds: float, smoke: bool) -> None:
        self.name, self.out, self.smoke = name, out, smoke
        self.path = os.path.join(out, "stages", f"{name}.json")
        self.deadline = time.monotonic() + seconds
        self.figures: dict = {"status": "running"}

    def left(self) -> float:
        """Seconds left of the cap."""
        return self.deadline - time.monotonic()

    def update(self, **figures) -> None:
        """Adds figures and rewrites the stage's file."""
        self.figures.update(figures)
        write_json(self.path, self.figures)

    def finish(self, status: str, summary: str, **figures) -> None:
        """The stage's end: "ok", "failed", "skipped" or "timeout", one line."""
        self.update(status=status, summary=summary, **figures)

    def skip(self, reason: str) -> None:
        """Ends the stage as skipped, ``reason`` saying why."""
        self.finish("skipped", reason, reason=reason)

    def unavailable(self, why: str) -> Optional[str]:
        """Why the stage cannot run here, or None: with --smoke, the stages
        it leaves out (``SMOKE_SKIPS``); else without a GPU, ``why``."""
        if self.smoke:
            return SMOKE_SKIPS.get(self.name)
        import torch

        if torch.cuda.is_available():
            return None
        return f"no CUDA device: {why} (--smoke checks the CPU path)"


def load_tool(filename: str) -> ModuleType:
    """Imports ``tools/<filename>`` by its path (the tools are no package).

    Args:
        filename: e.g. "check_split_bn.py".

    Returns:
        ModuleType: the executed module.
    """
    name = "gpu_check_" + os.path.splitext(filename)[0]
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(REPO_ROOT, "tools", "dev", filename)
    )
    assert spec is not None and spec.loader is not None  # a .py file's
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_configs(smoke: bool) -> Dict[str, "CfgNode"]:
    """The checked configs by file name, with the check's overrides.

    Args:
        smoke: the tiny demo configs on the CPU (``SMOKE_CONFIGS``) instead of
            the R50 ones on one GPU (``CONFIGS``).

    Returns:
        dict: name (the file's, without ``.yaml``) -> frozen config.
    """
    from slowfast.launch.config import load_run_config

    files = SMOKE_CONFIGS if smoke else CONFIGS
    opts = SMOKE_OPTS if smoke else FULL_OPTS
    return {
        os.path.basename(f)[: -len(".yaml")]: load_run_config(
            [os.path.join(REPO_ROOT, f)], opts
        )
        for f in files
    }


def _nvidia_smi() -> Dict[str, Optional[str]]:
    """Driver and driver CUDA versions from ``nvidia-smi`` (None without it)."""
    try:
        text = subprocess.run(
            ["nvidia-smi"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    found = {}
    for key, label in (("driver", "Driver Version"), ("driver_cuda", "CUDA Version")):
        match = re.search(label + r":\s*([\d.]+)", text)
        found[key] = match[1] if match else None
    return found


def _triton_version() -> Optional[str]:
    try:
        import triton
    except Exception:  # not installed, or unusable here
        return None
    return getattr(triton, "__version__", "unknown")


def stage_environment(stage: Stage) -> None:
    """The GPU, driver, CUDA, torch and Triton of this machine."""
    import torch

    info: Dict[str, Any] = {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
    }
    info["cudnn"] = (
        torch.backends.cudnn.version() if torch.cuda.is_available() else None
    )
    info["triton"] = _triton_version()
    info["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    info.update(gpu=None, gpu_memory_mib=None, capability=None)
    if info["gpus"]:
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_mib=props.total_memory // 2**20)
        info["capability"] = f"{props.major}.{props.minor}"
    info.update(_nvidia_smi())
    where = info["gpu"] or "no GPU"
    summary = f"{where}, torch {info['torch']}, Triton {info['triton'] or 'none'}"
    stage.finish("ok", summary, **info)


def _triton_cache_entries() -> Tuple[str, int]:
    """Triton's on-disk kernel cache (``TRITON_CACHE_DIR`` or its default)
    and how many kernels it holds (0 where it does not exist yet)."""
    folder = os.environ.get("TRITON_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".triton", "cache"
    )
    return folder, len(os.listdir(folder)) if os.path.isdir(folder) else 0


def run_side_by_side(commands: List[List[str]], logs: List[str], seconds: float):
    """Runs the commands at once, each writing into its log; those still
    running after ``seconds`` are stopped (their process groups killed).

    Returns:
        list: per command, ``exit_status`` (None: stopped), ``seconds`` and
        ``last_line`` (of its log).
    """
    start = time.monotonic()
    procs = []
    for cmd, log in zip(commands, logs):
        with open(log, "w") as handle:
            procs.append(
                subprocess.Popen(
                    cmd,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=REPO_ROOT,
                )
            )
    ended: Dict[int, float] = {}
    while len(ended) < len(procs) and time.monotonic() - start < seconds:
        for i, proc in enumerate(procs):
            if i not in ended and proc.poll() is not None:
                ended[i] = time.monotonic() - start
        time.sleep(0.2)
    results = []
    for i, (proc, log) in enumerate(zip(procs, logs)):
        if i not in ended:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with open(log, errors="replace") as handle:
            lines = [line.strip() for line in handle if line.strip()]
        results.append(
            {
                "exit_status": proc.returncode if i in ended else None,
                "seconds": number(ended.get(i, time.monotonic() - start), 3),
                "last_line": lines[-1] if lines else "",
            }
        )
    return results


def stage_triton_warmup(stage: Stage) -> None:
    """Builds the split-BN check's Triton kernels in processes side by side:
    ``tools/dev/check_split_bn.py --part I/N``, one per CPU (at most one per
    case), so that a cold cache fills in a fraction of the serial time."""
    reason = stage.unavailable("Triton builds kernels for GPUs only")
    if reason or _triton_version() is None:
        return stage.skip(
            reason or "Triton is not installed (sub-batch BN runs native)"
        )
    tool = os.path.join(REPO_ROOT, "tools", "dev", "check_split_bn.py")
    cases = len(load_tool("check_split_bn.py").CASES)
    parts = max(1, min(cases, os.cpu_count() or 1))
    cache, before = _triton_cache_entries()
    stage.update(processes=parts, cases=cases, cache=cache, cache_entries_before=before)
    commands = [[sys.executable, tool, "--part", f"{i}/{parts}"] for i in range(parts)]
    logs = [
        os.path.join(stage.out, "logs", f"triton_warmup_{i}.log") for i in range(parts)
    ]
    start = time.monotonic()
    results = run_side_by_side(commands, logs, stage.left() - 5)
    workers = []
    for result in results:
        try:  # the part's JSON line
            workers.append({**json.loads(result["last_line"]), **result})
        except ValueError:  # it crashed or was stopped: its last line says why
            workers.append(result)
        else:
            del workers[-1]["last_line"]
    compiles = [w.get("compiles") for w in workers]
    counted = [c for c in compiles if c is not None]
    built = sum(counted) if len(counted) == len(compiles) else None
    stopped = sum(w["exit_status"] is None for w in workers)
    bad = sum(w["exit_status"] not in (0, None) for w in workers)
    seconds = time.monotonic() - start
    summary = f"{built if built is not None else 'an uncounted number of'} kernel "
    summary += f"variants built by {parts} processes in {seconds:.0f} s "
    summary += f"(the cache held {before} before)"
    if stopped or bad:
        summary += f"; {stopped} stopped at the cap, {bad} failed"
    status = "timeout" if stopped else ("failed" if bad else "ok")
    stage.finish(
        status,
        summary,
        workers=workers,
        compiles=built,
        seconds=number(seconds, 3),
        cache_entries_after=_triton_cache_entries()[1],
    )


def stage_split_bn(stage: Stage) -> None:
    """Split-BN Triton kernels against the reference, fp32/fp16/bf16, both formats."""
    reason = stage.unavailable("the Triton kernels run on GPUs only")
    if reason or _triton_version() is None:
        return stage.skip(
            reason or "Triton is not installed (sub-batch BN runs native)"
        )
    import torch

    tool = load_tool("check_split_bn.py")
    cases: List[dict] = []
    worst = 0.0  # the largest error over its tolerance
    with tool.CompileCounter().active() as counter:  # loaded, when warmed up
        for case in tool.check_cases(torch.device("cuda", 0)):
            errors = case.get("errors", {})
            if errors:
                worst = max(worst, max(errors.values()) / case["tolerance"])
            case["errors"] = {k: number(v) for k, v in errors.items()}
            case["seconds"] = number(case.get("seconds"), 3)
            cases.append(case)
            stage.update(cases=cases, compiles=counter.count)
    passed = sum(c["ok"] for c in cases)
    seconds = sum(c.get("seconds") or 0 for c in cases)
    summary = f"{passed}/{len(cases)} cases pass in {seconds:.1f} s; "
    summary += f"largest error {worst:.0%} of tolerance"
    status = "ok" if cases and passed == len(cases) else "failed"
    stage.finish(status, summary, passed=passed, failed=len(cases) - passed)


def _cell_rows(cells: list, base: int) -> List[dict]:
    """Cells as JSON rows, efficiency relative to the first variant's base shape."""
    from workshop.bench.step_cells import efficiency

    reference = cells[base] if len(cells) > base and cells[base].ms else None
    ratios = efficiency(cells, reference) if reference else [None] * len(cells)
    rows = [cell.as_row(ratio) for cell, ratio in zip(cells, ratios)]
    return [
        {k: number(v) if type(v) is float else v for k, v in r.items()} for r in rows
    ]


def _base_line(name: str, rows: List[dict], base_kind: str) -> str:
    """``"I3D: sub BN, eager 95.1 ms, ..."``: the base shape's times."""
    cells = [
        f"{r['variant']} {r['ms']:.1f} ms"
        if r["ms"]
        else f"{r['variant']} {r['status']}"
        for r in rows
        if r["shape"] == base_kind
    ]
    return f"{name}: " + ", ".join(cells)


def measure_configs(stage: Stage, variants: list, steps: Tuple[int, int]) -> None:
    """Times ``variants`` at every multigrid shape of each config, then ends
    the stage (``failed`` when a cell failed; "oom" cells are results).

    Args:
        stage: the running stage (its figures: ``configs``).
        variants: ``benchmark.Variant`` list; the first at the base shape is
            the reference of the efficiency.
        steps: (warm-up, timed) steps per cell.
    """
    from slowfast.models import describe_model
    from slowfast.models.memory_format import choose_channels_last
    from workshop.bench.model_step import base_shape_index, multigrid_shapes
    from workshop.bench.step_cells import measure_cells

    results: Dict[str, dict] = {}
    lines, counts = [], {"ok": 0, "oom": 0, "failed": 0}
    for name, cfg in load_configs(stage.smoke).items():
        shapes = multigrid_shapes(cfg)
        base = base_shape_index(cfg, shapes)
        cells: list = []
        entry = results[name] = {"base_shape": shapes[base].kind}
        entry["memory_format"] = (
            "channels_last_3d"
            if choose_channels_last(cfg, describe_model(cfg))
            else "contiguous"
        )
        entry["precision"] = "fp16" if cfg.TRAIN.MIXED_PRECISION else "fp32"
        v0 = variants[0]
        entry["reference"] = f"{'plain' if v0.plain_bn else 'sub'} BN, {v0.mode}"

        def done(cell, cells=cells, entry=entry, base=base):
            cells.append(cell)
            entry["cells"] = _cell_rows(cells, base)
            stage.update(configs=results)

        measure_cells(cfg, variants, shapes, *steps, on_cell=done)
        for cell in cells:
            counts[cell.status] += 1
        arch = cfg.MODEL.ARCH.upper()
        lines.append(_base_line(arch, entry["cells"], shapes[base].kind))
    summary = f"{counts['ok']} cells ok, {counts['oom']} oom, "
    summary += f"{counts['failed']} failed; base shape " + "; ".join(lines)
    stage.finish("failed" if counts["failed"] else "ok", summary, configs=results)


def stage_model_step(stage: Stage) -> None:
    """Sub-batch against plain BN, eager against graphed, per multigrid shape."""
    from workshop.bench.model_step import Variant

    reason = stage.unavailable("the real-scale model step needs a GPU")
    if reason:
        return stage.skip(reason)
    if stage.smoke:  # eager only: CUDA graphs need a GPU
        variants = [Variant(plain_bn=True), Variant()]
        stage.update(left_out="CUDA graphs (--smoke runs on the CPU)")
    else:
        variants = [Variant(plain_bn=True, mode="graphs"), Variant(mode="graphs")]
        variants += [Variant(), Variant(plain_bn=True)]
    measure_configs(stage, variants, STEPS["smoke" if stage.smoke else "full"])


def stage_compile(stage: Stage) -> None:
    """torch.compile of the step (sub and plain BN), plain BN graphed as reference."""
    from workshop.bench.model_step import Variant

    reason = stage.unavailable("the compiled step needs a GPU")
    if reason:
        return stage.skip(reason)
    variants = [Variant(plain_bn=True, mode="graphs"), Variant(mode="compile")]
    variants.append(Variant(plain_bn=True, mode="compile"))
    measure_configs(stage, variants, STEPS["compile"])


def _graph_rows(results: list, tolerance: float) -> List[dict]:
    rows = []
    for res in results:
        s = res.shape
        row = {"shape": s.kind, "clips": s.batch, "frames": s.frames, "crop": s.crop}
        row["bn_splits"] = s.bn_splits
        row["diffs"] = {k: number(v, 3) for k, v in res.diffs.items()}
        for key, times in (("eager_ms", res.eager_ms), ("graphed_ms", res.graphed_ms)):
            row[key] = number(statistics.median(times)) if times else None
        row["ok"] = all(v <= tolerance for v in res.diffs.values())
        rows.append(row)
    return rows


def split_bn_path() -> str:
    """What computes sub-batch BN of GPU batches here (as check_cuda_graphs.py)."""
    import torch

    from slowfast.models.kernels.split_bn import fused_split_ok

    probe = torch.zeros(2, 1, 1, 1, 2, device="cuda")  # a batch split in two
    return "Triton kernels" if fused_split_ok(probe) else "native BN (no Triton)"


def stage_graphs(stage: Stage) -> None:
    """Graphed against eager training at every shape a multigrid run trains."""
    reason = stage.unavailable("CUDA graphs need a GPU")
    if reason:
        return stage.skip(reason)
    from workshop.bench.graph_check import TOLERANCE, check, failures, table

    split_bn = split_bn_path()
    results: Dict[str, dict] = {}
    bad: List[str] = []
    for name, cfg in load_configs(False).items():
        tolerance = TOLERANCE["mixed" if cfg.TRAIN.MIXED_PRECISION else "fp32"]
        entry = results[name] = {"tolerance": tolerance, "rounds": GRAPH_ROUNDS}
        entry["split_bn"] = split_bn

        def save(so_far, entry=entry, tolerance=tolerance):  # as each comes
            entry["shapes"] = _graph_rows(so_far, tolerance)
            stage.update(configs=results)

        try:
            checked = check(cfg, GRAPH_ROUNDS, on_shape=save)
        except Exception as err:  # one config's crash is its result
            entry["error"] = one_line(err)
            bad.append(f"{name}: {entry['error']}")
        else:
            entry["failures"] = failures(checked, tolerance)
            entry["shapes"] = _graph_rows(checked, tolerance)
            entry["table"] = table(checked).splitlines()
            bad += [f"{name} {line}" for line in entry["failures"]]
        stage.update(configs=results)
    shapes = sum(len(e.get("shapes", [])) for e in results.values())
    summary = f"{shapes} shapes, {len(bad)} failures (sub-batch BN in {split_bn})"
    summary += "".join(f"; {line}" for line in bad[:3]) + ("; ..." if bad[3:] else "")
    stage.finish("failed" if bad else "ok", summary)
