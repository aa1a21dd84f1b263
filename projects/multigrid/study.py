#!/usr/bin/env python3
"""Speed-accuracy study of multigrid training (the paper's Fig. 1 and 3).

Usage:
    python projects/multigrid/study.py --cfg BASE.yaml [--cfg MORE.yaml]
        [--arms baseline,long,short,long_short] [--budgets 0.5,1,2]
        [--seeds 0,1] [--out DIR] [--results DIR] [--dry-run] [--keep-periods]
        [KEY VALUE ...]

Every run is the base config (and the KEY VALUE overrides) with:

* the arm's MULTIGRID.LONG_CYCLE / SHORT_CYCLE: ``baseline`` (neither),
  ``long``, ``short`` or ``long_short`` (both, the default recipe); nothing
  else differs between arms (the trainer switches BN to sub-batch BN by itself
  when multigrid is on);
* the budget: SOLVER.MAX_EPOCH = round(budget x MAX_EPOCH), SOLVER.STEPS scaled
  by the budget (warm-up kept); MULTIGRID.EPOCH_FACTOR applies on top, so the
  baseline at 1x and the default multigrid at 1.5x epochs are both budget 1;
* RNG_SEED = seed and OUTPUT_DIR = DIR/runs/<arm>_b<budget>_s<seed>.

Each run is a series of ``tools/run_net.py`` processes, timed separately: training
(TEST.ENABLE False) and testing (TRAIN.ENABLE False, TEST.ENABLE True) of the
final checkpoint; a stopped run resumes in further training processes (below).
The training wall-clock is the whole training process (start-up, the training
loop, precise BN and the final checkpoint), summed over its processes.
TRAIN.EVAL_PERIOD is 0 (no validation in training: the test process scores the
final checkpoint) and TRAIN.CHECKPOINT_PERIOD is set so that only the last
epoch saves, so no evaluation counts as training time; --keep-periods keeps the
config's periods.
A run's console output goes to ``study_train.out`` / ``study_test.out`` in its
folder. Each run's training compute (clips x fvcore GFLOPs per clip at each
shape) gives the table's "speedup (compute)": what a perfectly efficient
machine would show.

Each finished run writes ``study_result.json`` in its folder and is skipped
by later invocations (run the same command again to go on), once its
``config.yaml`` is checked against the config the study builds for it: a
finished run made with another config (an edited config file, other overrides,
another data folder or test views) stops the study before any run, so that old
and new results do not mix. A stop signal (TRAIN.STOP_SIGNALS, e.g. SIGTERM
from ``timeout``) stops the study with exit status 75 after the running
training process has saved a mid-epoch checkpoint; the same command resumes
that run from it, and its
training wall-clock sums its training processes'
(``multigrid_study/progress.py``); a run trained to the end but not tested is
only tested. Any other run folder without a result is moved aside to
``<name>.stale-<time>`` and the run starts over, unless a live process holds
its run lock: then it is left alone and the run reported failed. Runs are
timed on one kind of machine (``multigrid_study/machine.py``): a study with
runs left to make refuses a finished run timed on another.

Each tested run's result, per-video correctness included, is also kept in
the repository: ``results/multigrid_study/<DIR's name>/<run>.json``
(``--results`` names another folder; ``multigrid_study/archive.py``). A file
there of another study with the same name stops the study before any run.

DIR (default: the config's OUTPUT_DIR + ``_study``) gets ``runs.csv``,
``runs.json``, ``table.md``, ``shapes.md`` (per-shape throughput against the
FLOP-ideal and data wait), ``plot.png`` and ``curves.png`` (training loss and
LR per epoch) for the runs of this command line.
Exit status: 0, 1 when a run failed, 2 for a bad command line or config or a
finished run made with another config or timed on another machine (before
any run starts), 75 when a stop signal stopped the study, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import List, Optional

from slowfast.config.derived import stop_signals
from slowfast.launch.config import load_run_config
from slowfast.launch.parser import load_config_from_args
from slowfast.launch.parser import parse_args as parse_run_args
from slowfast.multigrid import MultigridSchedule
from slowfast.multigrid.schedule import check_epochs_have_iterations
from slowfast.utils.distributed import procs_per_machine
from slowfast.utils.errors import EXIT_PREEMPTED

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from multigrid_study import archive  # noqa: E402
from multigrid_study.machine import code_version, describe_machine  # noqa: E402
from multigrid_study.outputs import write_outputs  # noqa: E402
from multigrid_study.progress import RunFailed, Stopper, StudyStopped  # noqa: E402
from multigrid_study.results import estimate_eta, metric_key  # noqa: E402
from multigrid_study.runs import (  # noqa: E402
    REPO_ROOT,
    TRAINING_OVERRIDES,
    StudyRun,
    execute,
    load_finished,
    testing_overrides,
)
from multigrid_study.study_runs import (  # noqa: E402
    ARMS,
    list_runs,
    parse_arms,
    parse_budgets,
    parse_seeds,
    run_overrides,
)

DEFAULT_INIT_METHOD = "tcp://localhost:9999"
EXIT_INTERRUPTED = 130  # a shell's status for a process ended by Ctrl-C (SIGINT)


def parse_args(argv: Optional[list] = None) -> tuple:
    """Parses the command line.

    The study's own options are taken out; the rest (``--cfg``, KEY VALUE
    overrides, ``--init_method``) is parsed by run_net.py's parser.

    Args:
        argv: arguments (default ``sys.argv[1:]``).

    Returns:
        tuple: the study's options, run_net.py's parsed arguments.
    """
    parser = argparse.ArgumentParser(
        usage="%(prog)s --cfg FILE [options] [KEY VALUE ...]",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Trailing KEY VALUE config overrides (and --init_method) are "
        "passed to every run; see projects/multigrid/README.md.",
        allow_abbrev=False,
    )
    add = parser.add_argument
    add("--cfg", action="append", default=[], metavar="FILE", help="config file")
    add("--arms", default=",".join(ARMS), help="comma-separated (%(default)s)")
    add("--budgets", default="0.5,1,2", help="x SOLVER.MAX_EPOCH (%(default)s)")
    add("--seeds", default="0", help="RNG_SEED values (%(default)s)")
    add("--out", default="", help="study folder (default: OUTPUT_DIR_study)")
    add(
        "--results",
        default="",
        help="folder of the runs' results kept (default: "
        "results/multigrid_study/<study folder's name> in the repository)",
    )
    add("--dry-run", action="store_true", help="print the runs and commands")
    add("--keep-periods", action="store_true", help="keep TRAIN.*_PERIOD")
    args, rest = parser.parse_known_args(argv)
    cfg_args = [token for path in args.cfg for token in ("--cfg", path)]
    return args, parse_run_args(cfg_args + rest)


def build_runs(args: argparse.Namespace, run_args: argparse.Namespace) -> tuple:
    """Builds and checks every run's config and schedule, before any run.

    Args:
        args, run_args: see ``parse_args``.

    Returns:
        tuple: the study folder, DATA.MULTI_LABEL, the ``StudyRun`` list.

    Raises:
        ValueError, OSError, KeyError: a bad option, config or data list.
    """
    base = load_config_from_args(run_args)
    if base.NUM_SHARDS > 1:
        raise ValueError("NUM_SHARDS > 1: the study runs every run on this machine")
    out = args.out or os.path.normpath(base.OUTPUT_DIR) + "_study"
    listed = list_runs(
        parse_arms(args.arms),
        parse_budgets(args.budgets),
        parse_seeds(args.seeds),
    )
    common = [token for path in run_args.cfg_files for token in ("--cfg", path)]
    if run_args.init_method != DEFAULT_INIT_METHOD:
        common += ["--init_method", run_args.init_method]
    runs = []
    for run in listed:
        run_dir = os.path.join(out, "runs", run.name)
        opts = run_args.opts + run_overrides(
            run, base.SOLVER, run_dir, args.keep_periods
        )
        cfg = load_run_config(run_args.cfg_files, opts)
        schedule = MultigridSchedule.from_cfg(cfg, num_procs=procs_per_machine(cfg))
        runs.append(StudyRun(run, run_dir, common + opts, cfg, schedule))
    if not args.dry_run:  # the trainer's own early checks, before any work
        from slowfast.datasets.build import dataset_size
        from slowfast.models import describe_model

        size = dataset_size(base, "train")
        for p in runs:
            info = describe_model(p.cfg)
            p.schedule.validate(info.spatial_stride, info.min_frames, info.alpha)
            try:
                check_epochs_have_iterations(p.schedule, size)
            except ValueError as err:
                raise ValueError(f"{p.run.name}: {err}") from err
            p.iterations = p.schedule.total_iters(size)
    return out, base.DATA.MULTI_LABEL, runs


def _clock(seconds: Optional[float]) -> str:
    if seconds is None:
        return "ETA unknown"
    seconds = int(seconds)
    return f"ETA {seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def main(argv: Optional[list] = None) -> int:
    """Runs the study.

    Args:
        argv: arguments (default ``sys.argv[1:]``).

    Returns:
        int: 0; 1 when a run failed; 2 for a bad command line or config;
        EXIT_PREEMPTED (75) when a stop signal stopped the study; 130 on
        Ctrl-C (the run it interrupted starts over).
    """
    args, run_args = parse_args(argv)
    try:
        out, multi_label, runs = build_runs(args, run_args)
    except (ValueError, OSError, KeyError) as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        print(f"error: {'; '.join(lines) or type(err).__name__}", file=sys.stderr)
        return 2
    total = len(runs)
    if args.dry_run:
        for i, p in enumerate(runs, 1):
            print(f"[{i}/{total}] {p.run.name}: {p.schedule.max_epoch} epochs")
            print("    train: " + shlex.join(p.command(TRAINING_OVERRIDES)))
            print(
                "    test:  " + shlex.join(p.command(testing_overrides(p.checkpoint)))
            )
        return 0
    machine = describe_machine(runs[0].cfg.NUM_GPUS)
    kept = archive.results_folder(REPO_ROOT, args.results, out)
    try:
        results = load_finished(runs, machine)
        archive.check_folder(kept, runs, REPO_ROOT)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stopper = Stopper(stop_signals(runs[0].cfg))
    stopper.install()
    try:
        failed, stopped = _run_all(runs, results, multi_label, stopper, machine, kept)
    finally:
        stopper.restore()
    finished = [results[p.run] for p in runs if p.run in results]
    if finished:
        print(write_outputs(out, finished, multi_label, runs[0].cfg))
        names = "runs.csv, runs.json, table.md, shapes.md, plot.png, curves.png"
        print(f"written: {out}/{names}")
        print(f"results kept in {kept}")
    if failed:
        print(f"{len(failed)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
    if stopped:
        print(f"{stopped}; run the same command to go on", file=sys.stderr)
        return EXIT_PREEMPTED if stopped.resumable else EXIT_INTERRUPTED
    return 1 if failed else 0


def _run_all(
    runs: list,
    results: dict,
    multi_label: bool,
    stopper: Stopper,
    machine: dict,
    kept: str,
) -> tuple:
    """Runs the study's runs without a result (adding theirs to ``results``),
    keeping each finished run's result in the folder ``kept``.

    Returns:
        tuple: the names of the runs that failed, and the ``StudyStopped``
        that stopped the study (None when every run was tried).
    """
    failed: List[str] = []
    total, code = len(runs), code_version(REPO_ROOT)
    for i, p in enumerate(runs, 1):
        label = f"[{i}/{total}] {p.run.arm} budget {p.run.budget} seed {p.run.seed}"
        if p.run in results:
            print(f"{label}: finished before, skipped ({p.result_path})")
            archive.keep(kept, p.run, results[p.run], REPO_ROOT)
            continue
        if stopper.received:
            return failed, StudyStopped(stopper.received, f"before {p.run.name}")
        done = [
            (r["arm"], r["budget"], r["train_s"] + r["test_s"])
            for r in results.values()
        ]
        todo = [
            (q.run.arm, q.run.budget) for q in runs[i - 1 :] if q.run not in results
        ]
        print(f"{label} ... (study {_clock(estimate_eta(done, todo))})", flush=True)
        try:
            result = results[p.run] = execute(p, stopper, machine, code)
        except StudyStopped as err:
            return failed, err
        except KeyboardInterrupt:
            where = f"by Ctrl-C in {p.run.name}, which starts over next time (to "
            where += "stop resumably, send SIGTERM)"
            return failed, StudyStopped(0, where, resumable=False)
        except (RunFailed, OSError, ValueError) as err:
            failed.append(p.run.name)
            print(f"    failed: {err}", flush=True)
            continue
        archive.keep(kept, p.run, result, REPO_ROOT)
        metric = result[metric_key(multi_label)]
        processes = result["train_processes"]
        print(
            f"    train {result['train_s']:.0f} s ({result['epochs']} epochs, "
            f"{result['iterations']} iterations"
            + (f", {processes} processes" if processes > 1 else "")
            + f"), test {result['test_s']:.0f} s, "
            f"test {'mAP' if multi_label else 'top-1'} "
            + (f"{metric:.2f}%" if metric is not None else "-"),
            flush=True,
        )
    return failed, None


if __name__ == "__main__":
    sys.exit(main())
