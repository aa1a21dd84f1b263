r"""``tools/submit.py``: submits a run to SLURM with submitit, one task per GPU,
requeued when preempted.

Usage:
    python tools/submit.py --cfg X.yaml [--cfg Y.yaml] --nodes N \
        --gpus-per-node G [--partition P] [--time MINUTES|HH:MM:SS] \
        [--account A] [--constraint C] [--mem M] [--cpus-per-task K] \
        [--job-dir DIR] [--name NAME] [--dry-run] [--executor slurm|local] \
        [--signal-delay-s 300] [--max-requeues 100] [--no-checks] \
        [--import MODULE ...] [KEY VALUE ...]

Every task runs the start sequence of ``tools/run_net.py``
(``slowfast/launch/job.py``, through ``slowfast/launch/submitit_job.py``);
srun ends the whole job when one task fails (``--kill-on-bad-exit``). SLURM
sends SIGUSR2 ``--signal-delay-s`` seconds before the time limit (and on
preemption, where the cluster sends it): the run saves a mid-epoch checkpoint
and submitit requeues the job, which resumes from it. Job logs go to
``OUTPUT_DIR/slurm/`` unless ``--job-dir``.
Before anything is submitted, the checks ``run_net.py`` makes before any work
(data and list files, checkpoints to load, OUTPUT_DIR, the run to resume; not
the GPUs, which are the job's nodes') run here and stop with one line naming
the problem (``--no-checks`` skips them, e.g. when the data is mounted on the
compute nodes only); every task checks again when the job starts.
``--dry-run`` prints the sbatch script submitit would submit and exits; no
SLURM needed. ``--executor local`` runs the job on this machine with
submitit's local executor (its tasks on CPU when NUM_GPUS is 0) and waits
for it to end.

``--import MODULE`` imports a module of your own here before the config is
checked, and adds it to the config's IMPORTS, which every task imports before
its run starts (by its dotted name, as here: the tasks start in the folder of
the submission, SLURM's default; docs/EXTENDING.md).

Install submitit with ``pip install -e ".[slurm]"`` (or ``pip install submitit``).
"""

import argparse
import os
import sys
from typing import List, Optional

from fvcore.common.config import CfgNode

from slowfast.config import ConfigError
from slowfast.config.derived import global_batch_size, lr_scale
from slowfast.launch.config import load_run_config
from slowfast.launch.job import one_line
from slowfast.launch.launcher import Layout
from slowfast.launch.parser import reject_options_among_overrides
from slowfast.launch.preflight import PreflightError, preflight_submit
from slowfast.utils.errors import EXIT_CONFIG, EXIT_OK


def _minutes(text: str) -> int:
    """``"90"`` -> 90; ``"1-12:00:00"``, ``"72:00:00"``, ``"30:00"`` -> minutes."""
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if len(parts) == 1:
        minutes = parts[0]
    else:
        while len(parts) < 3:
            parts.insert(0, 0)
        hours, mins, secs = parts
        minutes = hours * 60 + mins + (1 if secs else 0)
    return minutes + 24 * 60 * int(days or 0)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the command line (options first, then KEY VALUE overrides)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--cfg", dest="cfg_files", action="append", required=True, help="config")
    add("--nodes", type=int, default=1, help="machines (default 1)")
    add("--gpus-per-node", type=int, default=None, help="default: NUM_GPUS")
    add("--partition", default=None)
    add("--time", type=_minutes, default=72 * 60, help="limit (default 72:00:00)")
    add("--account", default=None)
    add("--constraint", default=None)
    add("--mem", default=None, help="memory per node, e.g. 400G")
    add("--cpus-per-task", type=int, default=10)
    add("--signal-delay-s", type=int, default=300, help="SIGUSR2 before the limit")
    add("--max-requeues", type=int, default=100, help="time-limit requeues at most")
    add("--job-dir", default=None, help="job logs (default OUTPUT_DIR/slurm)")
    add("--name", default=None, help="job name (default: the config's name)")
    add("--executor", choices=("slurm", "local"), default="slurm")
    add("--dry-run", action="store_true", help="print the job, submit nothing")
    add("--no-checks", action="store_true", help="skip the checks before submitting")
    add(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module of your own that every task imports (its dotted name); "
        "repeat for several; added to the config's IMPORTS",
    )
    add("opts", nargs=argparse.REMAINDER, metavar="KEY VALUE")
    args = parser.parse_args(argv)
    reject_options_among_overrides(parser, args.opts)
    if args.nodes < 1 or (args.gpus_per_node is not None and args.gpus_per_node < 0):
        parser.error("--nodes must be >= 1 and --gpus-per-node >= 0")
    if args.signal_delay_s >= 60 * args.time:
        parser.error(
            f"--signal-delay-s {args.signal_delay_s} is not below --time "
            f"({args.time} min): SLURM would signal the job as it starts; lower "
            "--signal-delay-s or raise --time"
        )
    if args.executor == "local" and args.nodes != 1:
        parser.error("--executor local runs on one node: use --nodes 1")
    return args


def job_config(args: argparse.Namespace) -> CfgNode:
    """The run's config with the job's layout (NUM_GPUS per node, NUM_SHARDS
    nodes), an absolute OUTPUT_DIR and the ``--import`` modules in IMPORTS."""
    imports = getattr(args, "imports", [])
    cfg = load_run_config(args.cfg_files, args.opts, imports)
    gpus = cfg.NUM_GPUS if args.gpus_per_node is None else args.gpus_per_node
    # The tasks may start elsewhere: OUTPUT_DIR made absolute here.
    job = ["NUM_SHARDS", args.nodes, "NUM_GPUS", gpus]
    job += ["OUTPUT_DIR", os.path.abspath(cfg.OUTPUT_DIR)]
    opts = list(args.opts) + [str(v) for v in job]
    return load_run_config(args.cfg_files, opts, imports)


def executor_parameters(args: argparse.Namespace, cfg: CfgNode) -> dict:
    """submitit's parameters of the job (one task per GPU, or per CPU process)."""
    tasks = cfg.NUM_GPUS if cfg.NUM_GPUS > 0 else cfg.NUM_CPU_PROCS
    name = args.name or os.path.splitext(os.path.basename(args.cfg_files[-1]))[0]
    params = dict(
        nodes=args.nodes,
        tasks_per_node=tasks,
        gpus_per_node=cfg.NUM_GPUS,
        cpus_per_task=args.cpus_per_task,
        timeout_min=args.time,
        name=name,
    )
    if args.executor == "slurm":
        params["slurm_signal_delay_s"] = args.signal_delay_s
        # One task that fails ends the others at once, not at the process
        # group's timeout; ranks placed node by node.
        params["slurm_srun_args"] = ["--kill-on-bad-exit=1", "--distribution=block"]
        for key in ("partition", "account", "constraint", "mem"):
            if getattr(args, key):
                params[f"slurm_{key}"] = getattr(args, key)
    return params


def describe(args: argparse.Namespace, cfg: CfgNode, params: dict, job_dir: str) -> str:
    """What is submitted, in a few lines."""
    tasks = params["nodes"] * params["tasks_per_node"]
    unit = "GPU" if cfg.NUM_GPUS > 0 else "CPU process"
    batch = global_batch_size(cfg)
    return "\n".join(
        [
            f"job {params['name']}: {params['nodes']} node(s) x "
            f"{params['tasks_per_node']} task(s) = {tasks} ({unit} each), "
            f"time limit {params['timeout_min']} min, executor {args.executor}",
            f"config {', '.join(args.cfg_files)}; OUTPUT_DIR {cfg.OUTPUT_DIR}",
            f"global batch {batch} ({batch // tasks} per task), base LR "
            f"{cfg.SOLVER.BASE_LR * lr_scale(cfg):g}",
            f"requeued on preemption and time limit (SIGUSR2 "
            f"{args.signal_delay_s} s before it); job logs in {job_dir}",
        ]
    )


def sbatch_preview(params: dict, job_dir: str) -> str:
    """The sbatch script submitit would write for the SLURM executor."""
    from submitit.slurm.slurm import _make_sbatch_string

    slurm = {k.removeprefix("slurm_"): v for k, v in params.items()}
    return _make_sbatch_string(
        command=f"{sys.executable} -u -m submitit.core._submit {job_dir}",
        folder=job_dir,
        job_name=slurm.pop("name"),
        time=slurm.pop("timeout_min"),
        ntasks_per_node=slurm.pop("tasks_per_node"),
        **slurm,
    )


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the exit status."""
    args = parse_args(argv)
    try:
        cfg = job_config(args)
    except ConfigError as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return err.exit_status
    job_dir = os.path.abspath(args.job_dir or os.path.join(cfg.OUTPUT_DIR, "slurm"))
    params = executor_parameters(args, cfg)
    print(describe(args, cfg, params, job_dir))
    if not args.no_checks:
        layout = Layout("submitit", args.nodes, params["tasks_per_node"], 0, "", 0, 0)
        try:
            preflight_submit(cfg, layout, write=not args.dry_run)
        except PreflightError as err:
            print(f"error: {one_line(err)}", file=sys.stderr)
            return err.exit_status
    try:
        import submitit
    except ImportError:
        print(
            'error: submitit is not installed: pip install -e ".[slurm]"',
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if args.dry_run:
        if args.executor == "slurm":
            print("\nsbatch script (dry run, nothing submitted):\n")
            print(sbatch_preview(params, os.path.join(job_dir, "%j")))
        return EXIT_OK
    from slowfast.launch.submitit_job import SubmititJob

    executor = submitit.AutoExecutor(
        folder=os.path.join(job_dir, "%j"),
        cluster=args.executor,
        # Requeues after the time limit (submitit counts those; preemptions
        # are requeued without a bound).
        slurm_max_num_timeout=args.max_requeues,
    )
    executor.update_parameters(**params)
    job = executor.submit(SubmititJob(cfg))
    print(f"submitted job {job.job_id}; logs: {job.paths.stdout} (task 0)", flush=True)
    if args.executor == "local":  # runs here: wait for it, requeues included
        job.results()
        print(f"job {job.job_id} done")
    return EXIT_OK
