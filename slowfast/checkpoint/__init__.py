"""Checkpoints: the reference's format (``io``), file names (``files``), atomic
saving (``save``), run fingerprints and checksums (``fingerprint``), fitting
state dicts to models (``inflate``) and Caffe2 model-zoo weights (``caffe2``).

Names are imported from their own module
(``from slowfast.checkpoint.files import CheckpointError``); the package
re-exports nothing.
"""
