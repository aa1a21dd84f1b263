"""RNG states of a process: seeding, capturing and restoring them.

A checkpoint holds every process's states (``engine/checkpointer``), so that
a resumed run draws the same numbers as one never stopped; evaluation and
precise BN run inside ``preserved_rng`` so that they do not move them.
"""

import contextlib
import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seeds Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def get_rng_state() -> dict:
    """The RNG states of Python, NumPy and torch (CPU and CUDA)."""
    legacy_state = np.random.get_state(legacy=True)
    assert isinstance(legacy_state, tuple)  # the global generator is MT19937
    name, keys, pos, has_gauss, cached = legacy_state
    state = {
        "python": random.getstate(),
        # Plain types so that checkpoints load with torch.load(weights_only=True).
        "numpy": [
            name,
            torch.from_numpy(keys.astype(np.int64)),
            pos,
            has_gauss,
            cached,
        ],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # this process's GPU
    return state


def set_rng_state(state: dict) -> None:
    """Restores states saved by ``get_rng_state``."""
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(cuda)


@contextlib.contextmanager
def preserved_rng():
    """Runs a block (evaluation, precise BN) without moving the training RNGs."""
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
