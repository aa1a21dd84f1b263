"""Leaf utilities: logging, distributed collectives and the run context, tables.

Submodules are imported explicitly (``from slowfast.utils import distributed
as du``); this package imports none of them so that importing it stays cheap.
"""
