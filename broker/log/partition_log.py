"""Durable log of one topic partition: segments, offsets, retention, recovery.

Single node, so the high watermark is the log end offset after every append;
the last stable offset is held back by open transactions. Appends rewrite
baseOffset / leader epoch (and LogAppendTime) of the validated batches in place
in the request frame (one copy into a bytearray when the bytes are read-only),
and write them to the active segment (``fileio.write``): when
``append`` returns the bytes are in the page cache (they survive kill -9).
An append or a roll is all or nothing (README.md, "Failed writes").
fsync only per ``flush.messages`` / ``flush.ms``, for rolled segments right
after the roll, and at close. Reads return whole batches byte-for-byte as
memoryview slices of one ``os.pread`` per contiguous range.

Start-up: a clean shutdown (``clean_shutdown=True``) trusts everything but the
tail of the last segment after its last index entry; otherwise every segment
at or after the checkpointed recovery point is re-scanned with CRC32C. A torn
or corrupt tail is truncated (later segments are kept: ``damage.py``).
Producer state comes from the latest producer snapshot (written at each roll
and at close) plus a scan of the batches after it (``producer_state_load``
says which snapshot and how many batches); only without a usable snapshot is
the whole log scanned. Sealed segments' indexes are not read at start-up.

Segment replacement (the log cleaner, ``broker/log/cleaner``): the cleaner's
process writes a segment under ``<base>.*.cleaned`` names; ``replace_segments``
swaps it in on the loop with renames only, crash-safe as Kafka's
``LocalLog.replaceSegments``: new files ``.cleaned`` -> ``.swap`` (the log file
last: a ``.log.swap`` is the commit point), the old segments' files ->
``.deleted``, new files ``.swap`` -> final names, then the old files are
unlinked and the directory fsynced in the background. Start-up
(``_complete_swaps``, Kafka's ``LogLoader``) deletes ``.cleaned`` and
``.deleted`` files and index ``.swap`` files without a ``.log.swap``; for each
``<base>.log.swap`` it deletes the other segment files whose base offset lies in
[base, next offset of the swap file) and renames the ``.swap`` files to their
final names (that segment is then re-scanned). A cleaned segment may end before
the next segment's base offset (compaction leaves gaps); recovery allows that.
The producer snapshots of replaced segments are deleted with them (as Kafka); one
a crash left behind is a stray, removed at start-up.

Not implemented: leader epoch cache, tiered storage, Kafka's per-segment transaction
index (the aborted-transaction list travels in the producer snapshots).
"""

from __future__ import annotations

import errno
import logging
import os
import random
import struct
import time
from bisect import bisect_right
from typing import Callable

from protocol.records import (CONTROL_COMMIT, COMPRESSION_NONE, COMPRESSION_MASK, HEADER_SIZE, LOG_APPEND_TIME,
                              TIMESTAMP_TYPE_MASK, UNSUPPORTED_COMPRESSION_TYPE, BatchInfo, RecordsError, build_control_batch,
                              control_coordinator_epoch, control_record_type, iter_records, keyless_records,
                              set_base_offset, set_log_append_time, set_partition_leader_epoch, validate_records)

from .background import Inline
from .config import LogConfig, as_log_config
from .damage import CHECKED, UNCHECKED, DamageWatch, skip as skip_damage
from .errors import KAFKA_STORAGE_ERROR, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, LogError
from .faults import FD_RESERVE, STORAGE
from .files import atomic_write, fsync_dir
from .loading import CHECKPOINT_FILE, LogLoading
from .syncing import NO_FLUSH, LogSyncing
from .producer_state import ProducerStateLoad, ProducerStateManager, SnapshotFiles
from .refs import AppendResult, BatchRef, file_spans  # noqa: F401 - file_spans: the read API's, re-exported
from .segment import DELETED_SUFFIX, SWAP_SUFFIX, Segment, SpareFiles

log = logging.getLogger(__name__)

_OFF_LEN = struct.Struct(">qi")
_DELTA = struct.Struct(">i")
_NEED = 27  # header bytes needed to know base offset, size and lastOffsetDelta
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86400000
SPARE_RETRY_S = 1.0  # after a failed spare-file creation; a roll without spare files creates them itself


def _now_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog(LogLoading, LogSyncing):
    # one object per partition: 50,000 partitions on a broker (issue 33) save about 1.3 KB each without a __dict__
    __slots__ = ("_bases", "_bg", "_ckpt_failing", "_ckpt_ms", "_ckpt_written", "_closed", "_failing",
                 "_flushing", "_hw", "_last_flush_ms", "_leo", "_log_start", "_mark", "_next_flush",
                 "_pending_flush", "_read_failing", "_recovery_point", "_roll_jitter", "_segments",
                 "_snapshots", "_spare", "_spare_pending", "_spare_retry_at", "_unflushed",
                 "_unsynced_markers", "clock", "config", "damage", "dir", "durable", "leader_epoch", "offline",
                 "on_durable", "partition", "producer_id_expiration_ms", "producer_state",
                 "producer_state_load", "startup_shortfall", "storage_errors", "topic")

    def __init__(self, dir_path: str, topic: str, partition: int, config: LogConfig | dict | None = None, *,
                 clock: Callable[[], int] | None = None, clean_shutdown: bool = False,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS, leader_epoch: int = 0,
                 background=None, durable: bool = False, on_durable: Callable[[], None] | None = None,
                 staged: bool = False):
        """``staged``: ``dir_path`` was just made by ``loading.stage_partition``; nothing is read."""
        self.dir = dir_path
        self.topic = topic
        self.partition = partition
        self.config = as_log_config(config)
        self.clock = clock or _now_ms
        self.leader_epoch = leader_epoch
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_state = ProducerStateManager()
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._pending_flush: list[Segment] = []
        self._log_start = 0
        self._leo = 0
        self._recovery_point = 0
        self._unflushed = 0
        self._last_flush_ms = self.clock()
        self._roll_jitter = self._new_jitter()
        self._closed = False
        # durable mode (``sharebroker.durability=fsync``, README "Durability"): every append asks for an fsync,
        # the high watermark is the end of what an fsync covered, a failed fsync takes the partition offline
        self.durable = durable
        self.on_durable = on_durable  # called on the loop when the high watermark moved (durable mode)
        self._hw = 0  # durable mode: every offset below is on disk (set by _load, moved by completed fsyncs)
        self._mark: tuple[Segment | None, int] = (None, 0)  # durable mode: (segment, size) at _hw
        self.offline: LogError | None = None  # set when a data fsync failed: every append refused until restart
        # durable mode: (marker offset, first offset) of transactions whose marker is not yet synced: they stay
        # unstable (below the LSO) until it is, so a read_committed reader sees a transaction end once on disk
        self._unsynced_markers: list[tuple[int, int]] = []
        # fsync / unlink / checkpoint-sync jobs: Inline (synchronous) unless a Background worker is given
        self._bg = background or Inline()
        self._flushing = False           # a background fsync of this log is running
        self._next_flush = None          # future of the fsync requested while one was running
        self._ckpt_written: tuple[int, int] | None = None  # (log start, recovery point) in the file
        self._ckpt_ms = 0  # when it was last written (self.clock())
        self._spare: SpareFiles | None = None  # next segment's files, made on the worker
        self._spare_pending = False
        self._spare_retry_at = 0.0  # time.monotonic() before which _prepare_spare does not try again
        self._snapshots: SnapshotFiles | None = None  # producer snapshots; set by _load
        self.producer_state_load = ProducerStateLoad(None, 0)  # written once by _load
        # offsets the checkpoint promised beyond the log end found at start-up (data lost); written once by _load
        self.startup_shortfall = 0
        self.storage_errors = 0  # write steps that failed (KAFKA_STORAGE_ERROR answers); a metric
        self._failing = 0  # failures since the last successful append (one log line per run of them)
        self._read_failing = 0  # reads failed since the last one that succeeded (likewise)
        self._ckpt_failing = 0  # checkpoint writes failed since the last one that succeeded (likewise)
        self.damage = DamageWatch(f"{topic}-{partition}", self._bg)  # damage at rest; see damage.py
        if staged:
            self._load_staged()
            if durable:
                self._set_durable_mark(0)
            return
        os.makedirs(dir_path, exist_ok=True)
        try:
            self._load(clean_shutdown)
            if durable:  # what recovery found beyond the recovery point was never synced: sync it before it is seen
                if self._leo > self._recovery_point or self._pending_flush:
                    self.flush()
                self._set_durable_mark(self._leo)
        except BaseException:
            self.abandon()  # a log that could not open keeps no descriptor
            raise

    def set_background(self, background) -> None:
        """Run fsyncs, checkpoint syncs and unlinks on ``background`` (a ``Background``) from now on."""
        self._bg = self.damage.background = background or Inline()

    # ---------------------------------------------------------------- offsets
    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        """The log end offset; in durable mode the end of what an fsync covered (a consumer never sees a
        record that a power cut could take back, as Kafka's high watermark waits for the in-sync replicas)."""
        return self._hw if self.durable else self._leo

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset()
        if not self.durable:
            return self._leo if first_unstable is None else min(first_unstable, self._leo)
        hw = self._hw
        for marker, first in self._unsynced_markers:
            if marker >= hw and first < hw:
                hw = first
        return hw if first_unstable is None else min(first_unstable, hw)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    def update_config(self, config: LogConfig | dict) -> None:
        self.config = as_log_config(config)
        for seg in self._segments:
            seg.interval = self.config.index_interval_bytes
        self._roll_jitter = self._new_jitter()

    def _write_checkpoint(self, sync: bool = True) -> None:
        """Persist log start offset and recovery point atomically, if they changed (``sync=False``:
        without fsyncs, for ``close(synced=True)``, whose caller syncs the file system afterwards).

        Through ``atomic_write``: synchronously tmp, fsync, rename, directory fsync; with
        a background worker the tmp write and the rename happen here (so the new values
        survive kill -9 as soon as this returns) and the fsyncs run in the background. The recovery point written is always one whose
        data fsync has completed. A checkpoint lost to a power failure only
        means more recovery work (a malformed file reads as "recover all").
        """
        state = (self._log_start, self._recovery_point)
        if state == self._ckpt_written:
            return
        atomic_write(os.path.join(self.dir, CHECKPOINT_FILE), f"v1 {state[0]} {state[1]}\n".encode(), self._bg,
                     on_error=self._on_bg_error, sync=sync)
        self._ckpt_written = state
        self._ckpt_ms = self.clock()

    def _try_checkpoint(self) -> bool:
        """``_write_checkpoint`` where a failure must not fail the caller: the failure is logged and
        the checkpoint stays stale (a longer recovery, never lost data) until a later write, at the
        latest the next maintenance pass, succeeds. Returns True if the file is up to date."""
        try:
            self._write_checkpoint()
        except OSError as e:
            self.storage_errors += 1
            if not self._ckpt_failing:
                log.error("%s-%d: cannot write the checkpoint file: %s (retried by later flushes and the next "
                          "maintenance pass)", self.topic, self.partition, e)
            self._ckpt_failing += 1
            return False
        if self._ckpt_failing:
            log.warning("%s-%d: checkpoint file written again after %d failed attempts", self.topic, self.partition,
                        self._ckpt_failing)
            self._ckpt_failing = 0
        return True

    def _storage_error(self, operation: str, path: str, exc: OSError) -> LogError:
        """A write step failed and was undone: count it, say it (once per run of failures: the
        next successful append says when writes work again) and return the error to answer."""
        self.storage_errors += 1
        self._failing += 1
        STORAGE.count(operation, path, exc)
        if self._failing == 1:
            log.error("%s-%d: %s of %s failed: %s; answering KAFKA_STORAGE_ERROR until a write succeeds",
                      self.topic, self.partition, operation, path, exc)
        return LogError(KAFKA_STORAGE_ERROR, f"{operation} of {path} failed: {exc}")

    def _on_bg_error(self, _result, exc) -> None:
        if exc is not None and not isinstance(exc, FileNotFoundError):
            STORAGE.report("background file sync", self.dir, exc)

    # ----------------------------------------------------------------- append
    def validate(self, records, now_ms: int | None = None) -> list[BatchInfo]:
        """Produce-path validation with this log's config (max.message.bytes, timestamp rules).

        Raises ``protocol.records.RecordsError`` carrying the Kafka error code.
        """
        cfg = self.config
        return validate_records(records, max_message_bytes=cfg.max_message_bytes,
                                timestamp_type=LOG_APPEND_TIME if cfg.log_append_time else 0,
                                now_ms=self.clock() if now_ms is None else now_ms,
                                timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
                                timestamp_after_max_ms=cfg.message_timestamp_after_max_ms)

    def key_errors(self, records, infos: list[BatchInfo]) -> list[tuple[int, str]]:
        """On a compacted log, (record index, message) for each record without a key: Kafka's
        ``LogValidator.validateKey``, which refuses them (INVALID_RECORD). Empty otherwise, and for
        a batch whose codec needs the optional extra (kept as it is; the cleaner keeps it whole).
        Raises ``RecordsError`` (CORRUPT_MESSAGE) for a batch that does not inflate."""
        if not self.config.compact:
            return []
        errors = []
        mv = records if isinstance(records, memoryview) else memoryview(records)
        message = f"Compacted topic cannot accept message without key in topic partition {self.topic}-{self.partition}"
        for info in infos:
            try:
                missing = keyless_records(mv[info.position:info.position + info.size])
            except RecordsError as e:
                if e.code == UNSUPPORTED_COMPRESSION_TYPE:
                    continue
                raise
            errors += [(i, message) for i in missing]
        return errors

    def check_producer(self, infos: list[BatchInfo]) -> tuple[int, int, int]:
        """Idempotence check before append: (error_code, dup_first_offset, dup_last_offset).

        (0, -1, -1): go ahead; (0, first, last): duplicate of an earlier append;
        (code, -1, -1): reject with that Kafka error code.
        """
        return self.producer_state.check(infos)

    def append(self, records, infos: list[BatchInfo], now_ms: int | None = None, *,
               check_producer: bool = True) -> AppendResult:
        """Assign offsets to the validated batches ``infos`` of ``records`` and write them.

        ``infos`` come from ``protocol.records.validate_records`` on the same
        buffer. With ``check_producer`` the idempotence check runs first: a
        duplicate returns the original offsets (``duplicate=True``) without
        writing; a sequence/epoch error raises LogError with its code.
        """
        if not infos:
            raise ValueError("nothing to append")
        if self._closed:
            raise LogError(UNKNOWN_TOPIC_OR_PARTITION, f"{self.topic}-{self.partition} is closed")
        if self.offline is not None:
            raise self.offline
        now = self.clock() if now_ms is None else now_ms
        if check_producer:
            code, dup_first, dup_last = self.producer_state.check(infos)
            if code:
                raise LogError(code, f"producer state check failed for {self.topic}-{self.partition}")
            if dup_first >= 0:
                # a retry is answered success only once the original is known durable: if it was written
                # but not yet synced (its first answer may have been an fsync's failure), sync it first
                durable = None
                if dup_last >= self._recovery_point and (self.durable or self.config.flush_messages < NO_FLUSH):
                    durable = self._flush_or_raise(self._segments[-1])
                return AppendResult(dup_first, dup_last, -1, self._log_start, True, durable)
        start = infos[0].position
        end = infos[-1].position + infos[-1].size
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.readonly:
            buf = bytearray(mv[start:end])  # e.g. bytes from a test or a built control batch: one copy
        else:
            # a writable view of the request frame (broker/server.py reads each frame into its own
            # bytearray): rewrite baseOffset / leader epoch / LogAppendTime in place, no copy
            buf = mv[start:end]
        log_append_time = now if self.config.log_append_time else -1
        offset = self._leo
        metas = []
        max_ts = -1
        for info in infos:
            rel = info.position - start
            set_base_offset(buf, rel, offset)
            set_partition_leader_epoch(buf, rel, self.leader_epoch)
            if log_append_time >= 0:
                set_log_append_time(buf, rel, info.size, log_append_time)
                batch_ts = log_append_time
            else:
                batch_ts = info.max_timestamp
            max_ts = max(max_ts, batch_ts)
            metas.append((rel, offset, batch_ts, info.size))
            offset += info.last_offset_delta + 1
        self._maybe_roll(len(buf), max_ts, offset - 1, now)  # a failed roll raises LogError, changing nothing
        seg = self._segments[-1]
        try:
            seg.append(buf, metas)  # all or nothing
        except OSError as e:
            raise self._storage_error("append", seg.log_path, e) from e
        if self._failing:
            log.warning("%s-%d: appends work again after %d failed", self.topic, self.partition, self._failing)
            self._failing = 0
        # from here on nothing fails: in-memory state moves only now that the bytes are written
        ps = self.producer_state
        for info, (rel, base, ts, size) in zip(infos, metas):
            if info.producer_id < 0:
                continue
            if info.is_control:
                data = bytes(buf[rel:rel + size])
                if self.durable:
                    entry = ps.producers.get(info.producer_id)
                    first = entry.txn_first_offset if entry is not None else None
                    if first is not None:
                        self._unsynced_markers.append((base, first))
                ps.on_marker(info.producer_id, info.producer_epoch, control_record_type(data) == CONTROL_COMMIT,
                             control_coordinator_epoch(data), base, now)
            else:
                ps.on_batch(info, base, ts)
        if self._spare is None and seg.size > self.config.segment_bytes >> 1 and self._bg.threaded:
            self._prepare_spare()  # half full: make the next segment's files off the loop
        first = self._leo
        self._leo = seg.next_offset = offset
        self._unflushed += offset - first
        durable = None
        if self.durable or self._unflushed >= self.config.flush_messages:
            durable = self._flush_or_raise(seg)
        return AppendResult(first, offset - 1, log_append_time, self._log_start, durable=durable)

    def _flush_or_raise(self, seg: Segment):
        """``request_flush`` for an append's answer; synchronously (no worker) a failed fsync raises here."""
        try:
            return self.request_flush()
        except OSError as e:  # written and in the log, but not on disk: the partition goes offline
            self._go_offline(e)
            raise self._storage_error("fsync", seg.log_path, e) from e

    def append_control(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int = 0,
                       now_ms: int | None = None) -> AppendResult:
        """Write an end-transaction marker for ``producer_id`` (closes its open transaction)."""
        code = self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if code:
            raise LogError(code, f"transaction marker rejected for producer {producer_id}")
        now = self.clock() if now_ms is None else now_ms
        data = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch, timestamp=now)
        return self.append(data, validate_records(data, single_batch=False, client=False), now,
                           check_producer=False)

    def _maybe_roll(self, nbytes: int, max_ts: int, last_offset: int, now: int) -> None:
        seg = self._segments[-1]
        if seg.size == 0:
            return
        cfg = self.config
        rolling = seg.rolling_timestamp
        waited = max_ts - rolling if rolling >= 0 and max_ts >= 0 else now - seg.created_ms
        if (seg.size > cfg.segment_bytes - nbytes
                or waited > cfg.segment_ms - self._roll_jitter
                or seg.index_full()
                or last_offset - seg.base_offset > 0x7FFFFFFF):
            self.roll(now)

    def _new_jitter(self) -> int:
        j = self.config.segment_jitter_ms
        return random.randrange(min(j, self.config.segment_ms)) if j > 0 else 0

    def roll(self, now_ms: int | None = None) -> None:
        """Start a new active segment at the log end offset (no-op if the active one is empty).

        All or nothing: the new segment's files are made first and the old segment is sealed
        after; if either fails, the new files are removed, the old segment stays the active one
        (usable as before) and LogError(KAFKA_STORAGE_ERROR) is raised; the next append that
        needs a roll tries again. Then, as Kafka's ``UnifiedLog.roll``, a producer snapshot at the
        new base offset and (with the worker) an fsync of the rolled segment right away; a failure
        of either is logged, not raised (the snapshot is an optimisation; the maintenance pass
        retries the fsync)."""
        old = self._segments[-1]
        if old.size == 0:
            return
        now = self.clock() if now_ms is None else now_ms
        cfg = self.config
        spare, self._spare = self._spare, None
        try:
            if spare is not None:
                new = Segment.adopt(self.dir, self._leo, cfg.segment_index_bytes, cfg.index_interval_bytes, now,
                                    spare)
            else:  # at the open-file limit the descriptor reserve makes room (faults.py)
                new = FD_RESERVE.run(lambda: Segment.create(self.dir, self._leo, cfg.segment_index_bytes,
                                                            cfg.index_interval_bytes, now))
        except OSError as e:
            raise self._storage_error("roll (creating the next segment)", self.dir, e) from e
        try:
            old.seal()
        except OSError as e:
            new.delete()
            raise self._storage_error("roll (sealing the segment)", old.log_path, e) from e
        old.check = UNCHECKED  # sealed: checked whole when a read first touches it (damage.py)
        new.check = CHECKED  # every batch it gets is checked on produce
        self._pending_flush.append(old)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._roll_jitter = self._new_jitter()
        FD_RESERVE.refill()  # the old segment's index files are closed: room to take the reserve back
        try:  # Kafka's roll: a producer snapshot at the new segment's base offset (written off the loop)
            self._snapshots.write(self._leo, self.producer_state.snapshot(), self._bg)
        except OSError as e:  # only means a longer scan at the next start
            STORAGE.report("writing a producer snapshot", self.dir, e)
        if self._bg.threaded and not self._flushing:  # Kafka: flushUptoOffsetExclusive(new base) at once
            self._start_flush(new.base_offset, list(self._pending_flush))

    def _prepare_spare(self) -> None:
        """With a background worker, make the next segment's files there (a roll then only renames)."""
        if not self._bg.threaded or self._spare is not None or self._spare_pending or self._closed:
            return
        if time.monotonic() < self._spare_retry_at:
            return  # the last try failed (e.g. at the open-file limit): not again on every append
        self._spare_pending = True
        path = self.dir

        def done(spare, exc):
            self._spare_pending = False
            if exc is not None:
                self._spare_retry_at = time.monotonic() + SPARE_RETRY_S
                STORAGE.report("creating the next segment's files", path, exc)
            elif self._closed or self._spare is not None:
                self._bg.submit(spare.discard)
            else:
                self._spare = spare
        self._bg.submit(lambda: SpareFiles(path), done)

    def _discard_spare(self) -> None:
        if self._spare is not None:
            self._spare.discard()
            self._spare = None

    # ------------------------------------------------------------------- read
    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one: bool = True, lazy: bool = False) -> list[BatchRef]:
        """Whole batches from the one containing ``offset``, at most ``max_bytes`` in total.

        With ``min_one`` the first batch is returned even if larger than
        ``max_bytes``. Batches whose last offset is >= ``max_offset`` (e.g. the
        LSO) are never returned. Raises LogError(OFFSET_OUT_OF_RANGE) if
        ``offset`` is outside [log start, log end].

        ``lazy=True`` reads only batch headers (one small ``pread`` per batch);
        the refs' ``data`` is read on first use. For a sender that uses
        ``os.sendfile`` with ``file_spans(refs)``, record bytes never enter Python. Damaged batches of
        sealed segments are left out (``damage.py``): the answer has a gap of offsets there.
        """
        try:
            refs = self._read(offset, max_bytes, max_offset, min_one, lazy)
            refs = self.damage.verify(refs) if refs and self.damage.checking else refs
        except OSError as e:  # EIO from a failing disk, a file gone under us, ...: this read fails, not the broker
            raise self._read_error(e) from None
        if self._read_failing:
            log.warning("%s-%d: reads work again after %d failed", self.topic, self.partition, self._read_failing)
            self._read_failing = 0
        return refs

    def _read_error(self, exc: OSError) -> LogError:
        """A read failed (Kafka: a KafkaStorageException, the log directory goes offline; here the
        partition answers KAFKA_STORAGE_ERROR to this read and is read again by the next one)."""
        self.storage_errors += 1
        self._read_failing += 1
        STORAGE.count("read", self.dir, exc)
        if self._read_failing == 1:
            log.error("%s-%d: reading the log failed: %s; answering KAFKA_STORAGE_ERROR until a read succeeds",
                      self.topic, self.partition, exc)
        return LogError(KAFKA_STORAGE_ERROR, f"read of {self.topic}-{self.partition} failed: {exc}")

    def _read(self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool, lazy: bool) -> list[BatchRef]:
        limit = self._read_limit(offset, max_offset)
        if lazy:
            return self._read_headers(offset, max_bytes, limit, min_one)
        out: list[BatchRef] = []
        if offset >= limit:
            return out
        total = 0
        i = bisect_right(self._bases, offset) - 1
        segs = self._segments
        while i < len(segs):
            seg = segs[i]
            if seg.check is not CHECKED or seg is not segs[-1]:
                self.damage.touch(seg, seg is segs[-1])  # checked once in the background; cut under us?
            if seg.damage is not None:  # the header walk steps over damaged batches
                return out + self._read_headers(offset, max_bytes - total, limit, min_one and not out)
            end = seg.size
            pos = seg.lookup_position(offset)
            budget = max(max_bytes - total, 0)
            data = memoryview(seg.read(pos, min(end - pos, budget + seg.interval + 2 * HEADER_SIZE)))
            base_pos, off = pos, 0
            while True:
                if off + _NEED > len(data):
                    if base_pos + off + _NEED > end:
                        break  # end of segment
                    base_pos += off
                    data = memoryview(seg.read(base_pos, min(end - base_pos, max(budget, HEADER_SIZE))))
                    off = 0
                    if len(data) < _NEED:
                        break
                base, length = _OFF_LEN.unpack_from(data, off)
                size = length + 12
                if size < HEADER_SIZE:  # a damaged length: nothing past it until the check says
                    return out
                last = base + _DELTA.unpack_from(data, off + 23)[0]
                if last < offset:
                    off += size
                    continue
                if last >= limit or ((out or not min_one) and total + size > max_bytes):
                    return out
                if off + size > len(data):
                    base_pos += off
                    data = memoryview(seg.read(base_pos, min(end - base_pos, max(size, budget))))
                    off = 0
                    if len(data) < size:  # cut under us: the check records the damage, reads then skip it
                        return out  # never serve a partial batch, nor what follows it, before that
                out.append(BatchRef(base, last, data[off:off + size], seg.fd, base_pos + off, size))
                total += size
                off += size
                budget = max(max_bytes - total, 0)
                if total >= max_bytes:
                    return out
            i += 1
            if i < len(segs):
                offset = segs[i].base_offset
        return out

    def _read_limit(self, offset: int, max_offset: int | None) -> int:
        """Check a read's start offset; return the offset reads stop before (log end or ``max_offset``)."""
        if self._closed:
            raise LogError(UNKNOWN_TOPIC_OR_PARTITION, f"{self.topic}-{self.partition} is closed")
        if offset < self._log_start or offset > self._leo:
            raise LogError(OFFSET_OUT_OF_RANGE, f"offset {offset} is out of range [{self._log_start}, {self._leo}] "
                                                f"for {self.topic}-{self.partition}")
        return self._leo if max_offset is None else min(max_offset, self._leo)

    def _read_headers(self, offset: int, max_bytes: int, limit: int, min_one: bool) -> list[BatchRef]:
        out: list[BatchRef] = []
        total = 0
        i = bisect_right(self._bases, offset) - 1
        segs = self._segments
        pread = os.pread
        while offset < limit and i < len(segs):
            seg = segs[i]
            if seg.check is not CHECKED or seg is not segs[-1]:
                self.damage.touch(seg, seg is segs[-1])
            fd, end, damage = seg.fd, seg.size, seg.damage
            pos = seg.lookup_position(offset)
            while pos + HEADER_SIZE <= end:
                if damage is not None and (pos := skip_damage(damage, pos)) + HEADER_SIZE > end:
                    break
                head = pread(fd, HEADER_SIZE, pos)
                base, length = _OFF_LEN.unpack_from(head, 0) if len(head) == HEADER_SIZE else (0, end)
                size = length + 12
                if size < HEADER_SIZE or pos + size > end:  # a damaged length or a cut: nothing past it
                    return out  # until the check says where the next batch starts
                last = base + _DELTA.unpack_from(head, 23)[0]
                if last >= offset:
                    if last >= limit or ((out or not min_one) and total + size > max_bytes):
                        return out
                    out.append(BatchRef(base, last, memoryview(head) if size > HEADER_SIZE else None, fd, pos, size))
                    total += size
                    if total >= max_bytes:
                        return out
                pos += size
            i += 1
            if i < len(segs):
                offset = segs[i].base_offset
        return out

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of aborted transactions overlapping [start, upper_bound)."""
        return self.producer_state.aborted_transactions(start_offset, upper_bound_offset)

    # ------------------------------------------------------------- timestamps
    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int]:
        """ListOffsets lookup: (offset, timestamp), (-1, -1) when nothing matches.

        -2 earliest -> (log start, -1); -1 latest -> (log end, -1); -3 max
        timestamp; otherwise the first record with timestamp >= ``timestamp``
        (record-level for uncompressed batches, batch-level otherwise).
        """
        if timestamp == -2:
            return self._log_start, -1
        if timestamp == -1:
            return self._leo, -1
        if timestamp == -3:
            return self.max_timestamp()
        start = bisect_right(self._bases, self._log_start) - 1
        for seg in self._segments[max(start, 0):]:
            if seg.size == 0 or seg.largest_timestamp() < timestamp:
                continue
            for pos, hdr in seg.headers_from(seg.lookup_time_position(timestamp)):
                if hdr[8] >= timestamp and hdr[0] + hdr[6] >= self._log_start:
                    return self._refine(seg, pos, hdr, lambda ts: ts >= timestamp)
        return -1, -1

    def max_timestamp(self) -> tuple[int, int]:
        """ListOffsets MAX_TIMESTAMP (-3): (offset, timestamp) of the record with the largest timestamp."""
        best = None
        for seg in self._segments:
            if seg.max_timestamp > (best.max_timestamp if best else -1):
                best = seg
        if best is None:
            return -1, -1
        target = best.offset_of_max_timestamp
        for pos, hdr in best.headers_from(best.lookup_position(target)):
            if hdr[0] >= target:
                return self._refine(best, pos, hdr, lambda ts: ts == hdr[8])
        return -1, -1

    def _refine(self, seg: Segment, pos: int, hdr: tuple, match) -> tuple[int, int]:
        base, max_ts, attrs = hdr[0], hdr[8], hdr[5]
        if attrs & COMPRESSION_MASK == COMPRESSION_NONE and not attrs & TIMESTAMP_TYPE_MASK:
            for rec in iter_records(seg.read(pos, hdr[1] + 12)):
                if rec.offset >= self._log_start and match(rec.timestamp):
                    return rec.offset, rec.timestamp
        return max(base, self._log_start), max_ts

    # -------------------------------------------------------------- deletion
    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset to ``offset`` (-1 = high watermark); return it."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise LogError(OFFSET_OUT_OF_RANGE, f"offset {offset} is out of range for {self.topic}-{self.partition}")
        if offset > self._log_start:
            before, self._log_start = self._log_start, offset
            try:  # durable before anything depends on it: a restart must not bring the records back
                self._write_checkpoint()
            except OSError as e:
                self._log_start = before
                raise self._storage_error("checkpoint", os.path.join(self.dir, CHECKPOINT_FILE), e) from e
            self._delete_prefix(self._deletable(lambda seg, nxt: nxt is not None and nxt.base_offset <= offset))
            self.producer_state.truncate_head(self._log_start)
        return self._log_start

    def apply_retention(self, now_ms: int | None = None) -> bool:
        """Kafka's deleteOldSegments; returns True if the log start offset moved."""
        now = self.clock() if now_ms is None else now_ms
        before = self._log_start
        cfg = self.config
        lso = self._log_start
        self._delete_prefix(self._deletable(lambda seg, nxt: nxt is not None and nxt.base_offset <= lso))
        if cfg.delete_enabled:
            if cfg.retention_ms >= 0:
                self._delete_prefix(self._deletable(
                    lambda seg, nxt: now - seg.largest_timestamp() > cfg.retention_ms))
            if cfg.retention_bytes >= 0:
                diff = self.size_bytes - cfg.retention_bytes
                if diff > 0:
                    def over(seg, nxt):
                        nonlocal diff
                        if diff - seg.size >= 0:
                            diff -= seg.size
                            return True
                        return False
                    self._delete_prefix(self._deletable(over))
        return self._log_start != before

    def _deletable(self, predicate) -> int:
        """Length of the segment prefix matching ``predicate(seg, next_seg)`` (never an empty active segment)."""
        segs = self._segments
        n = 0
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            if nxt is None and seg.size == 0:
                break
            if not predicate(seg, nxt):
                break
            n += 1
        return n

    def _delete_prefix(self, n: int) -> None:
        if n <= 0:
            return
        if n == len(self._segments):
            self.roll()  # never delete the active segment without a successor
        doomed = self._segments[:n]
        del self._segments[:n], self._bases[:n]
        for seg in doomed:
            if seg in self._pending_flush:
                self._pending_flush.remove(seg)
            seg.delete(self._bg if self._bg.threaded else None)
        try:
            self._snapshots.delete([seg.base_offset for seg in doomed], self._bg)  # a snapshot goes with its segment
        except OSError as e:  # left as strays: removed at the next start
            log.warning("%s-%d: cannot delete producer snapshots: %s", self.topic, self.partition, e)
        if self._bases[0] > self._log_start:
            self._log_start = self._bases[0]  # the segments are gone: the checkpoint follows when it can
            self._try_checkpoint()
        self.producer_state.truncate_head(self._log_start)
        log.info("%s-%d: deleted %d segment(s); log start offset %d", self.topic, self.partition, n,
                 self._log_start)

    # -------------------------------------------------- segment replacement
    @property
    def segments(self) -> tuple[Segment, ...]:
        """The segments, oldest first (the last is the active one); read them, never change them."""
        return tuple(self._segments)

    def replace_segments(self, new: Segment, old: list[Segment], on_phase=None) -> bool:
        """Swap the cleaner's segment ``new`` (opened under its ``.cleaned`` names) in for ``old``.

        ``old`` are consecutive inactive segments of this log and ``new`` starts at the first one's
        base offset; if any of them left the log meanwhile (retention, DeleteRecords, deletion)
        nothing happens and False is returned (the caller deletes ``new``). Renames only, then the
        in-memory segment list; unlinks and the directory fsync run in the background.
        ``on_phase(name)`` is called after each step ("swap", "deleted", "done"; the crash tests).
        """
        segs = self._segments
        try:
            i = next(k for k, seg in enumerate(segs) if seg is old[0])
        except StopIteration:
            return False
        if (self._closed or not old or new.base_offset != old[0].base_offset or i + len(old) >= len(segs)
                or any(segs[i + k] is not seg for k, seg in enumerate(old))):
            return False
        new.change_suffix(SWAP_SUFFIX)  # the commit point: recovery completes the swap from here
        if on_phase is not None:
            on_phase("swap")
        for seg in old:
            seg.change_suffix(DELETED_SUFFIX)
        if on_phase is not None:
            on_phase("deleted")
        new.change_suffix("")
        if on_phase is not None:
            on_phase("done")
        segs[i:i + len(old)] = [new]
        self._bases[i:i + len(old)] = [new.base_offset]
        bg = self._bg if self._bg.threaded else None
        for seg in old:
            if seg in self._pending_flush:  # superseded by ``new``, which the cleaner fsynced
                self._pending_flush.remove(seg)
            seg.delete(bg)
        # the replaced segments' producer snapshots go with them (Kafka's UnifiedLog.replaceSegments)
        self._snapshots.delete([seg.base_offset for seg in old if seg.base_offset != new.base_offset], bg)
        directory = self.dir
        if bg is not None:
            bg.submit(lambda: fsync_dir(directory), self._on_bg_error)
        else:
            fsync_dir(directory)
        return True

    def maintenance(self, now_ms: int | None = None, expire_producers: bool = True) -> bool:
        """Periodic work: retention, flush.ms, fsync of rolled segments, producer expiry.

        Returns True if the log start offset moved. ``LogManager`` passes
        ``expire_producers`` only when producer.id.expiration.check.interval.ms is due.
        """
        now = self.clock() if now_ms is None else now_ms
        moved = self.apply_retention(now)
        self._try_checkpoint()  # one that failed earlier (a no-op when it is up to date)
        if self.offline is not None:
            pass  # nothing more is synced until a restart
        elif self._unflushed and now - self._last_flush_ms >= self.config.flush_ms:
            self.request_flush()
        elif self._pending_flush and not self._flushing:
            # every rolled segment is queued here, so afterwards all but the active one are durable
            if self._bg.threaded:
                self._start_flush(self._segments[-1].base_offset, list(self._pending_flush))
            else:
                while self._pending_flush:
                    self._pending_flush[0].flush()
                    del self._pending_flush[0]
                point = self._segments[-1].base_offset
                if point > self._recovery_point:
                    self._recovery_point = point
                    self._try_checkpoint()
        if expire_producers:
            self.remove_expired_producers(now)
        return moved

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Kafka's removeExpiredProducers: forget producer ids idle >= producer.id.expiration.ms
        (no open transaction, last batch timestamp that old). Returns how many were removed."""
        now = self.clock() if now_ms is None else now_ms
        return self.producer_state.remove_expired(now, self.producer_id_expiration_ms)

    def prepare_close(self) -> None:
        """The writes of ``close`` that come before its fsync: the active segment's time index sealed, the
        prepared segment files removed (synchronously; after the background worker has drained)."""
        if self._closed:
            return
        if self.offline is not None:  # write nothing more: the next start recovers from the files
            self.abandon()
            raise OSError(errno.EIO, str(self.offline))
        self._segments[-1].seal()
        self._bg = Inline()
        self._discard_spare()

    def close(self, synced: bool = False) -> None:
        """``prepare_close``, fsync, checkpoint, producer snapshot, close files (synchronously; after the
        background worker has drained). ``synced``: the caller called ``prepare_close`` and then synced the
        whole file system (``LogManager.close``: one ``syncfs`` for every partition instead of six fsyncs
        each), so every byte is durable: the recovery point moves to the log end and the checkpoint and
        snapshot are written without fsyncs, which the caller's next ``syncfs`` covers."""
        if self._closed:
            return
        self.prepare_close()
        if synced:
            self._pending_flush.clear()
            self._unflushed = 0
            self._recovery_point = self._leo
            self._write_checkpoint(sync=False)
        else:
            self.flush()
        # Kafka: a snapshot at close
        self._snapshots.write(self._leo, self.producer_state.snapshot(), sync=not synced)
        self._finish_flush_future(self._next_flush, None)
        for seg in self._segments:
            seg.close()
        self._closed = True

    def abandon(self) -> None:
        """Close every descriptor without writing anything more (after a failed ``close``, or a failed
        load: what the files hold is what the next start recovers; or a partition being removed, which
        needs no fsync, as Kafka's ``LogManager.asyncDelete`` closes the handlers without a flush)."""
        self._spare = None  # holds no descriptor; its tmp files go at the next start
        for seg in self._segments:
            seg.drop_descriptors()
        self._closed = True
        self._finish_flush_future(self._next_flush, None)

    def delete(self) -> None:
        """Close and remove every file of this partition (the directory itself too)."""
        self._discard_spare()
        for seg in self._segments:
            seg.delete()
        self._closed = True
        self._finish_flush_future(self._next_flush, None)
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self._log_start}, end={self._leo}, "
                f"segments={len(self._segments)})")
