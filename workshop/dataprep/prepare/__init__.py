"""Turns the official downloads of Kinetics, SSv2 and Charades into our formats.

``tools/prepare_dataset.py`` is the command line; each dataset has a module
(``kinetics.py``, ``ssv2.py``, ``charades.py``) and ``common.py`` runs the
items in worker processes, resumably, listing the ones that failed and why.
"""
