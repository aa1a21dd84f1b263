"""Checkpoints: the reference's format (``io``), file names (``files``), atomic
saving (``save``), run fingerprints and checksums (``fingerprint``), fitting
state dicts to models (``inflate``) and Caffe2 model-zoo weights (``caffe2``).

Submodules are imported explicitly (``from slowfast.checkpoint import io as cu``).
"""
