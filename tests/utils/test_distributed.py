"""Distributed helpers: single-process fallbacks and a 2-process CPU launch."""

import os
import time

import pytest
import torch
import torch.multiprocessing as mp

from slowfast.config import load_config
from slowfast.launch import spawn
from slowfast.utils import distributed as du

# Rows contributed by each rank to the uneven gather.
ROWS = {0: 1, 1: 3}


def _collectives_job(cfg, rank, world_size):
    """Runs in each spawned process; writes what it saw for the parent to check."""
    assert du.get_rank() == rank and du.get_world_size() == world_size
    assert du.is_master_proc() == (rank == 0)
    (mean,) = du.all_reduce_mean([torch.tensor([float(rank + 1), 10.0 * rank])])
    (gathered,) = du.all_gather_tensors([torch.full((2,), float(rank))])
    part = torch.arange(ROWS[rank] * 2, dtype=torch.float32).view(-1, 2) + 100 * rank
    varlen = du.gather_varlen(part)
    empty = du.gather_varlen(torch.zeros(0, 2) if rank == 0 else torch.ones(1, 2))
    decided = du.decided_on_master(rank == 0, lambda: f"made by {rank}", (KeyError,))

    def refuse():
        raise KeyError(f"refused by {rank}")

    try:
        du.decided_on_master(rank == 0, refuse, (KeyError,))
        refused = None
    except KeyError as err:
        refused = str(err)
    torch.save(
        {
            "rank": rank,
            "world_size": world_size,
            "mean": mean,
            "gathered": gathered,
            "varlen": varlen,
            "empty": empty,
            "decided": decided,
            "refused": refused,
            "threads": torch.get_num_threads(),
        },
        os.path.join(cfg.OUTPUT_DIR, f"rank{rank}.pyth"),
    )


def _failing_job(cfg, rank, world_size):
    if rank == 1:
        raise ValueError("rank 1 failed on purpose")
    # Rank 0 would otherwise reach the process group's teardown and fail there
    # (peer gone), racing rank 1 to be the error reported.
    time.sleep(5)


def _single_job(cfg, rank, world_size):
    assert not du.is_initialized()
    with open(os.path.join(cfg.OUTPUT_DIR, "single.txt"), "w") as f:
        f.write(f"{rank} {world_size} {torch.get_num_threads()}")


def _wrapping_job(cfg, rank, world_size):
    from slowfast.engine.builders import wrap_for_processes

    ctx = du.RunContext.create(cfg, rank, world_size)
    model = wrap_for_processes(torch.nn.Linear(2, 2), ctx)
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    with open(os.path.join(cfg.OUTPUT_DIR, "wrapped.txt"), "w") as f:
        f.write(f"{world_size} {ctx.distributed} {ddp} {du.get_world_size()}")


def _cpu_cfg(tmp_path, procs):
    return load_config(
        [], ["NUM_GPUS", "0", "NUM_CPU_PROCS", str(procs), "OUTPUT_DIR", str(tmp_path)]
    )


def test_single_process_fallbacks():
    assert du.get_world_size() == 1 and du.get_rank() == 0 and du.is_master_proc()
    x = torch.arange(3.0)
    assert du.all_reduce_mean([x])[0] is x
    assert du.all_gather_tensors([x])[0] is x
    assert du.gather_varlen(x) is x


def test_rank_layout():
    assert [spawn.global_rank(1, 4, r) for r in range(4)] == [4, 5, 6, 7]
    cfg = load_config([], ["NUM_GPUS", "0", "NUM_CPU_PROCS", "3"])
    assert du.procs_per_machine(cfg) == 3
    assert du.procs_per_machine(load_config([], ["NUM_GPUS", "2"])) == 2


def test_cpu_thread_rule(monkeypatch):
    cfg = load_config([], ["NUM_GPUS", "0", "NUM_CPU_PROCS", "2"])
    rule = spawn.cpu_threads_per_process
    assert [rule(cfg, cores=c) for c in (1, 2, 3, 16, 17)] == [1, 1, 1, 8, 8]
    assert rule(cfg, num_procs=3, cores=16) == 5  # the launcher's count wins
    assert rule(load_config([], ["NUM_GPUS", "2"]), cores=16) is None  # GPU: torch's
    # The cores: the CPU affinity where narrower than os.cpu_count() (here
    # without hyper-threads: each logical CPU its own core).
    monkeypatch.setattr(spawn, "_physical_cores", lambda cpus: len(cpus))
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3, 5}, raising=False)
    assert spawn.available_cores() == 3
    assert rule(cfg) == 1
    monkeypatch.delattr(os, "sched_getaffinity")  # not on every platform
    assert spawn.available_cores() == 8 and rule(cfg) == 4
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert spawn.available_cores() == 1


def test_launch_single_process_runs_in_process(tmp_path, monkeypatch):
    monkeypatch.setattr(spawn, "available_cores", lambda: 3)
    spawn.launch_job(_cpu_cfg(tmp_path, 1), "tcp://localhost:1", _single_job)
    # All the cores for the run, then the caller's count again (conftest: 1).
    assert (tmp_path / "single.txt").read_text() == "0 1 3"
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("group", [False, True])
def test_one_process_is_data_parallel_only_in_a_group(tmp_path, group):
    """torchrun, srun and submitit start a group with one process too (DDP,
    as with several); a plain single-process run starts none."""
    init = f"file://{tmp_path / 'rendezvous'}"
    spawn.run_in_group(
        [_wrapping_job], _cpu_cfg(tmp_path, 1), init, 0, 1, 0, group=group
    )
    assert (tmp_path / "wrapped.txt").read_text() == f"1 {group} {group} 1"
    assert not du.is_initialized()  # the group is left at the end


@pytest.mark.slow
def test_two_process_cpu_launch(tmp_path, monkeypatch):
    cfg = _cpu_cfg(tmp_path, 2)
    init = f"file://{tmp_path / 'rendezvous'}"
    # A thread variable set by hand (or by torchrun) does not change the rule.
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    spawn.launch_job(cfg, init, _collectives_job)
    threads = max(1, spawn.available_cores() // 2)
    log = (tmp_path / "stdout.log").read_text()
    assert f"CPU threads: {threads} per process" in log
    assert log.count("CPU threads") == 1  # rank 0 alone
    assert "OMP_NUM_THREADS=5 in the environment not used" in log
    expected_varlen = torch.cat(
        [
            torch.arange(ROWS[r] * 2, dtype=torch.float32).view(-1, 2) + 100 * r
            for r in (0, 1)
        ]
    )
    for rank in (0, 1):
        seen = torch.load(tmp_path / f"rank{rank}.pyth", weights_only=True)
        assert seen["rank"] == rank and seen["world_size"] == 2
        torch.testing.assert_close(seen["mean"], torch.tensor([1.5, 5.0]))
        torch.testing.assert_close(seen["gathered"], torch.tensor([0.0, 0, 1, 1]))
        assert seen["varlen"].shape == (4, 2)
        torch.testing.assert_close(seen["varlen"], expected_varlen)
        torch.testing.assert_close(seen["empty"], torch.ones(1, 2))
        # rank 0 decides for both; its error reaches both
        assert seen["decided"] == "made by 0"
        assert seen["refused"] == "'refused by 0'"
        assert seen["threads"] == threads


def test_child_error_propagates_with_traceback(tmp_path):
    cfg = _cpu_cfg(tmp_path, 2)
    init = f"file://{tmp_path / 'rendezvous'}"
    with pytest.raises(mp.ProcessRaisedException) as err:
        spawn.launch_job(cfg, init, _failing_job)
    assert "ValueError: rank 1 failed on purpose" in str(err.value)
    assert "_failing_job" in str(err.value)


def test_hyper_threads_of_one_core_count_once(tmp_path):
    siblings = {0: "0,4", 1: "1,5", 4: "0,4", 5: "1,5", 2: "2"}
    for cpu, text in siblings.items():
        folder = tmp_path / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(text + "\n")
    assert spawn._physical_cores([0, 1, 4, 5], str(tmp_path)) == 2
    assert spawn._physical_cores([0, 2], str(tmp_path)) == 2
    assert spawn._physical_cores([0, 3], str(tmp_path)) == 2  # cpu3 unknown: count
