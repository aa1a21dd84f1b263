"""How a job was started, and what that means for its process layout.

``tools/run_net.py`` is one entry point for every way of starting a job:

- ``plain``: ``python tools/run_net.py ...`` spawns NUM_GPUS processes on this
  machine (NUM_CPU_PROCS on CPU); several machines use the reference's
  ``--init_method tcp://HOST:PORT --num_shards N --shard_id i``;
- ``torchrun``: ``torchrun --nproc-per-node G ... tools/run_net.py ...`` starts
  one process per GPU (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
  MASTER_ADDR, MASTER_PORT); nothing is spawned;
- ``srun``: ``srun`` inside a SLURM allocation starts one task per GPU
  (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID, the node list for
  the first host, a port derived from SLURM_JOB_ID); nothing is spawned;
- ``submitit``: ``tools/submit.py`` (one task per GPU through submitit).

Where the launcher's layout disagrees with NUM_GPUS / NUM_SHARDS / SHARD_ID,
the launcher's wins: ``apply_layout`` returns the config with its values and
the notes to log.
"""

import re
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

from fvcore.common.config import CfgNode

from slowfast.config.derived import global_batch_size, lr_scale
from slowfast.utils.errors import EXIT_CONFIG, UserError

LAUNCHERS = ("auto", "plain", "torchrun", "srun")
# SLURM_STEP_ID values of the steps that are not srun tasks.
_NOT_SRUN_STEPS = ("batch", "extern", "interactive", "4294967294", "4294967295")


class LaunchError(UserError, ValueError):
    """The environment describes an impossible layout; the message is one line."""

    exit_status = EXIT_CONFIG


@dataclass(frozen=True)
class Layout:
    """The processes of a job and this process's place among them.

    Attributes:
        launcher: "plain", "torchrun", "srun" or "submitit".
        num_nodes: machines.
        procs_per_node: processes per machine.
        node_rank: index of this machine.
        init_method: torch.distributed rendezvous URL.
        rank: this process's global rank; None when this process spawns the
            machine's processes itself (plain).
        local_rank: this process's index on its machine (None with plain).
    """

    launcher: str
    num_nodes: int
    procs_per_node: int
    node_rank: int
    init_method: str
    rank: Optional[int] = None
    local_rank: Optional[int] = None

    @property
    def world_size(self) -> int:
        """Processes in all."""
        return self.num_nodes * self.procs_per_node

    @property
    def spawns(self) -> bool:
        """Whether this process starts the machine's processes (plain)."""
        return self.rank is None


def _int(env: Mapping[str, str], *keys: str) -> Optional[int]:
    for key in keys:
        if env.get(key, "") != "":
            return int(env[key])
    return None


def _required_int(env: Mapping[str, str], *keys: str) -> int:
    value = _int(env, *keys)
    if value is None:
        raise LaunchError(f"{' / '.join(keys)} not set")
    return value


def job_port(job_id: str) -> int:
    """The rendezvous port of a SLURM job (15000-34999 from its id's digits),
    the same on every node, for srun tasks and submitit jobs alike."""
    digits = "".join(ch for ch in str(job_id) if ch.isdigit()) or "0"
    return 15000 + int(digits[-9:]) % 20000


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``"gpu[07-09,12],cpu1"`` -> ``"gpu07"``."""
    match = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?", nodelist.strip())
    assert match is not None  # the pattern matches any string
    prefix, ranges = match.group(1), match.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def tasks_per_node(text: str) -> List[int]:
    """Expands SLURM_TASKS_PER_NODE: ``"4(x2),3"`` -> ``[4, 4, 3]``."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise LaunchError(f"cannot read SLURM_TASKS_PER_NODE {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def _torchrun(env: Mapping[str, str]) -> Layout:
    world, rank = _required_int(env, "WORLD_SIZE"), _required_int(env, "RANK")
    local = _int(env, "LOCAL_RANK")
    per_node = _int(env, "LOCAL_WORLD_SIZE") or world
    if world % per_node:
        raise LaunchError(
            f"torchrun: WORLD_SIZE {world} is not a multiple of LOCAL_WORLD_SIZE "
            f"{per_node}; start the same number of processes on every node"
        )
    node = _int(env, "GROUP_RANK")
    node = rank // per_node if node is None else node
    return Layout("torchrun", world // per_node, per_node, node, "env://", rank, local)


def _srun(env: Mapping[str, str]) -> Layout:
    ntasks = _required_int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
    nodes = _int(env, "SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    nodes = nodes or 1
    per_node_text = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get(
        "SLURM_TASKS_PER_NODE", ""
    )
    counts = tasks_per_node(per_node_text) if per_node_text else []
    if counts and len(set(counts)) > 1:
        raise LaunchError(
            f"srun started {per_node_text} tasks per node; start the same number "
            "on every node (e.g. --ntasks-per-node G)"
        )
    per_node = counts[0] if counts else _int(env, "SLURM_NTASKS_PER_NODE")
    per_node = per_node or ntasks // nodes
    if per_node * nodes != ntasks:
        raise LaunchError(
            f"srun: {ntasks} tasks on {nodes} nodes; use --ntasks-per-node"
        )
    nodelist = (
        env.get("SLURM_STEP_NODELIST")
        or env.get("SLURM_JOB_NODELIST")
        or env.get("SLURM_NODELIST", "localhost")
    )
    host = env.get("MASTER_ADDR") or first_host(nodelist)
    port = env.get("MASTER_PORT") or job_port(env.get("SLURM_JOB_ID", "0"))
    rank = int(env["SLURM_PROCID"])
    node = rank // per_node  # SLURM_NODEID counts the allocation's nodes
    local = _int(env, "SLURM_LOCALID")
    return Layout("srun", nodes, per_node, node, f"tcp://{host}:{port}", rank, local)


def detect_launcher(env: Mapping[str, str]) -> str:
    """Which launcher started this process: "torchrun", "srun" or "plain".

    A SLURM batch script's own shell is not an srun task (its SLURM_PROCID
    and SLURM_NTASKS describe the allocation): only a process of an srun step
    (SLURM_STEP_ID set, not the batch or extern step) counts as srun.
    ``detect_layout`` also treats an srun step of one task per node as plain
    when the config asks for several processes per machine.
    """
    torchrun_keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    if "TORCHELASTIC_RUN_ID" in env or all(k in env for k in torchrun_keys):
        return "torchrun"
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
    if "SLURM_PROCID" in env and step is not None and step not in _NOT_SRUN_STEPS:
        return "srun"
    return "plain"


def detect_layout(
    cfg: CfgNode,
    init_method: str,
    env: Mapping[str, str],
    launcher: str = "auto",
) -> Layout:
    """The job's layout from the environment (or the config, with plain).

    Args:
        cfg: the loaded config (NUM_GPUS / NUM_CPU_PROCS, NUM_SHARDS, SHARD_ID).
        init_method: ``--init_method`` (used by plain).
        env: the environment (``os.environ``).
        launcher: one of LAUNCHERS; "auto" detects it.

    Raises:
        LaunchError: an inconsistent environment (one line).
    """
    per_node = cfg.NUM_GPUS if cfg.NUM_GPUS > 0 else cfg.NUM_CPU_PROCS
    if launcher == "auto":
        launcher = detect_launcher(env)
        if launcher == "srun" and per_node > 1 and _srun(env).procs_per_node == 1:
            # One task per node that starts its processes itself: an
            # interactive srun shell, or the reference's one-task-per-machine
            # scripts (--init_method, --num_shards, --shard_id).
            launcher = "plain"
    if launcher == "torchrun":
        layout = _torchrun(env)
    elif launcher == "srun":
        layout = _srun(env)
    else:
        return Layout("plain", cfg.NUM_SHARDS, per_node, cfg.SHARD_ID, init_method)
    check_layout(layout)
    return layout


def check_layout(layout: Layout) -> None:
    """Ranks must be laid out node by node (local rank = rank mod per node).

    Raises:
        LaunchError: otherwise, or ranks out of range.
    """
    rank, local, per_node = layout.rank, layout.local_rank, layout.procs_per_node
    assert rank is not None  # torchrun and srun layouts know this process's rank
    if not 0 <= rank < layout.world_size:
        raise LaunchError(
            f"{layout.launcher}: rank {rank} out of range for {layout.world_size} "
            "processes"
        )
    if local is not None and local != rank % per_node:
        raise LaunchError(
            f"{layout.launcher}: rank {rank} is local rank {local} on its node, "
            f"expected {rank % per_node}; place ranks node by node (srun "
            "--distribution=block)"
        )


def apply_layout(cfg: CfgNode, layout: Layout) -> Tuple[CfgNode, List[str]]:
    """The config with the launcher's layout, and a note per value it changed.

    Args:
        cfg: the loaded (frozen) config.
        layout: the job's layout.

    Returns:
        tuple: the frozen config to run, and notes such as
        ``"NUM_GPUS 8 -> 4 (torchrun: 4 processes per node)"``.
    """
    per_node_key = "NUM_GPUS" if cfg.NUM_GPUS > 0 else "NUM_CPU_PROCS"
    wanted = {
        per_node_key: layout.procs_per_node,
        "NUM_SHARDS": layout.num_nodes,
        "SHARD_ID": layout.node_rank,
    }
    notes = []
    for key, value in wanted.items():
        if cfg[key] != value:
            notes.append(f"{key} {cfg[key]} -> {value} (from {layout.launcher})")
    if not notes:
        return cfg, notes
    cfg = cfg.clone()
    cfg.defrost()
    for key, value in wanted.items():
        cfg[key] = value
    cfg.freeze()
    return cfg, notes


def describe_layout(cfg: CfgNode, layout: Layout) -> List[str]:
    """The run's first log lines: launcher, layout, backend, batch and LR."""
    device = "GPU" if cfg.NUM_GPUS > 0 else "CPU"
    backend = cfg.DIST_BACKEND if cfg.NUM_GPUS > 0 else "gloo"
    per = layout.procs_per_node
    first = layout.node_rank * per
    lines = [
        f"launcher {layout.launcher}: {layout.num_nodes} node(s) x {per} {device} "
        f"process(es) = {layout.world_size}; this is node {layout.node_rank}, "
        f"holding ranks {first}..{first + per - 1}"
        + ("" if layout.spawns else f", rank {layout.rank}")
        + f"; backend {backend}, rendezvous {layout.init_method}"
    ]
    batch = global_batch_size(cfg)
    lines.append(
        f"global batch {batch} (TRAIN.BATCH_SIZE {cfg.TRAIN.BATCH_SIZE} per node x "
        f"{cfg.NUM_SHARDS} node(s)), {batch // max(layout.world_size, 1)} clips per "
        f"process at the base shape; base LR {cfg.SOLVER.BASE_LR * lr_scale(cfg):g}"
        + (
            f" (SOLVER.BASE_LR {cfg.SOLVER.BASE_LR:g} x {cfg.NUM_SHARDS} nodes)"
            if lr_scale(cfg) > 1
            else ""
        )
    )
    return lines
