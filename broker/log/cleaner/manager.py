"""The log cleaner on the event loop: Kafka's ``LogCleaner`` + ``LogCleanerManager`` + ``CleanerConfig``.

Owns the cleaner checkpoints (``data_dir/cleaner-offset-checkpoint``, Kafka's
``OffsetCheckpointFile`` format: version ``0``, a count, then ``topic partition offset``
lines), picks the log to clean and applies what the worker process (``worker.py``) wrote.

- Choice (``grab_filthiest``, Kafka's ``grabFilthiestCompactedLog``): logs with
  ``cleanup.policy`` containing ``compact``, not being cleaned, not marked uncleanable; the
  dirty section runs from the checkpoint (reset to the log start offset when outside the log)
  to the first uncleanable offset: the last stable offset, the active segment, and with
  ``min.compaction.lag.ms`` the first segment holding a record that recent; a log is
  cleanable when its dirty ratio (dirty bytes / bytes up to the first uncleanable segment)
  exceeds ``min.cleanable.dirty.ratio``, or a dirty segment's first batch is older than
  ``max.compaction.lag.ms``; the dirtiest cleanable log is cleaned first.
- A pass: the job goes to an idle worker; each group the worker reports is opened (on the
  log's background thread: it reads the index files) and swapped in on the loop with
  ``PartitionLog.replace_segments`` (renames and the in-memory segment list; a group whose
  segments left the log meanwhile is dropped); aborted transactions whose markers went are
  forgotten; at the end the checkpoint moves to the pass's end offset.  After a pass the next
  log is looked at at once, otherwise every ``log.cleaner.backoff.ms``.
- A pass that fails marks its partition uncleanable (Kafka's ``markPartitionUncleanable``) until
  the broker restarts or the topic is deleted, unless segments of it left the log meanwhile
  (retention, DeleteRecords: the next pass starts again); a worker that dies is replaced at the next pass.
  A storage fault (an OSError: disk full, read-only, out of descriptors) does not mark it: the
  failure is reported to ``faults.STORAGE`` (logged once, counted), the pass's ``.cleaned`` files are
  removed and a later pass tries again (Kafka takes the log directory offline instead).
- Settings (Kafka's names): ``log.cleaner.enable``, ``log.cleaner.threads`` (worker processes),
  ``log.cleaner.dedupe.buffer.size`` (shared by the workers), ``log.cleaner.io.buffer.load.factor``,
  ``log.cleaner.io.max.bytes.per.second``, ``log.cleaner.backoff.ms``; per topic (dynamic, as every
  topic config, with the ``log.cleaner.*`` broker defaults) ``min.cleanable.dirty.ratio``,
  ``min.compaction.lag.ms``, ``max.compaction.lag.ms``, ``delete.retention.ms``.
- Test-only: ``sharebroker.log.cleaner.test.crash.phase`` kills the broker (SIGKILL, itself) at
  one point of a pass: ``writing`` (a cleaned segment half written, in the worker), ``cleaned``
  (written and opened, before the swap), ``swap``, ``deleted``, ``done`` (the steps of
  ``replace_segments``) or ``checkpoint`` (swapped, before the checkpoint moves).
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import TYPE_CHECKING

from protocol import compression

from ..faults import STORAGE
from ..files import atomic_write
from ..segment import CLEANED_SUFFIX, SEGMENT_SUFFIXES, Segment, segment_name, unlink_all

if TYPE_CHECKING:  # the cleaning code and the worker's handle load with the first pass, not at start-up
    from .cleaner import CleanJob, CleanerStats
    from .worker import WorkerProcess

log = logging.getLogger("sharebroker.cleaner")

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CRASH_PHASE_KEY = "sharebroker.log.cleaner.test.crash.phase"
DEFAULTS = {"log.cleaner.enable": "true", "log.cleaner.threads": "1", "log.cleaner.dedupe.buffer.size": "134217728",
            "log.cleaner.io.buffer.load.factor": "0.9", "log.cleaner.io.buffer.size": "524288",
            "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308", "log.cleaner.backoff.ms": "15000"}


class CleanerConfig:
    """Kafka's ``CleanerConfig`` from broker settings."""

    def __init__(self, config=None):
        get = (lambda k: config.get(k, DEFAULTS[k])) if config is not None else DEFAULTS.__getitem__
        self.enable = str(get("log.cleaner.enable")).strip().lower() == "true"
        self.threads = max(int(get("log.cleaner.threads")), 1)
        self.dedupe_buffer_size = int(get("log.cleaner.dedupe.buffer.size"))
        self.load_factor = float(get("log.cleaner.io.buffer.load.factor"))
        self.io_max_bytes_per_second = float(get("log.cleaner.io.max.bytes.per.second"))
        self.backoff_ms = int(get("log.cleaner.backoff.ms"))
        self.crash_phase = (config.get(CRASH_PHASE_KEY, "") if config is not None else "") or ""

    def worker_settings(self) -> tuple:
        """What a worker's :class:`Cleaner` is built with (the map memory is shared by the workers)."""
        return (self.dedupe_buffer_size // self.threads, self.load_factor, self.io_max_bytes_per_second)


# ---------------------------------------------------------------- checkpoints
def read_checkpoints(path: str) -> dict[tuple[str, int], int]:
    """Kafka's OffsetCheckpointFile; a missing file is empty, a malformed one is ignored (logged)."""
    try:
        with open(path, "rb") as f:
            lines = f.read().decode().splitlines()
    except FileNotFoundError:
        return {}
    try:
        if lines[0].strip() != "0":
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        out = {}
        for line in lines[2:2 + count]:
            topic, partition, offset = line.split()
            out[(topic, int(partition))] = int(offset)
        if len(out) != count:
            raise ValueError("fewer entries than announced")
        return out
    except (ValueError, IndexError) as e:
        log.warning("ignoring the malformed cleaner checkpoint file %s: %s", path, e)
        return {}


def checkpoint_bytes(entries: dict[tuple[str, int], int]) -> bytes:
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    return ("\n".join(lines) + "\n").encode()


# ------------------------------------------------------------- a log's dirt
class LogToClean:
    """Kafka's ``LogToClean`` with ``cleanableOffsets`` / ``calculateCleanableBytes`` /
    ``maxCompactionDelay`` (a query: reads the log, changes nothing)."""

    __slots__ = ("log", "first_dirty", "first_uncleanable", "force_checkpoint", "clean_bytes", "cleanable_bytes",
                 "compaction_delay_ms", "segments")

    def __init__(self, plog, checkpoint: int | None, now: int):
        cfg = plog.config
        self.log = plog
        segs = plog.segments
        active = segs[-1]
        start, leo = plog.log_start_offset, plog.log_end_offset
        ckpt = start if checkpoint is None else checkpoint
        self.force_checkpoint = not start <= ckpt <= leo
        first_dirty = start if self.force_checkpoint else ckpt
        uncleanable = min(plog.last_stable_offset, active.base_offset)
        lag = max(cfg.min_compaction_lag_ms, 0)
        dirty = [s for s in _non_active_from(segs, first_dirty)]
        if lag > 0:
            for s in dirty:
                if s.largest_timestamp() > now - lag:
                    uncleanable = min(uncleanable, s.base_offset)
                    break
        uncleanable = max(first_dirty, uncleanable)
        self.first_dirty = first_dirty
        rest = _non_active_from(segs, uncleanable)
        self.first_uncleanable = (rest[0] if rest else active).base_offset
        self.segments = [s for s in segs[:-1] if s.base_offset < self.first_uncleanable]
        self.clean_bytes = sum(s.size for s in segs if s.base_offset < first_dirty)
        low = min(first_dirty, self.first_uncleanable)
        self.cleanable_bytes = sum(s.size for s in _overlapping(segs, low, self.first_uncleanable))
        stamps = [t for t in (s.first_batch_timestamp() for s in dirty) if t > 0]
        clean_until = now - max(cfg.max_compaction_lag_ms, 0)
        earliest = min(stamps) if stamps else None
        self.compaction_delay_ms = clean_until - earliest if earliest is not None and earliest < clean_until else 0

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def need_compaction_now(self) -> bool:
        return self.compaction_delay_ms > 0

    def cleanable(self) -> bool:
        return ((self.need_compaction_now and self.cleanable_bytes > 0)
                or self.cleanable_ratio > self.log.config.min_cleanable_ratio)


def _floor_index(segs, offset: int) -> int:
    i = 0
    for k, s in enumerate(segs):
        if s.base_offset <= offset:
            i = k
        else:
            break
    return i


def _non_active_from(segs, offset: int) -> list:
    """Kafka's ``nonActiveLogSegmentsFrom``: the segment holding ``offset`` and the later inactive ones."""
    if offset >= segs[-1].base_offset:
        return []
    return list(segs[_floor_index(segs, offset):-1])


def _overlapping(segs, lo: int, hi: int) -> list:
    """Kafka's ``logSegments(from, to)``: segments holding offsets in [lo, hi)."""
    if hi <= lo:
        return []
    return [s for s in segs[_floor_index(segs, lo):] if s.base_offset < hi]


# ------------------------------------------------------------------- the pass
class _Pass:
    """One cleaning in progress: written by ``_start`` and the worker's messages; dies in ``_finish``."""

    __slots__ = ("job", "log", "segments", "failed", "aborted", "started", "groups_pending")

    def __init__(self, job: CleanJob, plog, segments: dict[int, Segment]):
        self.job, self.log, self.segments = job, plog, segments
        self.failed = False      # a group could not be applied: the checkpoint stays
        self.aborted = False     # the topic went away: results are dropped
        self.started = time.monotonic()
        self.groups_pending = 0


class _Slot:
    """One worker process and the pass it runs (None when idle)."""

    __slots__ = ("index", "worker", "current", "last_stats", "last_delay_ms", "dead")

    def __init__(self, index: int):
        self.index = index
        self.dead = False  # its worker exited unexpectedly and was not started again yet
        self.worker: WorkerProcess | None = None
        self.current: _Pass | None = None
        self.last_stats: CleanerStats | None = None  # of its last pass; None before the first
        self.last_delay_ms = 0


class LogCleaner:
    """The broker's log cleaner (one per log manager). ``start()`` on the loop; ``close()`` at shutdown."""

    def __init__(self, logs, config=None, *, clock=None):
        self.logs = logs
        self.config = CleanerConfig(config)
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._path = os.path.join(logs.data_dir, CHECKPOINT_FILE)
        self.checkpoints = read_checkpoints(self._path)  # written by _done and topic deletion
        self.uncleanable: set[tuple[str, int]] = set()  # written by failures; dropped with the topic
        self.in_progress: dict[tuple[str, int], _Pass] = {}
        self.max_dirty_ratio = 0.0  # of the last choice (Kafka's dirtiestLogCleanableRatio)
        self.time_of_last_run = time.time()
        self.warned_codecs: set[str] = set()  # topics told about a missing codec extra
        self._slots = [_Slot(i) for i in range(self.config.threads)]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._job_ids = 0

    # ----------------------------------------------------------- lifecycle
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Look for work every ``log.cleaner.backoff.ms`` (workers start when there is some)."""
        if not self.config.enable:
            log.info("log cleaner disabled (log.cleaner.enable=false): compacted topics are not compacted")
            return
        self._loop = loop or asyncio.get_running_loop()
        self._schedule(0.0)

    def _schedule(self, delay_s: float) -> None:
        if self._closed or self._loop is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(delay_s, self._tick)

    def close(self) -> None:
        """Stop the workers (a pass in the middle is abandoned: its ``.cleaned`` files go at the next start)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for slot in self._slots:
            if slot.worker is not None:
                slot.worker.stop()
                slot.worker = None
            if slot.current is not None:
                slot.current.aborted = True

    def topic_deleted(self, name: str) -> None:
        """Drop the deleted topic's checkpoints and uncleanable marks; ignore a pass in flight."""
        for key, p in list(self.in_progress.items()):
            if key[0] == name:
                p.aborted = True
        self.uncleanable = {k for k in self.uncleanable if k[0] != name}
        if any(k[0] == name for k in self.checkpoints):
            self.checkpoints = {k: v for k, v in self.checkpoints.items() if k[0] != name}
            self._write_checkpoints()

    # ------------------------------------------------------------ choosing
    def grab_filthiest(self, now: int | None = None) -> LogToClean | None:
        """Kafka's ``grabFilthiestCompactedLog`` (also updates the max-dirty-percent gauge and resets
        checkpoints found outside their log); the caller marks the choice in progress."""
        now = self.clock() if now is None else now
        self.time_of_last_run = time.time()
        dirty = []
        for plog in list(self.logs.all_logs()):
            key = (plog.topic, plog.partition)
            if not plog.config.compact or key in self.in_progress or key in self.uncleanable or plog.closed:
                continue
            ltc = LogToClean(plog, self.checkpoints.get(key), now)
            if ltc.force_checkpoint:
                self.checkpoints[key] = ltc.first_dirty
                self._write_checkpoints()
            if ltc.total_bytes > 0:
                dirty.append(ltc)
        self.max_dirty_ratio = max((d.cleanable_ratio for d in dirty), default=0.0)
        cleanable = [d for d in dirty if d.cleanable()]
        if not cleanable:
            return None
        return max(cleanable, key=lambda d: d.cleanable_ratio)

    def make_job(self, ltc: LogToClean, now: int | None = None) -> CleanJob:
        from .cleaner import CleanJob

        plog = ltc.log
        cfg = plog.config
        now = self.clock() if now is None else now
        self._job_ids += 1
        return CleanJob(job_id=self._job_ids, topic=plog.topic, partition=plog.partition, dir=plog.dir,
                        segments=[(s.base_offset, s.size) for s in ltc.segments], first_dirty=ltc.first_dirty,
                        first_uncleanable=ltc.first_uncleanable,
                        aborted=plog.producer_state.aborted_ranges(plog.log_start_offset, ltc.first_uncleanable),
                        last_records=plog.producer_state.last_records(), high_watermark=plog.high_watermark,
                        now_ms=now, delete_retention_ms=cfg.delete_retention_ms, segment_bytes=cfg.segment_bytes,
                        max_index_entries=max(cfg.segment_index_bytes // 8, 1),
                        index_interval=cfg.index_interval_bytes, crash_phase=self.config.crash_phase)

    # ------------------------------------------------------------- running
    def _tick(self) -> None:
        self._timer = None
        if self._closed:
            return
        try:
            for slot in self._slots:
                if slot.current is None and not self._start(slot):
                    break
        except OSError as e:
            STORAGE.report("choosing a log to clean", self.logs.data_dir, e)
        except Exception:
            log.exception("log cleaner: choosing a log to clean failed")
        if not any(slot.current is not None for slot in self._slots):
            self._schedule(self.config.backoff_ms / 1000.0)  # nothing to do: Kafka's cleaner thread pauses

    def _start(self, slot: _Slot) -> bool:
        ltc = self.grab_filthiest()
        if ltc is None:
            return False
        if slot.worker is None or not slot.worker.alive:
            from .worker import WorkerProcess

            try:
                slot.worker = WorkerProcess(self._loop, lambda kind, job_id, payload, s=slot: self._message(
                    s, kind, job_id, payload), lambda s=slot: self._worker_exited(s))
            except OSError as e:  # e.g. out of file descriptors or processes: the next tick tries again
                log.warning("log cleaner: cannot start a worker process: %s", e)
                return False
            slot.dead = False
        slot.last_delay_ms = ltc.compaction_delay_ms
        p = slot.current = self._begin(ltc)
        try:
            slot.worker.send(p.job, self.config.worker_settings())
        except OSError as e:
            self._fail(slot, f"cannot reach the cleaner worker: {e}", mark=False)
        return True

    def _begin(self, ltc: LogToClean) -> _Pass:
        job = self.make_job(ltc)
        p = _Pass(job, ltc.log, {s.base_offset: s for s in ltc.segments})
        self.in_progress[(job.topic, job.partition)] = p
        log.info("cleaning %s-%d: dirty section [%d, %d), %.0f%% dirty", job.topic, job.partition, job.first_dirty,
                 job.first_uncleanable, 100 * ltc.cleanable_ratio)
        return p

    def _message(self, slot: _Slot, kind: str, job_id: int, payload) -> None:
        p = slot.current
        if p is None or p.job.job_id != job_id:
            return
        if kind == "group":
            self._apply_group(p, payload)
        elif kind == "done":
            end_offset, stats, codecs = payload
            self._after_groups(p, lambda: self._done(slot, p, end_offset, stats, codecs))
        elif kind == "storage-error":
            code, reason, path = payload
            self._storage_failed(slot, p, OSError(code, reason, path))
        else:
            self._fail(slot, payload, mark=True)

    def _storage_failed(self, slot: _Slot, p: _Pass, exc: OSError) -> None:
        """A pass stopped by a storage fault (disk full, read-only, out of descriptors): its partial
        files go and the partition stays cleanable, tried again after ``log.cleaner.backoff.ms``.
        Kafka marks a partition uncleanable only for other failures (``LogCleaningException``); an
        IOException takes its log directory offline instead, which a one-directory broker cannot do."""
        STORAGE.report("log cleaning", exc.filename or p.log.dir, exc)

        def finish():
            _remove_all_cleaned(p.log.dir)
            self._fail(slot, f"storage error: {exc}", mark=False)
        self._after_groups(p, finish)

    def _worker_exited(self, slot: _Slot) -> None:
        slot.dead = not self._closed
        worker, slot.worker = slot.worker, None
        worker.stop()  # reaped, its pipes closed (its output ended: it is exiting)
        if slot.current is not None and not self._closed:
            self._fail(slot, f"the cleaner worker exited (code {worker.proc.returncode})", mark=True)

    def _fail(self, slot: _Slot, message: str, mark: bool) -> None:
        p = slot.current
        slot.current = None
        if p is None:
            return
        key = (p.job.topic, p.job.partition)
        self.in_progress.pop(key, None)
        if mark and not p.aborted and not _left_the_log(p):
            self.uncleanable.add(key)
            log.warning("cleaning %s-%d failed; the partition is marked uncleanable: %s", key[0], key[1], message)
        elif mark:
            log.info("cleaning %s-%d stopped: its log changed meanwhile (retention, DeleteRecords, deletion); "
                     "the next pass starts again", key[0], key[1])
        self._schedule(self.config.backoff_ms / 1000.0)

    # ------------------------------------------------------- applying results
    def _background(self):
        return self.logs.background

    def _after_groups(self, p: _Pass, fn) -> None:
        """Run ``fn`` on the loop after every group reported so far was applied (the FIFO worker)."""
        self._background().submit(lambda: None, lambda _r, _e: fn())

    def _apply_group(self, p: _Pass, group) -> None:
        plog = p.log
        cfg = plog.config
        now = self.clock()
        p.groups_pending += 1

        def open_new():
            return Segment.open(plog.dir, group.base, cfg.segment_index_bytes, cfg.index_interval_bytes, now,
                                suffix=CLEANED_SUFFIX)

        def opened(seg, exc):
            p.groups_pending -= 1
            if exc is not None:
                p.failed = True
                if p.aborted:  # the topic was deleted: its directory went, and the files with it
                    return
                STORAGE.report("opening a cleaned segment", segment_name(group.base, ".log") + CLEANED_SUFFIX, exc)
                _remove_cleaned(plog.dir, group.base)
                return
            self._crash_at("cleaned")
            old = [p.segments.get(b) for b in group.old_bases]
            try:
                swapped = not p.aborted and None not in old and plog.replace_segments(seg, old, self._crash_at)
            except OSError as e:  # a rename failed (e.g. read-only); start-up finishes or rolls back the swap
                STORAGE.report("swapping in a cleaned segment", plog.dir, e)
                swapped = False
                p.failed = True
            if not swapped:
                try:
                    seg.delete()  # the log changed meanwhile (retention, deletion), or the swap failed: dropped
                except OSError as e:
                    STORAGE.report("removing a cleaned segment", seg.log_path, e)
                return
            plog.producer_state.remove_aborted(group.removed_abort_markers)
        self._background().submit(open_new, opened)

    def _done(self, slot: _Slot, p: _Pass, end_offset: int, stats: dict, codecs: list) -> None:
        key = (p.job.topic, p.job.partition)
        if slot.current is p:
            slot.current = None
        self.in_progress.pop(key, None)
        from .cleaner import CleanerStats

        s = CleanerStats()
        for k, v in stats.items():
            setattr(s, k, v)
        slot.last_stats = s
        if codecs and p.job.topic not in self.warned_codecs:
            self.warned_codecs.add(p.job.topic)
            log.warning("topic %s: %s batches are kept whole by the log cleaner (not compacted): install the "
                        "optional extra %s", p.job.topic, "/".join(compression.NAMES[c] for c in codecs),
                        compression.EXTRA)
        if not p.aborted and not p.failed and not p.log.closed:
            self._crash_at("checkpoint")
            self.checkpoints[key] = end_offset
            try:
                self._write_checkpoints()
            except OSError as e:  # kept in memory: written with the next pass's
                STORAGE.report("writing the cleaner checkpoint", self._path, e)
            log.info("cleaned %s-%d: dirty section [%d, %d), %.1f MB -> %.1f MB in %.2f s", key[0], key[1],
                     p.job.first_dirty, end_offset, s.bytes_read / 1e6, s.bytes_written / 1e6, s.elapsed_secs)
        self._schedule(0.0)  # cleaned one: look for the next at once (Kafka's cleaner thread loop)

    def _write_checkpoints(self) -> None:
        live = {(plog.topic, plog.partition) for plog in self.logs.all_logs()}
        self.checkpoints = {k: v for k, v in self.checkpoints.items() if k in live}
        atomic_write(self._path, checkpoint_bytes(self.checkpoints), self._background())

    def _crash_at(self, phase: str) -> None:
        if self.config.crash_phase == phase:
            log.warning("log cleaner: test-only %s=%s: killing the broker", CRASH_PHASE_KEY, phase)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)

    # --------------------------------------------------------- in-process
    def clean_now(self, plog, now: int | None = None) -> int | None:
        """Clean ``plog`` once in this process, synchronously (tests and tools; the broker uses its
        workers): the same job, swap and checkpoint as a pass. Returns the new checkpoint, None
        if there was nothing to clean."""
        now = self.clock() if now is None else now
        ltc = LogToClean(plog, self.checkpoints.get((plog.topic, plog.partition)), now)
        if ltc.cleanable_bytes <= 0:
            return None
        slot = _Slot(-1)
        p = self._begin(ltc)
        slot.current = p
        from .cleaner import Cleaner

        cleaner = Cleaner(*self.config.worker_settings())
        passes = cleaner.clean(p.job)
        try:
            while True:
                try:
                    self._message(slot, "group", p.job.job_id, next(passes))
                except StopIteration as stop:
                    end_offset, stats = stop.value
                    break
        except OSError as e:
            STORAGE.report("log cleaning", e.filename or plog.dir, e)
            _remove_all_cleaned(plog.dir)
            self._fail(slot, repr(e), mark=False)
            raise
        except Exception as e:
            self._fail(slot, repr(e), mark=True)
            raise
        self._message(slot, "done", p.job.job_id, (end_offset, stats.as_dict(), sorted(cleaner.unavailable_codecs)))
        return self.checkpoints.get((plog.topic, plog.partition))

    # ------------------------------------------------------------ metrics
    def metrics(self) -> dict[str, float]:
        """Kafka's LogCleaner / LogCleanerManager gauges."""
        stats = [s.last_stats for s in self._slots if s.last_stats is not None]
        read = sum(s.bytes_read for s in stats)
        written = sum(s.bytes_written for s in stats)
        return {
            "max_buffer_utilization_percent": int(100 * max((s.buffer_utilization for s in stats), default=0)),
            "cleaner_recopy_percent": int(100 * written / max(read, 1)),
            "max_clean_time_secs": int(max((s.elapsed_secs if s.end > s.start else 0 for s in stats), default=0)),
            "max_compaction_delay_secs": int(max(s.last_delay_ms for s in self._slots) / 1000),
            "dead_thread_count": sum(1 for s in self._slots if s.dead),
            "max_dirty_percent": int(100 * self.max_dirty_ratio),
            "time_since_last_run_ms": int((time.time() - self.time_of_last_run) * 1000),
            "uncleanable_partitions_count": len(self.uncleanable),
        }


def _left_the_log(p: _Pass) -> bool:
    """Did a segment of the pass leave its log (retention, DeleteRecords, deletion)? Then a failure
    (the worker could not open it) is the log changing under the pass, not a log that cannot be cleaned
    (Kafka's deletions never race its cleaner: retention of compacted logs runs in the cleaner thread)."""
    live = {id(seg) for seg in p.log.segments}
    return p.log.closed or any(id(seg) not in live for seg in p.segments.values())


def _remove_cleaned(dir_path: str, base: int) -> None:
    unlink_all([os.path.join(dir_path, segment_name(base, suffix) + CLEANED_SUFFIX) for suffix in SEGMENT_SUFFIXES])


def _remove_all_cleaned(dir_path: str) -> None:
    """Every ``*.cleaned`` file of a partition (a failed pass's partial output); never raises."""
    try:
        names = os.listdir(dir_path)
    except OSError:
        return  # start-up removes what is left
    unlink_all([os.path.join(dir_path, n) for n in names if n.endswith(CLEANED_SUFFIX)])
