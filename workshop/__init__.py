"""The workshop: benchmarks, checks and data preparation.

The code behind ``tools/`` and ``projects/`` that a training run never imports:
the model-step benchmarks and the graphed-step check (``bench``), data
preparation, the Moving Digits demo data and dataset verification
(``dataprep``). It is not installed by ``pip install .``; the scripts that use it
put the repository root on ``sys.path``. It imports ``slowfast``, never the other
way round (``tests/test_architecture.py`` holds both).
"""
