"""What the coordinators share: coordinator record framing and the record log they append to.

A coordinator record is a Kafka record whose key is ``int16 record type`` followed
by the key struct, and whose value is ``int16 value version`` followed by the value
struct, or ``None`` (a tombstone).  Coordinators never change their state directly:
an operation returns ``(response, records)``; the records are appended to the
coordinator's internal topic (``__consumer_offsets`` or ``__share_group_state``)
and then applied through the same ``replay`` used at start-up.

:class:`RecordLog` is the durable append interface; :class:`MemoryRecordLog` is an
in-memory implementation for unit tests, and the broker provides one backed by a
partition log (``broker.internal_topics``).
"""
from __future__ import annotations

import struct
from typing import Iterable, Iterator, Protocol

_I16 = struct.Struct(">h")


class Record:
    """A decoded coordinator record: ``value`` is None for a tombstone."""

    __slots__ = ("record_type", "key", "value_version", "value")

    def __init__(self, record_type: int, key, value_version: int, value):
        self.record_type = record_type
        self.key = key
        self.value_version = value_version
        self.value = value

    def __repr__(self) -> str:
        return f"Record({self.record_type}, {self.key!r}, v{self.value_version}, {self.value!r})"


def encode_record(key, value, value_version: int | None = None) -> tuple[bytes, bytes | None]:
    """Frame a key struct and value struct (or None) as coordinator record bytes."""
    record_type = type(key).API_KEY
    kbytes = _I16.pack(record_type) + key.encode(0)
    if value is None:
        return kbytes, None
    v = type(value).MAX_VERSION if value_version is None else value_version
    return kbytes, _I16.pack(v) + value.encode(v)


def decode_record(registry: dict, key: bytes, value: bytes | None) -> Record | None:
    """Decode record bytes with a registry {record type: (KeyClass, ValueClass)}; None if unknown."""
    mv = memoryview(key)
    record_type = _I16.unpack_from(mv, 0)[0]
    pair = registry.get(record_type)
    if pair is None:
        return None
    key_cls, value_cls = pair
    k = key_cls.decode_from(mv, 2, 0)[0]
    if value is None:
        return Record(record_type, k, -1, None)
    vm = memoryview(value)
    version = _I16.unpack_from(vm, 0)[0]
    version = min(max(version, value_cls.MIN_VERSION), value_cls.MAX_VERSION)
    return Record(record_type, k, version, value_cls.decode_from(vm, 2, version)[0])


class RecordLog(Protocol):
    """A coordinator's durable record log (one internal-topic partition)."""

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append records atomically (one batch); return the last offset once durable."""

    def replay(self) -> Iterator[tuple[int, bytes, bytes | None]]:
        """Yield (offset, key, value) for every record, oldest first."""

    def truncate_before(self, offset: int) -> None:
        """Allow records below ``offset`` to be deleted (pruning after snapshots)."""


class MemoryRecordLog:
    """In-memory :class:`RecordLog` for unit tests; ``fail_next`` simulates a write failure."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.start_offset = 0
        self.fail_next: Exception | None = None

    async def append(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err
        offset = self.records[-1][0] + 1 if self.records else self.start_offset
        for k, v in records:
            self.records.append((offset, k, v))
            offset += 1
        return offset - 1

    def replay(self) -> Iterator[tuple[int, bytes, bytes | None]]:
        return iter(list(self.records))

    def truncate_before(self, offset: int) -> None:
        self.start_offset = max(self.start_offset, offset)
        self.records = [r for r in self.records if r[0] >= offset]
