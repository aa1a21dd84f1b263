"""The ``train`` stage of ``tools/dev/gpu_check.py``: short multigrid trainings.

I3D R50 multigrid (the tiny I3D demo under ``--smoke``) trains from generated
JPEG frame folders (``workshop/dataprep/demo/footage.make_frame_footage``)
through ``tools/run_net.py``, four times: CUDA graphs off and on, in one
process and under ``torchrun`` with one process (DistributedDataParallel, as on
several GPUs: each run's ``ddp`` says whether the trainer wrapped its model); on
a machine with G >= 2 GPUs (2 CPU processes under ``--smoke``) twice more, under
``torchrun`` with one process per GPU, 8 clips each. Each run's
``json_stats.log`` (``train_iter`` lines, one per iteration: ``LOG_PERIOD 1``)
gives the milliseconds per iteration and the data wait per batch shape. A run
whose CUDA graphs the trainer refuses is ``skipped`` with its one-line reason.

Runs that should train alike are compared (``comparisons``): graphs off
against on at each process count, and one process against torchrun's one.
The loss of every iteration (from the second on, it follows from the averaged
gradients of the steps before) and the weights of the last checkpoint (from
all of them), as relative differences; ``ok`` when the first five
iterations' losses agree within the precision's tolerance
(``workshop/bench/graph_check.TOLERANCE``, fp32 as the recipe trains: later
ones drift apart as rounding compounds). Standard library only at the top, as
``gpu_check_stages.py``.
"""

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

from gpu_check_stages import REPO_ROOT, Stage, number

TRAIN_CFG = "configs/Kinetics/I3D_8x8_R50_multigrid.yaml"
SMOKE_TRAIN_CFG = "configs/Demo/Kinetics_I3D_tiny_multigrid.yaml"
# Short runs: no validation or test, the last checkpoint only, a line per
# iteration, no FLOP count at start, and a stop signal ends a run at once.
COMMON_OPTS = ["DATA.DECODING_BACKEND", "frames", "TRAIN.EVAL_PERIOD", "0"]
COMMON_OPTS += ["TRAIN.CHECKPOINT_PERIOD", "100", "TEST.ENABLE", "False"]
COMMON_OPTS += ["LOG_PERIOD", "1", "LOG_MODEL_INFO", "False", "TRAIN.AUTO_RESUME"]
COMMON_OPTS += ["False", "TRAIN.STOP_SIGNALS", "[]", "SOLVER.LRS", "[1, 0.1]"]
# 8 clips at the base shape, the LR scaled to them (0.1 for 64); 384 clips
# over 8 baseline epochs: about 20 iterations per long-cycle shape.
FULL_OPTS = ["NUM_GPUS", "1", "TRAIN.BATCH_SIZE", "8", "SOLVER.BASE_LR", "0.0125"]
FULL_OPTS += ["SOLVER.MAX_EPOCH", "8", "SOLVER.STEPS", "[0, 6]"]
FULL_OPTS += ["SOLVER.WARMUP_EPOCHS", "1.0", "BN.NUM_BATCHES_PRECISE", "4"]
SMOKE_OPTS = ["NUM_GPUS", "0", "NUM_CPU_PROCS", "1", "TRAIN.BATCH_SIZE", "1"]
SMOKE_OPTS += ["SOLVER.MAX_EPOCH", "4", "SOLVER.STEPS", "[0, 3]"]
SMOKE_OPTS += ["SOLVER.WARMUP_EPOCHS", "0.0", "BN.NUM_BATCHES_PRECISE", "1"]
SMOKE_OPTS += ["DATA.TRAIN_CROP_SIZE", "32", "DATA.TRAIN_JITTER_SCALES", "[32, 32]"]
SMOKE_OPTS += ["MULTIGRID.BN_BASE_SIZE", "2", "DATA_LOADER.NUM_WORKERS", "0"]
SMOKE_OPTS += ["DATA_LOADER.FRAME_CACHE", "False"]
# The paper's short-cycle factors at the toy crop, so that its short cycle
# shrinks the views as the full run's 224 px does (the rule would keep 32 px).
SMOKE_OPTS += ["MULTIGRID.SHORT_CYCLE_MIN_MAP", "0"]
# (clips rendered, times listed, seconds, width, height) of the data.
FULL_DATA = (16, 24, 3.0, 340, 256)
SMOKE_DATA = (2, 8, 1.0, 112, 96)
# key, launcher, TRAIN.CUDA_GRAPHS; in order of value.
RUNS = (
    ("one_process_graphs_off", "plain", False),
    ("one_process_graphs_on", "plain", True),
    ("torchrun_graphs_off", "torchrun", False),
    ("torchrun_graphs_on", "torchrun", True),
)
# Pairs of runs that train alike, by their keys' heads ("N_processes" is
# filled in with the machine's count).
PAIRS = (
    ("one_process_graphs_off", "one_process_graphs_on"),
    ("torchrun_graphs_off", "torchrun_graphs_on"),
    ("torchrun_N_processes_graphs_off", "torchrun_N_processes_graphs_on"),
    ("one_process_graphs_off", "torchrun_graphs_off"),
)
COMPARED_ITERS = 5  # the first iterations whose losses must agree
STOP_GRACE_S = 5  # between SIGTERM and SIGKILL when a run is stopped
# The trainer's log line when it wraps the model, by the number of processes.
DDP_LINE = "Model in DistributedDataParallel over {} process"


def make_data(stage: Stage, processes: int = 1) -> dict:
    """Renders the footage frame folders (kept from an earlier check).

    Args:
        stage: the running stage (``--out`` and ``--smoke``).
        processes: the runs' processes: each clip is listed this many times
            more (in a folder of its own), so that every process has the
            one-process run's share.

    Returns:
        dict: the data's figures: folder (relative to ``--out``), clips
        listed, distinct clips, frames, renditions, seconds taken.
    """
    from slowfast.datasets.renditions.files import DEFAULT_SCALES
    from workshop.dataprep.demo.footage import FootageSpec, make_frame_footage

    clips, repeats, seconds, width, height = SMOKE_DATA if stage.smoke else FULL_DATA
    repeats *= processes
    name = ("smoke" if stage.smoke else "footage") + (
        f"_x{processes}" * (processes > 1)
    )
    folder = os.path.join(stage.out, "data", name)
    start = time.monotonic()
    listed = make_frame_footage(
        folder,
        clips,
        repeats,
        spec=FootageSpec(width=width, height=height, seconds=seconds),
        scales=DEFAULT_SCALES,
        workers=max(1, min(clips, os.cpu_count() or 1)),
    )
    return {
        "folder": os.path.relpath(folder, stage.out),
        "clips": listed,
        "distinct_clips": clips,
        "frames": f"{int(seconds * 30)} of {width} x {height} (JPEG, 30 fps)",
        "renditions": list(DEFAULT_SCALES),
        "seconds": number(time.monotonic() - start, 3),
    }


def all_runs(smoke: bool) -> List[Tuple[str, str, bool, int]]:
    """(key, launcher, TRAIN.CUDA_GRAPHS, processes) of every run here: the
    one-process :data:`RUNS`, then with G >= 2 GPUs (2 CPU processes under
    ``--smoke``) torchrun with G processes, graphs off and on."""
    import torch

    many = 2 if smoke else torch.cuda.device_count()
    runs = [(key, launcher, graphs, 1) for key, launcher, graphs in RUNS]
    for graphs in (False, True) if many >= 2 else ():
        key = f"torchrun_{many}_processes_graphs_{'on' if graphs else 'off'}"
        runs.append((key, "torchrun", graphs, many))
    return runs


def command(
    stage: Stage,
    data: str,
    out_dir: str,
    launcher: str,
    graphs: bool,
    processes: int = 1,
) -> List[str]:
    """The command line of one run.

    Args:
        stage: the running stage (``--smoke``: the tiny config on the CPU).
        data: the frame-folder dataset.
        out_dir: the run's OUTPUT_DIR.
        launcher: "plain" (one process) or "torchrun".
        graphs: TRAIN.CUDA_GRAPHS.
        processes: torchrun's processes (GPUs; CPU processes under
            ``--smoke``), each with the one-process batch (and the learning
            rate scaled with the total).

    Returns:
        list: the arguments, ``tools/run_net.py`` with its overrides.
    """
    cfg = SMOKE_TRAIN_CFG if stage.smoke else TRAIN_CFG
    opts = COMMON_OPTS + (SMOKE_OPTS if stage.smoke else FULL_OPTS)
    if processes > 1:
        per_process = 1 if stage.smoke else 8
        opts = opts + ["TRAIN.BATCH_SIZE", str(per_process * processes)]
        opts += ["NUM_CPU_PROCS" if stage.smoke else "NUM_GPUS", str(processes)]
        if not stage.smoke:
            opts += ["SOLVER.BASE_LR", str(0.0125 * processes)]
    opts += ["DATA.PATH_TO_DATA_DIR", data, "DATA.PATH_PREFIX", data]
    opts += ["OUTPUT_DIR", out_dir, "TRAIN.CUDA_GRAPHS", str(graphs)]
    head = [sys.executable]
    if launcher == "torchrun":
        head += ["-m", "torch.distributed.run", "--standalone"]
        head += [f"--nproc-per-node={processes}"]
    script = os.path.join(REPO_ROOT, "tools", "run_net.py")
    return head + [script, "--cfg", os.path.join(REPO_ROOT, cfg)] + opts


def shape_times(path: str) -> dict:
    """Times per batch shape from a run's ``json_stats.log``.

    Args:
        path: the file; its ``train_iter`` lines hold one iteration each
            (``LOG_PERIOD 1``): ``shape``, ``time_data``, ``time_compute``.

    Returns:
        dict: ``iters``, ``ms_per_iter``, ``data_ms``, ``compute_ms`` (medians)
        and ``data_wait`` (share of the time spent waiting for data) over all
        iterations, and the same per shape under ``shapes`` (keyed ``clips x
        frames x crop``, largest batch first).
    """
    per: Dict[str, List[tuple]] = {}
    if os.path.isfile(path):
        with open(path) as handle:
            for line in handle:
                stats = json.loads(line) if line.strip() else {}
                if stats.get("_type") == "train_iter":
                    times = (stats["time_data"], stats["time_compute"])
                    per.setdefault(stats["shape"], []).append(times)

    def figures(times: List[tuple]) -> dict:
        data, compute = [t[0] for t in times], [t[1] for t in times]
        total = [d + c for d, c in times]
        return {
            "iters": len(times),
            "ms_per_iter": number(1000 * statistics.median(total)),
            "data_ms": number(1000 * statistics.median(data)),
            "compute_ms": number(1000 * statistics.median(compute)),
            "data_wait": number(sum(data) / max(sum(total), 1e-9), 3),
        }

    order = sorted(per, key=lambda shape: -int(shape.split("x")[0]))
    every = [t for times in per.values() for t in times]
    overall = figures(every) if every else {"iters": 0}
    return {**overall, "shapes": {shape: figures(per[shape]) for shape in order}}


def _stop(proc: subprocess.Popen) -> None:
    """Stops a run's process group: SIGTERM (torchrun stops its worker), then
    SIGKILL for what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass


def _last_error(log: str) -> str:
    """The run's ``error: ...`` line, else its last line."""
    with open(log, errors="replace") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["(no output)"])[-1]


def train_run(
    stage: Stage, data: str, key: str, launcher: str, graphs: bool, processes: int = 1
) -> dict:
    """Runs one training (stopped when the stage's time runs out).

    Args:
        stage: the running stage.
        data: the frame-folder dataset.
        key: the run's name (its folder under ``--out``/train).
        launcher: "plain" or "torchrun".
        graphs: TRAIN.CUDA_GRAPHS.
        processes: torchrun's processes.

    Returns:
        dict: status (ok, failed, skipped: the trainer refused CUDA graphs,
        timeout), reason, seconds, exit status, log and ``shape_times``.
    """
    run = {"status": "running", "launcher": launcher, "world_size": processes}
    run["cuda_graphs"] = graphs
    if stage.smoke and graphs and launcher == "torchrun":  # refused, as below
        reason = "--smoke: TRAIN.CUDA_GRAPHS needs a GPU; not started (the "
        reason += "one-process run shows the trainer's refusal)"
        return {**run, "status": "skipped", "reason": reason, "seconds": 0.0}
    timeout = stage.left() - 2 * STOP_GRACE_S
    if timeout < 10:
        return {**run, "status": "timeout", "reason": "no time left of the cap"}
    out_dir = os.path.join(stage.out, "train", key)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    log = out_dir + ".log"
    start, status = time.monotonic(), None
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            command(stage, data, out_dir, launcher, graphs, processes),
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            start_new_session=True,  # its own group: stopped as a whole
        )
        try:
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if status is None:
                _stop(proc)
    run.update(seconds=number(time.monotonic() - start, 3))
    run.update(log=os.path.relpath(log, stage.out), exit_status=status)
    with open(log, errors="replace") as handle:  # the trainer's line when it wraps
        run["ddp"] = DDP_LINE.format(processes) in handle.read()
    run.update(shape_times(os.path.join(out_dir, "json_stats.log")))
    if status == 0:
        run["status"] = "ok"
    elif status is None:
        run.update(status="timeout", reason=f"ran past {timeout:.0f} s")
    else:
        reason = _last_error(log)
        refused = graphs and "CUDA_GRAPHS" in reason  # the trainer refuses them
        run.update(status="skipped" if refused else "failed", reason=reason)
    return run


def _summary(runs: Dict[str, dict]) -> str:
    parts = []
    for key, run in runs.items():
        name = key.replace("_", " ")
        if run["status"] == "ok":
            wait = 100 * run["data_wait"]
            parts.append(f"{name} {run['ms_per_iter']:.1f} ms/iter ({wait:.0f}% data)")
        else:
            parts.append(f"{name} {run['status']}")
    return "; ".join(parts)


def stage_train(stage: Stage) -> None:
    """The ``train`` stage (see the module doc)."""
    reason = stage.unavailable("training at real scale needs a GPU")
    if reason:
        return stage.skip(reason)
    data: Dict[int, dict] = {}  # by the runs' processes
    runs: Dict[str, dict] = {}
    for key, launcher, graphs, processes in all_runs(stage.smoke):
        if processes not in data:
            data[processes] = make_data(stage, processes)
            stage.update(data=list(data.values()))
        folder = os.path.join(stage.out, data[processes]["folder"])
        runs[key] = train_run(stage, folder, key, launcher, graphs, processes)
        stage.update(runs=runs)
    comparisons = compare_runs(stage, runs)
    stage.update(comparisons=comparisons)
    statuses = {run["status"] for run in runs.values()}
    status = "failed" if "failed" in statuses else "ok"
    status = "timeout" if "timeout" in statuses and status == "ok" else status
    differ = [c for c in comparisons if c.get("ok") is False]
    status = "failed" if differ else status
    summary = _summary(runs) + "".join(
        f"; {c['runs'][0]} and {c['runs'][1]} differ" for c in differ
    )
    stage.finish(status, summary)


def losses(path: str) -> Dict[Tuple[str, str], float]:
    """(epoch, iteration) -> loss of a run's ``train_iter`` lines."""
    found = {}
    if os.path.isfile(path):
        with open(path) as handle:
            for line in handle:
                stats = json.loads(line) if line.strip() else {}
                if stats.get("_type") == "train_iter":
                    found[(stats["epoch"], stats["iter"])] = stats["loss"]
    return found


def compare_pair(out_a: str, out_b: str, tolerance: float) -> dict:
    """Losses and last weights of two runs that train alike.

    Args:
        out_a: one run's OUTPUT_DIR.
        out_b: the other's.
        tolerance: relative difference allowed (the first iterations' losses).

    Returns:
        dict: ``iters`` compared, ``loss_first`` (the largest relative
        difference over the first :data:`COMPARED_ITERS`), ``loss_max``,
        ``weights`` (relative L2 of the last checkpoints' weights, None
        without both) and ``ok``.
    """
    import torch

    from slowfast.checkpoint.load import get_last_checkpoint
    from workshop.bench.graph_check import relative_difference

    a, b = (losses(os.path.join(o, "json_stats.log")) for o in (out_a, out_b))
    both = [k for k in a if k in b]
    diffs = [abs(a[k] - b[k]) / max(abs(a[k]), 1e-12) for k in both]
    result: Dict[str, Any] = {"iters": len(both), "tolerance": tolerance}
    result["loss_first"] = number(max(diffs[:COMPARED_ITERS], default=None), 3)
    result["loss_max"] = number(max(diffs, default=None), 3)
    paths = [get_last_checkpoint(o) for o in (out_a, out_b)]
    found = [p for p in paths if p is not None]
    result["weights"] = None
    if len(found) == len(paths):
        states = [torch.load(p, map_location="cpu")["model_state"] for p in found]
        names = [k for k, v in states[0].items() if v.is_floating_point()]
        pairs = [[s[k] for k in names] for s in states]
        result["weights"] = number(relative_difference(*pairs), 3)
    first = max(diffs[:COMPARED_ITERS], default=math.inf)
    result["ok"] = len(both) >= COMPARED_ITERS and first <= tolerance
    return result


def compare_runs(stage: Stage, runs: Dict[str, dict]) -> List[dict]:
    """The :data:`PAIRS` of ``runs`` that both ran (``ok`` None: not compared)."""
    from workshop.bench.graph_check import TOLERANCE

    many = [k for k in runs if "_processes_" in k]
    count = many[0].split("_")[1] if many else None
    compared = []
    for pair in PAIRS:
        keys = [key.replace("N", count or "N") for key in pair]
        if not all(k in runs for k in keys):
            continue  # the machine has no such runs
        entry: dict = {"runs": keys}
        left_out = [k for k in keys if runs[k]["status"] != "ok"]
        if left_out:
            entry.update(
                ok=None, reason=f"{', '.join(left_out)} did not run to the end"
            )
        else:
            dir_a, dir_b = (os.path.join(stage.out, "train", k) for k in keys)
            entry.update(compare_pair(dir_a, dir_b, TOLERANCE["fp32"]))  # as the recipe
        compared.append(entry)
    return compared
