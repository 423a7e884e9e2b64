"""The cleaner's key -> latest offset map (Kafka's ``OffsetMap`` / ``SkimpyOffsetMap``).

Kafka keeps a 16-byte MD5 hash and an 8-byte offset per key in one preallocated
buffer of ``log.cleaner.dedupe.buffer.size`` bytes, filled to
``log.cleaner.io.buffer.load.factor`` (0.9).  Here the map is a dict: a key of up to
15 bytes is its own dict key (exact), a longer one is replaced by its MD5 digest
(16 bytes, as Kafka; the lengths never meet, so a short key and a digest never
collide).  The same memory budget is honoured with Python's cost per entry
(``ENTRY_BYTES``, measured: dict slot, bytes object, int), so a pass maps about a
fifth of the keys Kafka would for the same setting; a log with more keys in its
dirty section is cleaned in several passes, as Kafka does when its map fills.
"""
from __future__ import annotations

ENTRY_BYTES = 128  # dict slot (~40 with the index), key bytes object (~49), offset int (~32), rounded up
MAX_RAW_KEY = 15


_md5 = None  # hashlib.md5, bound by the first map made: a broker that never cleans never sets up hashlib


def _digest(key) -> bytes:
    return bytes(key) if len(key) <= MAX_RAW_KEY else _md5(key).digest()


def capacity(memory_bytes: int, load_factor: float = 0.9) -> tuple[int, int]:
    """(slots, keys the map takes) for ``memory_bytes``; ValueError when it cannot take one key."""
    slots = max(int(memory_bytes) // ENTRY_BYTES, 1)
    keys = int(slots * load_factor)  # Kafka's maxDesiredMapSize
    if keys < 1:
        raise ValueError("the offset map is too small to hold even one key: raise "
                         "log.cleaner.dedupe.buffer.size or lower log.cleaner.threads")
    return slots, keys


class OffsetMap:
    """Latest offset per key of the dirty section being mapped; ``latest_offset`` is the last offset
    the map accounts for (Kafka's ``latestOffset``: every record up to it was considered)."""

    __slots__ = ("slots", "capacity", "latest_offset", "_map", "lookups", "probes")

    def __init__(self, memory_bytes: int, load_factor: float = 0.9):
        global _md5
        self.slots, self.capacity = capacity(memory_bytes, load_factor)
        if _md5 is None:
            from hashlib import md5 as _md5
        self.latest_offset = -1
        self._map: dict[bytes, int] = {}

    def put(self, key, offset: int) -> None:
        self._map[_digest(key)] = offset
        self.latest_offset = offset

    def get(self, key) -> int:
        """The latest offset mapped for ``key``, -1 if none."""
        return self._map.get(_digest(key), -1)

    def update_latest(self, offset: int) -> None:
        self.latest_offset = offset

    @property
    def size(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.capacity

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1
