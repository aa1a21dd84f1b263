"""Utilities: checkpoints, logging, distributed helpers and the command line.

Submodules are imported explicitly (``from slowfast.utils import checkpoint``);
this package imports none of them so that importing it stays cheap.
"""
