"""Benchmarks and checks: the workshop, never imported by a training run.

Model-step throughput at the multigrid shapes (``model_step``, cell by cell in
``step_cells``), the graphed-against-eager step check (``graph_check``), loader
timing (``loader_timing``) and the loader's capacity estimate (``capacity``). The
tools in ``tools/dev/`` and ``tools/dev/gpu_check.py`` drive them.
"""
