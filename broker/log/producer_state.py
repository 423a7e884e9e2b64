"""Idempotent / transactional producer state of one partition.

Follows Kafka's ProducerStateManager / ProducerAppendInfo rules for client
appends: duplicate detection over the last 5 batches of the current epoch,
epoch fencing (INVALID_PRODUCER_EPOCH), sequence continuity with int32
wrap-around (OUT_OF_ORDER_SEQUENCE_NUMBER), sequence 0 for a new epoch, and
INVALID_TXN_STATE for a non-transactional write inside an open transaction.
Tracks open transactions (first offset per producer) for the last stable
offset and the aborted-transaction list read_committed fetches need.

Transaction verification (KIP-890 part 1: is the partition in the producer's
ongoing transaction?) is asked of the transaction coordinator by the Produce
handler before the append; the aborted list ((first, marker offset, producer id)
per aborted transaction) also gives the share-partition leader the ranges it
archives under read_committed (``broker.share.isolation``).

Snapshots (Kafka's ``ProducerStateManager.takeSnapshot`` / ``readSnapshot``):
:meth:`ProducerStateManager.snapshot` serialises the whole state as of an offset
and :class:`SnapshotFiles` keeps them as ``<offset:020d>.snapshot`` files in the
partition directory, written at every segment roll (at the new segment's base
offset) and at a clean shutdown (at the log end). Start-up loads the latest
valid one at or below the log end and scans only the batches after it; a
missing, torn or corrupt snapshot (CRC32C over the body) falls back to an older
one or, with none left, to a scan of the whole log. A snapshot goes with its
segment (same base offset); Kafka's stray-snapshot rule runs at start-up.
Deviations (the format is ours): a snapshot keeps the last 5 batches of each
producer (Kafka's only the last one, so duplicates of older in-flight batches
are still detected after a restart), and it also carries the aborted-transaction
list, which takes the place of Kafka's per-segment ``.txnindex`` files.

Not implemented: the TV2 marker epoch rule (markers use the TV0/1 rule: epoch >=
current; the TV2 coordinator writes them with the bumped epoch, which satisfies it).
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_left, bisect_right
from collections import deque
from typing import NamedTuple

from protocol.records import (CONTROL_COMMIT, INT32_MAX, BatchInfo, control_coordinator_epoch, control_record_type,
                              crc32c)

from . import fileio
from .faults import OPEN_FILES, STORAGE

log = logging.getLogger(__name__)

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52

BATCHES_TO_RETAIN = 5
NO_EPOCH = -1

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAP_HEAD = struct.Struct(">4sHI")  # magic, version, CRC32C of the body
_SNAP_MAGIC = b"SBPS"
_COUNT = struct.Struct(">I")
# producer id, epoch, coordinator epoch, last timestamp, open transaction's first offset (-1: none), batches
_PRODUCER = struct.Struct(">qhiqqB")
_BATCH = struct.Struct(">iiqq")  # first sequence, last sequence, first offset, last offset
_ABORTED = struct.Struct(">qqq")  # first offset, marker offset, producer id


class CorruptSnapshot(Exception):
    """A snapshot file that does not parse or whose CRC does not match."""


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerEntry:
    __slots__ = ("producer_id", "epoch", "batches", "last_timestamp", "coordinator_epoch", "txn_first_offset")

    def __init__(self, producer_id: int):
        self.producer_id = producer_id
        self.epoch = NO_EPOCH
        # (first_seq, last_seq, first_offset, last_offset), oldest first
        self.batches: deque[tuple[int, int, int, int]] = deque(maxlen=BATCHES_TO_RETAIN)
        self.last_timestamp = -1
        self.coordinator_epoch = -1
        self.txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch


_EMPTY = ProducerEntry(-1)


class ProducerStateManager:
    __slots__ = ("producers", "ongoing", "_aborted", "_aborted_last")

    # ------------------------------------------------------------- snapshots
    def snapshot(self) -> bytes:
        """The whole state as one snapshot file's bytes."""
        body = bytearray(_COUNT.pack(len(self.producers)))
        for e in self.producers.values():
            first = -1 if e.txn_first_offset is None else e.txn_first_offset
            body += _PRODUCER.pack(e.producer_id, e.epoch, e.coordinator_epoch, e.last_timestamp, first,
                                   len(e.batches))
            for b in e.batches:
                body += _BATCH.pack(*b)
        body += _COUNT.pack(len(self._aborted))
        for a in self._aborted:
            body += _ABORTED.pack(*a)
        return _SNAP_HEAD.pack(_SNAP_MAGIC, SNAPSHOT_VERSION, crc32c(body)) + body

    @classmethod
    def from_snapshot(cls, data: bytes) -> "ProducerStateManager":
        """The state a snapshot holds; raises CorruptSnapshot."""
        mv = memoryview(data)
        try:
            magic, version, crc = _SNAP_HEAD.unpack_from(mv, 0)
            if magic != _SNAP_MAGIC or version != SNAPSHOT_VERSION:
                raise CorruptSnapshot(f"unknown snapshot format {bytes(magic)!r} v{version}")
            if crc32c(mv[_SNAP_HEAD.size:]) != crc:
                raise CorruptSnapshot("CRC mismatch")
            ps = cls()
            pos = _SNAP_HEAD.size
            (n,), pos = _COUNT.unpack_from(mv, pos), pos + _COUNT.size
            for _ in range(n):
                pid, epoch, coordinator_epoch, last_ts, first, nb = _PRODUCER.unpack_from(mv, pos)
                pos += _PRODUCER.size
                e = ps.producers[pid] = ProducerEntry(pid)
                e.epoch, e.coordinator_epoch, e.last_timestamp = epoch, coordinator_epoch, last_ts
                for _b in range(nb):
                    e.batches.append(_BATCH.unpack_from(mv, pos))
                    pos += _BATCH.size
                if first >= 0:
                    e.txn_first_offset = first
                    ps.ongoing.add(pid)
            (n,), pos = _COUNT.unpack_from(mv, pos), pos + _COUNT.size
            for _ in range(n):
                a = _ABORTED.unpack_from(mv, pos)
                pos += _ABORTED.size
                ps._aborted.append(a)
                ps._aborted_last.append(a[1])
        except struct.error as e:
            raise CorruptSnapshot(f"truncated snapshot: {e}") from None
        if pos != len(mv):
            raise CorruptSnapshot("trailing bytes")
        return ps

    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: set[int] = set()  # producer ids with an open transaction
        self._aborted: list[tuple[int, int, int]] = []  # (first_offset, last_offset, producer_id), by last
        self._aborted_last: list[int] = []

    # ------------------------------------------------------------ client check
    def check(self, infos: list[BatchInfo]) -> tuple[int, int, int]:
        """Validate data batches about to be appended by a client.

        Returns ``(error_code, dup_first_offset, dup_last_offset)``: ``(0, -1, -1)``
        means append; ``(0, first, last)`` means the batch was already appended
        at those offsets (answer it, do not append); a non-zero code rejects.
        """
        pending: dict[int, list] = {}  # pid -> [epoch, last_seq | None, txn_open]
        for info in infos:
            pid = info.producer_id
            if pid < 0 or info.is_control:
                continue
            current = self.producers.get(pid, _EMPTY)
            if info.producer_epoch == current.epoch:
                for first_seq, last_seq, first_off, last_off in current.batches:
                    if first_seq == info.base_sequence and last_seq == info.last_sequence:
                        return 0, first_off, last_off
            upd = pending.get(pid)
            if upd is None:
                upd = pending[pid] = [current.epoch, None, current.txn_first_offset is not None]
            epoch, first_seq = info.producer_epoch, info.base_sequence
            if epoch < upd[0]:
                return INVALID_PRODUCER_EPOCH, -1, -1
            if epoch != upd[0]:
                if first_seq != 0 and upd[0] != NO_EPOCH:
                    return OUT_OF_ORDER_SEQUENCE_NUMBER, -1, -1
            else:
                if upd[1] is not None:
                    last = upd[1]
                elif epoch == current.epoch:
                    last = current.last_seq
                else:
                    last = -1
                if not (current.epoch == NO_EPOCH or in_sequence(last, first_seq)):
                    return OUT_OF_ORDER_SEQUENCE_NUMBER, -1, -1
            upd[0], upd[1] = epoch, info.last_sequence
            if upd[2] and not info.is_transactional:
                return INVALID_TXN_STATE, -1, -1
            if info.is_transactional:
                upd[2] = True
        return 0, -1, -1

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> int:
        entry = self.producers.get(producer_id, _EMPTY)
        if epoch < entry.epoch:
            return INVALID_PRODUCER_EPOCH
        if coordinator_epoch < entry.coordinator_epoch:
            return TRANSACTION_COORDINATOR_FENCED
        return 0

    # ------------------------------------------------------------------ apply
    def on_batch(self, info: BatchInfo, first_offset: int, timestamp: int | None = None) -> None:
        """Record an appended data batch (also used when replaying the log).

        ``timestamp`` is the batch's max timestamp as stored (the append time for
        LogAppendTime topics); it defaults to the one in ``info``.
        """
        pid = info.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        entry.set_epoch(info.producer_epoch)
        last_offset = first_offset + info.last_offset_delta
        entry.batches.append((info.base_sequence, info.last_sequence, first_offset, last_offset))
        entry.last_timestamp = info.max_timestamp if timestamp is None else timestamp
        if info.is_transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = first_offset
            self.ongoing.add(pid)

    def on_marker(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                  offset: int, timestamp: int) -> None:
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id)
        first = entry.txn_first_offset if entry.txn_first_offset is not None else offset
        self.ongoing.discard(producer_id)
        if not commit:
            self._aborted.append((first, offset, producer_id))
            self._aborted_last.append(offset)
        entry.set_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.txn_first_offset = None
        entry.last_timestamp = timestamp

    # ------------------------------------------------------------------ query
    def first_unstable_offset(self) -> int | None:
        if not self.ongoing:
            return None
        return min(self.producers[pid].txn_first_offset for pid in self.ongoing)

    def aborted_transactions(self, start_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of aborted transactions overlapping [start, upper_bound)."""
        i = bisect_left(self._aborted_last, start_offset)
        return [(pid, first) for first, _last, pid in self._aborted[i:] if first < upper_bound]

    def aborted_ranges(self, start_offset: int, upper_bound: int) -> list[tuple[int, int, int]]:
        """(first_offset, marker_offset, producer_id) of aborted transactions overlapping [start, upper_bound)."""
        i = bisect_left(self._aborted_last, start_offset)
        return [entry for entry in self._aborted[i:] if entry[0] < upper_bound]

    # ------------------------------------------------------------ maintenance
    def truncate_head(self, log_start_offset: int) -> None:
        i = bisect_left(self._aborted_last, log_start_offset)
        if i:
            del self._aborted[:i], self._aborted_last[:i]
        for pid in self.ongoing:
            entry = self.producers[pid]
            # the open transaction's first batch is gone; the LSO may not point below the log start
            if entry.txn_first_offset < log_start_offset:
                entry.txn_first_offset = log_start_offset

    def remove_aborted(self, marker_offsets) -> None:
        """Forget the aborted transactions whose ABORT markers (at ``marker_offsets``) the log cleaner
        removed: their data went first, and a fetch must not name them (Kafka rebuilds the cleaned
        segment's transaction index without them)."""
        gone = set(marker_offsets)
        if gone:
            keep = [i for i, last in enumerate(self._aborted_last) if last not in gone]
            self._aborted = [self._aborted[i] for i in keep]
            self._aborted_last = [self._aborted_last[i] for i in keep]

    def last_records(self) -> dict[int, tuple[int, int]]:
        """Producer id -> (offset of its last data batch's last record or -1, epoch): Kafka's
        ``lastRecordsOfActiveProducers``, the batches the log cleaner keeps."""
        return {pid: (e.batches[-1][3] if e.batches else -1, e.epoch) for pid, e in self.producers.items()}

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Kafka's removeExpiredProducers: drop producers with no open transaction whose last
        timestamp is ``expiration_ms`` or more before ``now_ms``; returns how many."""
        expired = [pid for pid, e in self.producers.items()
                   if e.txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)


class ProducerStateLoad(NamedTuple):
    """How start-up rebuilt a partition's producer state: from the snapshot at ``snapshot_offset`` (None:
    no usable snapshot, the whole log was read) plus ``batches_scanned`` batch headers after it."""

    snapshot_offset: int | None
    batches_scanned: int


def load_producer_state(snapshots: "SnapshotFiles", segments, bases: list[int],
                        log_end: int) -> tuple[ProducerStateManager, int, ProducerStateLoad]:
    """Kafka's rebuildProducerState: the latest valid snapshot at or below ``log_end``, then the batches
    of ``segments`` (base offsets ``bases``) after it. Returns (state, the offset it was read from, how)."""
    found = snapshots.load_latest(log_end)
    start, ps = found if found is not None else (segments[0].base_offset, ProducerStateManager())
    scanned = 0
    for seg in segments[max(bisect_right(bases, start) - 1, 0):]:
        OPEN_FILES.trim()  # start-up holds no read's descriptor: a long scan keeps to the bound
        fd = seg.fd
        for pos, hdr in seg.headers_from(seg.lookup_position(start) if seg.base_offset < start else 0):
            if hdr[0] + hdr[6] < start:
                continue
            scanned += 1
            if hdr[9] < 0:
                continue
            info = BatchInfo(pos, hdr)
            if info.is_control:
                if not info.records_count:
                    continue  # a marker the cleaner emptied: its transaction is gone (as Kafka)
                data = os.pread(fd, info.size, pos)
                ps.on_marker(info.producer_id, info.producer_epoch, control_record_type(data) == CONTROL_COMMIT,
                             control_coordinator_epoch(data), info.base_offset, info.max_timestamp)
            else:
                ps.on_batch(info, info.base_offset)
    return ps, start, ProducerStateLoad(found[0] if found is not None else None, scanned)


class SnapshotFiles:
    """The producer-state snapshot files of one partition directory, ``<offset:020d>.snapshot``.

    ``offsets`` (sorted) are the snapshots written or found; written by :meth:`write`,
    dropped by :meth:`delete` and the start-up rules. With a ``Background`` worker the
    files are written (tmp, fsync, rename) and removed there, through a descriptor of the
    directory taken on the loop: a job never touches a directory that replaced this one.
    """

    __slots__ = ("dir", "offsets")

    def __init__(self, dir_path: str, names=None):
        self.dir = dir_path
        self.offsets = sorted(int(n[:-len(SNAPSHOT_SUFFIX)]) for n in (os.listdir(dir_path) if names is None else names)
                              if n.endswith(SNAPSHOT_SUFFIX) and n[:-len(SNAPSHOT_SUFFIX)].isdigit())

    @staticmethod
    def name(offset: int) -> str:
        return f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def remove_stray(self, segment_bases) -> None:
        """Kafka's removeStraySnapshots: keep the snapshots at segment base offsets and the largest
        other one if it is above every segment (a clean shutdown's, at the log end)."""
        bases = set(segment_bases)
        top = max(bases) if bases else -1
        stray = [o for o in self.offsets if o not in bases]
        doomed = stray[:-1] + [o for o in stray[-1:] if o < top]
        self.delete(doomed)

    def load_latest(self, end_offset: int) -> tuple[int, ProducerStateManager] | None:
        """The latest valid snapshot at or below ``end_offset`` as (offset, state); those above it
        and the corrupt ones are deleted (Kafka's truncateAndReload / loadFromSnapshot)."""
        self.delete([o for o in self.offsets if o > end_offset])
        while self.offsets:
            offset = self.offsets[-1]
            try:
                with open(os.path.join(self.dir, self.name(offset)), "rb") as f:
                    return offset, ProducerStateManager.from_snapshot(f.read())
            except (OSError, CorruptSnapshot) as e:
                log.warning("%s: ignoring producer snapshot %s: %s", self.dir, self.name(offset), e)
                self.delete([offset])
        return None

    def write(self, offset: int, data: bytes, background=None, sync: bool = True) -> None:
        """Write the snapshot at ``offset``: on ``background`` when given and threaded, else now; ``sync``
        fsyncs it (without, a power failure may leave it torn: start-up then falls back to an older one).
        A failure raises OSError (on the worker: logged) and leaves no file behind; ``offsets`` then
        names a snapshot that is missing, which every reader and ``delete`` tolerate."""
        name = self.name(offset)
        if background is None or not background.threaded:
            _write_file(self.dir, name, data, sync=sync)
        else:
            here = _DirRef(self.dir)
            background.submit(lambda: here.run(lambda dir_fd: _write_file(dir_fd, name, data, sync=sync)),
                              lambda _r, exc: _report("writing a producer snapshot", self.dir, exc))
        if offset not in self.offsets:
            self.offsets.append(offset)
            self.offsets.sort()

    def delete(self, offsets, background=None) -> None:
        doomed = [o for o in offsets if o in self.offsets]
        if not doomed:
            return
        self.offsets = [o for o in self.offsets if o not in doomed]
        names = [self.name(o) for o in doomed]
        if background is None or not background.threaded:
            _unlink(self.dir, names)
            return
        here = _DirRef(self.dir)
        background.submit(lambda: here.run(lambda dir_fd: _unlink(dir_fd, names)),
                          lambda _r, exc: _report("removing producer snapshots", self.dir, exc))


class _DirRef:
    """A partition directory as it is now, for a background job: the job must work in this directory
    even if it has been renamed away meanwhile (a deleted topic), never in one that replaced it. Kept
    as its identity (device, inode), not a descriptor, so queued jobs hold none (at the open-file
    limit a burst of rolls would queue one each); a job whose directory has gone or been replaced
    does nothing (the partition is being deleted)."""

    __slots__ = ("path", "ident")

    def __init__(self, path: str):
        st = os.stat(path)
        self.path, self.ident = path, (st.st_dev, st.st_ino)

    def run(self, job) -> None:
        try:
            dir_fd = fileio.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            return
        try:
            st = os.fstat(dir_fd)
            if (st.st_dev, st.st_ino) == self.ident:
                job(dir_fd)
        finally:
            os.close(dir_fd)


def _write_file(directory, name: str, data: bytes, sync: bool = True) -> None:
    """tmp, fsync (``sync``), rename, in ``directory`` (a path or a directory descriptor). Not
    ``files.atomic_write``: a background job must write into the directory it was given even if that
    one has been renamed away meanwhile (a deleted topic), never into one that replaced it."""
    dir_fd = directory if isinstance(directory, int) else fileio.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    tmp = name + ".tmp"
    try:
        fd = fileio.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[fileio.write(fd, view):]
            if sync:
                fileio.fsync(fd)
        finally:
            os.close(fd)
        fileio.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        try:
            _unlink(dir_fd, [tmp])
        except OSError:
            pass  # a leftover *.tmp file is removed at start-up
        raise
    finally:
        if not isinstance(directory, int):
            os.close(dir_fd)


def _unlink(directory, names: list[str]) -> None:
    dir_fd = directory if isinstance(directory, int) else os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
    finally:
        if not isinstance(directory, int):
            os.close(dir_fd)


def _report(operation: str, path: str, exc) -> None:
    if exc is not None:
        STORAGE.report(operation, path, exc)
