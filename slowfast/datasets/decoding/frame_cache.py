"""A per-worker LRU cache of decoded frames, bounded by a size in bytes.

Each loader worker holds its own copy (the dataset creates it lazily, after
the worker process started), so nothing is shared between processes. With
persistent workers the cache survives across epochs, and a small dataset is
then decoded only once.
"""

from collections import OrderedDict
from typing import Any, Hashable, Optional


class FrameCache:
    """Least-recently-used mapping from a key to decoded frames.

    Args:
        max_bytes: total size of the cached values; the oldest entries are
            dropped to stay below it. A value larger than this is not kept.
    """

    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise ValueError(f"FrameCache: max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self.num_bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: "OrderedDict[Hashable, tuple]" = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Optional[Any]:
        """Returns the value stored for ``key`` (marking it recent) or None."""
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[0]

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        """Stores ``value`` of size ``nbytes``, evicting the oldest entries.

        Args:
            key: lookup key (a path).
            value: the decoded frames.
            nbytes: the value's size in bytes.
        """
        if key in self._entries:
            self.num_bytes -= self._entries.pop(key)[1]
        if nbytes > self.max_bytes:
            return
        while self._entries and self.num_bytes + nbytes > self.max_bytes:
            _, (_, size) = self._entries.popitem(last=False)
            self.num_bytes -= size
        self._entries[key] = (value, int(nbytes))
        self.num_bytes += int(nbytes)
