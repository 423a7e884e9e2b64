"""Cleaning one log: Kafka's ``Cleaner`` (``doClean``, ``buildOffsetMap``, ``groupSegmentsBySize``,
``cleanSegments``, ``cleanInto``) and the cleaner's ``MemoryRecords.filterTo`` rules.

This runs in the cleaner's worker process (``worker.py``), never on the event loop.  It
works on file paths: a :class:`CleanJob` describes the log as the broker saw it when the
job was made (its inactive segments up to the first uncleanable one, the producers'
last batches, the aborted transactions) and :meth:`Cleaner.clean` yields one
:class:`GroupResult` per group of segments it rewrote, each a segment written under
``<base>.*.cleaned`` names (fsynced) that the broker swaps in (``PartitionLog.replace_segments``),
then the end offset of the cleaned section (the next first dirty offset).

Per batch (``_clean_batch``), as Kafka's ``cleanInto`` filter:
- transactional state (:class:`CleanedTransactionMetadata`): an aborted transaction's data
  may go; its ABORT marker once none of its batches is left; a COMMIT marker once no batch of
  its transaction is left; markers only after their delete horizon (KIP-534), which a marker
  that may go receives when first seen;
- the batch holding a producer's last data offset (or its last marker, when it has no data
  batch of its epoch) and the batch before the high watermark are kept, emptied of their
  records when they hold none to keep (``empty_batch``): producer sequences and the log end
  survive;
- a record is kept if it is past the offset map's latest offset, or it is the latest of its key
  and either has a value or is a tombstone whose batch's delete horizon has not passed (a batch
  that keeps a tombstone and has no horizon yet gets now + ``delete.retention.ms``); keyless
  records are dropped (Kafka counts them as invalid);
- compressed batches are inflated, filtered and written with the same codec; a codec this
  process cannot decode (snappy/lz4/zstd without the optional extra) keeps the batch whole
  (its keys are not mapped either), and the codec is reported so the broker warns once per topic.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from protocol import compression
from protocol.records import (CONTROL_MASK, CORRUPT_MESSAGE, DELETE_HORIZON_MASK, HEADER, HEADER_SIZE, LOG_OVERHEAD,
                              BatchInfo, RecordsError, batch_body, empty_batch, filter_batch, scan_records)

from ..segment import CLEANED_SUFFIX, Segment, segment_name
from .offset_map import OffsetMap
from .transactions import CONTROL_ABORT, CONTROL_COMMIT, CleanedTransactionMetadata

INT32_MAX = 0x7FFFFFFF
IO_BUFFER = 1 << 20  # bytes read per pread (Kafka's io buffer: grows to the largest batch)
DELETE, DELETE_EMPTY, RETAIN_EMPTY = 0, 1, 2


class CleanJob:
    """What the worker needs to clean one log (picklable; made on the loop by the cleaner manager).

    ``segments``: (base offset, size) of the log's inactive segments from the first one up to
    (excluding) the first uncleanable segment. ``aborted``: (first offset, marker offset, producer id) of
    the aborted transactions in that range. ``last_records``: producer id -> (last data offset or -1, epoch)
    (Kafka's ``lastRecordsOfActiveProducers``)."""

    __slots__ = ("job_id", "topic", "partition", "dir", "segments", "first_dirty", "first_uncleanable",
                 "aborted", "last_records", "high_watermark", "now_ms", "delete_retention_ms",
                 "segment_bytes", "max_index_entries", "index_interval", "crash_phase")

    def __init__(self, **kw):
        self.crash_phase = ""
        for k, v in kw.items():
            setattr(self, k, v)

    def __getstate__(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)


class CleanerStats:
    """Kafka's ``CleanerStats``: what one pass read, mapped and wrote, and how long it took."""

    __slots__ = ("bytes_read", "bytes_written", "map_bytes_read", "map_messages_read", "messages_read",
                 "messages_written", "invalid_messages", "buffer_utilization", "start", "map_done", "end")

    def __init__(self):
        self.bytes_read = self.bytes_written = self.map_bytes_read = self.map_messages_read = 0
        self.messages_read = self.messages_written = self.invalid_messages = 0
        self.buffer_utilization = 0.0
        self.start = self.map_done = self.end = time.monotonic()

    @property
    def elapsed_secs(self) -> float:
        return max(self.end - self.start, 1e-9)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


class GroupResult:
    """One rewritten group: the new segment ``base`` (files ``<base>.*.cleaned``) replaces the
    segments at ``old_bases``; ``removed_abort_markers`` are the offsets of ABORT markers it no
    longer holds (their aborted-transaction entries go too)."""

    __slots__ = ("base", "old_bases", "removed_abort_markers")

    def __init__(self, base: int, old_bases: list[int], removed_abort_markers: list[int]):
        self.base, self.old_bases, self.removed_abort_markers = base, old_bases, removed_abort_markers

    def __getstate__(self):
        return (self.base, self.old_bases, self.removed_abort_markers)

    def __setstate__(self, state):
        self.base, self.old_bases, self.removed_abort_markers = state


class Throttler:
    """Kafka's ``Throttler`` for ``log.cleaner.io.max.bytes.per.second``: sleeps when the bytes read
    and written over a 300 ms window exceed the rate."""

    def __init__(self, bytes_per_second: float):
        self.rate = bytes_per_second
        self.window_start = time.monotonic()
        self.count = 0

    def maybe_throttle(self, n: int) -> None:
        if not self.rate or self.rate <= 0 or self.rate >= 1e300:
            return
        self.count += n
        elapsed = time.monotonic() - self.window_start
        if elapsed >= 0.3:
            needed = self.count / self.rate
            if needed > elapsed:
                time.sleep(needed - elapsed)
            self.window_start, self.count = time.monotonic(), 0


def iter_batches(fd: int, start: int, end: int, throttler: Throttler | None = None):
    """(position, whole batch as a memoryview) for the batches of a segment file between positions.

    The range is a sealed segment's (recovery truncated any torn tail): a batch that does not fit
    in it raises ``RecordsError`` (Kafka's "Log segment may be corrupt"), so the pass fails and the
    partition is marked uncleanable rather than its cleaned copy ending early."""
    pos = start
    while pos < end:
        buf = memoryview(os.pread(fd, min(IO_BUFFER, end - pos), pos))
        if throttler is not None:
            throttler.maybe_throttle(len(buf))
        off = 0
        while off + HEADER_SIZE <= len(buf):
            size = int.from_bytes(buf[off + 8:off + 12], "big", signed=True) + LOG_OVERHEAD
            if size < HEADER_SIZE:
                raise RecordsError(CORRUPT_MESSAGE, f"corrupt batch at position {pos + off} (size {size})")
            if off + size > len(buf):
                break
            yield pos + off, buf[off:off + size]
            off += size
        if off == 0:  # one batch larger than the buffer
            size = int.from_bytes(buf[8:12], "big", signed=True) + LOG_OVERHEAD if len(buf) >= 12 else -1
            whole = memoryview(os.pread(fd, size, pos)) if HEADER_SIZE <= size <= end - pos else b""
            if len(whole) != size:
                raise RecordsError(CORRUPT_MESSAGE, f"log segment may be corrupt: a batch of {size} bytes at "
                                                    f"position {pos}, {end - pos} bytes left")
            yield pos, whole
            off = size
        pos += off


def _control_type(batch: memoryview, info: BatchInfo) -> int | None:
    """CONTROL_ABORT / CONTROL_COMMIT / another type of a marker batch; None if it has no record."""
    if info.records_count <= 0:
        return None
    try:
        spans = scan_records(batch_body(batch, info), 1)
    except RecordsError:
        return -1
    key = spans[0].key if spans else None
    if key is None or len(key) < 4:
        return -1
    return int.from_bytes(key[2:4], "big", signed=True)


def group_segments_by_size(segments: list[tuple[int, int]], max_size: int, max_index_entries: int,
                           index_interval: int, first_uncleanable: int) -> list[list[tuple[int, int]]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose total size stays within
    ``segment.bytes`` (and whose index entries, estimated from their sizes, within
    ``segment.index.bytes``) and whose offsets span at most 2^31, grouped into one new segment."""
    groups: list[list[tuple[int, int]]] = []
    interval = max(index_interval, 1)
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size, entries = segments[i][1], segments[i][1] // interval
        i += 1
        while i < len(segments):
            base, seg_size = segments[i]
            # the worst-case last offset of the next segment: the following base, or the uncleanable offset
            last = (segments[i + 1][0] if i + 1 < len(segments) else first_uncleanable) - 1
            if (size + seg_size > max_size or entries + seg_size // interval > max_index_entries
                    or (seg_size and last - group[0][0] > INT32_MAX)):
                break
            group.append(segments[i])
            size += seg_size
            entries += seg_size // interval
            i += 1
        groups.append(group)
    return groups


class Cleaner:
    """One cleaner (Kafka's ``Cleaner``); ``unavailable_codecs`` collects codecs it kept whole."""

    def __init__(self, map_memory: int, load_factor: float = 0.9, io_max_bytes_per_second: float = 0.0):
        self.map = OffsetMap(map_memory, load_factor)
        self.throttler = Throttler(io_max_bytes_per_second)
        self.unavailable_codecs: set[int] = set()

    # ---------------------------------------------------------------- the pass
    def clean(self, job: CleanJob):
        """Yield a :class:`GroupResult` per rewritten group; return (end offset, stats) (StopIteration)."""
        stats = CleanerStats()
        self.unavailable_codecs = set()
        segments = job.segments
        self.build_offset_map(job, stats)
        end_offset = self.map.latest_offset + 1
        stats.map_done = time.monotonic()
        txn = CleanedTransactionMetadata([(first, pid) for first, _marker, pid in job.aborted])
        to_clean = [s for s in segments if s[0] < end_offset]
        groups = group_segments_by_size(to_clean, job.segment_bytes, job.max_index_entries, job.index_interval,
                                        job.first_uncleanable)
        for group in groups:
            yield self.clean_segments(job, group, txn, stats)
        stats.buffer_utilization = self.map.utilization
        stats.end = time.monotonic()
        return end_offset, stats

    def build_offset_map(self, job: CleanJob, stats: CleanerStats) -> None:
        """Kafka's ``buildOffsetMap``: the latest offset of each key in [first dirty, first uncleanable),
        as many keys as the map holds (``map.latest_offset`` says how far it got)."""
        m = self.map
        m.clear()
        start, end = job.first_dirty, job.first_uncleanable
        # only the aborted transactions that reach into the dirty section (Kafka's collectAbortedTransactions(
        # start, end)): one that ended before it would make the producer's later transactions look aborted
        txn = CleanedTransactionMetadata([(first, pid) for first, marker, pid in job.aborted if marker >= start])
        dirty = [(i, s) for i, s in enumerate(job.segments)
                 if s[0] < end and (i + 1 == len(job.segments) or job.segments[i + 1][0] > start)]
        for i, (base, size) in dirty:
            next_start = job.segments[i + 1][0] if i + 1 < len(job.segments) else end
            if self._map_segment(job, base, size, start, txn, stats):
                return
            m.update_latest(next_start - 1)  # offsets removed by an earlier cleaning: fast-forward

    def _map_segment(self, job: CleanJob, base: int, size: int, start: int, txn, stats) -> bool:
        m = self.map
        fd = os.open(_log_path(job.dir, base), os.O_RDONLY)
        try:
            for _pos, batch in iter_batches(fd, 0, size, self.throttler):
                info = BatchInfo(0, HEADER.unpack_from(batch, 0))
                last = info.last_offset
                stats.map_bytes_read += info.size
                if last < start:
                    continue
                if info.is_control:
                    txn.on_control_batch_read(info.producer_id, last, _control_type(batch, info))
                    stats.map_messages_read += 1
                elif txn.on_batch_read(info.producer_id, info.is_transactional, last):
                    stats.map_messages_read += info.records_count
                else:
                    body = self._body(batch, info)
                    if body is not None:
                        for span in scan_records(body, info.records_count):
                            offset = info.base_offset + span.offset_delta
                            if span.key is not None and offset >= start:
                                if m.full:
                                    return True
                                m.put(span.key, offset)
                            stats.map_messages_read += 1
                m.update_latest(last)
        finally:
            os.close(fd)
        return False

    def _body(self, batch: memoryview, info: BatchInfo):
        """The batch's records section, or None when its codec is not available here."""
        codec = info.compression
        if codec and not compression.available(codec):
            self.unavailable_codecs.add(codec)
            return None
        return batch_body(batch, info)

    # ------------------------------------------------------------- rewriting
    def clean_segments(self, job: CleanJob, group: list[tuple[int, int]], txn: CleanedTransactionMetadata,
                       stats: CleanerStats) -> GroupResult:
        """Kafka's ``cleanSegments``: clean the group into one new segment under ``.cleaned`` names,
        fsynced, with the last source segment's modification time."""
        base = group[0][0]
        out = Segment.create(job.dir, base, job.max_index_entries * 8, job.index_interval, job.now_ms,
                             suffix=CLEANED_SUFFIX)
        removed: list[int] = []
        try:
            for seg_base, size in group:
                fd = os.open(_log_path(job.dir, seg_base), os.O_RDONLY)
                try:
                    self._clean_into(job, fd, size, out, txn, stats, removed)
                finally:
                    os.close(fd)
            out.seal()
            out.flush()
            mtime = os.stat(_log_path(job.dir, group[-1][0])).st_mtime_ns
            os.utime(out.log_path, ns=(mtime, mtime))
        except BaseException:
            out.delete()
            raise
        finally:
            out.close()
        return GroupResult(base, [b for b, _ in group], removed)

    def _clean_into(self, job: CleanJob, fd: int, size: int, out: Segment, txn, stats, removed: list) -> None:
        chunk = bytearray()
        metas: list[tuple[int, int, int, int]] = []
        for _pos, batch in iter_batches(fd, 0, size, self.throttler):
            info = BatchInfo(0, HEADER.unpack_from(batch, 0))
            stats.bytes_read += info.size
            stats.messages_read += max(info.records_count, 0)
            kept = self._clean_batch(job, batch, info, txn, stats)
            if info.is_control and (kept is None or not _records_count(kept)):
                if _control_type(batch, info) == CONTROL_ABORT:
                    removed.append(info.base_offset)
            if kept is None:
                continue
            metas.append((len(chunk), info.base_offset, _max_timestamp(kept), len(kept)))
            chunk += kept
            stats.bytes_written += len(kept)
            stats.messages_written += _records_count(kept)
            if len(chunk) >= IO_BUFFER:
                self._write(out, chunk, metas, job)
                chunk, metas = bytearray(), []
        if chunk:
            self._write(out, chunk, metas, job)

    def _write(self, out: Segment, chunk: bytearray, metas: list, job: CleanJob) -> None:
        out.append(chunk, metas)
        self.throttler.maybe_throttle(len(chunk))
        if job.crash_phase == "writing":  # test-only: the broker dies while a cleaned segment is half written
            print("log cleaner worker: test-only sharebroker.log.cleaner.test.crash.phase=writing: killing the broker",
                  file=sys.stderr, flush=True)
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(1)

    def _clean_batch(self, job: CleanJob, batch: memoryview, info: BatchInfo, txn, stats):
        """The bytes to keep of one batch (the batch itself, a filtered or an empty one), or None."""
        now, pid = job.now_ms, info.producer_id
        last = info.last_offset
        if info.is_control:
            control_type = _control_type(batch, info)
            can_discard = txn.on_control_batch_read(pid, last, control_type)
            horizon = info.base_timestamp if info.attributes & DELETE_HORIZON_MASK else None
            discard_records = can_discard and horizon is not None and horizon <= now
        else:
            can_discard = txn.on_batch_read(pid, info.is_transactional, last)
            discard_records = can_discard
        last_record = job.last_records.get(pid) if pid >= 0 else None
        if last_record is not None:
            last_data, epoch = last_record
            last_of_producer = (last == last_data) if last_data >= 0 else (
                info.is_control and info.producer_epoch == epoch)
        else:
            last_of_producer = False
        if last_of_producer:
            retention = RETAIN_EMPTY
        elif last + 1 == job.high_watermark:
            retention = RETAIN_EMPTY  # the batch before the high watermark keeps the log end
        elif discard_records:
            retention = DELETE
        else:
            retention = DELETE_EMPTY
        if retention == DELETE:
            return None
        horizon_ms = now + job.delete_retention_ms
        if discard_records:
            kept = None
        elif info.is_control:
            kept = filter_batch(batch, _keep_all, delete_horizon_ms=horizon_ms, force_delete_horizon=can_discard)
        else:
            body = self._body(batch, info)
            if body is None:
                return batch  # a codec this process cannot decode: kept whole
            m = self.map
            latest_mapped = m.latest_offset
            base = info.base_offset
            has_horizon = bool(info.attributes & DELETE_HORIZON_MASK)
            retain_deletes = not has_horizon or now < info.base_timestamp

            def keep(span) -> bool:
                offset = base + span.offset_delta
                if offset > latest_mapped:
                    return True
                if span.key is None:
                    stats.invalid_messages += 1
                    return False
                return offset >= m.get(span.key) and (span.has_value or retain_deletes)
            kept = filter_batch(batch, keep, body=body, delete_horizon_ms=horizon_ms)
        if kept is None and retention == RETAIN_EMPTY:
            return empty_batch(batch)
        return kept


def _keep_all(_span) -> bool:
    return True


def _records_count(batch) -> int:
    return int.from_bytes(bytes(batch[57:61]), "big", signed=True)


def _max_timestamp(batch) -> int:
    return int.from_bytes(bytes(batch[35:43]), "big", signed=True)


def _log_path(dir_path: str, base: int) -> str:
    return os.path.join(dir_path, segment_name(base, ".log"))


__all__ = ["CleanJob", "Cleaner", "CleanerStats", "GroupResult", "CONTROL_ABORT", "CONTROL_COMMIT", "CONTROL_MASK",
           "group_segments_by_size", "iter_batches"]
