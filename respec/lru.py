"""One least-recently-used cache for the core, bounded by a count of items and/or by bytes.

The core keeps many small caches keyed by content hashes (change masks, alignments, working-size
images, downscaled prompt images, encoded PNGs, published masks, SAM embeddings, detections, sim
frames). They share one eviction rule and one lock, written here once instead of once per cache.

The rules: `get` counts as a use, `peek` does not (a cache read only by `peek` drops the oldest
written first); `put` inserts or replaces and counts as a use; past a bound the least recently
used items go first; an item larger than `max_bytes` on its own is not kept, so a cache never
holds more than its bounds. Every call takes the cache's lock: it is safe across threads.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable


class LRU:
    """A thread-safe LRU of at most `max_items` items and `max_bytes` bytes (as `size_of` counts them)."""

    def __init__(self, max_items: int | None = None, max_bytes: int | None = None,
                 size_of: Callable[[Any], int] | None = None):
        if (max_bytes is None) != (size_of is None):
            raise ValueError("an LRU bounded by bytes needs both max_bytes and size_of")
        self.max_items, self.max_bytes, self._size_of = max_items, max_bytes, size_of
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()   # oldest first
        self._bytes = 0
        self._hits = self._misses = 0     # of `get` (a `peek` is not counted)
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value under `key`, now the most recently used, or `default`."""
        with self._lock:
            if key not in self._items:
                self._misses += 1
                return default
            self._hits += 1
            self._items.move_to_end(key)
            return self._items[key][0]

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """The value under `key` without counting it as a use, or `default`."""
        with self._lock:
            return self._items.get(key, (default,))[0]

    def put(self, key: Hashable, value: Any) -> None:
        """Keep `value` under `key` as the most recently used item, within the bounds."""
        size = self._size_of(value) if self._size_of is not None else 0
        with self._lock:
            if key in self._items:
                self._bytes -= self._items.pop(key)[1]
            if self.max_bytes is not None and size > self.max_bytes:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while ((self.max_items is not None and len(self._items) > self.max_items)
                   or (self.max_bytes is not None and self._bytes > self.max_bytes)):
                self._bytes -= self._items.popitem(last=False)[1][1]

    def keys(self) -> list:
        """The keys, least recently used first."""
        with self._lock:
            return list(self._items)

    def stats(self) -> dict:
        """{items, bytes (when bounded by bytes), hits, misses}: how full it is and how often `get` found its key."""
        with self._lock:
            out = {"items": len(self._items), "hits": self._hits, "misses": self._misses}
            if self.max_bytes is not None:
                out["bytes"] = self._bytes
            return out

    def clear(self) -> None:
        """Forget every item."""
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
