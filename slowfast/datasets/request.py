"""Dataset requests and seeds: parsing ``i``, ``(i, grid)`` or ``(i, grid, seed)``.

``parse_request`` splits what ``VideoDataset.__getitem__`` receives into an
index, a sampling grid and a seed; ``mix_seed`` combines integers (RNG_SEED,
epoch, index, rank, worker...) into the 64-bit seeds that the datasets and the
loader's samplers and workers draw from.
"""

from typing import Any, Optional, Tuple

from slowfast.datasets.grid import SamplingGrid

_MASK64 = (1 << 64) - 1


def mix_seed(*parts: int) -> int:
    """Combines integers into one 64-bit seed (order matters, deterministic).

    Args:
        *parts: integers (e.g. RNG_SEED, epoch, index).

    Returns:
        int: a seed for ``random.Random``.
    """
    value = 0x243F6A8885A308D3
    for part in parts:
        value = (value ^ (int(part) & _MASK64)) * 0x100000001B3 & _MASK64
        value ^= value >> 29
    return value


def parse_request(request: Any) -> Tuple[int, Optional[SamplingGrid], Optional[int]]:
    """Splits a dataset request into (index, grid, seed).

    Args:
        request: ``i``, ``(i, grid)`` or ``(i, grid, seed)``.

    Returns:
        tuple: index, grid (None: config shape) and seed (None: unseeded).
    """
    if isinstance(request, (tuple, list)):
        if not 1 <= len(request) <= 3:
            raise ValueError(
                f"dataset request must be (index, grid[, seed]), got {request!r}"
            )
        index = request[0]
        grid = request[1] if len(request) > 1 else None
        seed = request[2] if len(request) > 2 else None
    else:
        index, grid, seed = request, None, None
    if grid is not None and not isinstance(grid, SamplingGrid):
        raise TypeError(f"dataset request grid must be a SamplingGrid, got {grid!r}")
    return int(index), grid, (None if seed is None else int(seed))
