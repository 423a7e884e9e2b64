"""Fair acquisition (ours): a big log batch is shared among the members, not handed to one of them.

Kafka 4.4's batch_optimized mode acquires whole log batches, so a producer that batched 10,000
records gives them all to the first member that fetches while the others wait: parallelism
follows producer batching. With the group's ``share.fair.acquisition.enable`` (default true;
false gives Kafka's exact behaviour) a ShareFetch in batch_optimized mode acquires at most its
MaxRecords of a log batch that holds more than MaxRecords records, as KIP-1206's record_limit
mode does; smaller batches are still acquired whole (MaxRecords stays a soft limit, rounded up
to the batch). Unlike record_limit, the records of the batch past the acquired ones are not put
in the in-flight window: they stay in the log and the next fetch reads them from there, so
``share.partition.max.record.locks`` bounds the records in flight exactly (a batch that the
window would cut is cut too).

Only when another member wants the records (:class:`Demand`): a member with no competitor on
the partition acquires whole log batches, as Kafka, so a lone consumer pays nothing for fairness
(one round trip and no rewritten batch per log batch). Another member wants them when its last
fetch of the partition (within the group's record lock duration) acquired at most its MaxRecords
from it, none included (an empty fetch, maybe waiting now, or a member busy with one piece, which
comes back for another), or when the group coordinator assigned it the partition and it has not
fetched it yet (its assignment would sit idle). A member whose last fetch got more than its
MaxRecords (whole batches) is not waiting for this one.

What goes out: an uncompressed v2 batch that is only partly acquired is sent as a sub-batch
holding just the acquired records (``protocol.records.slice_batch_parts``: same base offset and
offset deltas, header and CRC rewritten, the record bytes sent from where they lie); a compressed one whole, with
the acquired ranges, as Kafka's record_limit does (every client drops the records outside
AcquiredRecords). The record index of a big batch is cached (``RecordIndexCache``) so that
handing out a 10,000-record batch 50 records at a time walks its records once, not 200 times,
and the batch itself is kept between fetches (``OpenBatches``) instead of being read again.

``SharePartition.acquire`` (partition.py) uses :func:`fair_piece` and :func:`last_new_to_acquire`;
the share-partition manager decides with :class:`Demand` whether a fetch shares, and builds the
response records with :class:`ResponseRecords`.
"""
from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from typing import Any, Callable, Iterable, Sequence

from protocol.records import RecordIndex, RecordsError, batch_body, read_header, scan_records, slice_batch_parts

from broker.log.refs import BatchRef
from broker.share.fetched import last_of_batch_with


UNCUT = 1 << 62  # the piece of a fetch nobody competes with: no batch is that big, only the window cuts


def fair_piece(config: Any, batch_optimized: bool, max_records: int, shared: bool = True) -> int:
    """Records of one log batch a fetch may take when the batch is bigger (0: whole batches, even
    past the max-record-locks window, as Kafka; `UNCUT`: whole batches, cut at the window only,
    when no other member wants the records)."""
    if not (batch_optimized and config.fair_acquisition):
        return 0
    return max_records if shared else UNCUT


class Demand:
    """The last fetch of one share partition by each member: when, the records it acquired from the
    partition, its MaxRecords. Written by the share-partition manager after each pass over the
    partition; a member is forgotten when its share session releases its records."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, int, int]] = {}

    def fetched(self, member: str, now_ms: int, count: int, max_records: int) -> None:
        self._last[member] = (now_ms, count, max_records)

    def forget(self, member: str) -> None:
        self._last.pop(member, None)

    def wanted_by_others(self, member: str, now_ms: int, horizon_ms: int,
                         assigned: Callable[[], Iterable[str]]) -> bool:
        """Whether a member other than `member` wants records of the partition: its last fetch of
        it, at most `horizon_ms` ago, acquired at most its MaxRecords (none: an empty fetch), or it
        is assigned the partition (``assigned()``, asked only when no fetch decided) and has not
        fetched it yet."""
        last = self._last
        for m, (at, count, max_records) in last.items():
            if count <= max_records and now_ms - at <= horizon_ms and m != member:
                return True
        return any(m != member and m not in last for m in assigned())


def last_new_to_acquire(batches: Sequence[Any], first: int, last: int, remaining: int, piece: int,
                        window_last: int) -> int:
    """Last offset to acquire of the new records first..last (fewer than fit in `remaining`).

    Kafka: the end of the log batch holding the `remaining`-th record (whole batches). Fair
    (`piece` > 0): exactly `remaining` records when that batch holds more than `piece` records
    or its end passes `window_last`, the last offset the max-record-locks window allows.

    A batch the log cleaner thinned (fewer records than offsets) is cut at its records: a piece
    ends at a record (or, past its last record, at the batch end) and holds at least one, so no
    acquired range is only offsets without records (librdkafka never acknowledges a response
    whose acquired ranges hold no record: those offsets would wait for their lock to expire)."""
    cut = first + remaining - 1
    end = last_of_batch_with(batches, cut)
    if piece > 0 and end > cut:
        bt = next(bt for bt in batches if bt.base_offset <= cut <= bt.last_offset)
        offsets = _record_offsets(bt)
        if offsets is None:  # dense: an offset is a record
            if end - bt.base_offset + 1 > piece or end > window_last:
                return cut
        elif len(offsets) > piece or end > window_last:
            return _cut_at_records(offsets, max(first, bt.base_offset), cut, end, window_last)
    return min(last, end)


def _record_offsets(bt: Any) -> list[int] | None:
    """The offsets of the records of a batch that has gaps (None when every offset is a record)."""
    try:
        info = read_header(bt.data)
        if info.records_count == info.last_offset_delta + 1:
            return None
        body = batch_body(bt.data, info)
        return [info.base_offset + s.offset_delta for s in scan_records(body, info.records_count)]
    except (RecordsError, struct.error):
        return None  # a batch that does not parse is cut by offsets; the client decides


def _cut_at_records(offsets: list[int], start: int, cut: int, end: int, window_last: int) -> int:
    """Where a piece of a thinned batch ends: at its last record at or before `cut`, or, when
    `start`..`cut` holds none, at the next record; past the batch's last record, at its end (the
    window allowing)."""
    lo = bisect_left(offsets, start)
    hi = bisect_right(offsets, cut)
    if hi == lo:  # no record in start..cut: take the next one
        if hi == len(offsets) or offsets[hi] > window_last:
            return cut
        hi += 1
    if hi == len(offsets):  # nothing but offsets without records after it
        return min(end, window_last) if end > cut else cut
    return offsets[hi - 1]


class RecordIndexCache:
    """Record indexes (``protocol.records.RecordIndex``) of the big batches being handed out in
    pieces, least recently used first, at most `max_records` records indexed in all.

    Written by ``ResponseRecords.add`` on the event loop; an entry is keyed by (topic id,
    partition, base offset) and checked against the batch's CRC and size, so a batch that the
    log cleaner rewrote under the same base offset is indexed again; entries die by eviction."""

    __slots__ = ("_entries", "_records", "max_records")

    def __init__(self, max_records: int = 1_000_000):
        self._entries: OrderedDict[tuple, RecordIndex] = OrderedDict()
        self._records = 0
        self.max_records = max_records

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple, batch) -> RecordIndex:
        idx = self._entries.get(key)
        if idx is not None and idx.matches(batch):
            self._entries.move_to_end(key)
            return idx
        if idx is not None:
            self._drop(key)
        idx = RecordIndex(batch)
        self._entries[key] = idx
        self._records += idx.count
        while self._records > self.max_records and len(self._entries) > 1:
            self._drop(next(iter(self._entries)))
        return idx

    def _drop(self, key: tuple) -> None:
        self._records -= self._entries.pop(key).count


class OpenBatches:
    """The log batch each partition is being cut from, kept between fetches so that the next piece
    of it is not read from the log again (a 1 MB producer batch handed out 500 records at a time
    was read whole for every piece). At most `max_entries` partitions, least recently used first.

    ``get(key, plog, offset, upper)`` returns the kept batch when `offset` falls after its first
    record and the log still holds that very batch: one header read (61 bytes, ``lazy``) at the
    offset must give the same base offset, size and CRC (a batch the log cleaner rewrote, or one
    below the log start, is read again). ``put`` after an acquire keeps the last batch of it when
    records of that batch were left for a later fetch, and forgets the partition's entry
    otherwise."""

    __slots__ = ("_entries", "max_entries")

    def __init__(self, max_entries: int = 64):
        self._entries: OrderedDict[tuple, Any] = OrderedDict()
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple, plog: Any, offset: int, upper: int) -> list | None:
        ref = self._entries.get(key)
        if ref is None:
            return None
        if not (ref.base_offset < offset <= ref.last_offset < upper and ref.base_offset >= plog.log_start_offset):
            del self._entries[key]
            return None
        heads = plog.read(offset, 1, max_offset=upper, lazy=True)
        if not heads or heads[0].base_offset != ref.base_offset or heads[0].size != ref.size \
                or heads[0].header().crc != ref.header().crc:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return [ref]

    def put(self, key: tuple, refs: Sequence[Any], acquired: Sequence[tuple[int, int, int]]) -> None:
        last = refs[-1] if refs else None
        if last is None or acquired[-1][1] >= last.last_offset:
            self._entries.pop(key, None)
            return
        if self._entries.get(key) is last:
            return
        data = last.data
        held = getattr(data, "obj", data)  # a read's buffer may hold more batches than this one
        if len(held) > 2 * last.size:
            data = memoryview(bytes(data))
        self._entries[key] = BatchRef(last.base_offset, last.last_offset, data)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


class ResponseRecords:
    """The record batches of one partition of a ShareFetch answer, one per log batch.

    ``add(refs, acquired)`` after each acquire: a ref wholly acquired is sent as it is; with
    `sub_batches` (fair acquisition on) an uncompressed v2 batch partly acquired becomes a
    sub-batch of its acquired records (a batch met again in a later acquire of the same
    request is rebuilt with the union, since a client skips a second batch with the same
    offsets). A sub-batch is a new header followed by the acquired records' bytes where they lie
    in the log batch: chunks the socket write takes one after the other, never joined into a
    copy. ``records`` is what the response carries (the chunks of every batch, in order),
    ``batches`` the same one bytes per batch (tests), ``size`` their bytes."""

    __slots__ = ("_key", "_cache", "_sub", "_by_base", "_parts", "records", "size")

    def __init__(self, key: tuple, cache: RecordIndexCache, sub_batches: bool):
        self._key, self._cache, self._sub = key, cache, sub_batches
        self._by_base: dict[int, tuple[Any, list[tuple[int, int]], int]] = {}  # base -> (ref, ranges, position)
        self._parts: list[list] = []  # the chunks of each batch, in answer order
        self.records: list = []  # the chunks of every batch: the response's records (kept as one list object)
        self.size = 0

    @property
    def batches(self) -> list:
        return [p[0] if len(p) == 1 else b"".join(p) for p in self._parts]

    def add(self, refs: Sequence[Any], acquired: Sequence[tuple[int, int, int]]) -> int:
        """Add the batches of one acquire; returns the bytes added."""
        before, k = self.size, 0
        for ref in refs:
            lo, hi = ref.base_offset, ref.last_offset
            while k < len(acquired) and acquired[k][1] < lo:
                k += 1
            ranges, j = [], k
            while j < len(acquired) and acquired[j][0] <= hi:
                ranges.append((max(acquired[j][0], lo), min(acquired[j][1], hi)))
                j += 1
            seen = self._by_base.get(lo)
            if seen is not None:
                ranges = _union(seen[1] + ranges)
            parts = self._chunks(ref, ranges)
            if seen is None:
                self._by_base[lo] = (ref, ranges, len(self._parts))
                self._parts.append(parts)
            else:
                self.size -= sum(len(c) for c in self._parts[seen[2]])
                self._parts[seen[2]] = parts
                self._by_base[lo] = (ref, ranges, seen[2])
            self.size += sum(len(c) for c in parts)
        self.records[:] = [c for p in self._parts for c in p]
        return self.size - before

    def _chunks(self, ref: Any, ranges: list[tuple[int, int]]) -> list:
        data = ref.data
        if not self._sub or (len(ranges) == 1 and ranges[0] == (ref.base_offset, ref.last_offset)):
            return [data]
        try:
            info = read_header(data)
            if info.compression or info.magic != 2:
                return [data]  # compressed: the whole batch and the acquired ranges (Kafka's record_limit)
            index = self._cache.get(self._key + (ref.base_offset,), data) if info.records_count > 64 else None
            return slice_batch_parts(data, ranges, index)
        except (RecordsError, struct.error):
            return [data]  # a batch that does not parse goes out as stored; the client decides


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out
