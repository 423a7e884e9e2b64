"""What a partition log's reads and appends return: ``BatchRef`` (a stored batch), ``file_spans``
(batches as file ranges for ``os.sendfile``) and ``AppendResult`` (the offsets of an append)."""
from __future__ import annotations

import os
import struct

from protocol.records import CONTROL_MASK, HEADER, TRANSACTIONAL_MASK, BatchInfo


class BatchRef:
    """One stored batch as returned by ``read``; ``data`` is the whole batch, byte-for-byte.

    ``fd`` / ``position`` / ``size`` locate the batch in its segment file, for a
    sender that wants ``os.sendfile``. The fd belongs to the log: use it in the
    same event-loop callback that called ``read`` (a later retention pass may close
    it). Refs from ``read(..., lazy=True)`` hold only the header until ``data`` is
    first used, which then costs one ``pread`` (same rule about the fd).
    """

    __slots__ = ("base_offset", "last_offset", "_data", "fd", "position", "size")

    def __init__(self, base_offset: int, last_offset: int, data: memoryview | None, fd: int = -1,
                 position: int = -1, size: int = -1):
        self.base_offset = base_offset
        self.last_offset = last_offset
        self._data = data
        self.fd = fd
        self.position = position
        self.size = len(data) if data is not None and size < 0 else size

    @property
    def data(self) -> memoryview:
        d = self._data
        if d is None or len(d) < self.size:
            d = self._data = memoryview(os.pread(self.fd, self.size, self.position))
        return d

    @property
    def _head(self) -> memoryview:
        """At least the batch header (61 bytes): the data, or what a lazy read kept."""
        d = self._data
        return d if d is not None else self.data

    def header(self) -> BatchInfo:
        return BatchInfo(0, HEADER.unpack_from(self._head, 0))

    @property
    def attributes(self) -> int:
        h = self._head
        return h[22] | (h[21] << 8)

    @property
    def is_control(self) -> bool:
        return bool(self._head[22] & CONTROL_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self._head[22] & TRANSACTIONAL_MASK)

    @property
    def producer_id(self) -> int:
        return struct.unpack_from(">q", self._head, 43)[0]

    @property
    def max_timestamp(self) -> int:
        return struct.unpack_from(">q", self._head, 35)[0]

    @property
    def records_count(self) -> int:
        return struct.unpack_from(">i", self._head, 57)[0]

    def __repr__(self) -> str:
        return f"BatchRef({self.base_offset}..{self.last_offset}, {self.size} bytes)"


def file_spans(refs: list[BatchRef]) -> list[tuple[int, int, int]]:
    """(fd, position, length) runs covering ``refs`` in order, contiguous batches merged:
    what a sender needs for ``os.sendfile`` (see BatchRef about the fd's lifetime)."""
    spans: list[list[int]] = []
    for r in refs:
        if spans and spans[-1][0] == r.fd and spans[-1][1] + spans[-1][2] == r.position:
            spans[-1][2] += r.size
        else:
            spans.append([r.fd, r.position, r.size])
    return [tuple(s) for s in spans]


class AppendResult:
    """Offsets of an append. ``durable`` is None, or (background fsync only) a future done once a
    ``flush.messages`` fsync covering this append finished; await it before answering if the
    answer must mean "on disk" (it fails with LogError(KAFKA_STORAGE_ERROR) if the fsync failed)."""

    __slots__ = ("base_offset", "last_offset", "log_append_time", "log_start_offset", "duplicate", "durable")

    def __init__(self, base_offset, last_offset, log_append_time, log_start_offset, duplicate=False, durable=None):
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.duplicate = duplicate
        self.durable = durable

    def __repr__(self) -> str:
        return (f"AppendResult(base={self.base_offset}, last={self.last_offset}, lat={self.log_append_time}, "
                f"lso={self.log_start_offset}, duplicate={self.duplicate})")
