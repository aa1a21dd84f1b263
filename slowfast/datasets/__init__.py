"""Video datasets (Kinetics, SSv2, Charades), decoding, transforms and loaders."""

from slowfast.datasets import charades, kinetics, ssv2  # noqa: F401  (registration)
from slowfast.datasets.bad_data import BadDataMonitor
from slowfast.datasets.base import VideoDataset
from slowfast.datasets.build import DATASET_REGISTRY, build_dataset, dataset_size
from slowfast.datasets.decoding.decoder import DecodeError
from slowfast.datasets.grid import SamplingGrid
from slowfast.datasets.loader import (
    BatchSpec,
    EvalShardSampler,
    GridBatchSampler,
    construct_loader,
    loader_set_epoch,
    shutdown_workers,
)

__all__ = [
    "DATASET_REGISTRY",
    "BadDataMonitor",
    "BatchSpec",
    "DecodeError",
    "EvalShardSampler",
    "GridBatchSampler",
    "SamplingGrid",
    "VideoDataset",
    "build_dataset",
    "construct_loader",
    "dataset_size",
    "loader_set_epoch",
    "shutdown_workers",
]
