"""Data preparation: the workshop, never imported by a training run.

Turning official downloads into the files and folders the datasets read (``prepare``),
the generated "Moving Digits" demo data (``demo``) and checking a prepared
dataset (``verify``). ``tools/prepare_dataset.py``, ``tools/add_renditions.py``,
``tools/make_demo_data.py`` and ``tools/verify_dataset.py`` drive them.
"""
