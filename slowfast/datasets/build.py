"""The dataset registry and its builder."""

import os
from typing import Optional

from fvcore.common.config import CfgNode
from fvcore.common.registry import Registry

from slowfast.models.describe import ModelInfo
from slowfast.utils.registry import check_registered

DATASET_REGISTRY = Registry("DATASET")
DATASET_REGISTRY.__doc__ = """
Registry of video datasets. A dataset class is registered under its class name
(``Kinetics``, ``Ssv2``, ``Charades``) and looked up case-insensitively from the
config's TRAIN.DATASET / TEST.DATASET (``kinetics``, ``ssv2``, ``charades``).
It is called as ``cls(cfg, split, model=...)``: ``model`` is the run's
``ModelInfo`` (how clips are packed for the model), or None where no run
resolved it (``VideoDataset`` then describes the configured model itself).
"""


def build_dataset(
    name: str, cfg: CfgNode, split: str, model: Optional[ModelInfo] = None
):
    """Builds a registered dataset.

    Args:
        name: dataset name, e.g. "kinetics", "ssv2" or "charades".
        cfg: the run's config.
        split: "train", "val" or "test".
        model: the run's model description (how clips are packed); None:
            the dataset describes the configured model itself.

    Returns:
        torch.utils.data.Dataset: the dataset.

    Raises:
        KeyError: no dataset of that name is registered.
    """
    return dataset_class(name)(cfg, split, model=model)


def dataset_class(name: str):
    """The registered dataset class of a config name (case-insensitive).

    Raises:
        KeyError: no dataset of that name is registered.
    """
    known = {key.lower(): key for key, _ in DATASET_REGISTRY}
    key = known.get(str(name).lower())
    if key is None:
        raise KeyError(f"unknown dataset {name!r}; registered: {sorted(known)}")
    return DATASET_REGISTRY.get(key)


def dataset_name(cfg: CfgNode, split: str) -> str:
    """The dataset a split reads: TRAIN.DATASET for train/val, TEST.DATASET for test."""
    return cfg.TEST.DATASET if split == "test" else cfg.TRAIN.DATASET


def dataset_size(cfg: CfgNode, split: str) -> int:
    """Number of entries of a split (views for "test"), built from the config.

    Args:
        cfg: the run's config.
        split: "train", "val" or "test".

    Returns:
        int: ``len(dataset)``.
    """
    return len(build_dataset(dataset_name(cfg, split), cfg, split))


def check_dataset_names(cfg: CfgNode) -> None:
    """Raises a one-line ValueError unless TRAIN.DATASET and TEST.DATASET are
    registered (case ignored, as the lookup does)."""
    names = [name for name, _ in DATASET_REGISTRY]
    for key, value in (
        ("TRAIN.DATASET", cfg.TRAIN.DATASET),
        ("TEST.DATASET", cfg.TEST.DATASET),
    ):
        check_registered(key, value, names, fold_case=True)


def check_data_dir(cfg: CfgNode) -> None:
    """Fails with one line when DATA.PATH_TO_DATA_DIR is not a folder.

    The one home of this check: ``launch/preflight.py`` runs it before any
    work (as its exit status), the trainer and the tester before building
    their loaders.

    Raises:
        FileNotFoundError: the folder is missing (names the key and value).
    """
    path = cfg.DATA.PATH_TO_DATA_DIR
    if not path or not os.path.isdir(path):
        raise FileNotFoundError(
            f"DATA.PATH_TO_DATA_DIR = {path!r}: folder not found "
            "(see DATASET.md; `python tools/make_demo_data.py` writes the demo data)"
        )
