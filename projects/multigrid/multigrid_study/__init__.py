"""The multigrid speed-accuracy study (``projects/multigrid/study.py``).

``study_runs`` (arms, budgets, seeds and each run's overrides), ``results`` (a run's
statistics, aggregation over seeds, the table), ``intervals`` (95% intervals
over seeds, paired differences, test sampling), ``archive`` (results kept in
the repository), ``shapes`` (per-shape
throughput against the FLOP-ideal), ``compute`` (a run's training FLOPs),
``outputs`` (the files a study writes), ``progress`` (a run's processes,
stopped by a signal and resumed), ``machine`` (what the runs are timed on)
and ``runs`` (one run of the study: its processes and its result). Import with
``projects/multigrid`` on ``sys.path``, as ``study.py`` and the tests do.
"""
